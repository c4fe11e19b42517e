"""The drawing kit the figures share: byte axes, step axes, bar series, figures drawn again.

Figures are built with the object API (``Figure`` + Agg canvas), never through pyplot, so they
are not registered globally: nothing leaks and the inline backend shows no duplicate figure.
``reuse_figure`` hands back a figure drawn before, emptied of its data, so a dashboard refresh
keeps the axes, their tick objects and the canvas (see ``canvas``: repeated text is rasterised
once): that cut a refresh from ~0.45 s to ~0.2 s here.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any, Callable, TypeVar

import matplotlib as mpl
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, Locator, MaxNLocator
from matplotlib.transforms import Bbox

from .canvas import TextCacheCanvas
from .words import fmt_bytes

BYTES = FuncFormatter(lambda v, _: fmt_bytes(int(v)))
# Pictures follow the output's width, so what matters is text size relative to figure width.
# JupyterLab in a 1000-px window with its side bar open gives an output 568 px wide: a 6.4-inch
# figure (Jupyter's usual inline size) with 11-pt text shows it there at 13.6 px, above the
# UI font's 13 px; wider outputs only make it larger.
WIDTH = 6.4  # inches
DPI = 100  # layout pixels per inch (640 px wide at 1x)
SCALE = 2  # PNGs carry twice the pixels, so text stays sharp when the image is scaled up
FONT = 11  # points: the smallest text in any figure
TITLE_FONT = 12


def byte_step(span: float, ticks: int = 5) -> float:
    """A tick spacing of 1, 2 or 5 times a power of ten of a binary unit (KiB, MiB, ...)."""
    unit = 1.0
    while span / unit >= 1024 and unit < 1024.0**4:
        unit *= 1024
    raw = span / unit / ticks
    mag = 10 ** np.floor(np.log10(raw)) if raw > 0 else 1.0
    nice = next(m for m in (1, 2, 5, 10) if m * mag >= raw)
    return float(nice * mag * unit)


class ByteLocator(Locator):
    """Ticks at round binary steps of the final view (1, 2 or 5 × 10ⁿ KiB/MiB/GiB)."""

    def __call__(self) -> Sequence[float]:
        axis: Any = self.axis  # set by matplotlib before it asks for ticks
        lo, hi = axis.get_view_interval()
        return self.tick_values(lo, hi)

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        step = byte_step(max(vmax - vmin, 1.0))
        return np.arange(np.floor(vmin / step) * step, vmax + step / 2, step)  # type: ignore[return-value]  # an array, as matplotlib's own locators return


def byte_axis(ax: Any, from_zero: bool = True) -> None:
    """Byte-formatted y axis with round binary ticks; ``from_zero``: the axis starts at 0 B."""
    if from_zero:
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(ByteLocator())
    ax.yaxis.set_major_formatter(BYTES)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def figure_legend(fig: Figure, axes: Sequence[Any]) -> None:
    """One legend for all panels (each legend costs ~30 ms to draw), under the title."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(
            handles,
            labels,
            fontsize=FONT,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.96),
            ncol=len(handles) if len(handles) <= 3 else (len(handles) + 1) // 2,
            frameon=False,
        )


def reuse_figure(
    fig: Figure | None, kind: str, height: float, layout: Callable[[Figure], list[Any]]
) -> tuple[Figure, list[Any]]:
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
    fig = Figure(figsize=(WIDTH, height), dpi=DPI)
    TextCacheCanvas(fig)
    fig._memsnap_kind = kind  # type: ignore[attr-defined]
    axes = layout(fig)
    for ax in axes:  # kept by ticks made later, unlike a temporary rcParams setting
        ax.tick_params(labelsize=FONT)
        ax.xaxis.label.set_size(FONT)
        ax.yaxis.label.set_size(FONT)
    return fig, axes


F = TypeVar("F", bound=Callable[..., Any])


def plain_text(draw: F) -> F:
    """Build a figure with mathtext off: its text holds names from files and folders (runs,
    categories), where a ``$`` is a dollar sign, not a formula matplotlib may refuse to parse."""

    @functools.wraps(draw)
    def drawn(*args: Any, **kwargs: Any) -> Any:
        with mpl.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn  # type: ignore[return-value]


def panel_title(ax: Any, text: str, **kwargs: Any) -> None:
    # an explicit y spares matplotlib re-measuring every tick label at each draw to place the title
    ax.set_title(text, fontsize=FONT, loc="left", y=1.0, **kwargs)


def step_axis(ax: Any, labels: Sequence[str], ticks: int = 8) -> None:
    """Step labels at (at most ~``ticks``) integer positions: a tick object per label is slow."""
    if len(labels) <= ticks + 4:
        ax.xaxis.set_major_locator(FixedLocator(range(len(labels))))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=ticks, integer=True, min_n_ticks=1))
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda v, _: labels[int(v)] if v == int(v) and 0 <= int(v) < len(labels) else "")
    )
    ax.set_xlim(-0.6, max(len(labels), 1) - 0.4)
    ax.set_xlabel("step")


BAR_WIDTH = 0.8  # of a step's slot


def bars(
    ax: Any,
    x: Sequence[float],
    height: Sequence[float],
    bottom: Sequence[float] | float = 0,
    *,
    color: Any,
    label: str = "",
    width: float = BAR_WIDTH,
    edgecolor: Any = "none",
    linewidth: float | None = None,
) -> PolyCollection:
    """Vertical bars as one collection: hundreds of steps draw as fast as a few. Past ``DENSE``
    consecutive steps, bars would be thinner than the gaps between them and alias into stripes:
    they become one stepped area per colour, each step still its own flat top. ``edgecolor``
    with ``color="none"``: outlines only."""
    xs = np.asarray(x, dtype=float)
    if len(xs) > DENSE and width >= BAR_WIDTH and np.all(np.diff(xs) == 1):
        return _stepped(ax, xs, height, bottom, color=color, label=label)
    x0 = xs - width / 2
    lo = np.broadcast_to(np.asarray(bottom, dtype=float), x0.shape)
    hi = lo + np.asarray(height, dtype=float)
    verts = np.stack(
        [np.stack([x0, lo], 1), np.stack([x0, hi], 1), np.stack([x0 + width, hi], 1), np.stack([x0 + width, lo], 1)], 1
    )
    # an (N, 4, 2) array, which PolyCollection takes though its stubs list sequences only
    bars = PolyCollection(verts, facecolors=color, edgecolors=edgecolor, linewidths=linewidth, label=label)  # type: ignore[arg-type]
    ax.add_collection(bars)
    ax.update_datalim(np.concatenate([verts.reshape(-1, 2), [[0, 0]]]))
    ax.autoscale_view()
    return bars


DENSE = 150  # steps in one panel past which bars are drawn as a stepped area


def _stepped(ax: Any, x: np.ndarray, height: Sequence[float], bottom: Any, *, color: Any, label: str) -> PolyCollection:
    """``bars`` for many consecutive steps: per colour, one polygon along the steps' tops and back
    along their bottoms (a step of another colour has zero height in it)."""
    lo = np.broadcast_to(np.asarray(bottom, dtype=float), x.shape)
    hi = lo + np.asarray(height, dtype=float)
    colors = [color] * len(x) if isinstance(color, str) else list(color)
    if len(colors) != len(x):  # one colour for all, given as a list
        colors = [colors[0]] * len(x)
    edges = np.repeat(x - 0.5, 2)
    edges[1::2] += 1.0
    polygons, faces = [], []
    for c in dict.fromkeys(map(str, colors)):
        mine = np.array([str(k) == c for k in colors])
        top = np.where(mine, hi, lo)
        outline = np.concatenate(
            [np.stack([edges, np.repeat(top, 2)], 1), np.stack([edges[::-1], np.repeat(lo, 2)[::-1]], 1)]
        )
        polygons.append(outline)
        faces.append(colors[int(np.flatnonzero(mine)[0])])
    area = PolyCollection(polygons, facecolors=faces, edgecolors="none", label=label)
    ax.add_collection(area)
    ax.update_datalim(np.concatenate([*polygons, [[0, 0]]]))
    ax.autoscale_view()
    return area


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI * SCALE, pil_kwargs={"compress_level": 1})  # fast; small PNGs anyway
    return buf.getvalue()


def label_largest(
    ax: Any, values: Sequence[int], *, color: str, prefix: str = "", names: Sequence[str] | None = None
) -> None:
    """Write the largest value above its bar (one per step, at x = its position), if above zero;
    ``names``: the steps' labels, the one meant said in the text (``+64.0 MiB in step 5``), since a
    wide label reaches over its neighbours' bars, which may have kept nothing."""
    if not len(values):
        return
    worst = max(range(len(values)), key=values.__getitem__)
    if values[worst] > 0:
        # in a side third the label runs inwards from the bar's outer edge: centred, it may cross the frame
        x: float = worst
        ha = "center"
        if len(values) > 1 and worst >= (len(values) - 1) * 2 / 3:
            x, ha = worst + BAR_WIDTH / 2, "right"
        elif len(values) > 1 and worst <= (len(values) - 1) / 3:
            x, ha = worst - BAR_WIDTH / 2, "left"
        named = f"\nin step {names[worst]}" if names is not None and len(values) > 1 else ""  # narrow panels
        ax.annotate(
            prefix + fmt_bytes(values[worst]) + named,
            (x, values[worst]),
            textcoords="offset points",
            xytext=(0, 3),
            ha=ha,
            fontsize=FONT,
            color=color,
        )
        ax.update_datalim([(worst, values[worst] * (1.5 if named else 1.25))])  # room for the label inside the frame


# The figures' names and colours, shared by the overview (charts) and the step's timeline.
VIEWS = ("interval", "cumulative", "both", "categories")
# categories (see categories.ORDER); steps recorded without them are drawn whole, in grey
CATEGORY_COLORS = {
    "parameter": "#4e79a7",
    "gradient": "#f28e2c",
    "optimizer_state": "#59a14f",
    "activation": "#e15759",
    "other": "#bab0ab",
    "unknown": "#dcdcdc",
}
BASE, RISE, CUMUL, KEPT, FREED, ERR = "#b8c4d6", "#3b6fb6", "#d1495b", "#e07a1f", "#8fa3bf", "#c0392b"
THIS_STEP = "this step"
NEVER_CLEARED = "never cleared"
AT_START = "live at step start"

# one colour per run (the first is the single-run view's); the step's start in a lighter tint
RUN_COLORS = ("#3b6fb6", "#e07a1f", "#2a9d8f", "#8e5ea2", "#c0392b", "#6b7a90")
RUNS_TITLES = {
    "interval": "Runs step by step (light: live at start)",
    "cumulative": "Runs step by step, never cleared (dashed)",
    "both": "Runs step by step (light: live at start; dashed: never cleared)",
    "categories": "Runs step by step, each peak by category",
}
OUTLINE = "#444444"  # each run's bar, in the by-category view
RUN_GREYS = ("#4d4d4d", "#ffffff", "#9a9a9a", "#d9d9d9")  # runs in the by-category view's lower panels
VIEW_TITLES = {
    "interval": "Per step: each snapshot holds only its own step",
    "cumulative": "Never cleared: each snapshot would hold every earlier step",
    "both": "Per step vs never cleared: the gap is old history",
    "categories": "Per step, what was alive at the peak, by category",
}
