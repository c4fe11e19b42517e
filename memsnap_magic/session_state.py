"""The session: ordered intervals and the cumulative figures a never-cleared recording would show.

The process-wide one is ``memsnap_magic.session()`` (kept in ``state``); the CLI builds its own.
"""

from __future__ import annotations

import types
import weakref
from typing import Any, Callable

from .intervals import Interval
from .notice import warn


class Session:
    """Intervals in run order; re-running a step replaces its interval in place."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.defaults: dict[str, Any] = {}  # %memsnap config: option -> value, over the table's defaults
        self.last: Interval | None = None  # the interval added most recently
        self._listeners: list[Any] = []

    def next_step(self) -> int:
        return max((i.step for i in self.intervals), default=0) + 1

    def previous(self, interval: Interval) -> Interval | None:
        """The interval before ``interval`` on the same rank and device, by step."""
        earlier = [
            i
            for i in self.intervals
            if i.rank == interval.rank and i.device == interval.device and i.step < interval.step
        ]
        return max(earlier, key=lambda i: i.step) if earlier else None

    def add(self, interval: Interval) -> Interval:
        key = (interval.step, interval.rank, interval.device, interval.tag)
        for n, old in enumerate(self.intervals):
            if (old.step, old.rank, old.device, old.tag) == key:
                self.intervals[n] = interval
                break
        else:
            self.intervals.append(interval)
        self.last = interval
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
        return interval

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
        last: dict[tuple[int, str], Interval] = {}
        for iv in self.intervals:
            prev = last.get((iv.rank, iv.device))
            # A snapshot after a clear=false interval already holds that interval's entries.
            carried = prev.trace_entries if prev is not None and not prev.clear else 0
            iv.cumulative_trace_entries = (prev.cumulative_trace_entries if prev else 0) + max(
                iv.trace_entries - carried, 0
            )
            iv.cumulative_peak_allocated = max(iv.peak_allocated, prev.cumulative_peak_allocated if prev else 0)
            last[(iv.rank, iv.device)] = iv

    def reset(self) -> None:
        """Forget the intervals (files on disk stay); defaults and dashboards stay."""
        self.intervals.clear()
        self.last = None

    def to_records(self) -> list[dict[str, Any]]:
        """Plain dicts (one per interval) for pandas or JSON."""
        return [iv.to_record() for iv in self.intervals]
