"""The dashboard's *fit* view (will it fit?): a step's peak against the size it was recorded at
with ``scale=``, the recorded points, the peak predicted between and beyond them, the capacity
and the largest size predicted to fit.

Its own module because it reads files the overview never does: the prediction replays the
recorded steps (``results.prediction``), so ``fit_of`` waits for the background writes first and
the dashboard keeps its answer until the steps or the capacity change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

from ..core.errors import SnapshotError
from ..files.writer import wait_for_writes
from ..results.intervals import Interval
from ..results.prediction import FAR, Prediction, parse_capacity, predict
from .chartkit import (
    BYTES,
    ERR,
    FONT,
    RISE,
    RUN_COLORS,
    TITLE_FONT,
    byte_axis,
    figure_legend,
    panel_title,
    plain_text,
    reuse_figure,
)
from .prediction import far_words
from .words import count_of, fmt_bytes

__all__ = ["Fit", "fit_figure", "fit_of", "fit_words", "scaled_dims"]

RECORDED, PREDICTED, CAPACITY, LARGEST = "recorded", "predicted peak", "capacity", "largest that fits"
FAR_OFF = f"over {FAR}× the recorded"  # the predicted curve, dashed there: far beyond what was recorded
FITS = RUN_COLORS[2]  # the largest size that fits: apart from the capacity's red
WIDE = 64  # the sizes shown span more than this factor: both axes logarithmic
POINTS = 96  # sizes the predicted curve is drawn at


@dataclass(frozen=True)
class Fit:
    """What the fit view shows: the recorded peaks of one dimension and, where the step could be
    predicted, the predicted peak over a range of sizes, the capacity and the largest that fits."""

    dim: str
    points: list[tuple[int, int, Any]]  # (size, recorded peak, step), one per recorded step
    sizes: list[float] = field(default_factory=list)  # where the curve is drawn
    peaks: list[int] = field(default_factory=list)  # the predicted (allocator-level) peak there
    capacity: int | None = None
    capacity_from: str = ""
    largest: int | None = None  # the largest size predicted to fit; None: no capacity, or nothing grows
    prediction: Prediction | None = None
    why_not: str = ""  # why nothing is predicted (too few sizes, a refusal's line)
    note: str = ""  # what is wrong with the capacity asked for (the curve is drawn without it)

    @property
    def log_sizes(self) -> bool:
        """Whether the size axis is logarithmic: the sizes shown reach more than ``WIDE`` times the
        smallest recorded (a capacity far beyond the recorded sizes, as a GPU's against a few
        small batches), where a linear axis would crowd the recorded points into a corner."""
        recorded = [s for s, _, _ in self.points]
        return bool(recorded) and max(recorded + list(self.sizes)) / min(recorded) > WIDE

    @property
    def log_bytes(self) -> bool:
        """Whether the byte axis is logarithmic too: the peaks shown span more than ``WIDE`` times."""
        shown = [b for b in self._bytes() if b > 0]
        return self.log_sizes and bool(shown) and max(shown) / min(shown) > WIDE

    def _bytes(self) -> list[int]:
        return [b for _, b, _ in self.points] + list(self.peaks) + [self.capacity or 0]


def scaled_dims(intervals: Sequence[Interval]) -> list[str]:
    """The dimensions steps were recorded at (``scale=``), the one with most sizes first."""
    sizes: dict[str, set[int]] = {}
    for iv in intervals:
        for name, size in (iv.scale or {}).items():
            sizes.setdefault(name, set()).add(size)
    return sorted(sizes, key=lambda name: -len(sizes[name]))  # stable: recorded order among equals


def fit_of(intervals: Sequence[Interval], capacity: str | int | None = "auto", dim: str | None = None) -> Fit | None:
    """The fit of ``intervals`` (a session's) in ``dim`` (default: the dimension with most sizes);
    None when no step was recorded with ``scale=``. ``capacity``: bytes, ``"80GiB"``, ``"auto"``
    (the device's memory less what ran outside PyTorch; on the CPU the memory available) or None.
    Never raises for what the recordings or the capacity lack: ``why_not`` and ``note`` say it."""
    dims = scaled_dims(intervals)
    if not dims:
        return None
    dim = dim if dim in dims else dims[0]
    chosen = [iv for iv in intervals if iv.scale and dim in iv.scale]
    points = sorted((iv.scale[dim], iv.peak_allocated, iv.step) for iv in chosen if iv.scale)
    sizes = sorted({s for s, _, _ in points})
    if len(sizes) < 3:
        why = f"{count_of(len(sizes), 'size')} of {dim} recorded: record three or more to predict"
        return Fit(dim, points, why_not=why)
    note = ""
    if capacity not in (None, "auto"):
        try:
            parse_capacity(capacity)
        except ValueError as e:
            note, capacity = f"{e}: drawn without one", None
    wait_for_writes()  # the newest step's file may still be on its way
    try:
        p = predict(list(chosen), at={dim: 2 * sizes[-1]}, capacity=capacity)
    except (SnapshotError, ValueError) as e:  # PredictionRefused too: its one line
        return Fit(dim, points, why_not=str(e).removeprefix("predict: "), note=note)
    largest = p.largest() if p.capacity is not None else None
    top = max(2 * sizes[-1], round(1.25 * largest) if largest else 0)
    if top / sizes[0] > WIDE:  # as ``Fit.log_sizes`` decides
        grid = np.unique(np.geomspace(sizes[0] / 2, top, POINTS).round(6))
    else:
        grid = np.linspace(1, top, POINTS)
    grid = np.unique(np.concatenate([grid, sizes, [largest] if largest else []]))
    return Fit(
        dim,
        points,
        sizes=grid.tolist(),
        peaks=[p.blocks_at(float(x)) for x in grid],
        capacity=p.capacity,
        capacity_from=p.capacity_from,
        largest=largest,
        prediction=p,
        note=note,
    )


def fit_words(fit: Fit) -> list[str]:
    """The fit in a few lines, beside its picture (and in the still copy's text)."""
    recorded = ", ".join(f"{s:,}" for s in sorted({s for s, _, _ in fit.points}))
    if fit.prediction is None:
        return [f"fit over {fit.dim}={recorded}: nothing predicted: {fit.why_not}"]
    p = fit.prediction
    check = f"leave-one-out error at most {p.loo_error:.1%}" if p.loo_error is not None else "unverified: three sizes"
    lines = [f"fit over {fit.dim}={recorded} ({check}), step {p.step} replayed at each size"]
    if fit.capacity is None:
        lines.append("no capacity known: give one to see the largest size that fits")
    elif fit.largest is None:
        lines.append(f"capacity {fmt_bytes(fit.capacity)} ({fit.capacity_from}): nothing grows with {fit.dim}")
    elif fit.largest == 0:
        lines.append(f"capacity {fmt_bytes(fit.capacity)} ({fit.capacity_from}): not even {fit.dim}=1 fits")
    else:
        lines.append(
            f"capacity {fmt_bytes(fit.capacity)} ({fit.capacity_from}): the largest {fit.dim} predicted to fit is "
            f"{fit.largest:,} (peak {fmt_bytes(p.blocks_at(fit.largest))})"
        )
        if p.far(fit.largest):
            lines.append(far_words(p, fit.largest))
    if fit.note:
        lines.append(fit.note)
    return lines


def _fit_axes(fig: Figure) -> list[Any]:
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.15, right=0.965, top=0.78, bottom=0.13)
    return [ax]


@plain_text
def fit_figure(fit: Fit, fig: Figure | None = None) -> Figure:
    """Peak against the dimension: the recorded steps as points, the predicted peak as a curve,
    the capacity as a line and the largest size that fits it marked."""
    if fig is not None and getattr(fig, "_memsnap_kind", None) == "fit":
        for old in fig.axes:  # linear again before it is emptied: a log axis refuses a limit of 0
            old.set_xscale("linear")
            old.set_yscale("linear")
    fig, (ax,) = reuse_figure(fig, "fit", 4.2, _fit_axes)
    fig.suptitle(f"Will it fit? The step's peak against {fit.dim}", fontsize=TITLE_FONT, y=0.985)
    log_x, log_y = fit.log_sizes, fit.log_bytes
    ax.set_xscale("log" if log_x else "linear")
    ax.set_yscale("log" if log_y else "linear")
    scales = "both axes" if log_y else f"{fit.dim} axis" if log_x else ""
    panel_title(ax, "Peak allocated memory" + (f" ({scales} logarithmic)" if scales else ""))
    if fit.sizes:
        # solid up to FAR times the largest recorded size, dashed beyond: said, as the words say it
        edge = FAR * max(s for s, _, _ in fit.points)
        near = [(x, y) for x, y in zip(fit.sizes, fit.peaks) if x <= edge]
        far = [(x, y) for x, y in zip(fit.sizes, fit.peaks) if x >= edge]
        if far and near and near[-1][0] < edge:  # the two parts meet at the edge
            far.insert(0, near[-1])
        for part, style, label in ((near, "-", PREDICTED), (far, "--", FAR_OFF)):
            if part:
                ax.plot(*zip(*part), style, color=RISE, linewidth=1.8, label=label)
    xs = [s for s, _, _ in fit.points]
    ax.plot(xs, [b for _, b, _ in fit.points], "o", color="black", ms=6, label=RECORDED, zorder=3)
    if fit.capacity is not None:
        ax.axhline(fit.capacity, color=ERR, linestyle="--", linewidth=1.2, label=CAPACITY)
        ax.annotate(
            f"{fmt_bytes(fit.capacity)} ({fit.capacity_from})",
            (0.01, fit.capacity),
            xycoords=("axes fraction", "data"),
            textcoords="offset points",
            xytext=(0, 3),
            fontsize=FONT,
            color=ERR,
        )
    if fit.largest:
        peak = fit.peaks[fit.sizes.index(fit.largest)]
        ax.axvline(fit.largest, color=FITS, linestyle=":", linewidth=1.2, zorder=1, label="_largest")
        ax.plot([fit.largest], [peak], "D", color=FITS, ms=8, zorder=4, label=LARGEST)
        ax.annotate(
            f"{fit.dim} {fit.largest:,}",
            (fit.largest, peak),
            textcoords="offset points",
            xytext=(-8, 6),  # above the capacity, left of the curve: both rise to the right
            ha="right",
            va="bottom",
            fontsize=FONT,
            color=FITS,
            fontweight="bold",
        )
    if fit.prediction is None:
        ax.text(
            0.5,
            0.5,
            _wrapped(f"nothing predicted: {fit.why_not}"),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=FONT,
            color="gray",
        )
    _axes(ax, fit, log_x, log_y)
    figure_legend(fig, [ax])
    return fig


def _axes(ax: Any, fit: Fit, log_x: bool, log_y: bool) -> None:
    """Logarithmic axes in powers of two (batch sizes read there, bytes in whole units), else
    linear from 0; with points alone, a tick at each recorded size."""
    ax.set_xlabel(fit.dim)
    ax.grid(alpha=0.3)
    ax.set_axisbelow(True)
    if log_x:
        ax.xaxis.set_major_locator(LogLocator(base=2, numticks=9))
        ax.xaxis.set_minor_locator(NullLocator())
    else:
        ax.set_xlim(0, max([s for s, _, _ in fit.points] + list(fit.sizes)) * 1.06)
        if not fit.sizes:
            ax.xaxis.set_major_locator(FixedLocator(sorted({s for s, _, _ in fit.points})))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    shown = fit._bytes()
    if log_y:
        ax.yaxis.set_major_locator(LogLocator(base=2, numticks=7))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(BYTES)
        ax.set_ylim(min(b for b in shown if b > 0) / 1.5, max(shown) * 2)  # room for the labels above
    else:
        byte_axis(ax)
        ax.set_ylim(0, max(shown) * 1.12)


def _wrapped(text: str, width: int = 56) -> str:
    """A long line broken at spaces, for text inside the axes."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join([*lines, line])
