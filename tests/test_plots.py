"""Figures drawn again into the same figure, and the text-caching canvas they draw on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from memsnap_magic import canvas, plots
from test_widget import MiB, interval


def pixels(fig: Figure) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)


def drawn(fig: Figure) -> list:
    """What each axes shows: limits, its titles, its lines' data, its bars' outlines, its texts."""
    out = []
    for ax in fig.axes:
        out.append((np.round(ax.get_xlim(), 6).tolist(), np.round(ax.get_ylim(), 6).tolist(), ax.get_title(loc="left"),
                    [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines],
                    [(c.get_label(), [p.vertices.tolist() for p in c.get_paths()]) for c in ax.collections],
                    [t.get_text() for t in ax.texts], [p.get_label() for p in ax.patches],
                    [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]))
    legends = [[t.get_text() for t in lg.get_texts()] for lg in (*fig.legends, *(ax.legend_ for ax in fig.axes if ax.legend_))]
    return out + [legends]


SMALL = [interval(1, 1 * MiB, 2 * MiB, 1 * MiB), interval(2, 1 * MiB, 3 * MiB, 2 * MiB)]
BIG = [interval(s, 100 * MiB, (200 + s) * MiB, 100 * MiB + s, error="OutOfMemoryError" if s == 3 else None)
       for s in range(1, 8)]


@pytest.mark.parametrize("view", plots.VIEWS)
def test_overview_drawn_again_equals_a_fresh_figure(view):
    fig = plots.overview_figure(BIG, view="both", selected=6)
    plots.png(fig)
    again = plots.overview_figure(SMALL, view=view, selected=0, fig=fig)
    assert again is fig  # the same figure, axes and canvas
    fresh = plots.overview_figure(SMALL, view=view, selected=0)
    plots.png(fresh)
    assert drawn(again) == drawn(fresh)  # nothing of the big steps is left: limits shrank too
    assert np.array_equal(pixels(again), pixels(fresh))


def test_detail_and_ranks_drawn_again_equal_fresh_figures():
    empty = replace(interval(9, 0, 0, 0), time_us=np.array([], dtype=np.int64), allocated=np.array([], dtype=np.int64))
    fig = plots.detail_figure(BIG[-1])
    for iv in (empty, SMALL[0]):  # an empty step hides the ticks; the next step has them back
        again = plots.detail_figure(iv, fig=fig)
        assert again is fig and drawn(again) == drawn(plots.detail_figure(iv))
    assert fig.axes[0].get_xticklabels() and fig.axes[0].get_yticklabels()

    ranks = [interval(1, MiB, 5 * MiB, MiB, rank=r) for r in (0, 1)]
    fig = plots.ranks_figure(ranks + [interval(2, MiB, 90 * MiB, MiB, rank=1)], selected=1)
    again = plots.ranks_figure(ranks, selected=0, fig=fig)
    assert again is fig and drawn(again) == drawn(plots.ranks_figure(ranks, selected=0))


def test_a_figure_of_another_kind_is_not_reused():
    fig = plots.detail_figure(SMALL[0])
    over = plots.overview_figure(SMALL, fig=fig)
    assert over is not fig and len(over.axes) == 3 and len(fig.axes) == 1


def text_figure(canvas_class) -> Figure:
    fig = Figure(figsize=(4, 2), dpi=80)
    canvas_class(fig)
    fig.text(0.05, 0.7, "peak 12.5 MiB ▼ gypsy", fontsize=12, color="#d1495b")
    fig.text(0.05, 0.3, "step 7", fontsize=9)
    fig.text(0.6, 0.3, "rotated", rotation=30)  # drawn the normal way
    return fig


def test_cached_text_lands_where_matplotlib_draws_it():
    plain, cached = pixels(text_figure(FigureCanvasAgg)), text_figure(canvas.TextCacheCanvas)
    first = pixels(cached)
    assert np.array_equal(first, pixels(cached))  # the second draw pastes the same pixels

    def gap(dy: int, dx: int) -> float:
        return float(np.abs(plain - np.roll(first, (dy, dx), (0, 1))).mean())

    ink = float(np.abs(plain - 255).mean())  # how far a blank figure would be from the plain one
    assert gap(0, 0) < 0.15 * ink  # same glyphs, within sub-pixel placement
    assert gap(0, 0) < min(gap(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx)  # not shifted
    assert np.abs(plain - np.flipud(first)).mean() > 0.5 * ink  # and not upside down


def test_text_cache_keys_on_the_font_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(canvas, "_MAX_TEXTS", 8)
    fig = text_figure(canvas.TextCacheCanvas)
    pixels(fig)
    label = fig.texts[1]
    label.set_fontsize(20)  # another font: drawn afresh, not the cached 9-point pixels
    assert not np.array_equal(pixels(fig), pixels(text_figure(canvas.TextCacheCanvas)))
    for n in range(30):
        label.set_text(f"step {n}")
        pixels(fig)
    assert len(fig.canvas._texts) <= 8
