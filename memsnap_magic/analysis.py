"""Pure functions over a snapshot dict: an interval's baseline, peak, end and timeline.

A snapshot's trace usually starts mid-run. Blocks allocated before the window and freed inside
it, and end-state blocks the trace never allocated, were live at the window's start: they form
the baseline (the "initially allocated" set memory_viz builds). Replaying the trace from the
baseline gives the interval's timeline. Sizes are requested bytes, as the trace records them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

_FREE_ACTIONS = ("free_completed", "free")


@dataclass(frozen=True)
class Summary:
    """One device's interval figures, in requested bytes, plus the arrays a plot needs."""

    device: int
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    time_us: np.ndarray = field(repr=False)      # per replayed event (alloc/free)
    allocated: np.ndarray = field(repr=False)    # bytes allocated after each event
    peak_index: int = -1                         # index into the arrays; -1: the baseline
    # per replayed event: +1 alloc / -1 free, address, size, index of its trace entry
    events: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(default=(), repr=False)
    untouched: list[dict[str, Any]] = field(default_factory=list, repr=False)  # end blocks live all along

    @property
    def peak_increase(self) -> int:
        return self.peak_allocated - self.baseline_allocated

    @property
    def kept(self) -> int:
        """Allocated at the end minus at the start: what the interval left behind (a leak)."""
        return self.end_allocated - self.baseline_allocated


def pick_device(snap: dict[str, Any]) -> int:
    """The device whose trace has entries (the first such); 0 when every trace is empty."""
    for d, trace in enumerate(snap.get("device_traces", [])):
        if trace:
            return d
    return 0


_CODE = {"alloc": 1, "free_completed": 2, "free": 2, "free_requested": 3}


def _column(trace: list[dict[str, Any]], key: str, default: int) -> np.ndarray:
    """One integer field of every entry, read at C speed (``dict.get`` mapped over the list)."""
    n = len(trace)
    return np.fromiter(map(dict.get, trace, repeat(key, n), repeat(default, n)), dtype=np.int64, count=n)


def _trace_arrays(trace: list[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    """(sign, addr, size, time_us, entry index) of the events that change allocated bytes."""
    n = len(trace)
    actions = map(dict.get, trace, repeat("action", n))
    code = np.fromiter(map(_CODE.get, actions, repeat(0, n)), dtype=np.int8, count=n)
    # a trace without free_completed counts frees where they are requested
    free_code = 2 if (code == 2).any() else 3
    index = np.flatnonzero((code == 1) | (code == free_code))
    sign = np.where(code[index] == 1, 1, -1).astype(np.int64)
    addr = _column(trace, "addr", 0)[index].astype(np.uint64)
    size = _column(trace, "size", 0)[index]
    t = _column(trace, "time_us", -1)[index]
    if len(t) and t.min() < 0:  # older traces lack time_us: carry the last known time forward
        known = np.where(t >= 0, np.arange(len(t)), -1)
        last = np.maximum.accumulate(known)
        t = np.where(last >= 0, t[np.maximum(last, 0)], 0)
    return sign, addr, size, t, index.astype(np.int64)


def _end_blocks(snap: dict[str, Any], device: int) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """(address, requested size, block dict) of the device's allocated blocks at the snapshot's end."""
    addrs, sizes, blocks = [], [], []
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        a = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                addrs.append(a)
                sizes.append(b.get("requested_size") or b["size"])
                blocks.append(b)
            a += b["size"]
    return np.asarray(addrs, dtype=np.uint64), np.asarray(sizes, dtype=np.int64), blocks


def summarize(snap: dict[str, Any], device: int | None = None) -> Summary:
    """Baseline, peak and end of one device's trace window (``device=None``: the one with entries)."""
    if device is None:
        device = pick_device(snap)
    traces = snap["device_traces"]
    trace = traces[device] if device < len(traces) else []
    sign, addr, size, t, entry = _trace_arrays(trace)
    delta = sign * size

    # Per address, events alternate alloc/free; a free that comes first was allocated before the
    # window, and the addresses whose last event is an alloc are the trace's own live blocks.
    order = np.argsort(addr, kind="stable")
    a_sorted = addr[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = a_sorted[1:] != a_sorted[:-1]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = a_sorted[1:] != a_sorted[:-1]
    first_idx, last_idx = order[first], order[last]
    freed_before = int(size[first_idx][sign[first_idx] < 0].sum())
    live_from_trace = addr[last_idx][sign[last_idx] > 0]

    end_addr, end_size, end_blocks = _end_blocks(snap, device)
    untouched = ~np.isin(end_addr, live_from_trace)
    baseline = freed_before + int(end_size[untouched].sum())
    kept_blocks = [dict(end_blocks[i], address=int(end_addr[i]), requested_size=int(end_size[i]))
                   for i in np.flatnonzero(untouched)]

    allocated = baseline + np.cumsum(delta)
    if len(allocated) and allocated.max() > baseline:
        peak_index = int(allocated.argmax())
        peak = int(allocated[peak_index])
    else:
        peak_index, peak = -1, baseline
    end = int(allocated[-1]) if len(allocated) else baseline
    return Summary(device=device, baseline_allocated=baseline, peak_allocated=peak,
                   end_allocated=end, trace_entries=len(trace), time_us=t,
                   allocated=allocated, peak_index=peak_index,
                   events=(sign, addr, size, entry), untouched=kept_blocks)


def alive_at(snap: dict[str, Any], summary: Summary, index: int | None = None,
             top: int = 10) -> list[dict[str, Any]]:
    """The largest blocks allocated after replayed event ``index`` (default: the peak).

    Each item: ``size``, ``addr``, ``frames`` (the trace's or the block's stack, possibly
    empty) and ``before`` (True when the block was already live when the window started).
    """
    p = summary.peak_index if index is None else index
    sign, addr, size, entry = summary.events
    n = len(sign)
    idx = np.arange(n)
    order = np.argsort(addr, kind="stable")
    a = addr[order]
    same = a[1:] == a[:-1]
    following = np.full(n, n, dtype=np.int64)  # the next event at the same address
    following[order[:-1][same]] = order[1:][same]
    first = np.ones(n, dtype=bool)
    first[order[1:][same]] = False
    alive_new = (sign > 0) & (idx <= p) & (following > p)
    alive_old = first & (sign < 0) & (idx > p)  # live before the window, freed after index
    chosen = np.flatnonzero(alive_new | alive_old)
    if top:
        chosen = chosen[np.argsort(-size[chosen], kind="stable")[:top]]
    trace = snap["device_traces"][summary.device] if n else []
    items = [{"size": int(size[i]), "addr": int(addr[i]), "before": bool(alive_old[i]),
              "frames": [] if alive_old[i] else list(trace[entry[i]].get("frames", []))}
             for i in chosen.tolist()]
    items += [{"size": b["requested_size"], "addr": b["address"], "before": True,
               "frames": list(b.get("frames", []))} for b in summary.untouched]
    items.sort(key=lambda item: -item["size"])  # stable: ties keep trace order
    return items[:top] if top else items


def decimate(x: np.ndarray, y: np.ndarray, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` samples keeping each bucket's min and max, so peaks survive."""
    n = len(y)
    if n <= points:
        return x, y
    buckets = max(points // 2, 1)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    lo = np.minimum.reduceat(y, starts)
    hi = np.maximum.reduceat(y, starts)
    # index of min/max within each bucket, to keep their order in time
    idx = np.arange(n)
    ymin_rep = np.repeat(lo, np.diff(edges))
    ymax_rep = np.repeat(hi, np.diff(edges))
    big = np.iinfo(np.int64).max
    imin = np.minimum.reduceat(np.where(y == ymin_rep, idx, big), starts)
    imax = np.minimum.reduceat(np.where(y == ymax_rep, idx, big), starts)
    keep = np.unique(np.concatenate([imin, imax]))
    return x[keep], y[keep]
