"""Will it fit? ``memsnap_magic.predict`` over this session's runs, and a prediction in words
(what ``%memsnap predict`` and ``memsnap predict`` print).

The model is ``results.prediction`` (pure: recordings in, a ``Prediction`` out); here the
session the magic fills is what it reads when nothing else is given, so
``%%memsnap run=b2 scale=batch:2`` cells (three sizes or more) then ``predict(batch=64)`` is all
a notebook needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..recording.process_state import STATE
from ..results.prediction import Prediction
from ..results.prediction import predict as _predict
from .words import fmt_bytes

__all__ = ["far_words", "predict", "prediction_text"]


def predict(
    recorded: Any = None,
    at: Mapping[str, float] | None = None,
    capacity: int | str | None = None,
    *,
    run: str | Iterable[str] | None = None,
    steps: Iterable[int] | None = None,
    device: int | None = None,
    rounding: int | None = None,
    **sizes: float,
) -> Prediction:
    """Predict a step's peak at a larger size from the same step recorded at three or more sizes.

    ``predict(batch=64)`` reads this session's steps recorded with ``scale=batch:N`` (each size
    its own run: ``%%memsnap run=b8 scale=batch:8``); ``recorded`` gives others instead: a
    ``Session``, intervals, files or folders' files as ``(path, {"batch": 8})`` pairs, or files
    recorded with ``scale=``. ``run``: only these runs; ``steps``: only these steps (the highest
    predicted peak of the steps wins). ``capacity``: bytes, ``"80GiB"`` or ``"auto"`` (the
    device's memory less what was in use outside PyTorch, on the CPU the memory available), for
    ``fits`` and ``largest()``: the largest size predicted to fit.

    The step is replayed, allocation by allocation, with each allocation's size fitted as a
    polynomial (degree <= 2) of the size; ``ValueError`` says what cannot be predicted from, and
    ``PredictionRefused`` (a ``ValueError``) names the first difference where the step does
    something else at some sizes. Limits: docs/prediction.md.
    """
    return _predict(
        STATE.session if recorded is None else recorded,
        at,
        capacity,
        run=run,
        steps=steps,
        device=device,
        rounding=rounding,
        **sizes,
    )


def prediction_text(p: Prediction, top: int = 3) -> str:
    """The prediction in a few lines: the peak and what it rests on, what is alive then, the
    sites that grow most with their laws, and, with a capacity, whether it fits and the largest
    size that does."""
    dim, sizes = p.dim, sorted(p.recorded)
    check = (
        f"leave-one-out error at most {p.loo_error:.1%}"
        if p.loo_error is not None
        else "unverified: three sizes leave none to check the fit against; a fourth would"
    )
    blocks = f" ({fmt_bytes(p.peak_blocks)} in allocator blocks)" if p.peak_blocks != p.peak_allocated else ""
    lines = [
        f"memsnap predict: step {p.step}{_rank(p)} at {dim}={_num(p.at)}: peak {fmt_bytes(p.peak_allocated)}{blocks}"
        f" · from {dim}={', '.join(map(_num, sizes))} ({check})"
    ]
    if p.far(p.at):
        lines.append(f"  {far_words(p, p.at)}")
    if len(p.by_step) > 1:
        lines.append("  by step: " + ", ".join(f"{s} {fmt_bytes(b)}" for s, b in p.by_step.items()))
    if p.by_rank:
        lines.append("  by rank: " + ", ".join(f"{r} {fmt_bytes(b)}" for r, b in sorted(p.by_rank.items())))
    alive = ", ".join(f"{c} {fmt_bytes(b)}" for c, b in p.at_peak["category"].items()) or "nothing"
    when = f"{p.when.fraction:.0%} into the step, at {p.when.site}" if p.when.event >= 0 else "before the step"
    lines.append(f"  alive at the peak ({when}): {alive}")
    for g in p.growth[:top]:
        lines.append(
            f"  grows: {g.site}: {g.law} ({fmt_bytes(g.bytes_smallest)} at {dim}={_num(sizes[0])}, "
            f"{fmt_bytes(g.bytes_at)} at {_num(p.at)})"
        )
    if p.unaligned_bytes:
        lines.append(
            f"  {fmt_bytes(p.unaligned_bytes)} at {dim}={_num(sizes[-1])} not found at every size: "
            "taken as recorded there"
        )
    lines.append(_capacity_line(p))
    return "\n".join(lines)


def _capacity_line(p: Prediction) -> str:
    if p.capacity is None:
        return "  no capacity given: give one (bytes, 80GiB, or auto) to ask what fits"
    cap, need = p.capacity, p.peak_blocks
    verdict = f"fits ({fmt_bytes(cap - need)} spare)" if need <= cap else f"over by {fmt_bytes(need - cap)}"
    largest = p.largest()
    most = (
        f"nothing grows with {p.dim}: any size fits"
        if largest is None
        else f"not even {p.dim}=1 fits"
        if largest == 0
        else f"the largest {p.dim} predicted to fit: {largest:,}"
    )
    far = f" ({far_words(p, largest)})" if largest and p.far(largest) else ""
    return f"  capacity {fmt_bytes(cap)} ({p.capacity_from}): {verdict}; {most}{far}"


def far_words(p: Prediction, value: float) -> str:
    """A size far beyond the recorded ones, said: an extrapolation, answered but not checked."""
    top = max(p.recorded)
    return (
        f"{p.beyond(value):,.0f}× the largest recorded, {p.dim}={_num(top)}: far beyond what was recorded, "
        f"where a small error grows; record a larger {p.dim} to check"
    )


def _num(value: float) -> str:
    """A size as written: ``64``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _rank(p: Prediction) -> str:
    """`` on rank 3 (the highest of 4)``: where several ranks were recorded, the one that peaks."""
    return f" on rank {p.rank} (the highest of {len(p.by_rank)})" if p.rank is not None else ""
