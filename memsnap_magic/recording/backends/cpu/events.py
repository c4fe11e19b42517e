"""A profiler session's CPU allocation events read by columns: the tree walked a level at a time
(each node once), fields read with C-level passes, a chunk of events at a time (see ``history``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import chain, compress, repeat
from operator import attrgetter, is_, not_
from typing import TYPE_CHECKING, Any

import numpy as np

from ....core.devices import KINDS
from .frames import STACK_BYTES

if TYPE_CHECKING:  # one chunk of events: (nodes, fields, sizes, times, made)
    Columns = tuple[list[Any] | None, list[Any], list[int], np.ndarray | None, list[Any] | None]

_FIELDS, _TIME, _CHILDREN = attrgetter("extra_fields"), attrgetter("start_time_ns"), attrgetter("children")
_SIZE = attrgetter("alloc_size")
_DURATION = attrgetter("duration_time_ns")
_INSTANTS = [True]  # allocations report no duration (checked once per process: see ``check_instants``)
_CHUNK = 1 << 16  # events read per pass: bounds the columns held at once


def times_ns(items: list[Any]) -> list[int]:
    """The times (ns) of a window's ``times`` items: an int each, or the event-tree node it is
    read from (``entries.Window.unread``)."""
    return [t if type(t) is int else _TIME(t) for t in items]


def other_devices_may_allocate() -> bool:
    """Whether an accelerator in this process may have reported allocations to the profiler too
    (then each event's device is read; on a CPU-only process that would cost ~15% for nothing)."""
    import torch

    for kind in KINDS:
        module = getattr(torch, kind, None) if kind != "cpu" else None  # torch.npu: once torch_npu is in
        if module is not None and getattr(module, "is_initialized", lambda: True)():
            return True
    # MPS has no history API to record it by, but its allocations reach the profiler all the same
    mps = getattr(torch.backends, "mps", None)
    return "intel_extension_for_pytorch" in sys.modules or (mps is not None and mps.is_available())


def columns(roots: list[Any], tracer: bool, held: list[Any]) -> Iterator[Columns]:
    """The CPU allocation events of a session's tree in time order, a chunk at a time:
    ``(nodes, fields, sizes, times, made)``. A tree of allocations alone (no tracer, no user
    scope: its roots are the events) is read a chunk at a time, each event's time only if it is
    among the newest (``nodes``); any other tree by levels (``times``, int64; ``made``: each event's
    node, whose parent is the call it was made in, given only to a chunk holding an allocation
    large enough for a stack), whose lists of fields and nodes read join ``held`` (they live
    together anyway; a chunk's are let go with it)."""
    from torch._C._profiler import _ExtraFields_Allocation

    if tracer:
        yield from _by_levels(roots, held)
        return
    for lo in range(0, len(roots), _CHUNK):
        nodes = roots[lo : lo + _CHUNK]
        fields = list(map(_FIELDS, nodes))
        if set(map(type, fields)) - {_ExtraFields_Allocation}:
            # Everything in the chunks read so far happened before this chunk's first root began.
            yield from _by_levels(roots[lo:], held, fields if len(nodes) == len(roots) - lo else None)
            return
        yield nodes, fields, list(map(_SIZE, fields)), None, None


def _by_levels(roots: list[Any], held: list[Any], fields: list[Any] | None = None) -> Iterator[Columns]:
    """The allocation events of a tree whose roots are not all allocations, in time order, with
    their nodes (each sits in a Python call, a C function called from Python, a user scope, or
    at the top). Read a level at a time with C-level passes (a tiny-op loop has one node per op).
    An allocation is an instant, so only nodes of zero duration have their fields read (a call's
    fields cost three times its duration to read), each once (``fields``: the roots', if read).
    Which call an event sits in is its node's parent, asked only of those that get a stack."""
    from torch._C._profiler import _ExtraFields_Allocation

    found: list[Any] = []
    times: list[int] = []  # of the narrow levels read since the last wide one
    stamps: list[Any] = []  # every allocation's time, in ``found``'s order: int64 arrays, no int objects kept
    made: list[Any] = []  # every allocation's node, in ``found``'s order
    level = roots
    while level:
        held.append(level)
        if len(level) < NARROW:  # a C-level pass costs a fixed ~0.3 µs: a loop is cheaper on a few nodes
            level = _narrow_level(level, fields, found, times, made, _ExtraFields_Allocation)
            fields = None
            continue
        if fields is None and _INSTANTS[0]:
            instant = list(map(not_, map(_DURATION, level)))
            nodes = list(compress(level, instant))
            fields = list(map(_FIELDS, nodes))
        else:
            instant, nodes = [True] * len(level), level
            fields = fields if fields is not None else list(map(_FIELDS, level))
        is_alloc = list(map(is_, map(type, fields), repeat(_ExtraFields_Allocation)))
        found += compress(fields, is_alloc)
        if times:
            stamps.append(np.array(times, dtype=np.int64))
            times.clear()
        allocations = list(compress(nodes, is_alloc))
        stamps.append(np.fromiter(map(_TIME, allocations), np.int64, len(allocations)))
        made += allocations
        if all(instant):
            inner = list(compress(level, map(not_, is_alloc)))
        else:  # the calls, and any instant that is not an allocation (few: set one by one)
            below = list(map(not_, instant))
            for i in compress(compress(range(len(level)), instant), map(not_, is_alloc)):
                below[i] = True
            inner = list(compress(level, below))
        level = list(chain.from_iterable(map(_CHILDREN, inner)))
        fields = None
    held.append(found)
    stamps.append(np.array(times, dtype=np.int64))
    # into time order, a chunk at a time (a stable sort: events of one time keep the tree's order)
    every = np.concatenate(stamps)
    order = np.argsort(every, kind="stable")
    ordered = every[order]
    del every, stamps
    for lo in range(0, len(found), _CHUNK):
        at = order[lo : lo + _CHUNK].tolist()
        chunk = list(map(found.__getitem__, at))
        sizes = list(map(_SIZE, chunk))
        stacked = list(map(made.__getitem__, at)) if sizes and max(sizes) >= STACK_BYTES else None
        yield None, chunk, sizes, ordered[lo : lo + _CHUNK], stacked  # times as int64: few are the window's


NARROW = 32  # nodes in a level below which it is read by a loop (small cells' trees are deep and narrow)


def _narrow_level(
    level: list[Any],
    fields: list[Any] | None,
    found: list[Any],
    times: list[int],
    made: list[Any],
    allocation: type,
) -> list[Any]:
    """``_by_levels``' pass over one level, node by node: the allocations (fields of type
    ``allocation``) join ``found``, ``times`` and ``made``; the next level is returned."""
    instants = fields is None and _INSTANTS[0]
    below: list[Any] = []
    for i, node in enumerate(level):
        if fields is not None:
            kind = fields[i]
        elif instants and node.duration_time_ns:
            kind = None  # a call: only instants are allocations
        else:
            kind = node.extra_fields
        if type(kind) is allocation:
            found.append(kind)
            times.append(node.start_time_ns)
            made.append(node)
        else:
            below += node.children
    return below


def check_instants(roots: list[Any]) -> None:
    """Read fields only of nodes without duration from now on if this session's allocations had
    none (so PyTorch reports them; a release that changed it costs the reader speed, not events)."""
    from torch._C._profiler import _ExtraFields_Allocation

    allocations = [n for n in roots if type(n.extra_fields) is _ExtraFields_Allocation]
    _INSTANTS[0] = bool(allocations) and not any(map(_DURATION, allocations))
