"""The CPU route's allocation history: the profiler's events, read by columns, into a snapshot.

A profiler session reports every allocation and free of the interval, and a tiny-op loop makes
hundreds of thousands. Only the newest ``max_entries`` become trace entries, so only those are read
in full (their times). Of every event the history keeps just what the end state needs (each
address's last event, and the first event at the addresses of the tensors live when the interval
began), read with C-level passes (``map``/``attrgetter`` into dicts), a chunk of events at a time so the
columns held at once stay bounded. The snapshot is the same, entry for entry, as reading every
event one by one (``tests/cpu_reference.py`` keeps that older reader; the tests compare them).
"""

from __future__ import annotations

from collections import deque
from itertools import compress
from operator import attrgetter
from typing import Any

_FIELDS, _PTR, _SIZE = attrgetter("extra_fields"), attrgetter("ptr"), attrgetter("alloc_size")
_TIME, _DEVICE = attrgetter("start_time_ns"), attrgetter("device")
_CHUNK = 1 << 16  # events read per pass: bounds the columns held at once


class _Tables:
    """What the end state needs of a run of events, folded at C speed: each address's last event,
    and the first event at each watched address (those of the tensors live when the interval began)."""

    def __init__(self, watch: set[int], start: int = 0) -> None:
        self.watch = set(watch)  # watched addresses whose first event is still to come
        self.count = start  # index of the next event
        self.last: dict[int, int] = {}  # address -> signed size of its last event (> 0: live at the end)
        self.first: dict[int, int] = {}  # watched address -> signed size of its first event
        self.first_index: dict[int, int] = {}  # watched address -> index of its first event

    def fold(self, ptrs: list[int], sizes: list[int]) -> None:
        if self.watch:
            hits = list(compress(range(len(ptrs)), map(self.watch.__contains__, ptrs)))
            for i in reversed(hits):  # the earliest event of each watched address is written last
                self.first[ptrs[i]], self.first_index[ptrs[i]] = sizes[i], self.count + i
            self.watch -= self.first.keys()
        self.last.update(zip(ptrs, sizes))
        self.count += len(ptrs)

    def merge(self, later: _Tables) -> None:
        """Append the tables of the events that came after these (``later`` counts on from ours)."""
        self.first.update(later.first)  # ``later`` watched only what was still to come here
        self.first_index.update(later.first_index)
        self.watch = later.watch
        self.last.update(later.last)
        self.count = later.count


class History:
    """Every allocation event of an interval (across profiler sessions, for ``clear=false`` chains).

    ``live_start``: ``{address: bytes}`` of the tensors found in the user's namespace when the
    interval began (blocks the profiler never saw allocated)."""

    def __init__(self, newest: int, live_start: dict[int, int]) -> None:
        self.live_start = live_start
        self.tables = _Tables(set(live_start))
        self.window: deque[tuple[int, int, int]] = deque(maxlen=newest)  # (time_ns, ptr, size), newest

    @property
    def count(self) -> int:
        return self.tables.count

    def keep_newest(self, newest: int) -> None:
        """Keep the newest ``newest`` events in full from now on (a chain's cell asked for another size)."""
        if newest != self.window.maxlen:
            self.window = deque(self.window, maxlen=newest)

    def add(self, roots: list[Any]) -> None:
        """The events of one profiler session: its event tree's roots, in time order."""
        try:
            run, kept = _fold(roots, _Tables(self.tables.watch, self.count))
        except _NotFlat:  # a root that is no allocation (a user scope): walk the tree instead
            run, kept = _fold(_allocations(roots), _Tables(self.tables.watch, self.count))
        self.tables.merge(run)
        tail = kept[max(len(kept) - (self.window.maxlen or 0), 0) :]
        fields = list(map(_FIELDS, tail))
        self.window.extend(zip(map(_TIME, tail), map(_PTR, fields), map(_SIZE, fields)))

    def add_events(self, events: list[tuple[int, int, int]]) -> None:
        """Events given as ``(time_ns, ptr, signed size)``, in time order (tests, tools)."""
        events = [e for e in events if e[2]]
        self.tables.fold([e[1] for e in events], [e[2] for e in events])
        self.window.extend(events[max(len(events) - (self.window.maxlen or 0), 0) :])

    def snapshot(
        self, live_end: dict[int, int], end_us: int, max_entries: int, segment_events: bool = True
    ) -> dict[str, Any]:
        """PyTorch-schema snapshot: the newest ``max_entries`` entries and the live blocks at the end.

        ``live_end``: the namespace's tensors when the interval ended. ``segment_events``: each
        block is its own segment (the CPU allocator has none), so an allocation is preceded by its
        ``segment_alloc`` and a free followed by its ``segment_free``: PyTorch's viewer, replaying
        backwards from the end state, then finds every block it restores inside a segment.
        """
        alloc_entries = _alloc_entries if segment_events else _bare_alloc_entries
        free_entries = _free_entries if segment_events else _bare_free_entries
        t, live_start = self.tables, self.live_start
        # Baseline blocks freed without a report: their address was allocated anew inside the
        # interval, or they are gone at the end and the interval never mentions them.
        silent = {
            p: n for p, n in live_start.items() if t.first.get(p, 0) > 0 or (p not in t.first and p not in live_end)
        }
        # The free of a silent block goes just before the first allocation at its address; only
        # those inside the window are entries (the trace keeps its newest part, like PyTorch's ring).
        window_start = t.count - len(self.window)
        pending = {p: n for p, n in silent.items() if t.first_index.get(p, t.count) >= window_start}
        trace: list[dict[str, Any]] = []
        for t_ns, ptr, size in self.window:
            t_us = t_ns // 1000
            if size > 0:
                gone = pending.pop(ptr, None)
                if gone is not None:
                    trace += free_entries(ptr, gone, t_us)
                trace += alloc_entries(ptr, size, t_us)
            else:
                trace += free_entries(ptr, -size, t_us)
        for ptr, size in pending.items():  # never allocated again: freed at the end, at the latest
            trace += free_entries(ptr, size, end_us)
        blocks = {p: s for p, s in t.last.items() if s > 0}
        for ptr, size in live_start.items():  # live throughout, as far as the events tell
            if ptr in live_end and ptr not in t.last:
                blocks[ptr] = size
        return {
            "segments": [_segment(ptr, size) for ptr, size in sorted(blocks.items())],
            "device_traces": [trace[-max_entries:]],
            "allocator_settings": {},
        }


class _NotFlat(Exception):
    """A root of the event tree is not an allocation: allocations hide below it."""


def _fold(roots: list[Any], run: _Tables) -> tuple[_Tables, list[Any]]:
    """Fold allocation-event roots into ``run``; also the events kept (CPU ones, of nonzero size)."""
    from torch._C._profiler import _ExtraFields_Allocation

    check_devices = _other_devices_may_allocate()
    kept: list[Any] | None = None  # set once some events are dropped
    for lo in range(0, len(roots), _CHUNK):
        chunk = roots[lo : lo + _CHUNK]
        fields = list(map(_FIELDS, chunk))
        if set(map(type, fields)) - {_ExtraFields_Allocation}:
            raise _NotFlat
        sizes = list(map(_SIZE, fields))
        if 0 in sizes or (check_devices and any(d.type != "cpu" for d in set(map(_DEVICE, fields)))):
            keep = [bool(n) and d.type == "cpu" for n, d in zip(sizes, map(_DEVICE, fields))]
            chunk, fields, sizes = (list(compress(c, keep)) for c in (chunk, fields, sizes))
            kept = roots[:lo] if kept is None else kept
        if kept is not None:
            kept += chunk
        run.fold(list(map(_PTR, fields)), sizes)
    return run, roots if kept is None else kept


def _other_devices_may_allocate() -> bool:
    """Whether an accelerator in this process may have reported allocations to the profiler too
    (then each event's device is read; on a CPU-only process that would cost ~15% for nothing)."""
    import sys

    import torch

    from .registry import KINDS

    for kind in KINDS:
        module = getattr(torch, kind, None) if kind != "cpu" else None  # torch.npu: once torch_npu is in
        if module is not None and getattr(module, "is_initialized", lambda: True)():
            return True
    # MPS has no history API to record it by, but its allocations reach the profiler all the same
    mps = getattr(torch.backends, "mps", None)
    return "intel_extension_for_pytorch" in sys.modules or (mps is not None and mps.is_available())


def _allocations(roots: list[Any]) -> list[Any]:
    """The allocation events of a tree whose roots are not all allocations, in time order."""
    from torch._C._profiler import _EventType

    found, stack = [], list(roots)
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            found.append(node)
        stack.extend(node.children)
    found.sort(key=_TIME)
    return found


def _entry(action: str, ptr: int, size: int, t_us: int) -> dict[str, Any]:
    return {"action": action, "addr": ptr, "size": size, "stream": 0, "time_us": t_us}


def _bare_alloc_entries(ptr: int, size: int, t_us: int) -> list[dict[str, Any]]:
    return [_entry("alloc", ptr, size, t_us)]


def _bare_free_entries(ptr: int, size: int, t_us: int) -> list[dict[str, Any]]:
    return [_entry("free_requested", ptr, size, t_us), _entry("free_completed", ptr, size, t_us)]


def _alloc_entries(ptr: int, size: int, t_us: int) -> list[dict[str, Any]]:
    return [_entry("segment_alloc", ptr, size, t_us), _entry("alloc", ptr, size, t_us)]


def _free_entries(ptr: int, size: int, t_us: int) -> list[dict[str, Any]]:
    return [*_bare_free_entries(ptr, size, t_us), _entry("segment_free", ptr, size, t_us)]


def _segment(ptr: int, size: int) -> dict[str, Any]:
    """One segment per live CPU block: the CPU allocator has no segments of its own."""
    return {
        "device": 0,
        "address": ptr,
        "total_size": size,
        "allocated_size": size,
        "active_size": size,
        "requested_size": size,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [{"address": ptr, "size": size, "requested_size": size, "state": "active_allocated", "frames": []}],
    }


def build_snapshot(
    events: list[tuple[int, int, int]],
    live_start: dict[int, int],
    live_end: dict[int, int],
    end_us: int,
    max_entries: int,
    segment_events: bool = True,
) -> dict[str, Any]:
    """The snapshot of ``(time_ns, ptr, signed size)`` events and the walked live storages."""
    history = History(max_entries, live_start)
    history.add_events(events)
    return history.snapshot(live_end, end_us, max_entries, segment_events)
