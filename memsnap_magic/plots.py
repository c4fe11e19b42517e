"""Matplotlib figures of a session: the per-step overview and one step's timeline.

Figures are built with the object API (``Figure`` + Agg canvas), never through pyplot, so they
are not registered globally: nothing leaks and the inline backend shows no duplicate figure.
The dashboard and the CLI both draw through here.

Each function takes an optional ``fig`` it drew before and redraws into it, so a dashboard refresh
keeps the axes, their tick objects and the canvas (see ``canvas``: repeated text is rasterised
once):
that cut a refresh from ~0.45 s to ~0.2 s here.
"""

from __future__ import annotations

import io
from typing import Any, Callable, Sequence

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import AutoLocator, FixedLocator, FuncFormatter, Locator, MaxNLocator, NullLocator
from matplotlib.transforms import Bbox

from .canvas import TextCacheCanvas
from .text import fmt_bytes

VIEWS = ("interval", "cumulative", "both")
BASE, RISE, CUMUL, KEPT, FREED, ERR = "#b8c4d6", "#3b6fb6", "#d1495b", "#e07a1f", "#8fa3bf", "#c0392b"
THIS_STEP = "this step (history cleared after each)"
NEVER_CLEARED = "never cleared (cumulative)"
_BYTES = FuncFormatter(lambda v, _: fmt_bytes(int(v)))
_DPI = 80


def _byte_step(span: float, ticks: int = 5) -> float:
    """A tick spacing of 1, 2 or 5 times a power of ten of a binary unit (KiB, MiB, ...)."""
    unit = 1.0
    while span / unit >= 1024 and unit < 1024.0 ** 4:
        unit *= 1024
    raw = span / unit / ticks
    mag = 10 ** np.floor(np.log10(raw)) if raw > 0 else 1.0
    nice = next(m for m in (1, 2, 5, 10) if m * mag >= raw)
    return float(nice * mag * unit)


class _ByteLocator(Locator):
    """Ticks at round binary steps of the final view (1, 2 or 5 × 10ⁿ KiB/MiB/GiB)."""

    def __call__(self) -> Sequence[float]:
        lo, hi = self.axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        step = _byte_step(max(vmax - vmin, 1.0))
        return np.arange(np.floor(vmin / step) * step, vmax + step / 2, step)


def _byte_axis(ax: Any, from_zero: bool = True) -> None:
    """Byte-formatted y axis with round binary ticks; ``from_zero``: the axis starts at 0 B."""
    if from_zero:
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(_ByteLocator())
    ax.yaxis.set_major_formatter(_BYTES)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _legend_above(ax: Any) -> None:
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, frameon=False)


def _figure_legend(fig: Figure, axes: Sequence[Any]) -> None:
    """One legend for all panels (each legend costs ~30 ms to draw), under the title."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.96),
                   ncol=len(handles), frameon=False)


def _figure(fig: Figure | None, kind: str, height: float,
            layout: Callable[[Figure], list[Any]]) -> tuple[Figure, list[Any]]:
    """``fig`` and its axes emptied of their data when ``kind`` drew it before, else a new figure
    with the axes ``layout`` adds."""
    if fig is not None and getattr(fig, "_memsnap_kind", None) == kind:
        for ax in fig.axes:
            for artist in (*ax.collections, *ax.lines, *ax.patches, *ax.texts):
                artist.remove()
            if ax.legend_ is not None:
                ax.legend_.remove()
            ax.dataLim.set_points(Bbox.null().get_points())  # as a new axes: no data yet
            ax.ignore_existing_data_limits = True
            ax.set_xlim(0, 1, auto=True)
            ax.set_ylim(0, 1, auto=True)
        fig.legends.clear()
        return fig, fig.axes
    fig = Figure(figsize=(9.5, height), dpi=_DPI)
    TextCacheCanvas(fig)
    fig._memsnap_kind = kind  # type: ignore[attr-defined]
    return fig, layout(fig)


# Fixed layouts: constrained layout would double the drawing time.
def _overview_axes(fig: Figure) -> list[Any]:
    grid = fig.add_gridspec(2, 2, height_ratios=[1.35, 1], left=0.085, right=0.985, top=0.86,
                            bottom=0.075, hspace=0.5, wspace=0.22)
    return [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]


def _detail_axes(fig: Figure) -> list[Any]:
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.085, right=0.985, top=0.86, bottom=0.16)
    return [ax]


def _ranks_axes(fig: Figure) -> list[Any]:
    grid = fig.add_gridspec(2, 1, height_ratios=[1.35, 1], left=0.085, right=0.985, top=0.86,
                            bottom=0.075, hspace=0.5)
    return [fig.add_subplot(grid[0]), fig.add_subplot(grid[1])]


def _title(ax: Any, text: str, **kwargs: Any) -> None:
    # an explicit y spares matplotlib re-measuring every tick label at each draw to place the title
    ax.set_title(text, fontsize=10, loc="left", y=1.0, **kwargs)


def _step_axis(ax: Any, labels: Sequence[str], ticks: int = 8) -> None:
    """Step labels at (at most ~``ticks``) integer positions: a tick object per label is slow."""
    if len(labels) <= ticks + 4:
        ax.xaxis.set_major_locator(FixedLocator(range(len(labels))))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=ticks, integer=True, min_n_ticks=1))
    ax.xaxis.set_major_formatter(FuncFormatter(
        lambda v, _: labels[int(v)] if v == int(v) and 0 <= int(v) < len(labels) else ""))
    ax.set_xlim(-0.6, max(len(labels), 1) - 0.4)
    ax.set_xlabel("step")


def _bars(ax: Any, x: Sequence[float], height: Sequence[float], bottom: Sequence[float] | float = 0,
          color: Any = RISE, label: str = "", width: float = 0.8) -> PolyCollection:
    """Vertical bars as one collection: hundreds of steps draw as fast as a few."""
    x0 = np.asarray(x, dtype=float) - width / 2
    lo = np.broadcast_to(np.asarray(bottom, dtype=float), x0.shape)
    hi = lo + np.asarray(height, dtype=float)
    verts = np.stack([np.stack([x0, lo], 1), np.stack([x0, hi], 1),
                      np.stack([x0 + width, hi], 1), np.stack([x0 + width, lo], 1)], 1)
    bars = PolyCollection(verts, facecolors=color, edgecolors="none", label=label)
    ax.add_collection(bars)
    ax.update_datalim(np.concatenate([verts.reshape(-1, 2), [[0, 0]]]))
    ax.autoscale_view()
    return bars


def overview_figure(intervals: Sequence[Any], view: str = "both", selected: int | None = None,
                    title: str = "", fig: Figure | None = None) -> Figure:
    """Peaks (interval vs cumulative), what each step kept, and snapshot sizes, one column per step."""
    fig, (peak_ax, kept_ax, size_ax) = _figure(fig, "overview", 6.4, _overview_axes)
    x = list(range(len(intervals)))
    labels = [str(iv.step) for iv in intervals]
    fig.suptitle(title or "Memory per step: snapshots cleared after each step vs never cleared",
                 fontsize=12, y=0.985)
    _title(peak_ax, "Peak allocated memory")
    show_interval, show_cumul = view in ("interval", "both"), view in ("cumulative", "both")

    base = [iv.baseline_allocated for iv in intervals]
    rise = [iv.peak_increase for iv in intervals]
    marker = "o--" if len(x) <= 60 else "--"
    if show_interval and x:
        _bars(peak_ax, x, base, color=BASE, label="live at the step's start")
        _bars(peak_ax, x, rise, bottom=base, color=RISE, label=THIS_STEP)
        if selected is not None and 0 <= selected < len(x):
            peak_ax.add_patch(Rectangle((selected - 0.4, base[selected]), 0.8, rise[selected],
                                        fill=False, edgecolor="black", linewidth=2, label="_selected"))
    if show_cumul and x:
        peak_ax.plot(x, [iv.cumulative_peak_allocated for iv in intervals], marker, color=CUMUL,
                     label=NEVER_CLEARED)
    failed = [i for i, iv in enumerate(intervals) if iv.error]
    if failed:
        peak_ax.plot(failed, [intervals[i].peak_allocated for i in failed], "x", color=ERR,
                     markersize=8, mew=2, label="_failed")
        for i in failed[-8:]:  # name the most recent failures; the x marks show them all
            peak_ax.annotate(intervals[i].error, (i, intervals[i].peak_allocated), textcoords="offset points",
                             xytext=(0, 6), ha="center", color=ERR, fontsize=8, fontweight="bold")
    peak_ax.margins(y=0.12)
    _byte_axis(peak_ax)
    _step_axis(peak_ax, labels, ticks=16)

    kept = [iv.kept for iv in intervals]
    if x:
        _bars(kept_ax, x, kept, color=[KEPT if k > 0 else FREED for k in kept], label="_kept")  # the panel title explains it
    kept_ax.axhline(0, color="black", linewidth=0.8)
    if kept and max(kept) > 0:
        worst = max(range(len(kept)), key=kept.__getitem__)
        kept_ax.annotate(f"+{fmt_bytes(kept[worst])}", (worst, kept[worst]), textcoords="offset points",
                         xytext=(0, 3), ha="center", fontsize=8, color=KEPT)
    _title(kept_ax, "What each step kept: end − start (a leak stands out)")
    kept_ax.margins(y=0.15)
    _byte_axis(kept_ax, from_zero=False)
    _step_axis(kept_ax, labels)

    if show_interval and x:
        _bars(size_ax, x, [iv.trace_entries for iv in intervals], color=RISE, label=THIS_STEP)
    if show_cumul and x:
        size_ax.plot(x, [iv.cumulative_trace_entries for iv in intervals], marker, color=CUMUL,
                     label=NEVER_CLEARED)
    _title(size_ax, "Snapshot size (trace entries)")
    size_ax.set_ylim(bottom=0)
    size_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(v):,}"))
    size_ax.grid(axis="y", alpha=0.3)
    size_ax.set_axisbelow(True)
    _step_axis(size_ax, labels)
    if intervals:
        _figure_legend(fig, [peak_ax, kept_ax, size_ax])
    if not intervals:
        peak_ax.text(0.5, 0.5, "no intervals yet: run a %%memsnap cell", transform=peak_ax.transAxes,
                     ha="center", va="center", fontsize=11, color="gray")
    return fig


def detail_figure(iv: Any, fig: Figure | None = None) -> Figure:
    """One step's allocated-memory timeline (decimated, peaks kept) with its peak marked."""
    fig, (ax,) = _figure(fig, "detail", 3.2, _detail_axes)
    where = iv.device if iv.rank == 0 else f"{iv.device}, rank {iv.rank}"
    _title(ax, f"Step {iv.step} ({where}): allocated memory over the step — start "
               f"{fmt_bytes(iv.baseline_allocated)} (dashed), peak {fmt_bytes(iv.peak_allocated)} (▼)")
    t, y = iv.time_us, iv.allocated
    if t is None or len(t) == 0:
        ax.text(0.5, 0.5, "no allocations or frees recorded in this step", transform=ax.transAxes,
                ha="center", va="center", color="gray")
        ax.xaxis.set_major_locator(NullLocator())
        ax.yaxis.set_major_locator(NullLocator())
        ax.set_xlabel("")
        return fig
    ax.xaxis.set_major_locator(AutoLocator())
    ms = (t - t[0]) / 1000.0
    ax.step(ms, y, where="post", color=RISE, linewidth=1.2, label="allocated")
    ax.axhline(iv.baseline_allocated, color="#6b7a90", linestyle="--", linewidth=1,
               label=f"start {fmt_bytes(iv.baseline_allocated)}")
    peak_at = int(y.argmax())
    ax.plot([ms[peak_at]], [y[peak_at]], "v", color=CUMUL, markersize=9,
            label=f"peak {fmt_bytes(iv.peak_allocated)}")
    ax.set_xlabel("time since the step's first event (ms)")
    ax.margins(y=0.1)
    _byte_axis(ax, from_zero=False)
    return fig


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, pil_kwargs={"compress_level": 1})  # fast; small PNGs anyway
    return buf.getvalue()


def ranks_figure(intervals: Sequence[Any], selected: int | None = None, fig: Figure | None = None) -> Figure:
    """Several ranks (or devices): per step, the largest and smallest peak and their gap."""
    by_step: dict[int, list[Any]] = {}
    for iv in intervals:
        by_step.setdefault(iv.step, []).append(iv)
    steps = sorted(by_step)
    peaks = [[iv.peak_allocated for iv in by_step[s]] for s in steps]
    hi, lo = [max(p) for p in peaks], [min(p) for p in peaks]
    gap = [h - l for h, l in zip(hi, lo)]
    x = list(range(len(steps)))
    labels = [str(s) for s in steps]
    ranks = len({(iv.rank, iv.device) for iv in intervals})
    fig, (peak_ax, gap_ax) = _figure(fig, "ranks", 6.4, _ranks_axes)
    fig.suptitle(f"Peak allocated memory per step across {ranks} ranks/devices", fontsize=12, y=0.985)
    _title(peak_ax, "Largest and smallest rank's peak", pad=18)
    if x:
        _bars(peak_ax, x, hi, color=RISE, label="largest rank's peak")
        _bars(peak_ax, x, lo, color=BASE, label="smallest rank's peak")
        dots = [(i, p) for i, ps in enumerate(peaks) for p in ps]
        peak_ax.plot([d[0] for d in dots], [d[1] for d in dots], ".", color="black", markersize=4,
                     label="each rank")
        if selected is not None and 0 <= selected < len(x):
            peak_ax.add_patch(Rectangle((selected - 0.4, 0), 0.8, hi[selected], fill=False,
                                        edgecolor="black", linewidth=2, label="_selected"))
        _legend_above(peak_ax)
    peak_ax.margins(y=0.12)
    _byte_axis(peak_ax)
    _step_axis(peak_ax, labels, ticks=16)
    _title(gap_ax, "Imbalance: largest − smallest peak")
    if x:
        _bars(gap_ax, x, gap, color=KEPT, label="imbalance")
        worst = max(x, key=gap.__getitem__)
        if gap[worst] > 0:
            gap_ax.annotate(fmt_bytes(gap[worst]), (worst, gap[worst]), textcoords="offset points",
                            xytext=(0, 3), ha="center", fontsize=8, color=KEPT)
    gap_ax.margins(y=0.15)
    _byte_axis(gap_ax)
    _step_axis(gap_ax, labels, ticks=16)
    return fig
