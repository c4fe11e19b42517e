"""The session: runs of intervals and the cumulative figures a never-cleared recording would show.

The process-wide one is ``memsnap_magic.session()`` (kept in ``recording.process_state``); the CLI builds its own.
Intervals belong to runs: the cells a kernel records without ``run=`` form the session's own run
(named ""), ``run=NAME`` cells and loaded files form named ones. A step is replaced only within
its run, and cumulative figures never reach across runs.

Intervals are kept in step order within each run, whatever order the cells ran in, and the
cumulative figures accumulate in that order: the same table whether a kernel recorded the steps
(``%memsnap list``) or a folder holds them (``memsnap summarize``).
"""

from __future__ import annotations

import bisect
import threading
import types
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..core.names import run_label
from ..core.warn import warn
from .intervals import Interval, holds


@dataclass(frozen=True)
class Run:
    """One run's intervals, in step order. ``name`` "" is the session's own."""

    name: str
    intervals: list[Interval]

    @property
    def label(self) -> str:
        return run_label(self.name)


def busiest(intervals: Iterable[Interval]) -> list[Interval]:
    """Per step, the interval (of any rank or device) with the highest peak, in step order: what
    sets a run's memory need, and one bar per step where runs of several ranks are compared."""
    top: dict[int, Interval] = {}
    for iv in intervals:
        if iv.step not in top or iv.peak_allocated > top[iv.step].peak_allocated:
            top[iv.step] = iv
    return [top[step] for step in sorted(top)]


def recorded_before(iv: Interval, ivs: list[Interval]) -> list[Interval]:
    """The intervals of ``iv``'s rank and device recorded before it, oldest first: by when their
    snapshots were taken (a lower step may have run later), else in step order."""
    same = [e for e in ivs if (e.rank, e.device) == (iv.rank, iv.device)]
    if iv.end_us is not None and all(e.end_us is not None for e in same):
        end = iv.end_us
        return sorted((e for e in same if e.end_us is not None and e.end_us < end), key=lambda e: e.end_us or 0)
    return same[: next((n for n, e in enumerate(same) if e is iv), len(same))]


def _key(iv: Interval) -> tuple[Any, ...]:
    return (iv.run, iv.step, iv.rank, iv.device, iv.tag)


def _stream(iv: Interval) -> tuple[str, int, str]:
    """What cumulative figures accumulate over: one run's steps on one rank and device."""
    return (iv.run, iv.rank, iv.device)


class Session:
    """Intervals run by run (in the order runs began), each run in step and rank order (ties in
    the order added); re-running a step replaces its interval within its run. A record held is
    never changed: a figure that moves later (cumulative, a file's size) comes in a new record
    in its place, which ``current`` finds from the old one."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []  # every run's; read it, change it only through add, written, reset
        self.defaults: dict[str, Any] = {}  # %memsnap config: option -> value, over the table's defaults
        self.last: Interval | None = None  # the interval added most recently
        self.last_replaced: Interval | None = None  # the one ``last`` replaced, if any
        self._listeners: list[Any] = []
        # Indexes kept by ``add``, so a cell costs the same at step 5,000 as at step 5:
        self._where: dict[tuple[Any, ...], Interval] = {}  # _key -> its interval
        self._order: list[tuple[int, int, int]] = []  # _place of each of ``intervals``, ascending
        self._runs: dict[str, int] = {}  # run -> when it began (its place among the runs)
        self._tails: dict[tuple[str, int, str], Interval] = {}  # each stream's interval added last
        self._steps: dict[tuple[str, int, str], dict[int, Interval]] = {}  # stream -> step -> first added
        self._sorted: dict[tuple[str, int, str], list[int]] = {}  # stream -> its steps, ascending
        self._top: dict[str, int] = {}  # run -> its highest step, those a reset forgot included
        self._lock = threading.RLock()  # one change at a time: a block's thread, the writer's results

    @property
    def runs(self) -> dict[str, Run]:
        """Runs by name, in the order they began; each with its intervals."""
        runs: dict[str, list[Interval]] = {}
        for iv in self.intervals:
            runs.setdefault(iv.run, []).append(iv)
        return {name: Run(name, ivs) for name, ivs in runs.items()}

    def next_step(self, run: str = "") -> int:
        return self._top.get(run, 0) + 1

    def previous(self, interval: Interval) -> Interval | None:
        """The interval before ``interval`` in its run, on the same rank and device, by step
        (of several with that step, the first added)."""
        stream = _stream(interval)
        steps = self._sorted.get(stream, [])
        below = bisect.bisect_left(steps, interval.step)
        return self._steps[stream][steps[below - 1]] if below else None

    def _place(self, iv: Interval) -> tuple[int, int, int]:
        return (self._runs.setdefault(iv.run, len(self._runs)), iv.step, iv.rank)

    def add(self, interval: Interval, notify: bool = True) -> Interval | None:
        """Add ``interval``; returns the interval of the same step in its run it replaced, if any.
        ``notify``: tell the listeners now (``add_all`` tells them once, after the last).

        What the session holds is ``interval`` with its cumulative figures (``last`` after
        this, and ``current(interval)`` later): a record, once held, is never changed."""
        with self._lock:
            replaced = self._add(interval)
        if notify:
            self._notify()
        return replaced

    def _add(self, interval: Interval) -> Interval | None:
        key, stream, place = _key(interval), _stream(interval), self._place(interval)
        replaced = self._where.get(key)
        if replaced is not None:
            # out, and in again after the others of its step and rank (other tags, devices):
            # the newer last, as a folder's scan orders a step written twice
            first = n = bisect.bisect_left(self._order, place)
            while self.intervals[n] is not replaced:
                n += 1
            del self.intervals[n], self._order[n]
            self._where[key] = interval
            n = bisect.bisect_right(self._order, place)
            self._order.insert(n, place)
            self.intervals.insert(n, interval)
            by_step = self._steps[stream]
            if by_step[interval.step] is replaced:  # the first of its step in the list, as before
                by_step[interval.step] = next(
                    iv for iv in self.intervals[first:] if _stream(iv) == stream and iv.step == interval.step
                )
            self._update_cumulative()  # a step replaced: every later figure may move (its own too)
        else:
            steps = self._sorted.setdefault(stream, [])
            last = not steps or interval.step >= steps[-1]  # the newest step of its stream
            if last:  # its figures follow from its stream's last: complete as it joins
                interval = _accumulated(interval, self._tails.get(stream))
                self._tails[stream] = interval
            self._where[key] = interval
            n = bisect.bisect_right(self._order, place)
            self._order.insert(n, place)
            self.intervals.insert(n, interval)
            by_step = self._steps.setdefault(stream, {})
            if interval.step not in by_step:
                by_step[interval.step] = interval
                bisect.insort(steps, interval.step)
            self._top[interval.run] = max(self._top.get(interval.run, interval.step), interval.step)
            if not last:  # a step before others already held: theirs now accumulate over it
                self._update_cumulative()
        self.last, self.last_replaced = self._where[key], replaced
        return replaced

    def _index(self, iv: Interval) -> int:
        """Where ``iv`` (held) is in ``intervals``."""
        n = bisect.bisect_left(self._order, self._place(iv))
        while self.intervals[n] is not iv:
            n += 1
        return n

    def current(self, interval: Interval) -> Interval:
        """The record held now for ``interval``'s recording (the session replaced the one given,
        or since held, as its figures became known); ``interval`` itself where none is held any
        more (its step recorded again, a reset). What a reader that kept a record reads again."""
        held = self._where.get(_key(interval))
        return held if held is not None and held.origin == interval.origin else interval

    def written(self, interval: Interval, path: Path | None, file_bytes: int | None) -> Interval:
        """Take the outcome of ``interval``'s write: the file's path and size, or ``None`` for
        both where it could not be written. Called where the writer's results are applied
        (``files.writer``: by whoever waits for it), not on the writer's thread. Returns the
        record that stands for it now; listeners are not told (no figure moved)."""
        with self._lock:
            held = self.current(interval)
            record = replace(held, path=path, file_bytes=file_bytes)
            if self._where.get(_key(held)) is held:
                self._swap(self._index(held), record)
            return record

    def _swap(self, n: int, record: Interval) -> None:
        """Put ``record`` in place of ``intervals[n]`` (the same recording) in every index."""
        old, self.intervals[n] = self.intervals[n], record
        stream = _stream(record)
        self._where[_key(record)] = record
        if self._steps[stream].get(record.step) is old:
            self._steps[stream][record.step] = record
        if self._tails.get(stream) is old:
            self._tails[stream] = record
        if self.last is old:
            self.last = record

    def add_all(self, intervals: Iterable[Interval]) -> list[Interval | None]:
        """``add`` each, in order; the listeners are told once, after the last: a dashboard
        redraws once for a folder loaded, not once per file."""
        replaced = [self.add(iv, notify=False) for iv in intervals]
        if replaced:
            self._notify()
        return replaced

    def _notify(self) -> None:
        self._listeners = [ref for ref in self._listeners if ref() is not None]
        for ref in list(self._listeners):  # a listener may subscribe others
            listener = ref()
            if listener is None:
                continue
            try:
                listener(self)
            except Exception as e:  # a dashboard that fails to redraw must not fail a cell
                warn(f"memsnap: updating {listener!r} failed: {type(e).__name__}: {e}")

    def subscribe(self, listener: Callable[[Session], None]) -> None:
        """Call ``listener(session)`` after every added interval and after a reset (the
        dashboard updates in place).

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
        """Every interval's cumulative figures again; a record whose figures moved is replaced."""
        self._tails = {}
        for n, iv in enumerate(self.intervals):
            stream = _stream(iv)
            record = _accumulated(iv, self._tails.get(stream))
            if record is not iv:
                self._swap(n, record)
            self._tails[stream] = record

    def reset(self) -> None:
        """Forget the intervals (files on disk stay); defaults and dashboards stay."""
        with self._lock:
            self.intervals.clear()
            self.last = self.last_replaced = None
            # the steps numbered so far stay: a cell without step= after a reset must not take step 1
            # again and overwrite its file, which stays on disk
            for index in (self._where, self._order, self._runs, self._tails, self._steps, self._sorted):
                index.clear()
        self._notify()  # a dashboard shown would offer steps that are gone

    def to_records(self) -> list[dict[str, Any]]:
        """Plain dicts (one per interval) for pandas or JSON."""
        return [iv.to_record() for iv in self.intervals]


def _accumulated(iv: Interval, prev: Interval | None) -> Interval:
    """``iv`` with its cumulative figures, given the interval before it in its stream: ``iv``
    itself where they are already so."""
    carried = prev.trace_entries if prev is not None and holds(iv, prev) else 0
    entries = (prev.cumulative_trace_entries if prev else 0) + max(iv.trace_entries - carried, 0)
    peak = max(iv.peak_allocated, prev.cumulative_peak_allocated if prev else 0)
    if (entries, peak) == (iv.cumulative_trace_entries, iv.cumulative_peak_allocated):
        return iv
    return replace(iv, cumulative_trace_entries=entries, cumulative_peak_allocated=peak)
