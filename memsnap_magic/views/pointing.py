"""Which step's column lies under a point of a drawn figure's PNG: clicks and hovers on the
dashboard's overview (reported by ipyevents in the image's own pixels) become steps.

Pure geometry over the figure matplotlib last drew, so it holds for any width the picture is
shown at: the browser reports positions in the PNG's pixels, whatever its CSS size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .chartkit import SCALE


def position_at(fig: Any, x: float, y: float, scale: float = SCALE) -> float | None:
    """The data x under pixel ``(x, y)`` of ``fig``'s PNG drawn at ``scale`` times the figure's
    dpi, in whichever panel holds the point; None off every panel."""
    if fig is None:
        return None
    px, py = x / scale, fig.bbox.height - y / scale  # PNG rows grow downwards, display y upwards
    for ax in fig.axes:
        if ax.bbox.contains(px, py):
            return float(ax.transData.inverted().transform((px, py))[0])
    return None


def column_at(fig: Any, x: float, y: float, columns: int, scale: float = SCALE) -> int | None:
    """The column (0-based step position) under pixel ``(x, y)``, or None off every panel and
    outside ``0..columns-1``. Every panel of our figures puts column ``i`` at x = i; a point
    anywhere within half a column of it counts (a short bar is as easy to hit as a tall one)."""
    position = position_at(fig, x, y, scale)
    if position is None:
        return None
    i = round(position)
    return i if 0 <= i < columns and abs(position - i) <= 0.5 else None


def bar_in_column(position: float, bars: int, width: float = 0.8) -> int:
    """Which of ``bars`` side-by-side bars (together ``width`` wide, centred on the column)
    ``position`` falls on: the runs compared in one step's column."""
    offset = position - round(position) + width / 2
    return min(max(int(offset // (width / bars)), 0), bars - 1)


def bar_at(fig: Any, x: float, y: float, shown: Sequence[Any], compared: Sequence[tuple[str, Sequence[Any]]]) -> Any:
    """The interval whose bar (or column) is under pixel (x, y) of an overview's PNG: of ``shown``
    (one bar per step), or of ``compared`` runs (a column per step, a bar per run); None off them."""
    if not compared:
        i = column_at(fig, x, y, len(shown))
        return shown[i] if i is not None else None
    steps = sorted({iv.step for _, ivs in compared for iv in ivs})
    position = position_at(fig, x, y)
    i = column_at(fig, x, y, len(steps))
    if position is None or i is None:
        return None
    _, ivs = compared[bar_in_column(position, len(compared))]
    return next((iv for iv in ivs if iv.step == steps[i]), None)
