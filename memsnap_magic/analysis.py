"""Pure functions over a snapshot dict: an interval's baseline, peak, end and timeline.

A snapshot's trace usually starts mid-run. Blocks allocated before the window and freed inside
it, and end-state blocks the trace never allocated, were live at the window's start: they form
the baseline (the "initially allocated" set memory_viz builds). Replaying the trace from the
baseline gives the interval's timeline. Sizes are requested bytes, as the trace records them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Summary:
    """One device's interval figures, in requested bytes, plus the arrays a plot needs."""

    device: int
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    allocated: np.ndarray = field(repr=False)    # bytes allocated after each replayed event
    peak_index: int = -1                         # index into the arrays; -1: the baseline
    # per replayed event: +1 alloc / -1 free, address, size, index of its trace entry
    events: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(default=(), repr=False)
    trace: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # end-state blocks live all along: (address, requested size, block dict)
    untouched: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]] = field(default=(), repr=False)

    @cached_property
    def time_us(self) -> np.ndarray:
        """``time_us`` of each replayed event (read on demand: plots need only a few)."""
        t = _column(self.trace, "time_us", -1)[self.events[3]] if self.trace else np.zeros(0, np.int64)
        if len(t) and t.min() < 0:  # older traces lack time_us: carry the last known time forward
            known = np.where(t >= 0, np.arange(len(t)), -1)
            last = np.maximum.accumulate(known)
            t = np.where(last >= 0, t[np.maximum(last, 0)], 0)
        return t

    def times_at(self, index: np.ndarray) -> np.ndarray:
        """``time_us`` of the replayed events at ``index``, without reading every entry."""
        entries = self.events[3][index].tolist()
        times = [self.trace[i].get("time_us") for i in entries]
        if None in times:
            return self.time_us[index]
        return np.asarray(times, dtype=np.int64)

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


def _column(trace: list[dict[str, Any]], key: str, default: int) -> np.ndarray:
    """One integer field of every entry, read at C speed (``dict.get`` mapped over the list)."""
    n = len(trace)
    return np.fromiter(map(dict.get, trace, repeat(key, n), repeat(default, n)), dtype=np.int64, count=n)


_HASH = {name: hash(name) for name in ("alloc", "free_completed", "free", "free_requested")}


def _trace_arrays(trace: list[dict[str, Any]]) -> tuple[np.ndarray, ...]:
    """(sign, addr, size, entry index) of the events that change allocated bytes."""
    n = len(trace)
    # Actions compared by their string hash: one C-level pass instead of a dict lookup per entry.
    h = np.fromiter(map(hash, map(dict.get, trace, repeat("action", n))), dtype=np.int64, count=n)
    alloc = h == _HASH["alloc"]
    freed = (h == _HASH["free_completed"]) | (h == _HASH["free"])
    if not freed.any():  # a trace without free_completed counts frees where they are requested
        freed = h == _HASH["free_requested"]
    index = np.flatnonzero(alloc | freed)
    sign = np.where(alloc[index], 1, -1).astype(np.int64)
    addr = _column(trace, "addr", 0)[index].astype(np.uint64)
    size = _column(trace, "size", 0)[index]
    return sign, addr, size, index.astype(np.int64)


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


def _sorted_contains(sorted_values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``np.isin(query, sorted_values)`` for an ascending ``sorted_values``, without sorting again."""
    if not len(sorted_values):
        return np.zeros(len(query), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_values, query), len(sorted_values) - 1)
    return sorted_values[pos] == query


def summarize(snap: dict[str, Any], device: int | None = None) -> Summary:
    """Baseline, peak and end of one device's trace window (``device=None``: the one with entries)."""
    if device is None:
        device = pick_device(snap)
    traces = snap["device_traces"]
    trace = traces[device] if device < len(traces) else []
    sign, addr, size, entry = _trace_arrays(trace)
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
    live_from_trace = addr[last_idx][sign[last_idx] > 0]  # ascending: last_idx follows the sort

    end_addr, end_size, end_blocks = _end_blocks(snap, device)
    untouched = ~_sorted_contains(live_from_trace, end_addr)
    baseline = freed_before + int(end_size[untouched].sum())

    allocated = baseline + np.cumsum(delta)
    if len(allocated) and allocated.max() > baseline:
        peak_index = int(allocated.argmax())
        peak = int(allocated[peak_index])
    else:
        peak_index, peak = -1, baseline
    end = int(allocated[-1]) if len(allocated) else baseline
    return Summary(device=device, baseline_allocated=baseline, peak_allocated=peak,
                   end_allocated=end, trace_entries=len(trace), allocated=allocated,
                   peak_index=peak_index, events=(sign, addr, size, entry), trace=trace,
                   untouched=(end_addr[untouched], end_size[untouched],
                              [end_blocks[i] for i in np.flatnonzero(untouched).tolist()]))


def alive_at(summary: Summary, index: int | None = None, top: int = 10) -> list[dict[str, Any]]:
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
    trace = summary.trace
    items = [{"size": int(size[i]), "addr": int(addr[i]), "before": bool(alive_old[i]),
              "frames": [] if alive_old[i] else list(trace[entry[i]].get("frames", []))}
             for i in chosen.tolist()]
    kept_addr, kept_size, kept_blocks = summary.untouched or (np.zeros(0), np.zeros(0), [])
    kept = np.argsort(-kept_size, kind="stable")[:top] if top else np.arange(len(kept_size))
    items += [{"size": int(kept_size[i]), "addr": int(kept_addr[i]), "before": True,
               "frames": list(kept_blocks[i].get("frames", []))} for i in kept.tolist()]
    items.sort(key=lambda item: -item["size"])  # stable: ties keep trace order
    return items[:top] if top else items


_INPUT = re.compile(r"^<ipython-input-(\d+)-")
_RUNS_CELLS = re.compile(r"[/\\]memsnap_magic[/\\]execute\.py$")  # where the magic runs a body
_SITE = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def _is_cell_frame(frame: dict[str, Any]) -> bool:
    name = str(frame.get("filename", ""))
    return name.startswith("<ipython-input-") or "/ipykernel_" in name


def _where(frame: dict[str, Any]) -> str:
    name = str(frame.get("filename", "?"))
    cell = _INPUT.match(name)
    if cell:
        return f"cell In[{cell.group(1)}]"
    if _is_cell_frame(frame):
        return "notebook cell"
    return _SITE.sub("", name)


def frame_lines(frames: list[dict[str, Any]], limit: int = 4) -> list[str]:
    """A few readable frames: the notebook's cells first, then the innermost others.

    A stack recorded under ``%%memsnap`` continues past the user's cell into the magic, IPython
    and the kernel; from the frame that runs the cell's body outwards it says nothing about the
    user's code, so it is dropped (the ``%%memsnap`` line's own cell with it).
    """
    outer = next((i for i, f in enumerate(frames) if _RUNS_CELLS.search(str(f.get("filename", "")))),
                 len(frames))
    frames = frames[:outer]
    ordered = [f for f in frames if _is_cell_frame(f)] + [f for f in frames if not _is_cell_frame(f)]
    return [f"{f.get('name', '?')} ({_where(f)}:{f.get('line', '?')})" for f in ordered[:limit]]


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
