"""Matplotlib figures of a session's steps: the per-step overview, runs compared step by step;
several ranks side by side (``ranks_chart``) and one step's timeline (``timeline``) are offered
here too.

The dashboard and the CLI both draw through here (``charts.overview_figure``, looked up when
called). Each function takes an optional ``fig`` it drew before and redraws into it
(``chartkit.reuse_figure``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from ..core.categories import ORDER
from ..results.findings import leaks, spikes
from .chartkit import (
    AT_START,
    BASE,
    CATEGORY_COLORS,
    CUMUL,
    ERR,
    FONT,
    FREED,
    KEPT,
    NEVER_CLEARED,
    OUTLINE,
    RISE,
    RUN_COLORS,
    RUN_GREYS,
    RUNS_TITLES,
    THIS_STEP,
    TITLE_FONT,
    VIEW_TITLES,
    VIEWS,
    bars,
    byte_axis,
    figure_legend,
    label_largest,
    panel_title,
    plain_text,
    png,
    reuse_figure,
    step_axis,
)
from .ranks_chart import ranks_figure
from .timeline import detail_figure

# every figure a session draws, with the names their legends and titles use
__all__ = [
    "AT_START",
    "NEVER_CLEARED",
    "RUNS_TITLES",
    "THIS_STEP",
    "VIEWS",
    "VIEW_TITLES",
    "detail_figure",
    "overview_figure",
    "png",
    "ranks_figure",
    "runs_figure",
]


# Fixed layouts: constrained layout would double the drawing time.
def _overview_axes(fig: Figure) -> list[Any]:
    grid = fig.add_gridspec(
        2, 2, height_ratios=[1.35, 1], left=0.15, right=0.985, top=0.8, bottom=0.085, hspace=0.55, wspace=0.42
    )
    return [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]


@plain_text
def overview_figure(
    intervals: Sequence[Any],
    view: str = "both",
    selected: int | None = None,
    title: str = "",
    fig: Figure | None = None,
) -> Figure:
    """Peaks (interval vs cumulative), what each step kept, and snapshot sizes, one column per step."""
    fig, (peak_ax, kept_ax, size_ax) = reuse_figure(fig, "overview", 5.8, _overview_axes)
    x = list(range(len(intervals)))
    labels = [str(iv.step) for iv in intervals]
    fig.suptitle(title or VIEW_TITLES.get(view, VIEW_TITLES["both"]), fontsize=TITLE_FONT, y=0.985)
    panel_title(peak_ax, "Peak allocated memory")
    show_interval, show_cumul = view in ("interval", "both"), view in ("cumulative", "both")

    base = [iv.baseline_allocated for iv in intervals]
    rise = [iv.peak_increase for iv in intervals]
    marker = "o--" if len(x) <= 60 else "--"
    if view == "categories" and x:
        _category_bars(peak_ax, x, intervals)
        if selected is not None and 0 <= selected < len(x):
            peak = intervals[selected].peak_allocated
            peak_ax.add_patch(
                Rectangle((selected - 0.4, 0), 0.8, peak, fill=False, edgecolor="black", linewidth=2, label="_selected")
            )
    if show_interval and x:
        bars(peak_ax, x, base, color=BASE, label=AT_START)
        bars(peak_ax, x, rise, bottom=base, color=RISE, label=THIS_STEP)
        if selected is not None and 0 <= selected < len(x):
            peak_ax.add_patch(
                Rectangle(
                    (selected - 0.4, base[selected]),
                    0.8,
                    rise[selected],
                    fill=False,
                    edgecolor="black",
                    linewidth=2,
                    label="_selected",
                )
            )
    if show_cumul and x:
        cumul = [iv.cumulative_peak_allocated for iv in intervals]
        peak_ax.plot(x, cumul, marker, color=CUMUL, label=NEVER_CLEARED)
        if not show_interval and selected is not None and 0 <= selected < len(x):  # no bar to outline
            peak_ax.plot([selected], [cumul[selected]], "o", mfc="none", mec="black", ms=13, mew=2, label="_selected")
    failed = [i for i, iv in enumerate(intervals) if iv.error]
    if failed:
        peak_ax.plot(
            failed, [intervals[i].peak_allocated for i in failed], "x", color=ERR, markersize=8, mew=2, label="_failed"
        )
        for i in failed[-8:]:  # name the most recent failures; the x marks show them all
            peak_ax.annotate(
                intervals[i].error,
                (i, intervals[i].peak_allocated),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                color=ERR,
                fontsize=FONT,
                fontweight="bold",
            )
    peak_ax.margins(y=0.12)
    byte_axis(peak_ax)
    step_axis(peak_ax, labels, ticks=16)

    kept = [iv.kept for iv in intervals]
    if x:
        bars(
            kept_ax, x, kept, color=[KEPT if k > 0 else FREED for k in kept], label="_kept"
        )  # the panel title explains it
        if selected is not None and 0 <= selected < len(x):
            kept_ax.add_patch(
                Rectangle(
                    (selected - 0.4, min(0, kept[selected])),
                    0.8,
                    abs(kept[selected]),
                    fill=False,
                    edgecolor="black",
                    linewidth=2,
                    label="_selected",
                )
            )
    label_largest(kept_ax, kept, color=KEPT, prefix="+", names=labels)
    _kept_panel(kept_ax, labels)

    if (show_interval or view == "categories") and x:
        label = THIS_STEP if show_interval else "_entries"  # the categories' legend is the peak panel's
        bars(size_ax, x, [iv.trace_entries for iv in intervals], color=RISE, label=label)
    if show_cumul and x:
        size_ax.plot(x, [iv.cumulative_trace_entries for iv in intervals], marker, color=CUMUL, label=NEVER_CLEARED)
    _size_panel(size_ax, labels)
    _mark_findings(peak_ax, kept_ax, intervals)
    if intervals:
        figure_legend(fig, [peak_ax, kept_ax, size_ax])
    if not intervals:
        peak_ax.text(
            0.5,
            0.5,
            "no intervals yet: run a %%memsnap cell",
            transform=peak_ax.transAxes,
            ha="center",
            va="center",
            fontsize=FONT,
            color="gray",
        )
    return fig


def _mark_findings(peak_ax: Any, kept_ax: Any, intervals: Sequence[Any]) -> None:
    """The steps the headline names, shaded on their own bars, so words and picture point at the
    same columns: each leaking run in the kept panel, each spiking step in the peak panel (the
    legend names both). One run, rank and device only: the findings judge those apart."""
    if len({(iv.run, iv.rank, iv.device) for iv in intervals}) != 1:
        return
    at = list(range(len(intervals)))  # the findings named by column
    for n, run in enumerate(leaks(intervals, at)):
        _shade(kept_ax, run.steps[0], run.steps[-1], KEPT, LEAKING if not n else "_leak")
    for n, spike in enumerate(spikes(intervals, at)):
        _shade(peak_ax, spike.step, spike.step, RISE, SPIKING if not n else "_spike")


LEAKING, SPIKING = "leaking steps", "spiking steps"  # the shades' names in the legend


def _shade(ax: Any, first: int, last: int, color: str, label: str) -> None:
    ax.axvspan(first - 0.48, last + 0.48, color=color, alpha=0.15, linewidth=0, zorder=0, label=label)


def _kept_panel(ax: Any, labels: Sequence[str]) -> None:
    """The axes of the "what each step kept" panel (the overview's and the runs')."""
    ax.axhline(0, color="black", linewidth=0.8)
    panel_title(ax, "Kept: end − start")
    ax.margins(y=0.15)
    byte_axis(ax, from_zero=False)
    step_axis(ax, labels, ticks=5)


def _size_panel(ax: Any, labels: Sequence[str]) -> None:
    """The axes of the snapshot-size panel: entries counted from 0."""
    panel_title(ax, "Snapshot size (entries)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator("auto", integer=True, steps=[1, 2, 2.5, 5, 10]))  # counts
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v):,}"))
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    step_axis(ax, labels, ticks=5)


def _category_names(intervals: Sequence[Any]) -> list[str]:
    names = [c for c in ORDER if any((iv.by_category_at_peak or {}).get(c) for iv in intervals)]
    return names + sorted({c for iv in intervals for c in (iv.by_category_at_peak or {})} - set(names))


def _category_bars(
    ax: Any,
    x: Sequence[float],
    intervals: Sequence[Any],
    names: list[str] | None = None,
    width: float = 0.8,
    legend: bool = True,
    plain_legend: bool = True,
) -> bool:
    """Each step's peak stacked by category (``by_category_at_peak``); unlabelled steps in grey.
    ``legend``, ``plain_legend``: name the colours, the grey (once, where several runs draw).
    Returns whether any step was drawn grey."""
    hidden = "" if legend else "_"
    bottom = [0] * len(x)
    for name in _category_names(intervals) if names is None else names:
        height = [(iv.by_category_at_peak or {}).get(name, 0) for iv in intervals]
        color = CATEGORY_COLORS.get(name, "#888888")
        bars(ax, x, height, bottom=bottom, color=color, label=hidden + name.replace("_", " "), width=width)
        bottom = [b + h for b, h in zip(bottom, height)]
    plain = [iv.peak_allocated if iv.by_category_at_peak is None else 0 for iv in intervals]
    if any(plain):
        bars(ax, x, plain, color="#9e9e9e", label=("" if plain_legend else "_") + "no categories", width=width)
    return any(plain)


def _tint(color: str, amount: float = 0.6) -> tuple[float, ...]:
    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return tuple(c + (1 - c) * amount for c in (r, g, b))


@plain_text
def runs_figure(
    runs: Sequence[tuple[str, Sequence[Any]]],
    view: str = "both",
    selected: tuple[int, int] | None = None,
    fig: Figure | None = None,
) -> Figure:
    """Several runs side by side, one column per step and one bar per run in it: peaks (the
    start in a tint), never-cleared peaks as lines, what each step kept, snapshot sizes.
    ``selected``: (run position, column) to outline."""
    fig, (peak_ax, kept_ax, size_ax) = reuse_figure(fig, "runs", 5.8, _overview_axes)
    steps = sorted({iv.step for _, ivs in runs for iv in ivs})
    column = {step: i for i, step in enumerate(steps)}
    labels = [str(s) for s in steps]
    width = 0.8 / max(len(runs), 1)
    fig.suptitle(RUNS_TITLES.get(view, RUNS_TITLES["both"]), fontsize=TITLE_FONT, y=0.985)
    panel_title(peak_ax, "Peak allocated memory")
    show_interval, show_cumul = view in ("interval", "both"), view in ("cumulative", "both")
    names = _category_names([iv for _, ivs in runs for iv in ivs]) if view == "categories" else []
    grey_named = False
    for k, (label, ivs) in enumerate(runs):
        color = RUN_COLORS[k % len(RUN_COLORS)]
        x = [column[iv.step] - 0.4 + width * (k + 0.5) for iv in ivs]
        base = [iv.baseline_allocated for iv in ivs]
        if view == "categories" and x:  # the legend names the categories; the axis, the runs' order
            grey_named |= _category_bars(
                peak_ax, x, ivs, names, width=width, legend=k == 0, plain_legend=not grey_named
            )
            peaks = [iv.peak_allocated for iv in ivs]
            bars(peak_ax, x, peaks, color="none", edgecolor=OUTLINE, linewidth=0.8, label="_run", width=width)
        if show_interval and x:
            bars(peak_ax, x, base, color=[_tint(color)], label="_start", width=width)
            bars(peak_ax, x, [iv.peak_increase for iv in ivs], bottom=base, color=color, label=label, width=width)
        if show_cumul and x:
            cumul = [iv.cumulative_peak_allocated for iv in ivs]
            peak_ax.plot(x, cumul, "o--" if len(x) <= 60 else "--", color=color, label=f"_{label}, never cleared")
        if x:
            # by category, run colours beside the categories' would read as categories: greys, named
            below, edge = (RUN_GREYS[k % len(RUN_GREYS)], OUTLINE) if view == "categories" else (color, "none")
            kept_label = label if view == "categories" else "_kept"
            bars(kept_ax, x, [iv.kept for iv in ivs], color=below, edgecolor=edge, label=kept_label, width=width)
            bars(size_ax, x, [iv.trace_entries for iv in ivs], color=below, edgecolor=edge, label="_size", width=width)
        if selected is not None and selected[0] == k:
            chosen = [iv for iv in ivs if column[iv.step] == selected[1]]
            for iv in chosen[:1]:
                left = column[iv.step] - 0.4 + width * k
                peak_ax.add_patch(
                    Rectangle(
                        (left, 0), width, iv.peak_allocated, fill=False, edgecolor="black", lw=2, label="_selected"
                    )
                )
                kept_ax.add_patch(
                    Rectangle(
                        (left, min(0, iv.kept)),
                        width,
                        abs(iv.kept),
                        fill=False,
                        edgecolor="black",
                        lw=2,
                        label="_selected",
                    )
                )
    peak_ax.margins(y=0.12)
    byte_axis(peak_ax)
    step_axis(peak_ax, labels, ticks=16)
    if view == "categories":  # run colours beside category colours would read as categories
        peak_ax.set_xlabel("step · bars in each, left to right: " + ", ".join(label for label, _ in runs))
    _kept_panel(kept_ax, labels)
    _size_panel(size_ax, labels)
    if view == "categories" and runs:  # the greys below name the runs, on one line above the bars
        top = max((iv.kept for _, ivs in runs for iv in ivs), default=0)
        if top > 0:
            kept_ax.update_datalim([(0, top * 1.8)])
            kept_ax.autoscale_view()
        kept_ax.legend(
            fontsize=FONT, frameon=False, loc="upper left", ncol=len(runs), handlelength=1.0, columnspacing=0.8
        )
    figure_legend(fig, [peak_ax])
    return fig
