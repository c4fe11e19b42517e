"""The session: runs of intervals and the cumulative figures a never-cleared recording would show.

The process-wide one is ``memsnap_magic.session()`` (kept in ``state``); the CLI builds its own.
Intervals belong to runs: the cells a kernel records without ``run=`` form the session's own run
(named ""), ``run=NAME`` cells and loaded files form named ones. A step is replaced only within
its run, and cumulative figures never reach across runs.
"""

from __future__ import annotations

import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from .intervals import Interval
from .notice import warn
from .text import run_label


@dataclass(frozen=True)
class Run:
    """One run's intervals, in the order they were added. ``name`` "" is the session's own."""

    name: str
    intervals: list[Interval]

    @property
    def label(self) -> str:
        return run_label(self.name)


def _key(iv: Interval) -> tuple[Any, ...]:
    return (iv.run, iv.step, iv.rank, iv.device, iv.tag)


class Session:
    """Intervals in the order added, each in its run; re-running a step replaces its interval
    in place within its run."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []  # every run's
        self.defaults: dict[str, Any] = {}  # %memsnap config: option -> value, over the table's defaults
        self.last: Interval | None = None  # the interval added most recently
        self.last_replaced: Interval | None = None  # the one ``last`` replaced, if any
        self._listeners: list[Any] = []

    @property
    def runs(self) -> dict[str, Run]:
        """Runs by name, in the order they began; each with its intervals."""
        runs: dict[str, list[Interval]] = {}
        for iv in self.intervals:
            runs.setdefault(iv.run, []).append(iv)
        return {name: Run(name, ivs) for name, ivs in runs.items()}

    def next_step(self, run: str = "") -> int:
        return max((i.step for i in self.intervals if i.run == run), default=0) + 1

    def previous(self, interval: Interval) -> Interval | None:
        """The interval before ``interval`` in its run, on the same rank and device, by step."""
        earlier = [
            i
            for i in self.intervals
            if (i.run, i.rank, i.device) == (interval.run, interval.rank, interval.device) and i.step < interval.step
        ]
        return max(earlier, key=lambda i: i.step) if earlier else None

    def add(self, interval: Interval) -> Interval | None:
        """Add ``interval``; returns the interval of the same step in its run it replaced, if any."""
        key, replaced = _key(interval), None
        for n, old in enumerate(self.intervals):
            if _key(old) == key:
                replaced, self.intervals[n] = old, interval
                break
        else:
            self.intervals.append(interval)
        self.last, self.last_replaced = interval, replaced
        self._update_cumulative()
        self._listeners = [ref for ref in self._listeners if ref() is not None]
        for ref in list(self._listeners):  # a listener may subscribe others
            listener = ref()
            if listener is None:
                continue
            try:
                listener(self)
            except Exception as e:  # a dashboard that fails to redraw must not fail a cell
                warn(f"memsnap: updating {listener!r} failed: {type(e).__name__}: {e}")
        return replaced

    def subscribe(self, listener: Callable[[Session], None]) -> None:
        """Call ``listener(session)`` after every added interval (the dashboard updates in place).

        Bound methods are held weakly, so a dashboard nobody shows any more is not kept alive.
        """
        if isinstance(listener, types.MethodType):
            self._listeners.append(weakref.WeakMethod(listener))
        else:
            self._listeners.append(lambda: listener)

    def unsubscribe(self, listener: Callable[[Session], None]) -> None:
        """Stop calling ``listener`` (a superseded dashboard)."""
        self._listeners = [ref for ref in self._listeners if ref() not in (None, listener)]

    def _update_cumulative(self) -> None:
        last: dict[tuple[str, int, str], Interval] = {}
        for iv in self.intervals:
            prev = last.get((iv.run, iv.rank, iv.device))
            # A snapshot after a clear=false interval already holds that interval's entries.
            carried = prev.trace_entries if prev is not None and not prev.clear else 0
            iv.cumulative_trace_entries = (prev.cumulative_trace_entries if prev else 0) + max(
                iv.trace_entries - carried, 0
            )
            iv.cumulative_peak_allocated = max(iv.peak_allocated, prev.cumulative_peak_allocated if prev else 0)
            last[(iv.run, iv.rank, iv.device)] = iv

    def reset(self) -> None:
        """Forget the intervals (files on disk stay); defaults and dashboards stay."""
        self.intervals.clear()
        self.last = self.last_replaced = None

    def to_records(self) -> list[dict[str, Any]]:
        """Plain dicts (one per interval) for pandas or JSON."""
        return [iv.to_record() for iv in self.intervals]
