"""An Agg canvas that rasterises each distinct text once and pastes its pixels afterwards.

Matplotlib (3.11) renders text glyph by glyph in Python, and a dashboard refresh redraws the
same titles, legend and tick labels every time: text was over half of the drawing time. Text is
rendered once onto a transparent scratch canvas, and every later draw composites those pixels at
the text's position, snapped to whole pixels. Math and rotated text take the normal path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

_PAD = 3  # pixels around a text's measured box, for glyphs that overhang it
_MAX_TEXTS = 512  # distinct texts kept per figure (a few MB at most); then the cache starts over


class TextCacheRenderer(RendererAgg):
    """``RendererAgg`` whose plain, unrotated text comes from a per-figure pixel cache."""

    def __init__(self, width: float, height: float, dpi: float, texts: dict[Any, Any]) -> None:
        super().__init__(width, height, dpi)
        self._texts = texts

    def draw_text(self, gc: Any, x: float, y: float, s: str, prop: Any, angle: float,
                  ismath: Any = False, mtext: Any = None) -> None:
        if ismath or angle:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        key = (s, prop, self.dpi, gc.get_rgb(), gc.get_alpha(), gc.get_forced_alpha(), gc.get_antialiased())
        hit = self._texts.get(key)
        if hit is None:
            if len(self._texts) >= _MAX_TEXTS:
                self._texts.clear()
            width, height, descent = self.get_text_width_height_descent(s, prop, ismath)
            scratch = RendererAgg(math.ceil(width) + 2 * _PAD, math.ceil(height) + 2 * _PAD, self.dpi)
            baseline = _PAD + math.ceil(height - descent)  # from the top, as draw_text counts
            RendererAgg.draw_text(scratch, gc, _PAD, baseline, s, prop, 0, False, mtext)
            pixels = np.ascontiguousarray(np.asarray(scratch.buffer_rgba())[::-1])  # draw_image: bottom row first
            hit = self._texts[key] = (pixels, baseline)
        pixels, baseline = hit
        bottom = self.height - (round(y) - baseline) - pixels.shape[0]
        self._renderer.draw_image(gc, round(x) - _PAD, bottom, pixels)


class TextCacheCanvas(FigureCanvasAgg):
    """``FigureCanvasAgg`` drawing through a ``TextCacheRenderer`` that keeps its texts across draws."""

    def __init__(self, figure: Any = None) -> None:
        super().__init__(figure)
        self._texts: dict[Any, Any] = {}
        self._renderer_key: tuple[Any, ...] | None = None

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = (width, height, self.figure.dpi)
        if key != self._renderer_key:
            self.renderer = TextCacheRenderer(width, height, self.figure.dpi, self._texts)
            self._renderer_key = key
        return self.renderer
