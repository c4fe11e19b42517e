"""Figures drawn again into the same figure, and the text-caching canvas they draw on."""

from __future__ import annotations

from dataclasses import replace

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from test_widget import MiB, interval

from memsnap_magic.views import canvas
from memsnap_magic.views import charts as plots


def pixels(fig: Figure) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)


def drawn(fig: Figure) -> list:
    """What each axes shows: limits, its titles, its lines' data, its bars' outlines, its texts."""
    out = []
    for ax in fig.axes:
        out.append(
            (
                np.round(ax.get_xlim(), 6).tolist(),
                np.round(ax.get_ylim(), 6).tolist(),
                ax.get_title(loc="left"),
                [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines],
                [(c.get_label(), [p.vertices.tolist() for p in c.get_paths()]) for c in ax.collections],
                [t.get_text() for t in ax.texts],
                [p.get_label() for p in ax.patches],
                [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()],
            )
        )
    legends = [
        [t.get_text() for t in lg.get_texts()] for lg in (*fig.legends, *(ax.legend_ for ax in fig.axes if ax.legend_))
    ]
    return [*out, legends]


SMALL = [interval(1, 1 * MiB, 2 * MiB, 1 * MiB), interval(2, 1 * MiB, 3 * MiB, 2 * MiB)]
BIG = [
    interval(s, 100 * MiB, (200 + s) * MiB, 100 * MiB + s, error="OutOfMemoryError" if s == 3 else None)
    for s in range(1, 8)
]


@pytest.mark.parametrize("view", plots.VIEWS)
def test_overview_drawn_again_equals_a_fresh_figure(view):
    fig = plots.overview_figure(BIG, view="both", selected=6)
    plots.png(fig)
    again = plots.overview_figure(SMALL, view=view, selected=0, fig=fig)
    assert again is fig  # the same figure, axes and canvas
    fresh = plots.overview_figure(SMALL, view=view, selected=0)
    plots.png(fresh)
    assert drawn(again) == drawn(fresh)  # nothing of the big steps is left: limits shrank too
    for fig in (again, fresh):  # the artists, drawn the stock way (the text cache is tested below)
        FigureCanvasAgg(fig)
    assert np.array_equal(pixels(again), pixels(fresh))


def test_detail_and_ranks_drawn_again_equal_fresh_figures():
    empty = replace(interval(9, 0, 0, 0), time_us=np.array([], dtype=np.int64), allocated=np.array([], dtype=np.int64))
    fig = plots.detail_figure(BIG[-1])
    for iv in (empty, SMALL[0]):  # an empty step hides the ticks; the next step has them back
        again = plots.detail_figure(iv, fig=fig)
        assert again is fig and drawn(again) == drawn(plots.detail_figure(iv))
    assert fig.axes[0].get_xticklabels() and fig.axes[0].get_yticklabels()

    ranks = [interval(1, MiB, 5 * MiB, MiB, rank=r) for r in (0, 1)]
    fig = plots.ranks_figure([*ranks, interval(2, MiB, 90 * MiB, MiB, rank=1)], selected=1)
    again = plots.ranks_figure(ranks, selected=0, fig=fig)
    assert again is fig and drawn(again) == drawn(plots.ranks_figure(ranks, selected=0))


def test_runs_by_category_stack_each_runs_peak_and_outline_it_in_the_runs_colour():
    before = [
        replace(interval(s, MiB, 3 * MiB, MiB), by_category_at_peak={"parameter": MiB, "activation": 2 * MiB})
        for s in (1, 2)
    ]
    after = [
        replace(interval(s, MiB, 2 * MiB, MiB), by_category_at_peak={"parameter": MiB, "activation": MiB})
        for s in (1, 2)
    ]
    fig = plots.runs_figure([("before", before), ("after", after)], view="categories")
    peak_ax = fig.axes[0]
    tops = {}
    for c in peak_ax.collections:
        for path in c.get_paths():
            (left, _), (_, top) = path.vertices.min(0), path.vertices.max(0)
            tops.setdefault(c.get_label().lstrip("_"), []).append((round(left, 3), top))
    assert sorted(tops["parameter"]) == [(-0.4, MiB), (0.0, MiB), (0.6, MiB), (1.0, MiB)]  # each run's own bar
    assert [t for _, t in sorted(tops["run"])] == [3 * MiB, 2 * MiB, 3 * MiB, 2 * MiB]  # each bar outlined
    legend = drawn(fig)[-1][0]
    assert legend == ["parameter", "activation"]  # the categories' colours, once; no run colour among them
    assert peak_ax.get_xlabel() == "step · bars in each, left to right: before, after"
    assert fig._suptitle.get_text() == plots.RUNS_TITLES["categories"]
    # a later run without categories (a verl file) draws grey, and the legend says what grey is
    fig = plots.runs_figure([("before", before), ("verl", [interval(1, MiB, 2 * MiB, MiB)])], view="categories")
    assert "no categories" in drawn(fig)[-1][0]


def test_a_figure_of_another_kind_is_not_reused():
    fig = plots.detail_figure(SMALL[0])
    over = plots.overview_figure(SMALL, fig=fig)
    assert over is not fig and len(over.axes) == 3 and len(fig.axes) == 1


# Font features (shaping) arrived in matplotlib 3.11; the package supports older ones.
SHAPING = {"fontfeatures": ["-liga"]} if hasattr(Text, "set_fontfeatures") else None


def text_scene(canvas_class, dpi: int = 80) -> tuple[Figure, list]:
    """Texts that differ only in what the cache must key on: colour, alpha, font, shaping, clipping."""
    fig = Figure(figsize=(6, 4), dpi=dpi)
    canvas_class(fig)
    ax = fig.add_axes([0.45, 0.1, 0.5, 0.5])
    texts = [
        fig.text(0.02, 0.92, "peak 12.5 MiB ▼ gypsy", fontsize=12, color="#d1495b"),
        fig.text(0.02, 0.82, "peak 12.5 MiB ▼ gypsy", fontsize=12, color="#3b6fb6"),
        fig.text(0.02, 0.72, "peak 12.5 MiB ▼ gypsy", fontsize=12, color="#3b6fb6", alpha=0.3),
        fig.text(0.02, 0.62, "peak 12.5 MiB ▼ gypsy", fontsize=9),
        fig.text(0.25, 0.40, "fff", fontsize=60, style="italic"),  # overhangs its box
        fig.text(0.02, 0.10, "office fifi", fontsize=14),
        fig.text(0.02, 0.20, "office fifi", fontsize=14, **(SHAPING or {"color": "#555555"})),
        ax.text(0.1, 0.5, "clipped text", fontsize=12, clip_on=True),
        ax.text(0.1, 0.2, "only ever clipped", fontsize=12, clip_on=True),
        fig.text(0.5, 0.8, "clipped text", fontsize=12),
        fig.text(0.5, 0.7, "boxed", fontsize=11, bbox={"facecolor": "yellow"}),
        fig.text(0.8, 0.8, "rotated", rotation=30),
    ]
    return fig, texts


def ink(fig: Figure, texts: list, image: np.ndarray) -> np.ndarray:
    """Per text and colour channel, the ink in its box: kept when glyphs move by a sub-pixel."""
    renderer, height = fig.canvas.get_renderer(), image.shape[0]
    out = []
    for text in texts:
        box = text.get_window_extent(renderer)
        rows = slice(max(height - int(np.ceil(box.y1)) - 2, 0), height - int(box.y0) + 2)
        cols = slice(max(int(box.x0) - 2, 0), int(np.ceil(box.x1)) + 2)
        out.append((255 - image[rows, cols]).reshape(-1, 3).sum(0))
    return np.array(out)


def assert_same_text(cached: tuple[Figure, list], stock: tuple[Figure, list], image: np.ndarray) -> None:
    expected = ink(*stock, pixels(stock[0]))
    got = ink(*cached, image)
    assert (expected > 0).any(axis=1).all()
    # pasted pixels are whole-pixel snapped: ink within 1%, colour for colour (wrong pixels: far more)
    assert np.abs(got - expected).max(axis=1).tolist() <= (0.01 * expected.max(axis=1)).tolist()


# One or two texts per figure, anchored on whole pixels (480 x 160 px): there the pasted pixels must
# be exactly matplotlib's. Pairs differ only in something the cache must key on.
WHOLE_PIXEL_CASES = {
    "plain": lambda f: f.text(0.05, 0.5, "peak 12.5 MiB", fontsize=12),
    "colour": lambda f: (f.text(0.05, 0.25, "peak", color="#d1495b"), f.text(0.05, 0.75, "peak", color="#3b6fb6")),
    "alpha": lambda f: (f.text(0.05, 0.25, "peak", alpha=0.3), f.text(0.05, 0.75, "peak")),
    "size": lambda f: (f.text(0.05, 0.25, "peak", fontsize=9), f.text(0.05, 0.75, "peak", fontsize=12)),
    "shaping": lambda f: (
        f.text(0.05, 0.75, "office fifi", fontsize=30),
        f.text(0.05, 0.25, "office fifi", fontsize=30, **(SHAPING or {})),
    ),
    "overhang": lambda f: f.text(0.3, 0.4, "fff", fontsize=60, style="italic"),
    "negative bearing": lambda f: f.text(0.3, 0.4, "jjj", fontsize=60),
    "clipped": lambda f: f.add_axes([0, 0, 1, 1]).text(0.3, 0.5, "clipped text", fontsize=12, clip_on=True),
    "clipped away": lambda f: f.add_axes([0.5, 0, 0.5, 1], frame_on=False, xticks=[], yticks=[]).text(
        -0.2, 0.5, "half clipped", clip_on=True
    ),
    "background box": lambda f: f.text(0.05, 0.5, "boxed", fontsize=12, bbox={"facecolor": "yellow", "alpha": 0.5}),
    "rotated": lambda f: f.text(0.3, 0.3, "rotated", fontsize=12, rotation=30),
}


@pytest.mark.parametrize("case", WHOLE_PIXEL_CASES)
def test_cached_text_is_matplotlibs_at_whole_pixels(case):
    if case == "shaping" and SHAPING is None:
        pytest.skip("this matplotlib has no font features (3.11 added them)")
    images = {}
    for canvas_class in (FigureCanvasAgg, canvas.TextCacheCanvas):
        fig = Figure(figsize=(6, 2), dpi=80)
        canvas_class(fig)
        WHOLE_PIXEL_CASES[case](fig)
        images[canvas_class] = [pixels(fig) for _ in range(3)]  # drawn normally, rasterised, pasted
    stock, cached = images[FigureCanvasAgg][0], images[canvas.TextCacheCanvas]
    assert (stock < 255).any()
    for image in cached:
        assert np.array_equal(image, stock)


def test_cached_text_draws_what_matplotlib_draws():
    stock = text_scene(FigureCanvasAgg)  # anchors between pixels: cached text is snapped to whole ones
    cached = text_scene(canvas.TextCacheCanvas)
    for _ in range(3):
        third = pixels(cached[0])
        assert_same_text(cached, stock, third)
    assert np.array_equal(pixels(cached[0]), third)
    assert cached[0].canvas.text_cache.nbytes > 0

    def gap(dy: int, dx: int) -> float:
        return float(np.abs(pixels(stock[0]) - np.roll(third, (dy, dx), (0, 1))).mean())

    assert gap(0, 0) < min(gap(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx)  # not shifted


def test_cached_text_follows_dpi_and_rc_changes():
    cached = text_scene(canvas.TextCacheCanvas)
    for _ in range(3):
        pixels(cached[0])
    for dpi in (160, 80):  # savefig at another dpi draws through another renderer, same cache
        cached[0].set_dpi(dpi)
        for _ in range(2):
            image = pixels(cached[0])
        assert_same_text(cached, text_scene(FigureCanvasAgg, dpi), image)
    with mpl.rc_context({"font.sans-serif": ["DejaVu Serif"]}):  # same FontProperties, another font
        image = pixels(cached[0])
        assert_same_text(cached, text_scene(FigureCanvasAgg), image)


def test_text_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(canvas, "_MAX_KEYS", 8)
    fig, texts = text_scene(canvas.TextCacheCanvas)
    for n in range(30):
        texts[3].set_text(f"step {n // 2}")  # each label twice: cached on its second draw
        pixels(fig)
        assert len(fig.canvas.text_cache.entries) <= 8
    monkeypatch.setattr(canvas, "_MAX_BYTES", 20_000)
    for _ in range(3):
        pixels(fig)
        assert fig.canvas.text_cache.nbytes <= 20_000


def _area(path) -> float:
    x, y = path.vertices[:, 0], path.vertices[:, 1]
    return abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))) / 2


def test_many_steps_draw_as_stepped_areas_holding_every_steps_height():
    """Past plotkit.DENSE steps, bars would alias into stripes: one stepped polygon per colour,
    whose area is the sum of the steps' heights (each step one unit wide)."""
    from memsnap_magic.views.chartkit import DENSE

    n = DENSE + 50
    ivs = [interval(s, 10 * MiB, (10 + s % 7) * MiB, (10 + (1 if s % 3 == 0 else -1)) * MiB) for s in range(1, n + 1)]
    fig = plots.overview_figure(ivs, view="interval")
    peak_ax, kept_ax, _ = fig.axes
    (rise,) = [c for c in peak_ax.collections if c.get_label() == plots.THIS_STEP]
    (path,) = rise.get_paths()
    assert _area(path) == pytest.approx(sum(iv.peak_increase for iv in ivs))
    kept = [c for c in kept_ax.collections if c.get_label() == "_kept"]
    areas = sorted(_area(p) for c in kept for p in c.get_paths())
    assert len(areas) == 2  # one area above zero (kept), one below (freed)
    assert areas == pytest.approx(sorted([sum(max(iv.kept, 0) for iv in ivs), sum(-min(iv.kept, 0) for iv in ivs)]))
    # a few steps keep their bars, one path each
    few = plots.overview_figure(ivs[:10], view="interval")
    assert len(next(c for c in few.axes[0].collections if c.get_label() == plots.THIS_STEP).get_paths()) == 10


@pytest.mark.parametrize("at", [0, 2, 7])  # the first, a middle and the last of 8 steps
@pytest.mark.parametrize("kept", [6 * MiB, 700 * MiB])
def test_the_largest_kept_label_sits_inside_its_panel(kept, at):
    steps = [interval(n, 18 * MiB, 30 * MiB, 18 * MiB) for n in range(1, 9)]
    steps[at] = interval(at + 1, 18 * MiB, 30 * MiB, 18 * MiB + kept)
    fig = plots.overview_figure(steps, view="both")
    plots.png(fig)
    renderer = fig.canvas.get_renderer()
    kept_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("Kept"))
    (label,) = [t for t in kept_ax.texts if t.get_text().startswith("+")]
    box, frame = label.get_window_extent(renderer), kept_ax.get_window_extent(renderer)
    assert frame.y0 <= box.y0 and box.y1 <= frame.y1 - 1, (box, frame)  # below the frame's top line
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)  # and within its sides


def test_the_largest_kept_label_names_its_step():
    # a wide label reaches over the bars beside it, which kept nothing: the text says which step it is
    steps = [interval(n, 18 * MiB, 30 * MiB, 18 * MiB) for n in range(1, 9)]
    steps[4] = interval(5, 18 * MiB, 30 * MiB, 18 * MiB + 64 * MiB)
    fig = plots.overview_figure(steps, view="interval")
    kept_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("Kept"))
    (label,) = [t for t in kept_ax.texts if t.get_text().startswith("+")]
    assert label.get_text() == "+64.0 MiB\nin step 5"


def test_runs_by_category_name_their_runs_in_greys_below():
    # run colours beside category colours read as two more categories: the lower panels use greys, named
    runs = [
        (name, [interval(n, 18 * MiB, 30 * MiB, 18 * MiB + k * MiB) for n in range(1, 4)])
        for k, name in enumerate(("before", "after"))
    ]
    fig = plots.runs_figure(runs, view="categories")
    kept_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("Kept"))
    legend = kept_ax.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["before", "after"]
    faces = {tuple(c.get_facecolor()[0][:3]) for c in kept_ax.collections}
    category = {tuple(int(v[i : i + 2], 16) / 255 for i in (1, 3, 5)) for v in plots.CATEGORY_COLORS.values()}
    assert faces and not faces & category
    assert all(len({round(v, 3) for v in face}) == 1 for face in faces)  # greys


def test_the_overview_marks_the_steps_the_headline_names():
    from test_findings import held_run

    from memsnap_magic.views.headline import headline

    # steps 3-5 keep 8 MiB each, step 7 holds 96 MiB for a while against 32 MiB typical
    ivs = held_run([(32 * MiB, 0)] * 2 + [(32 * MiB, 8 * MiB)] * 3 + [(32 * MiB, 0), (96 * MiB, 0), (32 * MiB, 0)])
    lines = headline(ivs).splitlines()
    assert lines[0].startswith("leak: steps 3–5") and lines[-1].startswith("spike: step 7")
    fig = plots.overview_figure(ivs, view="interval")
    peak_ax, kept_ax, _ = fig.axes

    def shaded(ax, label):
        spans = [p for p in ax.patches if p.get_label() in (label, "_" + label.split()[0])]
        # a Rectangle since matplotlib 3.9, a Polygon before: its vertices' x, in data units
        xs = [p.get_patch_transform().transform(p.get_path().vertices)[:, 0] for p in spans]
        return [(round(float(min(x)), 2), round(float(max(x)), 2)) for x in xs]

    assert shaded(kept_ax, "leaking steps") == [(1.52, 4.48)]  # the columns of steps 3-5 (x 2 to 4)
    assert shaded(peak_ax, "spiking steps") == [(5.52, 6.48)]  # step 7's column
    assert shaded(peak_ax, "leaking steps") == [] and shaded(kept_ax, "spiking steps") == []
    (legend,) = fig.legends
    assert {"leaking steps", "spiking steps"} <= {t.get_text() for t in legend.get_texts()}
    quiet = plots.overview_figure(held_run([(32 * MiB, 0)] * 5), view="interval")
    assert not [p for ax in quiet.axes for p in ax.patches if "ing steps" in p.get_label()]
    assert not {"leaking steps", "spiking steps"} & {t.get_text() for t in quiet.legends[0].get_texts()}
