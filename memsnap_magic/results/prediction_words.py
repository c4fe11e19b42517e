"""What a prediction says in words: allocation sites, size laws, and a refusal's one line.

Kept apart from ``prediction`` so the model's numbers and the sentences about them stay
readable. In ``results``, not ``views``: a ``Prediction`` carries its sites and laws, and a
refusal is an error said where it is found; names of sites come from ``stacks`` (notebook cells
first, as elsewhere), bytes from ``core.units``. How a whole prediction reads is ``views.prediction``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.units import fmt_bytes
from .prediction_model import BEFORE, Replay, StepModel
from .prediction_recording import NO_SITE, Interner, Recording
from .stacks import frame_lines

ALIGNED_SHARE = 0.99  # below this share of the predicted peak from aligned allocations: refuse


class PredictionRefused(ValueError):
    """The step differs between recorded sizes where it matters; ``line`` says where, once."""

    def __init__(self, line: str, step: Any = None, site: str = "", what: str = "") -> None:
        super().__init__(line)
        self.line, self.step, self.site, self.what = line, step, site, what


def site_name(names: Interner, site: int) -> str:
    """A site as people read it: `function` (file or cell:line)."""
    if site == BEFORE:
        return "(alive before the step)"
    if site == NO_SITE:
        return "(no stack recorded: under 1 KiB on the CPU route)"
    named = names.shown.get(site)
    if named is None:
        named = names.shown[site] = _frame_name(names.site_frames[site])
    return named


def _frame_name(frames: list[dict[str, Any]]) -> str:
    """The frame people read first (cells first, else the innermost), its function quoted."""
    lines = frame_lines(frames, limit=1)
    if not lines:
        return "(no readable frame)"
    name, _, where = lines[0].partition(" (")
    return f"`{name}` ({where}" if where else f"`{name}`"


def law_words(c: np.ndarray, dim: str, target: float) -> str:
    """``4 × seq² + 512 × seq bytes``: the terms that count at ``target`` (0.1 % of the whole)."""
    terms = [(c[2], f" × {dim}²", target**2), (c[1], f" × {dim}", target), (c[0], "", 1.0)]
    total = sum(abs(k) * w for k, _, w in terms) or 1.0
    words = ""
    for k, unit, w in terms:
        if abs(k) * w < 1e-3 * total:
            continue
        number = _number(abs(k))
        words += (" − " if k < 0 else " + ") if words else ("−" if k < 0 else "")
        words += number + unit
    return f"{words or '0'} bytes"


def _number(x: float) -> str:
    if abs(x - round(x)) < 1e-6 * max(1.0, x):
        return f"{round(x):,}"
    return f"{x:,.4g}" if x < 1e4 else f"{x:,.0f}"


def check_aligned(step: Any, model: StepModel, replay: Replay, dim: str, target: float) -> None:
    """Refuse when less than ``ALIGNED_SHARE`` of the predicted peak is from aligned items, or
    when the unaligned ones, grown as much as a law of degree 2 allows, could raise the peak by
    more than the rest; name the step's first difference: its first unaligned allocation of
    1 KiB or more (one that has frames on every route), else the first one alive at the peak."""
    unaligned = replay.alive & ~model.aligned
    share = float(replay.sizes[replay.alive & model.aligned].sum()) / max(replay.peak, 1)
    worst = model.worst_case(target).peak if (~model.aligned).any() else replay.peak
    if share >= ALIGNED_SHARE and worst * ALIGNED_SHARE <= replay.peak:
        return
    found = "allocations found at every recorded size"
    if share >= ALIGNED_SHARE:
        extent = f"allocations other than {found} could raise the predicted peak by up to {worst / replay.peak - 1:.1%}"
    else:
        extent = f"only {share:.1%} of the bytes alive at the predicted peak come from {found}"
    named = np.flatnonzero(~model.aligned[: model.n_alloc] & (model.sizes[: model.n_alloc, -1] >= 1024))
    if not len(named):
        named = np.flatnonzero(unaligned if unaligned.any() else ~model.aligned)
    first = int(named[0])  # items are in the step's order
    missing = [r for k, r in enumerate(model.recs) if not model.present[first, k]]
    if missing:
        site, instead = _difference(model, first, missing[0], dim)
        what = (
            f"at {dim}={_value(model.ref.value)} it allocates {fmt_bytes(int(model.sizes[first, -1]))} "
            f"({model.names.category_names()[model.category[first]]}) that {dim}="
            f"{', '.join(_value(r.value) for r in missing)} {'does' if len(missing) == 1 else 'do'} not{instead}"
        )
    else:  # found at every size, but not growing steadily: likely different allocations matched
        site = site_name(model.names, int(model.site[first]))
        sizes = ", ".join(
            f"{fmt_bytes(int(z))} at {dim}={_value(r.value)}" for z, r in zip(model.sizes[first], model.recs)
        )
        what = f"its size does not grow steadily with {dim}: {sizes}"
    line = f"cannot predict step {step} at {dim}={_value(target)}: {extent}; first difference: {site}: {what}"
    raise PredictionRefused(line, step, site, what)


def _difference(model: StepModel, item: int, other: Recording, dim: str) -> tuple[str, str]:
    """The reference's site of ``item`` and what ``other`` allocates in its place (its first
    allocation matching none of the reference's after the last one both share), each site with
    the first frame where the two stacks part, so a branch in the caller shows."""
    names = model.names
    if item >= model.n_alloc:
        return site_name(names, BEFORE), ""
    ref = model.ref
    match = model.matches[model.recs.index(other)]
    before = match[:item][match[:item] >= 0]
    taken = set(match[match >= 0].tolist())
    start = int(before[-1]) + 1 if len(before) else 0
    j = next((j for j in range(start, len(other.alloc_size)) if j not in taken), None)
    here = int(ref.alloc_site[item])
    if j is None:
        return site_name(names, here), ""
    there = int(other.alloc_site[j])
    size = fmt_bytes(int(other.alloc_size[j]))
    instead = f"; {dim}={_value(other.value)} allocates {size} at {_parted(names, there, here)} there"
    return _parted(names, here, there), instead


def _parted(names: Interner, site: int, other: int) -> str:
    """``site``'s name, and where it was called from when that is where it parts from ``other``."""
    name = site_name(names, site)
    if site < 0 or other < 0:
        return name
    a, b = names.site_frames[site], names.site_frames[other]
    keys = [[(f["filename"], f["line"], f["name"]) for f in frames] for frames in (a, b)]
    common = next((k for k, (x, y) in enumerate(zip(*keys)) if x != y), min(map(len, keys)))
    if common == 0 or common >= len(a):
        return name
    return f"{name} via {_frame_name([a[common]])}"


def _value(v: float) -> str:
    return f"{v:g}"
