"""Will it fit? A step's peak at a larger batch or sequence length, from a few small recorded sizes.

``predict(recorded, at={"batch": 64})`` reads the same step recorded at three or more sizes of one
dimension, aligns its allocations across them (``prediction_align``), fits each one's size as a
polynomial of degree <= 2 and replays the step at the target size (``prediction_model``): the
peak, when it happens, what is alive then, and which sites grow fastest, each with its law. With
three sizes the prediction is unverified; with four or more, each is predicted from the others
(leave-one-out) and the worst error is reported. Where less than 99 % of the bytes alive at the
predicted peak come from allocations found at every recorded size, the step does something else
at some sizes and no prediction is made: ``PredictionRefused`` names the first difference.

Pure: snapshot dicts (or paths, read with ``load_snapshot``) in; numbers out, and the few words
that name sites and laws (``prediction_words``, which also words a refusal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.names import run_label
from ..core.nogc import no_gc
from ..core.units import parse_bytes
from ..files.meta import SCALE_NAME, SCALE_RESERVED
from ..files.snapshot import load_snapshot
from .intervals import Interval
from .prediction_align import Interner, Recording, read_recording
from .prediction_model import BEFORE, Replay, StepModel
from .prediction_words import PredictionRefused, check_aligned, law_words, site_name
from .session import Session

__all__ = [
    "Growth",
    "PeakMoment",
    "Prediction",
    "PredictionRefused",
    "auto_capacity",
    "parse_capacity",
    "parse_size",
    "predict",
]

SEARCH_LIMIT = 1 << 40  # largest(): sizes beyond this count as "nothing grows"
FAR = 8  # a size more than this many times the largest recorded is far: the words say so


@dataclass(frozen=True)
class Growth:
    """A site whose bytes alive at the predicted peak grow with the dimension, and its law."""

    site: str
    law: str  # in words: "4 × seq² + 512 × seq bytes"
    bytes_at: int  # at the target size
    bytes_smallest: int  # at the smallest recorded size
    coefficients: tuple[float, float, float]  # bytes, per unit, per unit²

    def __str__(self) -> str:
        return f"{self.site}: {self.law}"


@dataclass(frozen=True)
class PeakMoment:
    """When the predicted peak happens: at which event of the step, and the allocation there."""

    event: int  # index among the step's allocations and frees; -1: before the first
    fraction: float  # of the step's events
    site: str  # where the allocation that reaches the peak is made
    after_us: int | None  # into the step at the largest recorded size (None: no times recorded)


@dataclass(frozen=True)
class Prediction:
    """A step's predicted peak at ``dim`` = ``at``, and what it is made of."""

    dim: str
    at: float
    peak_allocated: int  # requested bytes, the highest over the steps given
    peak_blocks: int  # allocator-level: each block rounded as the caching allocator does (CPU: the same)
    step: Any  # the step whose peak that is
    by_step: dict[Any, int]
    at_peak: dict[str, dict[str, int]]  # {"category": {...}, "site": {...}} of bytes alive then
    when: PeakMoment
    growth: list[Growth]
    recorded: dict[float, int]  # the recorded peak at each size (the winning step's)
    unverified: bool  # three sizes: nothing was left to check the fit against
    loo_error: float | None  # four or more: the worst relative error, each size from the others
    loo: dict[float, float]
    unaligned_bytes: int  # at the largest recorded size: allocations not found at every size
    capacity: int | None = None
    capacity_from: str = ""  # how the capacity was found: given, or what ``auto_capacity`` read
    _models: tuple[StepModel, ...] = field(default=(), repr=False, compare=False)

    def beyond(self, value: float) -> float:
        """How many times the largest recorded size ``value`` is: past ``FAR`` the prediction is
        far beyond what was recorded, where a fit's small error grows (``far``); said, not refused."""
        return float(value) / max(self.recorded)

    def far(self, value: float) -> bool:
        """Whether ``value`` lies more than ``FAR`` times beyond the largest recorded size."""
        return self.beyond(value) > FAR

    def peak_at(self, value: float) -> int:
        """The predicted peak (requested bytes, highest over the steps) at another size."""
        return max(m.replay(value, alive=False).peak for m in self._models)

    def blocks_at(self, value: float) -> int:
        """The predicted allocator-level peak at another size (what a capacity is compared with)."""
        return max(m.replay(value, alive=False).blocks for m in self._models)

    @property
    def fits(self) -> bool | None:
        """Whether the allocator-level peak fits the capacity given (None: none given)."""
        return None if self.capacity is None else self.peak_blocks <= self.capacity

    def to_record(self) -> dict[str, Any]:
        """The prediction as JSON takes it (sizes and steps as keys are strings), with the largest
        size that fits where a capacity was given."""
        return {
            "dim": self.dim,
            "at": self.at,
            "peak_allocated": self.peak_allocated,
            "peak_blocks": self.peak_blocks,
            "step": self.step,
            "by_step": {str(k): v for k, v in self.by_step.items()},
            "at_peak": self.at_peak,
            "when": {
                "event": self.when.event,
                "fraction": self.when.fraction,
                "site": self.when.site,
                "after_us": self.when.after_us,
            },
            "growth": [
                {"site": g.site, "law": g.law, "bytes_at": g.bytes_at, "bytes_smallest": g.bytes_smallest}
                for g in self.growth
            ],
            "recorded": {f"{k:g}": v for k, v in self.recorded.items()},
            "unverified": self.unverified,
            "loo_error": self.loo_error,
            "loo": {f"{k:g}": v for k, v in self.loo.items()},
            "unaligned_bytes": self.unaligned_bytes,
            "capacity": self.capacity,
            "capacity_from": self.capacity_from,
            "fits": self.fits,
            "beyond": self.beyond(self.at),  # times the largest recorded size: past FAR, far
            **self._largest_record(),
        }

    def _largest_record(self) -> dict[str, Any]:
        largest = self.largest() if self.capacity is not None else None
        return {"largest": largest, "largest_beyond": self.beyond(largest) if largest else None}

    def largest(self, capacity: int | str | None = None) -> int | None:
        """The largest whole size of the dimension predicted to fit ``capacity`` (default: the one
        given to ``predict``); 0 when not even 1 fits, None when nothing grows with it. An answer
        ``far`` beyond the recorded sizes is an extrapolation: the words (and ``to_record``'s
        ``largest_beyond``) say how far; record a size nearer to check it."""
        cap = parse_capacity(capacity) if capacity is not None else self.capacity
        if cap is None:
            raise ValueError("largest(): give a capacity (bytes, or a string such as '80GiB')")

        def fits(value: int) -> bool:  # monotone in the size: searched below
            return self.blocks_at(value) <= cap

        if not fits(1):
            return 0
        lo = max(1, int(max(m.x[-1] for m in self._models)))
        if not fits(lo):
            lo, hi = 1, lo
        else:
            hi = lo * 2
            while fits(hi):
                lo, hi = hi, hi * 2
                if hi > SEARCH_LIMIT:
                    return None
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo


def auto_capacity(metas: Iterable[Mapping[str, Any]]) -> tuple[int, str] | None:
    """A capacity where none is given, and how it was found: on an accelerator the device's total
    less the most that was in use outside PyTorch at the recorded steps (from each file's
    ``usage_start``/``usage_end``: total - free - reserved); on the CPU the memory available now
    (``MemAvailable``). None where neither is known."""
    totals, outside, cpu = [], [], True
    for meta in metas:
        cpu = cpu and str(meta.get("device", "")).startswith("cpu")
        for key in ("usage_start", "usage_end"):
            usage = meta.get(key)
            if isinstance(usage, Mapping) and all(type(usage.get(k)) is int for k in ("total", "free", "reserved")):
                totals.append(usage["total"])
                outside.append(usage["total"] - usage["free"] - usage["reserved"])
    if totals:
        return min(totals) - max(outside), "the device's memory less what was in use outside PyTorch"
    if cpu:
        try:
            with open("/proc/meminfo") as f:
                kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
            return kib * 1024, "the memory available now"
        except (OSError, StopIteration, ValueError, IndexError):
            return None
    return None


def parse_capacity(capacity: int | str) -> int:
    """Bytes from ``80GiB``, ``80 GB``, ``512MiB`` or a whole number of bytes (``core.units``)."""
    if isinstance(capacity, np.integer):
        capacity = int(capacity)
    try:
        return parse_bytes(capacity)
    except ValueError as e:
        raise ValueError(f"capacity: {e}") from None


def predict(
    recorded: Session | Iterable[Any],
    at: Mapping[str, float] | None = None,
    capacity: int | str | None = None,
    *,
    run: str | Iterable[str] | None = None,
    steps: Iterable[Any] | None = None,
    device: int | None = None,
    rounding: int | None = None,
    **sizes: float,
) -> Prediction:
    """Predict the peak of the recorded step(s) at one size of one dimension: ``batch=64`` (or
    ``at={"batch": 64}``).

    ``recorded``: a ``Session`` (its intervals whose ``scale`` names the dimension), intervals
    (``iv.path`` read, at ``iv.scale``), ``(snapshot, scale)`` pairs (a snapshot a dict or a file's
    path, its scale a mapping such as ``{"batch": 8}``), or snapshots whose ``memsnap`` metadata
    holds ``scale`` (``scale=batch:8``). Scale keys other than the dimension must agree. ``run``:
    only the intervals (or snapshots) of this run, or these runs. Several steps are predicted
    apart, the highest peak wins; ``steps`` keeps only those. ``device``: the trace read (default:
    the first with entries, as ``summarize``). ``rounding``: the allocator's block granularity for
    ``peak_blocks`` (default 512 B off the CPU, none on it). ``capacity``: bytes, a size such as
    ``"80GiB"``, or ``"auto"`` (``auto_capacity``); ``largest()`` and ``fits`` use it.
    ``ValueError`` for what cannot be predicted from (``PredictionRefused``: a step that differs
    between the sizes where it matters).
    """
    dim, target = _target(at, sizes)
    if capacity is not None and capacity != "auto":
        parse_capacity(capacity)  # refused before any file is read
    pairs = _pairs(recorded, dim, _runs(run), None if steps is None else set(steps))
    with no_gc():  # the files' millions of containers: a collection would walk them and free nothing
        return _predict(pairs, dim, target, capacity, steps, device, rounding)


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


def _target(at: Mapping[str, float] | None, sizes: Mapping[str, float]) -> tuple[str, float]:
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


def _runs(run: str | Iterable[str] | None) -> set[str] | None:
    if run is None:
        return None
    runs = {run} if isinstance(run, str) else set(run) if isinstance(run, Iterable) else set()
    if not runs or not all(isinstance(r, str) for r in runs):
        raise ValueError(f"predict: run= is a run's name or a list of names, not {run!r}")
    return runs


def _pairs(
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


def _predict(
    pairs: Iterable[tuple[Any, Mapping[str, Any] | None]],
    dim: str,
    target: float,
    capacity: int | str | None,
    steps: Iterable[Any] | None,
    device: int | None,
    rounding: int | None,
) -> Prediction:
    wanted = None if steps is None else set(steps)
    names = Interner()
    groups: dict[Any, list[Recording]] = {}
    others: dict[str, Any] | None = None
    cpu = True
    metas: list[Mapping[str, Any]] = []
    for item, given in pairs:
        if item is None:  # another run's
            continue
        snap, scale = _source(item, given)
        if dim not in scale:
            raise ValueError(f"predict: a recording has no {dim!r} in its scale {dict(scale)!r}")
        rest = {k: v for k, v in scale.items() if k != dim}
        if others is not None and rest != others:
            raise ValueError(f"predict: recordings differ in more than {dim!r}: {others!r} and {rest!r}")
        others = rest
        step = (snap.get("memsnap") or {}).get("step")
        if wanted is not None and step not in wanted:
            continue
        meta = snap.get("memsnap") or {}
        metas.append(meta)
        cpu = cpu and str(meta.get("device", "")).startswith("cpu")
        rec = read_recording(snap, float(scale[dim]), names, device)
        _whole(meta, rec, f"step {step} at {dim}={scale[dim]}")
        if any(r.value == rec.value for r in groups.get(step, [])):
            raise ValueError(f"predict: step {step} was given twice at {dim}={scale[dim]}")
        groups.setdefault(step, []).append(rec)
    if not groups:
        raise ValueError("predict: no recordings (of the steps asked for)")
    for step, recs in groups.items():
        if len(recs) < 3:
            raise ValueError(
                f"predict: step {step} has {len(recs)} recorded size(s) of {dim!r}; three or more are needed"
            )
    block = (1 if cpu else 512) if rounding is None else max(int(rounding), 1)
    models = {step: StepModel(recs, names, block) for step, recs in groups.items()}
    replays = {step: m.replay(float(target)) for step, m in models.items()}
    for step, m in models.items():
        check_aligned(step, m, replays[step], dim, float(target))
    step = max(replays, key=lambda s: replays[s].peak)
    model, replay = models[step], replays[step]
    loo = model.leave_one_out() if len(model.recs) >= 4 else {}
    cap, cap_from = None, ""
    if capacity == "auto":
        cap, cap_from = auto_capacity(metas) or (None, "")
    elif capacity is not None:
        cap, cap_from = parse_capacity(capacity), "given"
    return Prediction(
        dim=dim,
        at=target,
        peak_allocated=replay.peak,
        peak_blocks=max(r.blocks for r in replays.values()),
        step=step,
        by_step={s: r.peak for s, r in replays.items()},
        at_peak=_at_peak(model, replay),
        when=_when(model, replay),
        growth=_growth(model, replay, float(target), dim),
        recorded={r.value: r.peak for r in model.recs},
        unverified=len(model.recs) < 4,
        loo_error=max(map(abs, loo.values())) if loo else None,
        loo=loo,
        unaligned_bytes=int(model.sizes[~model.aligned, -1].sum()),
        capacity=cap,
        capacity_from=cap_from,
        _models=tuple(models.values()),
    )


def _whole(meta: Mapping[str, Any], rec: Recording, which: str) -> None:
    """Refuse a file that holds less, or more, than its step: a replay of it would be wrong."""
    if meta.get("incomplete") or (meta.get("max_entries") and rec.entries >= meta["max_entries"]):
        why = meta.get("incomplete") or "its trace ring was full, so it kept only the newest entries"
        raise ValueError(f"predict: {which} holds less than the step did ({why}); record it with a larger max_entries")
    if meta.get("clear") is False:
        raise ValueError(f"predict: {which} was recorded with clear=false, so its file holds earlier steps too")


def _source(item: Any, scale: Mapping[str, Any] | None) -> tuple[dict[str, Any], Mapping[str, Any]]:
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


def _at_peak(model: StepModel, replay: Replay) -> dict[str, dict[str, int]]:
    live = np.flatnonzero(replay.alive)
    cats = model.names.category_names()
    by_cat = {cats[c]: b for c, b in zip(*_sums(model.category[live], replay.sizes[live]))}
    by_site: dict[str, int] = {}
    for site, b in zip(*_sums(model.site[live], replay.sizes[live])):
        name = site_name(model.names, site)
        by_site[name] = by_site.get(name, 0) + b
    return {"category": _largest_first(by_cat), "site": _largest_first(by_site)}


def _largest_first(bytes_by: dict[str, int]) -> dict[str, int]:
    """The entries that hold bytes, the largest first."""
    return dict(sorted(((k, v) for k, v in bytes_by.items() if v), key=lambda kv: -kv[1]))


def _sums(keys: np.ndarray, values: np.ndarray) -> tuple[list[int], list[int]]:
    """Each distinct key and the sum of its values, as Python ints."""
    uniq, which = np.unique(keys, return_inverse=True)
    return uniq.tolist(), np.bincount(which.ravel(), weights=values, minlength=len(uniq)).astype(np.int64).tolist()


def _when(model: StepModel, replay: Replay) -> PeakMoment:
    ref, p = model.ref, replay.index
    if p < 0:
        return PeakMoment(-1, 0.0, site_name(model.names, BEFORE), None)
    item = int(ref.item[p])
    site = site_name(model.names, int(model.site[item]))
    first, here = ref.trace[int(ref.entry[0])].get("time_us"), ref.trace[int(ref.entry[p])].get("time_us")
    after = here - first if type(first) is int and type(here) is int else None
    return PeakMoment(p, p / len(ref.sign), site, after)


def _growth(model: StepModel, replay: Replay, target: float, dim: str, top: int = 5) -> list[Growth]:
    """The sites alive at the peak whose bytes grow most from the smallest recorded size to the
    target, each with the law its allocations there add up to."""
    live = np.flatnonzero(replay.alive)
    uniq, which = np.unique(model.site[live], return_inverse=True)
    which = which.ravel()

    def sums(weights: np.ndarray) -> np.ndarray:
        summed: np.ndarray = np.bincount(which, weights=weights, minlength=len(uniq))
        return summed

    at, smallest = sums(replay.sizes[live]), sums(model.predict_sizes(model.recs[0].value)[live])
    laws = np.stack([sums(c) for c in model.law_rows(live).T], axis=1)
    by_name: dict[str, list[Any]] = {}
    for k, site in enumerate(uniq.tolist()):
        name = site_name(model.names, site)
        if name in by_name:
            entry = by_name[name]
            entry[0], entry[1], entry[2] = entry[0] + at[k], entry[1] + smallest[k], entry[2] + laws[k]
        else:
            by_name[name] = [at[k], smallest[k], laws[k]]
    found = [
        Growth(name, law_words(c, dim, target), int(a), int(b), (float(c[0]), float(c[1]), float(c[2])))
        for name, (a, b, c) in by_name.items()
        if a > b
    ]
    found.sort(key=lambda g: -(g.bytes_at - g.bytes_smallest))
    return found[:top]
