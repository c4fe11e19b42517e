"""Which step's column lies under a point of a drawn figure's PNG: clicks and hovers on the
dashboard's overview (reported by ipyevents in the image's own pixels) become steps.

Pure geometry over the figure matplotlib last drew, so it holds for any width the picture is
shown at: the browser reports positions in the PNG's pixels, whatever its CSS size.
"""

from __future__ import annotations

from typing import Any

from .plotkit import SCALE


def column_at(fig: Any, x: float, y: float, columns: int, scale: float = SCALE) -> int | None:
    """The column (0-based step position) under pixel ``(x, y)`` of ``fig``'s PNG drawn at
    ``scale`` times the figure's dpi, or None off every panel and outside ``0..columns-1``.

    Every panel of our figures puts column ``i`` at x = i; a point anywhere within half a
    column of it, in any panel, counts (a short bar is as easy to hit as a tall one)."""
    if fig is None or columns <= 0:
        return None
    px, py = x / scale, fig.bbox.height - y / scale  # PNG rows grow downwards, display y upwards
    for ax in fig.axes:
        if not ax.bbox.contains(px, py):
            continue
        column = float(ax.transData.inverted().transform((px, py))[0])
        i = round(column)
        if 0 <= i < columns and abs(column - i) <= 0.5:
            return i
    return None
