"""Pure functions over a snapshot dict: an interval's baseline, peak, end and timeline.

A snapshot's trace usually starts mid-run. Blocks allocated before the window and freed inside
it, and end-state blocks the trace never allocated, were live at the window's start: they form
the baseline (the "initially allocated" set memory_viz builds). Replaying the trace from the
baseline gives the interval's timeline. Sizes are requested bytes, as the trace records them.

Reading a field of every trace entry is most of the cost, so addresses are read only where
events must be paired. The baseline is the end state's bytes minus the trace's net change,
corrected for the blocks the two disagree on (the trace counts a pending free as allocated);
the blocks alive at an event are found among the largest sizes first. Both rely on a block's
alloc and free carrying the same requested size, so each pairing reads only the events of the
sizes in question.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from .figures import Figures

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Summary(Figures):
    """One device's interval figures, in requested bytes, plus the arrays a plot needs."""

    device: int
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    allocated: np.ndarray = field(repr=False)    # bytes allocated after each replayed event
    peak_index: int = -1                         # index into the arrays; -1: the baseline
    # per replayed event: +1 alloc / -1 free, requested size, index of its trace entry
    events: tuple[np.ndarray, np.ndarray, np.ndarray] = field(default=(_EMPTY, _EMPTY, _EMPTY), repr=False)
    trace: list[dict[str, Any]] = field(default_factory=list, repr=False)
    segments: list[dict[str, Any]] = field(default_factory=list, repr=False)  # the snapshot's end state
    requested_sizes: bool = True  # False: an old file whose end state gives only rounded sizes

    @cached_property
    def end(self) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """The device's allocated blocks at the snapshot's end: address, requested size, block dict."""
        return _end_blocks(self.segments, self.device)

    @cached_property
    def time_us(self) -> np.ndarray:
        """``time_us`` of each replayed event (read on demand: plots need only a few)."""
        t = _column(self.trace, "time_us", -1)[self.events[2]] if self.trace else _EMPTY
        if len(t) and t.min() < 0:  # older traces lack time_us: carry the last known time forward
            known = np.where(t >= 0, np.arange(len(t)), -1)
            last = np.maximum.accumulate(known)
            t = np.where(last >= 0, t[np.maximum(last, 0)], 0)
        return t

    def times_at(self, index: np.ndarray) -> np.ndarray:
        """``time_us`` of the replayed events at ``index``, without reading every entry."""
        entries = self.events[2][index].tolist()
        times = [self.trace[i].get("time_us") for i in entries]
        if None in times:
            return self.time_us[index]
        return np.asarray(times, dtype=np.int64)


def pick_device(snap: dict[str, Any]) -> int:
    """The device whose trace has entries (the first such); 0 when every trace is empty."""
    for d, trace in enumerate(snap.get("device_traces", [])):
        if trace:
            return d
    return 0


def _column(trace: list[dict[str, Any]], key: str, default: Any, dtype: Any = np.int64) -> np.ndarray:
    """One field of every entry, read at C speed (``itemgetter`` mapped over the list)."""
    n = len(trace)
    try:
        return np.fromiter(map(itemgetter(key), trace), dtype=dtype, count=n)
    except KeyError:  # some entry lacks it: an old trace's time_us, say
        return np.fromiter(map(dict.get, trace, repeat(key, n), repeat(default, n)), dtype=dtype, count=n)


# Entries picked here and there cost ~8x an entry of a pass over the whole list (cache misses).
_SPARSE = 8


def _addresses(trace: list[dict[str, Any]], entries: np.ndarray) -> np.ndarray:
    """``addr`` of some trace entries (alloc and free entries always carry one)."""
    if len(entries) > len(trace) // _SPARSE:
        return _column(trace, "addr", 0)[entries].astype(np.uint64)
    rows = map(trace.__getitem__, entries.tolist())
    # read as int64, as PyTorch writes them (int64_t(ptr)), then compared as unsigned
    return np.fromiter(map(itemgetter("addr"), rows), dtype=np.int64, count=len(entries)).astype(np.uint64)


def _trace_events(trace: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, size, entry index) of the events that change allocated bytes."""
    action = _column(trace, "action", None, object)  # compared as objects: no per-entry hashing
    alloc = action == "alloc"
    # frees count where they complete; a trace without free_completed, where they are requested
    for name in ("free_completed", "free", "free_requested"):
        freed = action == name
        if freed.any():
            break
    entry = np.flatnonzero(alloc | freed)
    sign = np.where(alloc[entry], 1, -1).astype(np.int64)
    return sign, _column(trace, "size", 0)[entry], entry


def _end_bytes(segments: list[dict[str, Any]], device: int) -> tuple[int, np.ndarray, bool]:
    """Requested bytes of the device's allocated blocks at the snapshot's end, the requested
    sizes of the blocks pending a free, and whether every size was a requested one (old files
    give only the rounded one). A segment's own sums answer unless it holds a pending block."""
    total, pending, exact = 0, [], True
    for seg in segments:
        if seg["device"] != device:
            continue
        allocated = seg.get("allocated_size")
        if "requested_size" in seg and allocated is not None and seg.get("active_size") == allocated:
            total += seg["requested_size"]  # summed over active blocks, here all allocated
            continue
        for b in seg["blocks"]:
            state = b["state"]
            if state == "active_allocated":
                requested = b.get("requested_size")
                exact = exact and bool(requested)
                total += requested or b["size"]
            elif state == "active_pending_free":
                pending.append(b.get("requested_size") or b["size"])
    return total, np.asarray(pending, dtype=np.int64), exact


def _end_blocks(segments: list[dict[str, Any]], device: int, at_least: int = 0
                ) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """(address, requested size, block dict) of the device's allocated blocks at the snapshot's
    end, those of ``at_least`` bytes (segments smaller than that are skipped whole)."""
    addrs, sizes, blocks = [], [], []
    for seg in segments:
        if seg["device"] != device or seg.get("total_size", at_least) < at_least:
            continue
        a = seg["address"]
        for b in seg["blocks"]:
            size = b.get("requested_size") or b["size"]
            if b["state"] == "active_allocated" and size >= at_least:
                addrs.append(a)
                sizes.append(size)
                blocks.append(b)
            a += b["size"]
    return np.asarray(addrs, dtype=np.uint64), np.asarray(sizes, dtype=np.int64), blocks


def _by_address(trace: list[dict[str, Any]], entry: np.ndarray, sel: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Events ``sel`` grouped by address, each address's events in time order: the order,
    the sorted addresses, and which sorted positions start and end an address's group."""
    a = _addresses(trace, entry[sel])
    order = np.argsort(a, kind="stable")
    a = a[order]
    change = np.ones(len(a) + 1, dtype=bool)
    change[1:-1] = a[1:] != a[:-1]
    return order, a, change[:-1], change[1:]


def _sorted_contains(sorted_values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``np.isin(query, sorted_values)`` for an ascending ``sorted_values``, without sorting again."""
    if not len(sorted_values):
        return np.zeros(len(query), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_values, query), len(sorted_values) - 1)
    return sorted_values[pos] == query


def _left_by_trace(trace: list[dict[str, Any]], events: tuple[np.ndarray, np.ndarray, np.ndarray],
                   sel: np.ndarray, end: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]) -> int:
    """Bytes of the blocks among events ``sel`` that the trace allocated and never freed, less
    what the end state counts for them: what "end-state bytes minus net change" misses."""
    sign, size, entry = events
    order, a, _, last = _by_address(trace, entry, sel)
    tail = sel[order[last]]                  # each address's last event
    live = sign[tail] > 0
    live_addr, live_size = a[last][live], size[tail][live]
    by_addr = np.argsort(end[0])
    end_addr, end_size = end[0][by_addr], end[1][by_addr]
    held = live_addr[_sorted_contains(end_addr, live_addr)]
    return int(live_size.sum() - end_size[np.searchsorted(end_addr, held)].sum())


def summarize(snap: dict[str, Any], device: int | None = None) -> Summary:
    """Baseline, peak and end of one device's trace window (``device=None``: the one with entries)."""
    if device is None:
        device = pick_device(snap)
    traces = snap["device_traces"]
    trace = traces[device] if device < len(traces) else []
    events = sign, size, entry = _trace_events(trace)
    steps = np.cumsum(sign * size)
    net, low = (int(steps[-1]), int(steps.min())) if len(steps) else (0, 0)
    segments = snap["segments"]
    end_bytes, pending, exact = _end_bytes(segments, device)

    # What the window started with: what it ended with, less what it added. A block pending a
    # free is allocated for the replay but not in the end's allocated blocks, so the blocks of
    # the pending sizes are paired by address to add the trace's own back.
    if not exact:  # end sizes are rounded where the trace's are requested: pair every event
        suspects = np.arange(len(sign))
    elif len(pending):
        suspects = np.flatnonzero(np.isin(size, pending))
    else:
        suspects = _EMPTY
    baseline = end_bytes - net
    if len(suspects):
        baseline += _left_by_trace(trace, events, suspects, _end_blocks(segments, device))
    if baseline + min(low, 0) < 0 and len(suspects) < len(sign):
        # the end state contradicts the trace (recording paused, say): pair every event, as
        # memory_viz does, and count what the trace freed but never allocated as the baseline
        everything = np.arange(len(sign))
        baseline = end_bytes - net + _left_by_trace(trace, events, everything, _end_blocks(segments, device))

    allocated = baseline + steps
    if len(allocated) and allocated.max() > baseline:
        peak_index = int(allocated.argmax())
        peak = int(allocated[peak_index])
    else:
        peak_index, peak = -1, baseline
    end_allocated = int(allocated[-1]) if len(allocated) else baseline
    return Summary(device=device, baseline_allocated=baseline, peak_allocated=peak,
                   end_allocated=end_allocated, trace_entries=len(trace), allocated=allocated,
                   peak_index=peak_index, events=events, trace=trace, segments=segments,
                   requested_sizes=exact)


_LOOK_PER_BLOCK = 32  # events looked at per wanted block before widening the search


def alive_at(summary: Summary, index: int | None = None, top: int = 10) -> list[dict[str, Any]]:
    """The largest blocks allocated after replayed event ``index`` (default: the peak).

    Each item: ``size``, ``addr``, ``frames`` (the trace's or the block's stack, possibly
    empty) and ``before`` (True when the block was already live when the window started).
    With ``top``, only events of the largest sizes are paired by address, widening until
    ``top`` blocks are found; ``top=0`` pairs them all.
    """
    if top < 0:
        raise ValueError(f"top must be 0 (every block) or more, not {top}")
    p = summary.peak_index if index is None else index
    size = summary.events[1]
    m = len(size)
    look = top * _LOOK_PER_BLOCK
    # pairing by size needs the end state's sizes to be the trace's (requested) ones
    while top and look < m and summary.requested_sizes:
        cut = np.partition(size, m - look)[m - look]  # the look-th largest size
        sel = np.flatnonzero(size >= cut)
        if len(sel) > len(summary.trace) // _SPARSE:  # no cheaper than pairing every event
            break
        items = _alive_among(summary, p, sel, _end_blocks(summary.segments, summary.device, cut), top)
        if len(items) >= top:  # every block of size >= cut is here, and none smaller can rank
            return items[:top]
        look *= 8
    items = _alive_among(summary, p, np.arange(m), summary.end, top)
    return items[:top] if top else items


def _alive_among(summary: Summary, p: int, sel: np.ndarray,
                 end: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]], top: int) -> list[dict[str, Any]]:
    """``alive_at`` over the events ``sel`` and the end-state blocks ``end`` only."""
    sign, size, entry = summary.events
    sign, size = sign[sel], size[sel]
    order, a, first_sorted, last_sorted = _by_address(summary.trace, entry, sel)
    n = len(sel)
    # event index of the next event at the same address (none: past every event)
    following = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    has_next = np.flatnonzero(~last_sorted)
    following[order[has_next]] = sel[order[has_next + 1]]
    first = np.empty(n, dtype=bool)
    first[order] = first_sorted
    alive_new = (sign > 0) & (sel <= p) & (following > p)
    alive_old = first & (sign < 0) & (sel > p)  # live before the window, freed after index p
    chosen = np.flatnonzero(alive_new | alive_old)
    if top:
        chosen = chosen[np.argsort(-size[chosen], kind="stable")[:top]]
    trace, addr = summary.trace, np.empty(n, dtype=np.uint64)
    addr[order] = a
    items = [{"size": int(size[i]), "addr": int(addr[i]), "before": bool(alive_old[i]),
              "frames": [] if alive_old[i] else list(trace[entry[sel[i]]].get("frames", []))}
             for i in chosen.tolist()]

    # end-state blocks the trace never allocated (or freed and did not allocate again)
    tail = order[last_sorted]
    live_addr = a[last_sorted][sign[tail] > 0]  # ascending
    end_addr, end_size, end_blocks = end
    kept = np.flatnonzero(~_sorted_contains(live_addr, end_addr))
    kept = kept[np.argsort(-end_size[kept], kind="stable")]
    if top:
        kept = kept[:top]
    items += [{"size": int(end_size[i]), "addr": int(end_addr[i]), "before": True,
               "frames": list(end_blocks[i].get("frames", []))} for i in kept.tolist()]
    items.sort(key=lambda item: -item["size"])  # stable: ties keep trace order
    return items


def decimate_index(y: np.ndarray, points: int = 2000) -> np.ndarray:
    """Indices of at most ``points`` samples keeping each bucket's min and max, so peaks survive."""
    n = len(y)
    if n <= points:
        return np.arange(n)
    buckets = max(points // 2, 1)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    width = np.diff(edges)
    idx = np.arange(n)
    big = np.iinfo(np.int64).max
    # first index of each bucket's min and max, to keep their order in time
    imin = np.minimum.reduceat(np.where(y == np.repeat(np.minimum.reduceat(y, starts), width), idx, big), starts)
    imax = np.minimum.reduceat(np.where(y == np.repeat(np.maximum.reduceat(y, starts), width), idx, big), starts)
    return np.unique(np.concatenate([imin, imax]))


def decimate(x: np.ndarray, y: np.ndarray, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` reduced to at most ``points`` samples by ``decimate_index``."""
    keep = decimate_index(y, points)
    return x[keep], y[keep]
