"""What a prediction is asked and what it reads: the one dimension and size asked for, the runs
and steps chosen, and the recordings (a session's intervals, files, snapshots, ``(snapshot,
scale)`` pairs) as snapshots and their scales, each refused where a replay of it would be wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..core.names import run_label
from ..files.meta import SCALE_NAME, SCALE_RESERVED
from ..files.snapshot import load_snapshot
from .intervals import Interval
from .prediction_recording import Recording
from .session import Session


def parse_size(text: str) -> dict[str, float]:
    """``batch=64`` (the magic's and the CLI's way to ask) as ``{"batch": 64}``; ``ValueError``
    naming the form allowed."""
    name, sep, size = text.partition("=")
    form = "NAME=SIZE, as batch=64 (NAME as recorded with scale=NAME:SIZE, SIZE a number above 0)"
    if not sep or not re.fullmatch(SCALE_NAME, name) or name in SCALE_RESERVED:
        raise ValueError(f"predict: {text!r} is not {form}")
    try:
        value = float(size) if any(c in size for c in ".eE") else int(size)
    except ValueError:
        raise ValueError(f"predict: {text!r}: {size!r} is no number; give {form}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"predict: {text!r}: {size!r} is no size; give {form}")
    return {name: value}


def asked(at: Mapping[str, float] | None, sizes: Mapping[str, float]) -> tuple[str, float]:
    """The one dimension and size asked for, from ``at`` or the keywords."""
    if at is not None and sizes:
        raise ValueError(f"predict: give the size as at={{...}} or as {next(iter(sizes))}=..., not both")
    asked = dict(at if at is not None else sizes)
    if not asked:
        raise ValueError("predict: give the size to predict at, as batch=64 (or at={'batch': 64})")
    if len(asked) != 1:
        raise ValueError(f"predict: one dimension at a time, as at={{'batch': 64}}; got {asked!r}")
    ((dim, target),) = asked.items()
    if not isinstance(dim, str) or not dim:
        raise ValueError(f"predict: a dimension is named by a string, not {dim!r}")
    if isinstance(target, bool) or not isinstance(target, (int, float, np.integer, np.floating)) or not target > 0:
        raise ValueError(f"predict: {dim}={target!r} is no size: give a number above 0")
    if target == float("inf"):
        raise ValueError(f"predict: {dim}={target!r} is no size: give a finite number")
    return dim, float(target) if isinstance(target, (float, np.floating)) else int(target)


def chosen_runs(run: str | Iterable[str] | None) -> set[str] | None:
    if run is None:
        return None
    runs = {run} if isinstance(run, str) else set(run) if isinstance(run, Iterable) else set()
    if not runs or not all(isinstance(r, str) for r in runs):
        raise ValueError(f"predict: run= is a run's name or a list of names, not {run!r}")
    return runs


def recordings(
    recorded: Session | Iterable[Any], dim: str, runs: set[str] | None, steps: set[Any] | None
) -> Iterator[tuple[Any, Mapping[str, Any] | None]]:
    """``(snapshot or path, scale or None)`` for each recording asked for; a session's intervals
    without the dimension in their scale are left out (cells recorded for something else)."""
    if isinstance(recorded, Session):
        known = {iv.run for iv in recorded.intervals}
        if runs is not None and not runs <= known:
            missing = ", ".join(sorted(map(repr, runs - known)))
            raise ValueError(f"predict: no run {missing} in this session (runs: {_run_names(known)})")
        chosen = [iv for iv in recorded.intervals if iv.scale and dim in iv.scale]
        if not chosen:
            raise ValueError(
                f"predict: none of the steps read was recorded with a {dim!r} size: record each size "
                f"with scale={dim}:N (%%memsnap run={dim}8 scale={dim}:8)"
            )
        items: Iterable[Any] = chosen
    else:
        if isinstance(recorded, (str, bytes, Mapping)) or not isinstance(recorded, Iterable):
            raise ValueError(
                "predict: recorded= is a session, or a list of intervals, files or (snapshot, scale) pairs, "
                f"not {type(recorded).__name__}"
            )
        items = recorded
    for item in items:
        if isinstance(item, Interval):
            if (runs is not None and item.run not in runs) or (steps is not None and item.step not in steps):
                continue
            if item.path is None:
                raise ValueError(f"predict: step {item.step} of {run_label(item.run)} has no file (it was not written)")
            yield item.path, item.scale
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], Mapping):
            yield _of_run(item[0], runs), item[1]
        else:
            yield _of_run(item, runs), None


def _of_run(snap: Any, runs: set[str] | None) -> Any:
    """The snapshot (loaded), or None where it belongs to none of ``runs``."""
    if runs is None:
        return snap
    if not isinstance(snap, Mapping):
        snap = load_snapshot(snap)
    return snap if ((snap.get("memsnap") or {}).get("run") or "") in runs else None


def _run_names(runs: Iterable[str]) -> str:
    return ", ".join(repr(r) if r else "'' (this session's own)" for r in sorted(runs)) or "none"


def whole(meta: Mapping[str, Any], rec: Recording, which: str) -> None:
    """Refuse a file that holds less, or more, than its step: a replay of it would be wrong."""
    if meta.get("incomplete") or (meta.get("max_entries") and rec.entries >= meta["max_entries"]):
        why = meta.get("incomplete") or "its trace ring was full, so it kept only the newest entries"
        raise ValueError(f"predict: {which} holds less than the step did ({why}); record it with a larger max_entries")
    if meta.get("clear") is False:
        raise ValueError(f"predict: {which} was recorded with clear=false, so its file holds earlier steps too")


def source(item: Any, scale: Mapping[str, Any] | None) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """A snapshot dict (read where it is a path) and its scale: the one given, else its metadata's."""
    snap = item if isinstance(item, Mapping) else load_snapshot(item)
    if scale is None:
        scale = (snap.get("memsnap") or {}).get("scale")
        if not isinstance(scale, Mapping):
            raise ValueError(
                "predict: a snapshot without a scale: record it with scale=batch:8, "
                "or give (snapshot, {'batch': 8}) pairs"
            )
    return (snap if isinstance(snap, dict) else dict(snap)), scale
