"""An Agg canvas that rasterises each repeated text once and pastes its pixels afterwards.

Matplotlib (3.11) renders text glyph by glyph in Python, and a dashboard refresh redraws the
same titles, legend and tick labels every time: text was over half of the drawing time. A text
seen a second time is rendered once onto a transparent scratch canvas (without clipping), and
every later draw composites those pixels at the text's position, snapped to whole pixels, with
the draw's own clipping. Texts drawn once (a one-off figure, a changing title) take the normal
path, as do math and rotated text.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import findfont

_MAX_BYTES = 16 << 20  # pixels kept per figure; past that the cache starts over
_MAX_KEYS = 4096  # texts remembered per figure, cached or only seen once
_MAX_TEXT_BYTES = 1 << 20  # a text larger than this is always drawn the normal way
_SEEN = object()  # drawn once, the normal way: cached if it comes again


class TextCache:
    """Rasterised texts of one figure, bounded in entries and bytes."""

    def __init__(self) -> None:
        self.entries: dict[Any, Any] = {}
        self.nbytes = 0

    def put(self, key: Any, value: Any, nbytes: int = 0) -> None:
        if len(self.entries) >= _MAX_KEYS or self.nbytes + nbytes > _MAX_BYTES:
            self.entries.clear()
            self.nbytes = 0
        self.entries[key] = value
        self.nbytes += nbytes


class TextCacheRenderer(RendererAgg):
    """``RendererAgg`` whose repeated plain, unrotated text comes from a per-figure pixel cache."""

    def __init__(self, width: float, height: float, dpi: float, cache: TextCache) -> None:
        super().__init__(width, height, dpi)
        self._cache = cache

    def _key(self, gc: Any, s: str, prop: Any, mtext: Any) -> tuple[Any, ...]:
        """Everything the pixels depend on, the font file as resolved now included (rcParams change)."""
        shaping = repr([getattr(mtext, name, lambda: None)() for name in ("get_fontfeatures", "get_language")])
        return (
            s,
            prop,
            findfont(prop),
            self.dpi,
            mpl.rcParams["text.hinting"],
            mpl.rcParams["text.hinting_factor"],
            gc.get_rgb(),
            gc.get_alpha(),
            gc.get_forced_alpha(),
            gc.get_antialiased(),
            shaping,
        )

    def draw_text(
        self, gc: Any, x: float, y: float, s: str, prop: Any, angle: float, ismath: Any = False, mtext: Any = None
    ) -> None:
        if ismath or angle:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        key = self._key(gc, s, prop, mtext)
        hit = self._cache.entries.get(key)
        if hit is _SEEN:  # second sight: rasterised once (None when too large to keep)
            hit = self._rasterise(gc, s, prop, mtext)
            if hit is not None:
                self._cache.put(key, hit, hit[0].nbytes)
        elif hit is None:  # first sight: remembered, drawn as usual
            self._cache.put(key, _SEEN)
        if hit is None:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        pixels, pad, baseline = hit
        bottom = self.height - (round(y) - baseline) - pixels.shape[0]
        self._renderer.draw_image(gc, round(x) - pad, bottom, pixels)

    def _rasterise(self, gc: Any, s: str, prop: Any, mtext: Any) -> tuple[np.ndarray, int, int] | None:
        """The text's pixels on a transparent canvas, bottom row first (as ``draw_image`` takes them)."""
        width, height, descent = self.get_text_width_height_descent(s, prop, False)
        pad = 2 + math.ceil(prop.get_size_in_points() * self.dpi / 72 / 2)  # italics and accents overhang
        shape = (math.ceil(height) + 2 * pad, math.ceil(width) + 2 * pad)
        if shape[0] * shape[1] * 4 > _MAX_TEXT_BYTES:
            return None
        scratch = RendererAgg(shape[1], shape[0], self.dpi)
        unclipped = scratch.new_gc()
        unclipped.copy_properties(gc)
        unclipped.set_clip_rectangle(None)  # clipped when pasted, with the draw's own gc
        unclipped.set_clip_path(None)
        baseline = pad + math.ceil(height - descent)  # from the top, as draw_text counts
        RendererAgg.draw_text(scratch, unclipped, pad, baseline, s, prop, 0, False, mtext)
        unclipped.restore()
        return np.ascontiguousarray(np.asarray(scratch.buffer_rgba())[::-1]), pad, baseline


class TextCacheCanvas(FigureCanvasAgg):
    """``FigureCanvasAgg`` drawing through a ``TextCacheRenderer`` that keeps its texts across draws."""

    def __init__(self, figure: Any = None) -> None:
        super().__init__(figure)
        self.text_cache = TextCache()
        self._renderer_key: tuple[Any, ...] | None = None

    def get_renderer(self) -> RendererAgg:
        width, height = self.get_width_height(physical=True)
        key = (width, height, self.figure.dpi)
        if key != self._renderer_key:
            self.renderer = TextCacheRenderer(width, height, self.figure.dpi, self.text_cache)
            self._renderer_key = key
        return self.renderer
