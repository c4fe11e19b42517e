"""The parts of a CPU snapshot the history builds from its events: where each unreported free
goes, the ring's newest entries (with the groups that hold them), and one segment per live block
(the CPU allocator has no segments of its own)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from operator import countOf, itemgetter
from typing import Any

import numpy as np

from ....files.compact import Compact, cut_head, ring_cut
from ....files.layout import MARK_KEY
from ....files.pending import Pending
from .events import times_ns

_ACTION = itemgetter("action")


class Window:
    """The newest events of an interval, as three rings of one length: times (ns on the
    profiler's clock), addresses and signed sizes (> 0: an allocation). Columns, not a tuple per
    event: the entries are built from them once, and a tuple each cost as much again. ``unread``:
    some times are still the event-tree nodes to read them from (a session without the tracer
    gives its events in time order, so none is needed to place them): read by the writer as it
    builds the entries, or by ``resolve`` before anything here reads them."""

    def __init__(self, maxlen: int, old: Window | None = None) -> None:
        self.times: deque[Any] = deque(old.times if old else (), maxlen)
        self.ptrs: deque[int] = deque(old.ptrs if old else (), maxlen)
        self.sizes: deque[int] = deque(old.sizes if old else (), maxlen)
        self.unread: bool = old.unread if old else False

    def resolve(self) -> None:
        """Every time read: before one is read here, and before the history outlives the
        session whose nodes it holds (a ``clear=false`` chain's)."""
        if self.unread:
            self.times = deque(times_ns(list(self.times)), self.times.maxlen)
            self.unread = False

    def columns(self) -> tuple[deque[Any], deque[int], deque[int]]:
        """The rings (times as held: ``unread`` ones are nodes)."""
        return self.times, self.ptrs, self.sizes

    @property
    def maxlen(self) -> int:
        return self.ptrs.maxlen or 0

    def __len__(self) -> int:
        return len(self.ptrs)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        self.resolve()
        return zip(self.times, self.ptrs, self.sizes)

    def extend(self, times: Iterable[Any], ptrs: Iterable[int], sizes: Iterable[int], unread: bool = False) -> None:
        self.times.extend(times)
        self.ptrs.extend(ptrs)
        self.sizes.extend(sizes)
        self.unread = self.unread or unread


def silent_frees(
    blocks: dict[int, int], window: Window, window_start: int, died: dict[int, int]
) -> tuple[dict[int, list[tuple[int, int, int]]], set[int]]:
    """Where the unreported free of each of ``blocks`` (live before the interval, allocated while
    nothing recorded) goes: ``{event index: [(address, bytes, time_us), ...]}``, each placed just
    before that event (an index past the window: after its last event), and the blocks freed
    before a window that dropped older events. A block's free is at the latest the first
    allocation reusing any of its bytes (two live blocks never overlap), and exactly when its
    storage died, where ``died`` (address -> time_ns on the profiler's clock) says so."""
    if not blocks:
        return {}, set()
    window.resolve()
    n = len(window)
    times = np.fromiter(window.times, np.int64, n)
    sizes = np.fromiter(window.sizes, np.int64, n)
    allocs = np.flatnonzero(sizes > 0)
    q, m = np.fromiter(window.ptrs, np.int64, n)[allocs], sizes[allocs]
    ptrs = sorted(blocks)
    starts = np.array(ptrs, dtype=np.int64)
    ends = starts + np.array([blocks[p] for p in ptrs], dtype=np.int64)
    never = np.iinfo(np.int64).max
    first = np.full(len(starts), never)
    last = np.searchsorted(starts, q + m, side="left") - 1  # the last block starting before each allocation ends
    for back in range(len(starts)):  # an allocation spanning several freed blocks reuses each
        cand = last - back
        hit = cand >= 0
        hit[hit] &= ends[cand[hit]] > q[hit]
        if not hit.any():
            break
        np.minimum.at(first, cand[hit], allocs[hit])
    placed: dict[int, list[tuple[int, int, int]]] = {}
    before_window: set[int] = set()
    for i, ptr in enumerate(ptrs):
        reused = int(first[i])
        at, t_ns = (reused, int(times[reused])) if reused != never else (n, None)
        death = died.get(ptr)
        if death is not None:
            index = int(np.searchsorted(times, death, side="right"))
            if index == 0 and window_start > 0:  # freed before the window's first event
                before_window.add(ptr)
                continue
            if index <= at:
                at, t_ns = index, death
        if t_ns is not None:
            placed.setdefault(at + window_start, []).append((ptr, blocks[ptr], t_ns // 1000))
    return placed, before_window


def held_before_window(blocks: dict[int, int], last: dict[int, int], window: Window) -> set[int]:
    """Which of ``blocks`` (live before the interval, freed unreported, their frees placed
    nowhere in the window) share bytes with a block at an address whose events all came before
    the window, or whose first event in it is a free (``last``: each address's last event, signed
    size). Two live blocks never overlap, so those were freed before the window, and nothing of
    theirs is in it; else each is freed at the interval's end, live at the window's start beside
    the block that took its bytes. (A block live before the interval whose free was reported is
    among those addresses too: it lived beside them, so it overlaps none.)"""
    first_in_window = dict(zip(reversed(window.ptrs), reversed(window.sizes)))
    spans = []  # (address, bytes) of each block held before the window
    for ptr, size in last.items():
        first = first_in_window.get(ptr)
        if first is None:
            spans.append((ptr, abs(size)))
        elif first < 0:
            spans.append((ptr, -first))
    if not spans:
        return set()
    starts = np.fromiter((p for p, _ in spans), np.int64, len(spans))
    ends = starts + np.fromiter((n for _, n in spans), np.int64, len(spans))
    return {p for p, n in blocks.items() if bool(np.any((starts < p + n) & (ends > p)))}


def freed(
    ptr: int, size: int, t_us: int, mark: str | None = None, frames: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"action": "free_completed", "addr": ptr, "size": size, "stream": 0, "time_us": t_us}
    if frames:
        entry["frames"] = frames
    if mark is not None:
        entry[MARK_KEY] = mark
    return entry


def newest_entries(trace: list[dict[str, Any]] | Pending, max_entries: int, segments: bool) -> Compact | Pending:
    """The block entries whose groups (an allocation: ``segment_alloc``, ``alloc``; a free:
    ``free_requested``, ``free_completed``, ``segment_free``; without ``segments`` none of the
    segment events) hold the newest ``max_entries`` entries of the completed trace, as a ``Compact``
    (a ``Pending`` one kept as such). A group the cut runs through keeps its newer entries: where
    that leaves a free's ``segment_free`` alone, it is in the list itself (``compact.cut_head``)."""
    if type(trace) is Pending:
        return trace.keep_newest(max_entries, segments)
    first, cut, companions = ring_cut(
        len(trace), countOf(map(_ACTION, trace), "alloc"), lambda i: trace[i]["action"], max_entries, segments
    )
    kept = Compact(trace[first:])
    kept.segments = segments
    kept.companions = companions
    cut_head(kept, cut)
    return kept


def wholly_dropped(sizes: np.ndarray, after: int, max_entries: int, segments: bool) -> int:
    """How many of the oldest window events (signed ``sizes``, each one block entry)
    ``newest_entries`` drops with their whole group, where ``after`` frees follow them: those
    need not be built. Its cut runs from the oldest group while the rest still overflows."""
    if not len(sizes):
        return 0
    alloc_group, free_group = (2, 3) if segments else (1, 2)
    groups = np.where(sizes > 0, alloc_group, free_group)
    ends = np.cumsum(groups)
    cut = int(ends[-1]) + free_group * after - max_entries
    return int(np.searchsorted(ends, cut, side="right")) if cut > 0 else 0


def no_frames(ptr: int, size: int, carried: bool) -> list[dict[str, Any]]:
    return []


def segment(ptr: int, size: int, frames: list[dict[str, Any]]) -> dict[str, Any]:
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
        "frames": frames,
        "blocks": [
            {"address": ptr, "size": size, "requested_size": size, "state": "active_allocated", "frames": frames}
        ],
    }
