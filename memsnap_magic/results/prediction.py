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
that name sites and laws (``prediction_words``, which also words a refusal). What is asked and
read is ``prediction_input``'s, the peak's make-up ``prediction_peak``'s, the capacity
``prediction_capacity``'s; here, the ``Prediction`` and how it is put together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.nogc import no_gc
from .prediction_capacity import auto_capacity, parse_capacity
from .prediction_input import asked, chosen_runs, parse_size, recordings, source, whole
from .prediction_model import StepModel
from .prediction_peak import Growth, PeakMoment, at_peak, growth, when
from .prediction_recording import Interner, Recording, read_recording
from .prediction_words import PredictionRefused, check_aligned
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
class Prediction:
    """A step's predicted peak at ``dim`` = ``at``, and what it is made of."""

    dim: str
    at: float
    peak_allocated: int  # requested bytes, the highest over the steps given
    peak_blocks: int  # allocator-level: each block rounded as the caching allocator does (CPU: the same)
    step: Any  # the step whose peak that is
    by_step: dict[Any, int]  # each step's predicted peak (the highest over the ranks recorded)
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
    rank: int | None = None  # several ranks recorded: the one whose step peaks highest (runs out first)
    by_rank: dict[int, int] = field(default_factory=dict)  # several ranks: each one's highest predicted peak
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
            "rank": self.rank,
            "by_rank": {str(k): v for k, v in self.by_rank.items()},
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
    apart, the highest peak wins; ``steps`` keeps only those. A step recorded on several ranks is
    predicted on each from its own files, and the rank that peaks highest wins (``rank``): the
    one that runs out first. ``device``: the trace read (default: the first with entries, as
    ``summarize``). ``rounding``: the allocator's block granularity for
    ``peak_blocks`` (default 512 B off the CPU, none on it). ``capacity``: bytes, a size such as
    ``"80GiB"``, or ``"auto"`` (``auto_capacity``); ``largest()`` and ``fits`` use it.
    ``ValueError`` for what cannot be predicted from (``PredictionRefused``: a step that differs
    between the sizes where it matters).
    """
    dim, target = asked(at, sizes)
    if capacity is not None and capacity != "auto":
        parse_capacity(capacity)  # refused before any file is read
    pairs = recordings(recorded, dim, chosen_runs(run), None if steps is None else set(steps))
    with no_gc():  # the files' millions of containers: a collection would walk them and free nothing
        return _predict(pairs, dim, target, capacity, steps, device, rounding)


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
    groups: dict[tuple[Any, int], list[Recording]] = {}  # (step, rank): the sizes it was recorded at
    others: dict[str, Any] | None = None
    cpu = True
    metas: list[Mapping[str, Any]] = []
    for item, given in pairs:
        if item is None:  # another run's
            continue
        snap, scale = source(item, given)
        meta = snap.get("memsnap") or {}
        step = meta.get("step")
        if wanted is not None and step not in wanted:
            continue
        if dim not in scale:
            raise ValueError(f"predict: a recording has no {dim!r} in its scale {dict(scale)!r}")
        rest = {k: v for k, v in scale.items() if k != dim}
        if others is not None and rest != others:
            raise ValueError(f"predict: recordings differ in more than {dim!r}: {others!r} and {rest!r}")
        others = rest
        rank: int = meta["rank"] if type(meta.get("rank")) is int else 0
        metas.append(meta)
        cpu = cpu and str(meta.get("device", "")).startswith("cpu")
        rec = read_recording(snap, float(scale[dim]), names, device)
        whole(meta, rec, f"step {step} at {dim}={scale[dim]}")
        if any(r.value == rec.value for r in groups.get((step, rank), [])):
            raise ValueError(f"predict: step {step} of rank {rank} was given twice at {dim}={scale[dim]}")
        groups.setdefault((step, rank), []).append(rec)
    if not groups:
        raise ValueError("predict: no recordings (of the steps asked for)")
    ranks = sorted({rank for _, rank in groups})
    label = {key: f"{key[0]} of rank {key[1]}" if len(ranks) > 1 else key[0] for key in groups}
    for key, recs in groups.items():
        if len(recs) < 3:
            raise ValueError(
                f"predict: step {label[key]} has {len(recs)} recorded size(s) of {dim!r}; three or more are needed"
            )
    block = (1 if cpu else 512) if rounding is None else max(int(rounding), 1)
    models = {key: StepModel(recs, names, block) for key, recs in groups.items()}
    replays = {key: m.replay(float(target)) for key, m in models.items()}
    for key, m in models.items():
        check_aligned(label[key], m, replays[key], dim, float(target))
    top = max(replays, key=lambda k: replays[k].peak)  # the rank that runs out first, on its highest step
    model, replay = models[top], replays[top]
    loo = model.leave_one_out() if len(model.recs) >= 4 else {}
    cap, cap_from = None, ""
    if capacity == "auto":
        cap, cap_from = auto_capacity(metas) or (None, "")
    elif capacity is not None:
        cap, cap_from = parse_capacity(capacity), "given"
    by_step: dict[Any, int] = {}
    by_rank: dict[int, int] = {}
    for (step, rank), r in replays.items():
        by_step[step] = max(by_step.get(step, 0), r.peak)
        by_rank[rank] = max(by_rank.get(rank, 0), r.peak)
    return Prediction(
        dim=dim,
        at=target,
        peak_allocated=replay.peak,
        peak_blocks=max(r.blocks for r in replays.values()),
        step=top[0],
        by_step=by_step,
        rank=top[1] if len(ranks) > 1 else None,
        by_rank=by_rank if len(ranks) > 1 else {},
        at_peak=at_peak(model, replay),
        when=when(model, replay),
        growth=growth(model, replay, float(target), dim),
        recorded={r.value: r.peak for r in model.recs},
        unverified=len(model.recs) < 4,
        loo_error=max(map(abs, loo.values())) if loo else None,
        loo=loo,
        unaligned_bytes=int(model.sizes[~model.aligned, -1].sum()),
        capacity=cap,
        capacity_from=cap_from,
        _models=tuple(models.values()),
    )
