"""Several ranks (or devices) of one run side by side: per step, the largest and smallest peak,
each rank's, and the gap between them (the imbalance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .chartkit import (
    BASE,
    KEPT,
    RISE,
    TITLE_FONT,
    bars,
    byte_axis,
    figure_legend,
    label_largest,
    panel_title,
    plain_text,
    reuse_figure,
    step_axis,
)


# A fixed layout: constrained layout would double the drawing time.
def _ranks_axes(fig: Figure) -> list[Any]:
    grid = fig.add_gridspec(2, 1, height_ratios=[1.35, 1], left=0.15, right=0.985, top=0.84, bottom=0.085, hspace=0.55)
    return [fig.add_subplot(grid[0]), fig.add_subplot(grid[1])]


@plain_text
def ranks_figure(intervals: Sequence[Any], selected: int | None = None, fig: Figure | None = None) -> Figure:
    """Several ranks (or devices): per step, the largest and smallest peak and their gap."""
    by_step: dict[int, list[Any]] = {}
    for iv in intervals:
        by_step.setdefault(iv.step, []).append(iv)
    steps = sorted(by_step)
    peaks = [[iv.peak_allocated for iv in by_step[s]] for s in steps]
    hi, lo = [max(p) for p in peaks], [min(p) for p in peaks]
    gap = [top - bottom for top, bottom in zip(hi, lo)]
    x = list(range(len(steps)))
    labels = [str(s) for s in steps]
    ranks = len({(iv.rank, iv.device) for iv in intervals})
    fig, (peak_ax, gap_ax) = reuse_figure(fig, "ranks", 5.8, _ranks_axes)
    fig.suptitle(f"Peak per step across {ranks} ranks/devices", fontsize=TITLE_FONT, y=0.985)
    panel_title(peak_ax, "Largest and smallest rank's peak")
    if x:
        bars(peak_ax, x, hi, color=RISE, label="largest")
        bars(peak_ax, x, lo, color=BASE, label="smallest")
        dots = [(i, p) for i, ps in enumerate(peaks) for p in ps]
        peak_ax.plot([d[0] for d in dots], [d[1] for d in dots], ".", color="black", markersize=4, label="each rank")
        if selected is not None and 0 <= selected < len(x):
            peak_ax.add_patch(
                Rectangle(
                    (selected - 0.4, 0),
                    0.8,
                    hi[selected],
                    fill=False,
                    edgecolor="black",
                    linewidth=2,
                    label="_selected",
                )
            )
        figure_legend(fig, [peak_ax])
    peak_ax.margins(y=0.12)
    byte_axis(peak_ax)
    step_axis(peak_ax, labels, ticks=16)
    panel_title(gap_ax, "Imbalance: largest − smallest peak")
    if x:
        bars(gap_ax, x, gap, color=KEPT, label="imbalance")
        label_largest(gap_ax, gap, color=KEPT)
    gap_ax.margins(y=0.15)
    byte_axis(gap_ax)
    step_axis(gap_ax, labels, ticks=16)
    return fig
