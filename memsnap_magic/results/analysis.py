"""Pure functions over a snapshot dict: an interval's baseline, peak, end and timeline.

A snapshot's trace usually starts mid-run. Blocks allocated before the window and freed inside
it, and end-state blocks the trace never allocated, were live at the window's start: they form
the baseline (the "initially allocated" set memory_viz builds). Replaying the trace from the
baseline gives the interval's timeline. Sizes are requested bytes, as the trace records them.

Reading a field of every trace entry is most of the cost, so addresses are read only where
events must be paired (``pairing``). The baseline is the end state's bytes minus the trace's net
change, corrected for the blocks the two disagree on (the trace counts a pending free as
allocated): a block's alloc and free carry the same requested size, so that pairing reads only
the events of the sizes in question. Which blocks are alive at an event is ``alive``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np

from ..files.compact import entries
from ..files.pending import Pending
from ..files.schema import INT64
from .measures import Figures
from .pairing import SPARSE, Actions, addresses, by_address, column, end_blocks, paired, sorted_contains

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Summary(Figures):
    """One device's interval figures, in requested bytes, plus the arrays a plot needs."""

    device: int
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    allocated: np.ndarray = field(repr=False)  # bytes allocated after each replayed event
    peak_index: int = -1  # index into the arrays; -1: the baseline
    # per replayed event: +1 alloc / -1 free, requested size, index of its trace entry
    events: tuple[np.ndarray, np.ndarray, np.ndarray] = field(default=(_EMPTY, _EMPTY, _EMPTY), repr=False)
    trace: list[dict[str, Any]] | Pending = field(default_factory=list, repr=False)  # Pending: see files.pending
    segments: list[dict[str, Any]] = field(default_factory=list, repr=False)  # the snapshot's end state
    ooms: np.ndarray = field(default_factory=lambda: _EMPTY, repr=False)  # the trace's ``oom`` entries
    requested_sizes: bool = True  # False: an old file whose end state gives only rounded sizes

    @cached_property
    def end(self) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """The device's allocated blocks at the snapshot's end: address, requested size, block dict."""
        return end_blocks(self.segments, self.device)

    def addresses(self, entries: np.ndarray) -> np.ndarray:
        """``addr`` of some trace entries: where many are asked, from one read of the whole
        column that every pairing over this summary shares."""
        if len(entries) > len(self.trace) // SPARSE:
            picked: np.ndarray = self._addr_column[entries]
            return picked
        return addresses(self.trace, entries)

    @cached_property
    def _addr_column(self) -> np.ndarray:
        return column(self.trace, "addr", 0).astype(np.uint64)

    @cached_property
    def paired(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every replayed event grouped by address (``by_address``): sorted once, shared by
        ``alive``'s functions (a digest asks for it three times)."""
        return paired(self.trace, self.events[2], self.addresses)

    @cached_property
    def time_us(self) -> np.ndarray:
        """``time_us`` of each replayed event (read on demand: plots need only a few)."""
        t = _times(self.trace)[self.events[2]] if self.trace else _EMPTY
        if len(t) and t.min() < 0:  # older traces lack time_us: carry the last known time forward
            known = np.where(t >= 0, np.arange(len(t)), -1)
            last = np.maximum.accumulate(known)
            t = np.where(last >= 0, t[np.maximum(last, 0)], 0)
        return t

    def times_at(self, index: np.ndarray) -> np.ndarray:
        """``time_us`` of the replayed events at ``index``, without reading every entry."""
        if type(self.trace) is Pending and not self.trace.ready:  # its times are read where asked
            return self.trace.times_of(self.events[2][index])
        entries = self.events[2][index].tolist()
        times = [self.trace[i].get("time_us") for i in entries]
        if not all(type(t) is int and 0 <= t < INT64 for t in times):  # missing (old traces) or not a time
            at: np.ndarray = self.time_us[index]
            return at
        return np.asarray(times, dtype=np.int64)


def _times(trace: list[dict[str, Any]] | Pending) -> np.ndarray:
    """Every entry's ``time_us``; -1 where an entry has none, or something that is not a time."""
    try:
        t = column(trace, "time_us", -1)
    except (ValueError, TypeError, OverflowError):  # a file's own business: only plots read times
        t = np.fromiter(
            (v if type(v) is int and 0 <= v < INT64 else -1 for v in map(dict.get, trace, repeat("time_us"))),
            dtype=np.int64,
            count=len(trace),
        )
    return t


def pick_device(snap: dict[str, Any]) -> int:
    """The device whose trace has entries (the first such); 0 when every trace is empty."""
    for d, trace in enumerate(snap.get("device_traces", [])):
        if trace:
            return d
    return 0


def _trace_events(trace: list[dict[str, Any]]) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """(sign, size, entry index) of the events that change allocated bytes, and the indices of
    the ``oom`` entries (an allocation the allocator could not serve)."""
    action = Actions(trace)
    alloc = action.is_("alloc")
    # frees count where they complete; a trace without free_completed, where they are requested
    for name in ("free_completed", "free", "free_requested"):
        freed = action.is_(name)
        if freed.any():
            break
    event = alloc | freed
    entry = np.flatnonzero(event)
    sign = np.where(alloc[entry], 1, -1).astype(np.int64)
    other = np.flatnonzero(~event)  # where an oom can be: most traces are mostly events
    return (sign, column(trace, "size", 0)[entry], entry), other[action.at(other) == "oom"]


def _end_bytes(segments: list[dict[str, Any]], device: int) -> tuple[int, np.ndarray, bool]:
    """Requested bytes of the device's allocated blocks at the snapshot's end, the requested
    sizes of the blocks pending a free, and whether every size was a requested one (old files
    give only the rounded one). A segment's own sums answer unless it holds a pending block."""
    total, pending, exact = 0, [], True
    for seg in segments:
        if seg["device"] != device:
            continue
        allocated = seg.get("allocated_size")
        if seg.get("requested_size") is not None and allocated is not None and seg.get("active_size") == allocated:
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


def _left_by_trace(
    trace: list[dict[str, Any]],
    events: tuple[np.ndarray, np.ndarray, np.ndarray],
    sel: np.ndarray,
    end: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]],
) -> int:
    """Bytes of the blocks among events ``sel`` that the trace allocated and never freed, less
    what the end state counts for them: what "end-state bytes minus net change" misses."""
    sign, size, entry = events
    order, a, _, last = by_address(addresses(trace, entry[sel]))
    tail = sel[order[last]]  # each address's last event
    live = sign[tail] > 0
    live_addr, live_size = a[last][live], size[tail][live]
    by_addr = np.argsort(end[0])
    end_addr, end_size = end[0][by_addr], end[1][by_addr]
    held = live_addr[sorted_contains(end_addr, live_addr)]
    return int(live_size.sum() - end_size[np.searchsorted(end_addr, held)].sum())


def summarize(snap: dict[str, Any], device: int | None = None) -> Summary:
    """Baseline, peak and end of one device's trace window (``device=None``: the one with entries)."""
    if device is None:
        device = pick_device(snap)
    traces = snap["device_traces"]
    trace = traces[device] if device < len(traces) else []
    events, ooms = _trace_events(trace)
    sign, size, _ = events
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
        baseline += _left_by_trace(trace, events, suspects, end_blocks(segments, device))
    if baseline + min(low, 0) < 0 and len(suspects) < len(sign):
        # the end state contradicts the trace (recording paused, say): pair every event, as
        # memory_viz does, and count what the trace freed but never allocated as the baseline
        everything = np.arange(len(sign))
        baseline = end_bytes - net + _left_by_trace(trace, events, everything, end_blocks(segments, device))

    allocated = baseline + steps
    if len(allocated) and allocated.max() > baseline:
        peak_index = int(allocated.argmax())
        peak = int(allocated[peak_index])
    else:
        peak_index, peak = -1, baseline
    end_allocated = int(allocated[-1]) if len(allocated) else baseline
    return Summary(
        device=device,
        baseline_allocated=baseline,
        peak_allocated=peak,
        end_allocated=end_allocated,
        trace_entries=entries(trace),  # a compact trace's companions counted
        allocated=allocated,
        peak_index=peak_index,
        events=events,
        trace=trace,
        segments=segments,
        requested_sizes=exact,
        ooms=ooms,
    )


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
