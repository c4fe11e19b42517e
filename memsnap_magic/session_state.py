"""The session: ordered intervals and the cumulative figures a never-cleared recording would show.

Intervals keep summaries and a decimated timeline, never whole snapshots, so a long notebook does
not hold hundreds of MB of traces.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from .units import fmt_bytes


@dataclass
class Interval:
    """One recorded interval (a cell, or one step of a loop). Bytes are ints."""

    step: int
    rank: int
    device: str
    path: Path | None
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    error: str | None = None
    allocator_peak_allocated: int | None = None
    clear: bool = True
    tag: str = "torch_memory"
    file_bytes: int | None = None
    overflowed: bool = False
    context: str = "all"  # which events carried stacks when it was recorded
    top_blocks: list[dict[str, Any]] = field(default_factory=list, repr=False)  # alive at the peak
    cumulative_peak_allocated: int = 0
    cumulative_trace_entries: int = 0
    # decimated allocated-bytes timeline (numpy arrays), for plots; None when not summarised
    time_us: Any = field(default=None, repr=False)
    allocated: Any = field(default=None, repr=False)

    @property
    def peak_increase(self) -> int:
        return self.peak_allocated - self.baseline_allocated

    @property
    def kept(self) -> int:
        return self.end_allocated - self.baseline_allocated

    def to_record(self) -> dict[str, Any]:
        rec = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("time_us", "allocated", "top_blocks")}
        rec["path"] = str(self.path) if self.path is not None else None
        rec["peak_increase"] = self.peak_increase
        rec["kept"] = self.kept
        return rec


class Session:
    """Intervals in run order; re-running a step replaces its interval in place."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.defaults: dict[str, Any] = {}
        self._listeners: list[Any] = []

    def next_step(self) -> int:
        return max((i.step for i in self.intervals), default=0) + 1

    def previous(self, interval: Interval) -> Interval | None:
        """The interval before ``interval`` on the same rank and device, by step."""
        earlier = [i for i in self.intervals if i.rank == interval.rank and i.device == interval.device
                   and i.step < interval.step]
        return max(earlier, key=lambda i: i.step) if earlier else None

    def add(self, interval: Interval) -> Interval:
        key = (interval.step, interval.rank, interval.device, interval.tag)
        for n, old in enumerate(self.intervals):
            if (old.step, old.rank, old.device, old.tag) == key:
                self.intervals[n] = interval
                break
        else:
            self.intervals.append(interval)
        self._update_cumulative()
        self._listeners = [ref for ref in self._listeners if ref() is not None]
        for ref in list(self._listeners):  # a listener may subscribe others
            listener = ref()
            if listener is None:
                continue
            try:
                listener(self)
            except Exception as e:  # a dashboard that fails to redraw must not fail a cell
                warnings.warn(f"memsnap: updating {listener!r} failed: {type(e).__name__}: {e}",
                              RuntimeWarning, stacklevel=2)
        return interval

    def subscribe(self, listener: Callable[["Session"], None]) -> None:
        """Call ``listener(session)`` after every added interval (the dashboard updates in place).

        Bound methods are held weakly, so a dashboard nobody shows any more is not kept alive.
        """
        if hasattr(listener, "__self__"):
            self._listeners.append(weakref.WeakMethod(listener))  # type: ignore[arg-type]
        else:
            self._listeners.append(lambda: listener)

    def _update_cumulative(self) -> None:
        last: dict[tuple[int, str], Interval] = {}
        for iv in self.intervals:
            prev = last.get((iv.rank, iv.device))
            # A snapshot after a clear=false interval already holds that interval's entries.
            carried = prev.trace_entries if prev is not None and not prev.clear else 0
            iv.cumulative_trace_entries = (prev.cumulative_trace_entries if prev else 0) + max(
                iv.trace_entries - carried, 0)
            iv.cumulative_peak_allocated = max(iv.peak_allocated,
                                               prev.cumulative_peak_allocated if prev else 0)
            last[(iv.rank, iv.device)] = iv

    def reset(self) -> None:
        self.intervals.clear()

    def to_records(self) -> list[dict[str, Any]]:
        """Plain dicts (one per interval) for pandas or JSON."""
        return [iv.to_record() for iv in self.intervals]

    def table(self) -> str:
        """The ``%memsnap list`` table."""
        if not self.intervals:
            return "memsnap: no intervals yet (run a %%memsnap cell)"
        head = ("step", "rank", "device", "baseline", "peak", "increase", "kept", "cum. peak",
                "entries", "cum. entries", "error", "file")
        rows = [head]
        for iv in self.intervals:
            rows.append((str(iv.step), str(iv.rank), iv.device, fmt_bytes(iv.baseline_allocated),
                         fmt_bytes(iv.peak_allocated), fmt_bytes(iv.peak_increase, signed=True),
                         fmt_bytes(iv.kept, signed=True), fmt_bytes(iv.cumulative_peak_allocated),
                         f"{iv.trace_entries:,}", f"{iv.cumulative_trace_entries:,}",
                         iv.error or "", str(iv.path) if iv.path else "(not written)"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


_session: Session | None = None


def session() -> Session:
    """The process-wide session the magic and ``Recorder`` add to."""
    global _session
    if _session is None:
        _session = Session()
    return _session


def interval_from_snapshot(snap: dict[str, Any], trace_index: int | None = None, *,
                           max_entries: int | None = None, **fields: Any) -> Interval:
    """Summarise a snapshot into an Interval: its figures, a decimated timeline and the blocks
    alive at its peak; the snapshot itself is not kept. ``fields``: step, rank, device, path…"""
    from .analysis import alive_at, decimate_index, summarize

    summary = summarize(snap, trace_index)
    keep = decimate_index(summary.allocated)
    t, y = summary.times_at(keep), summary.allocated[keep]
    return Interval(baseline_allocated=summary.baseline_allocated,
                    peak_allocated=summary.peak_allocated, end_allocated=summary.end_allocated,
                    trace_entries=summary.trace_entries,
                    overflowed=max_entries is not None and summary.trace_entries >= max_entries,
                    top_blocks=alive_at(summary), time_us=t, allocated=y, **fields)


def describe(iv: Interval, previous: Interval | None) -> str:
    """The compact line printed after each ``%%memsnap`` cell."""
    parts = [f"memsnap step {iv.step}", iv.device if iv.rank == 0 else f"{iv.device} rank {iv.rank}",
             f"peak {fmt_bytes(iv.peak_allocated)} ({fmt_bytes(iv.peak_increase, signed=True)} over "
             f"start {fmt_bytes(iv.baseline_allocated)})",
             f"kept {fmt_bytes(iv.kept, signed=True)}"]
    if previous is not None:
        parts.append(f"vs step {previous.step}: peak "
                     f"{fmt_bytes(iv.peak_allocated - previous.peak_allocated, signed=True)}")
    if iv.allocator_peak_allocated is not None:
        parts.append(f"allocator peak {fmt_bytes(iv.allocator_peak_allocated)}")
    entries = f"{iv.trace_entries:,} entries" + (" (ring full: oldest dropped)" if iv.overflowed else "")
    if iv.trace_entries == 0 and iv.device != "cpu":
        entries += f": nothing was allocated on {iv.device} (CPU tensors? record them with device=cpu)"
    parts.append(entries)
    if iv.error:
        parts.append(f"cell raised {iv.error}")
    parts.append(f"-> {iv.path}" if iv.path is not None else "-> not written")
    return " · ".join(parts)
