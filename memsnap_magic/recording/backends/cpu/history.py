"""The CPU route's allocation history: the profiler's events, read by columns, into a snapshot.

A profiler session reports every allocation and free of the interval, and a tiny-op loop makes
hundreds of thousands. Only the newest ``max_entries`` become trace entries, so only those are read
in full (their times; without the tracer, read by the writer as it builds the entries after the
cell: ``files.pending``). Of every event the history keeps just what the end state needs (each
address's last event, and the first event at the addresses of the tensors live when the interval
began), read with C-level passes (``map``/``attrgetter`` into dicts), a chunk of events at a time so the
columns held at once stay bounded. With the Python tracer on, the allocations sit below call nodes
and the tree is read a level at a time, each node touched once. Reading an event at all through
PyTorch's Python API (a wrapper per node, a fields object per event) costs ~1 µs, about what the
profiler spent recording it: the benchmarks' ``cpu_floor_read_every_event``. The snapshot is the
same, entry for entry, as reading every event one by one (``tests/cpu_reference.py`` keeps that
older reader; the tests compare them, with and without the tracer).
"""

from __future__ import annotations

import functools
from collections import deque
from itertools import chain, compress, islice, repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ....core.nogc import no_gc
from ....files.compact import expand
from ....files.layout import MARK_KEY
from ....files.pending import Pending, built
from .entries import (
    Window,
    freed,
    held_before_window,
    newest_entries,
    no_frames,
    segment,
    silent_frees,
    wholly_dropped,
)
from .events import columns, other_devices_may_allocate, times_ns
from .frames import Stacks

if TYPE_CHECKING:
    import numpy as np

_PTR, _DEVICE = attrgetter("ptr"), attrgetter("device")
_ACTION = itemgetter("action")
_FEW_HITS = 16  # watched addresses met in one chunk up to which each is looked up by a scan of its own


class _Chunk(NamedTuple):
    """A chunk of events as read (``events.columns``): ``times`` (int64) None where the tree
    gave ``nodes`` to read them from; ``made``: each event's node, for stacks (None where every
    allocation of the chunk is too small for one)."""

    ptrs: list[int]
    sizes: list[int]
    times: np.ndarray | None
    nodes: list[Any] | None
    made: list[Any] | None


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
        self.last.update(zip(ptrs, sizes))
        # a watched address met before left the watch, so those in ``last`` now are this chunk's:
        # the smaller side is asked of the other (the few watched, usually)
        watch = self.watch
        hits = set(filter(self.last.__contains__, watch)) if len(watch) < len(ptrs) else watch.intersection(ptrs)
        if len(hits) > _FEW_HITS:  # each found by one pass, not a scan of its own
            at = compress(range(len(ptrs)), map(hits.__contains__, ptrs))
            for i in reversed(list(at)):  # the earliest event of each watched address is written last
                self.first[ptrs[i]], self.first_index[ptrs[i]] = sizes[i], self.count + i
        else:
            for ptr in hits:
                i = ptrs.index(ptr)  # its earliest event
                self.first[ptr], self.first_index[ptr] = sizes[i], self.count + i
        if hits:
            self.watch -= hits
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

    def __init__(
        self,
        newest: int,
        live_start: dict[int, int],
        frames: bool = False,
        start_frames: dict[int, list[dict[str, Any]]] | None = None,
    ) -> None:
        self.live_start = live_start
        self.tables = _Tables(set(live_start))
        self.window = Window(newest)
        # With the profiler's Python tracer on: each allocation's stack (see ``frames.Stacks``).
        self.stacks = Stacks(start_frames or {}) if frames else None
        self.freed_unseen = 0  # bytes of start blocks the last snapshot could only free at its end

    @property
    def count(self) -> int:
        return self.tables.count

    def keep_newest(self, newest: int) -> None:
        """Keep the newest ``newest`` events in full from now on (a chain's cell asked for another size)."""
        if newest != self.window.maxlen:
            self.window = Window(newest, self.window)

    @no_gc()
    def add(self, roots: list[Any], held: list[Any] | None = None) -> None:
        """The events of one profiler session: its event tree's roots, in time order.
        ``held`` receives the lists of PyTorch's Python objects that reading made (~0.2 µs each
        to destroy), for whoever frees the session's results to free them too, later."""
        run = _Tables(self.tables.watch, self.count)
        newest = self.window.maxlen
        # The newest chunks read, held as they are until the session's last event is known: only
        # the window's events are copied into it, and where the tree gave nodes (allocations alone,
        # no times), only theirs have their times read
        tail: deque[_Chunk] = deque()
        in_tail = 0  # events in ``tail``
        check_devices = other_devices_may_allocate()
        read = columns(roots, self.stacks is not None, held if held is not None else [])
        for nodes, fields, sizes, times, made in read:
            if 0 in sizes or (check_devices and any(d.type != "cpu" for d in set(map(_DEVICE, fields)))):
                keep = [bool(n) and d.type == "cpu" for n, d in zip(sizes, map(_DEVICE, fields))]
                fields, sizes = list(compress(fields, keep)), list(compress(sizes, keep))
                nodes = list(compress(nodes, keep)) if nodes is not None else None
                times = times.compress(keep) if times is not None else None
                made = list(compress(made, keep)) if made is not None else None
            ptrs = list(map(_PTR, fields))
            if self.stacks is not None and made is not None:
                self.stacks.note(ptrs, sizes, made)
            run.fold(ptrs, sizes)
            if ptrs and newest:
                tail.append(_Chunk(ptrs, sizes, times, nodes, made))
                in_tail += len(ptrs)
                while in_tail - len(tail[0].ptrs) >= newest:  # the chunks after it hold the whole window
                    in_tail -= len(tail.popleft().ptrs)
        self.tables.merge(run)
        if not tail:
            return
        skip = in_tail - newest  # events of the oldest chunk older than the window
        if skip > 0:
            tail[0] = _Chunk(*(column[skip:] if column is not None else None for column in tail[0]))  # type: ignore[arg-type]
        self.window.extend(  # a tree of allocations alone gave nodes: their times are read when needed
            chain.from_iterable(c.times.tolist() if c.times is not None else c.nodes for c in tail),  # type: ignore[misc]
            chain.from_iterable(c.ptrs for c in tail),
            chain.from_iterable(c.sizes for c in tail),
            unread=any(c.times is None for c in tail),
        )
        if self.stacks is not None and any(c.made is not None for c in tail):
            kept_sizes = list(chain.from_iterable(c.sizes for c in tail))
            kept_made = chain.from_iterable(c.made if c.made is not None else repeat(None, len(c.ptrs)) for c in tail)
            self.stacks.keep(self.count - len(kept_sizes), kept_sizes, list(kept_made), self.count - newest)
        elif self.stacks is not None:  # no allocation large enough for a stack among the newest
            self.stacks.keep(self.count, [], [], self.count - newest)

    def add_events(self, events: list[tuple[int, int, int]]) -> None:
        """Events given as ``(time_ns, ptr, signed size)``, in time order (tests, tools)."""
        events = [e for e in events if e[2]]
        self.tables.fold([e[1] for e in events], [e[2] for e in events])
        newest = events[max(len(events) - self.window.maxlen, 0) :]
        self.window.extend([e[0] for e in newest], [e[1] for e in newest], [e[2] for e in newest])

    @no_gc()
    def _start_frames(self, ptr: int) -> list[dict[str, Any]] | None:
        """The stack a block carried in from the last interval was allocated with."""
        return self.stacks.start_frames.get(ptr) if self.stacks is not None else None

    def snapshot(
        self,
        live_end: dict[int, int],
        end_us: int,
        max_entries: int,
        segment_events: bool = True,
        died: dict[int, int] | None = None,
        compact: bool = False,
        mark: str | None = None,
        lazy: bool = False,
    ) -> dict[str, Any]:
        """PyTorch-schema snapshot: the newest ``max_entries`` entries and the live blocks at the end.

        ``live_end``: the namespace's tensors when the interval ended; ``died``: when start blocks
        whose frees the profiler does not report died (address -> time_ns). ``segment_events``: each
        block is its own segment (the CPU allocator has none), so an allocation is preceded by its
        ``segment_alloc`` and a free followed by its ``segment_free``: PyTorch's viewer, replaying
        backwards from the end state, then finds every block it restores inside a segment.
        ``compact``: the trace is a ``Compact`` of the block entries, its companions written by
        ``files.compact.complete`` (before the file is written); else it is complete. ``mark``: the
        ``user_metadata`` of every entry (``files.layout.stamp``'s, given here where one step is held).
        ``lazy`` (with ``compact``): the usual window's entries are left to build (``files.pending``):
        the digest reads their columns, the writer builds them.
        """
        t, live_start = self.tables, self.live_start
        # Baseline blocks freed without a report: their address was allocated anew inside the
        # interval, or they are gone at the end and the interval never mentions them.
        silent = {
            p: n for p, n in live_start.items() if t.first.get(p, 0) > 0 or (p not in t.first and p not in live_end)
        }
        # The free of a silent block goes just before the first allocation that reuses any of its
        # bytes (two live blocks never overlap); only those inside the window are entries (the trace
        # keeps its newest part, like PyTorch's ring).
        window_start = t.count - len(self.window)
        pending = {p: n for p, n in silent.items() if t.first_index.get(p, t.count) >= window_start}
        before, gone_earlier = silent_frees(pending, self.window, window_start, died or {})
        if window_start:  # bytes a block held before the window date the frees of undated ones before it
            placed = {ptr for frees in before.values() for ptr, _, _ in frees}
            undated = {p: n for p, n in pending.items() if p not in placed and p not in gone_earlier}
            if undated:
                gone_earlier |= held_before_window(undated, t.last, self.window)
        for ptr in gone_earlier:
            del pending[ptr]
        # A start block's reported free can carry a stale size (the allocator's table remembers the
        # size of an earlier block at that address when this one was allocated unrecorded): the
        # size a walk read from the tensor stands.
        known = {
            p: n
            for p, n in live_start.items()
            if t.first.get(p, 0) < 0 and t.first_index[p] >= window_start and -t.first[p] != n
        }
        stacks = self.stacks.window_frames(window_start) if self.stacks is not None else {}
        # The block entries only (an allocation's ``alloc``, a free's ``free_completed``): their
        # companions are copies of them (``compact``). Each is made with its step's ``mark``
        # (``block_entries``); in the usual window, as columns first (``files.pending``).
        trace: list[dict[str, Any]] | Pending
        if not (before or known or stacks):  # the usual window: nothing to insert or correct
            # the oldest events whose groups the ring drops whole (``newest_entries``) are not built
            w = self.window
            sizes = np.fromiter(w.sizes, np.int64, len(w))
            skip = wholly_dropped(sizes, len(pending), max_entries, segment_events)
            times, ptrs, kept_sizes = (list(islice(c, skip, None)) if skip else list(c) for c in w.columns())
            trace = Pending(
                times,
                ptrs,
                kept_sizes,
                build=functools.partial(block_entries, mark=mark),
                read_times=times_ns if w.unread else None,
                sizes_array=sizes[skip:],
            )
            if self.stacks is not None:  # a start block's free carries the stack it was carried in with
                for ptr, frames in self.stacks.start_frames.items():
                    index = t.first_index.get(ptr, -1)
                    if frames and index >= window_start + skip and t.first.get(ptr, 0) < 0:
                        trace.frames[index - window_start - skip] = frames
        else:
            trace = []
            add = trace.append
            # PyTorch's viewer shows a block freed in the trace with its free's stack: each free
            # carries its allocation's frames (the same list: the file does not grow), a start
            # block's those it was carried in with
            start_frames = self.stacks.start_frames if self.stacks is not None else {}
            opened: dict[int, list[dict[str, Any]]] = {}
            for index, (t_ns, ptr, size) in enumerate(self.window, start=window_start):
                t_us = t_ns // 1000
                if before and index in before:
                    for gone, gone_size, gone_us in before.pop(index):
                        del pending[gone]
                        add(freed(gone, gone_size, gone_us, mark, start_frames.get(gone)))
                if size > 0:
                    made_in = stacks.get(index) if stacks else None
                    if made_in is None:
                        alloc = {"action": "alloc", "addr": ptr, "size": size, "stream": 0, "time_us": t_us}
                        opened.pop(ptr, None)
                    else:
                        alloc = {
                            "action": "alloc",
                            "addr": ptr,
                            "size": size,
                            "stream": 0,
                            "time_us": t_us,
                            "frames": made_in,
                        }
                        opened[ptr] = made_in
                    if mark is not None:  # after the frames, as stamping put it
                        alloc[MARK_KEY] = mark
                    add(alloc)
                else:
                    size = -size
                    first = index == t.first_index.get(ptr)
                    if known and first:
                        size = known.pop(ptr, size)
                    freed_from = opened.pop(ptr, None) or (start_frames.get(ptr) if first else None)
                    add(freed(ptr, size, t_us, mark, freed_from))
        for gone, gone_size, gone_us in chain.from_iterable(before.values()):  # after the last event
            del pending[gone]
            trace.append(freed(gone, gone_size, gone_us, mark, self._start_frames(gone)))
        # neither reused nor seen dying: freed at the end, at the latest (the peak counts them: a bound)
        self.freed_unseen = sum(pending.values())
        for ptr, size in pending.items():
            trace.append(freed(ptr, size, end_us, mark, self._start_frames(ptr)))
        kept = newest_entries(trace, max_entries, segment_events)
        kept.marked = len(kept) if mark is not None else 0
        if not lazy:
            kept = built(kept)
        blocks = {p: s for p, s in t.last.items() if s > 0}
        carried = set()
        for ptr, size in live_start.items():  # live throughout, as far as the events tell
            if ptr in live_end and ptr not in t.last:
                blocks[ptr] = size
                carried.add(ptr)
        block_frames = self.stacks.block_frames if self.stacks is not None else no_frames
        return {
            "segments": [
                segment(ptr, size, block_frames(ptr, size, ptr in carried)) for ptr, size in sorted(blocks.items())
            ],
            "device_traces": [kept if compact else expand(built(kept))],
            "allocator_settings": {},
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


def block_entries(times: list[int], ptrs: list[int], sizes: list[int], mark: str | None) -> list[dict[str, Any]]:
    """The block entries of events (times in ns, addresses, signed sizes), an ``alloc`` or a
    ``free_completed`` each, with ``mark`` (a step's) where given. Each dict is written whole at
    once, its mark included: a key added later grows every dict (a stamping pass cost a third of
    the build), a call per entry was half of it."""
    m = MARK_KEY
    if mark is None:
        return [
            {"action": "alloc", "addr": p, "size": s, "stream": 0, "time_us": t_ns // 1000}
            if s > 0
            else {"action": "free_completed", "addr": p, "size": -s, "stream": 0, "time_us": t_ns // 1000}
            for t_ns, p, s in zip(times, ptrs, sizes)
        ]
    return [
        {"action": "alloc", "addr": p, "size": s, "stream": 0, "time_us": t_ns // 1000, m: mark}
        if s > 0
        else {"action": "free_completed", "addr": p, "size": -s, "stream": 0, "time_us": t_ns // 1000, m: mark}
        for t_ns, p, s in zip(times, ptrs, sizes)
    ]
