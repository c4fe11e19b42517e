"""The dashboard's fit view (will it fit?): the recorded peaks against the size, the predicted
curve, the capacity line and the largest size that fits, asserted on the plotted data.

The steps are synthetic CPU-route snapshots whose sizes follow known polynomials (the generator of
``test_prediction``), written as files recorded with ``scale=``: the truth at any size is
``summarize`` of the step generated at that size, never what the prediction computes.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from test_plots import drawn
from test_prediction import Program, synthetic
from test_widget import session  # noqa: F401  (a fixture: steps recorded without scale=)

from memsnap_magic import summarize
from memsnap_magic.files.snapshot import dump_snapshot
from memsnap_magic.results.intervals import interval_from_snapshot
from memsnap_magic.results.session import Session
from memsnap_magic.views.dashboard import Dashboard
from memsnap_magic.views.fit import CAPACITY, FAR_OFF, LARGEST, PREDICTED, RECORDED, fit_figure, fit_of
from memsnap_magic.views.still import FIT_ALT, OVERVIEW_ALT

# two allocations alive together, one growing as batch (+ a little), one as batch²
PROGRAM = Program(((4096, 64, 0), (2048, 0, 16)), (0, 1), (("a", 0), ("a", 1), ("f", 0), ("f", 1)), ())
MiB = 1 << 20


def truth(x: int, program: Program = PROGRAM) -> int:
    return summarize(synthetic(program, x)).peak_allocated


def largest_under(capacity: int) -> int:
    """The largest batch whose generated step peaks at or under ``capacity``, by bisection on the truth."""
    lo, hi = 1, 2
    while truth(hi) <= capacity:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if truth(mid) <= capacity else (lo, mid)
    return lo


def recorded(folder: Path, sizes=(2, 4, 8), program: Program = PROGRAM, scale=None) -> Session:
    """Each size its own run (``b2``, ``b4``, ...), one file each, as ``%%memsnap run=bN scale=batch:N``."""
    s = Session()
    for x in sizes:
        snap = synthetic(program, x)
        snap["memsnap"].update(scale=scale(x) if scale else {"batch": x}, run=f"b{x}")
        path = dump_snapshot(snap, folder / f"b{x}" / "step1" / "torch_memory_rank0_pid1-abcdef.pickle")
        s.add(interval_from_snapshot(snap, path))
    return s


def series(ax, label):
    (found,) = [ln for ln in ax.lines if ln.get_label() == label]
    return list(found.get_xdata()), list(found.get_ydata())


def curve(ax):
    """The predicted curve: solid up to 8 times the largest recorded size, dashed beyond (the two
    parts share the point where they meet)."""
    near = series(ax, PREDICTED)
    far = [ln for ln in ax.lines if ln.get_label() == FAR_OFF]
    xs, ys = near
    if far:
        fx, fy = list(far[0].get_xdata()), list(far[0].get_ydata())
        assert fx[0] <= 64 <= fx[1] and xs[-1] <= 64  # 8 × batch 8: where the dashes begin
        xs, ys = xs + fx[1:] if fx[0] == xs[-1] else xs + fx, ys + fy[1:] if fx[0] == xs[-1] else ys + fy
    return xs, ys


def fit_dashboard(s: Session, capacity: str) -> Dashboard:
    d = Dashboard(s)
    d.capacity.value = capacity
    d.view.value = "fit"
    return d


def test_the_fit_view_draws_the_points_the_curve_the_capacity_and_the_largest(tmp_path):
    s = recorded(tmp_path)
    capacity = 2 * MiB
    d = fit_dashboard(s, "2MiB")
    (ax,) = d.overview_fig.axes
    assert series(ax, RECORDED) == ([2, 4, 8], [truth(2), truth(4), truth(8)])
    xs, ys = curve(ax)
    # the curve passes through every recorded step and the largest that fits, at their true peaks
    at = dict(zip(xs, ys))
    largest = largest_under(capacity)
    assert all(at[x] == truth(x) for x in (2, 4, 8, largest))
    assert ys == sorted(ys) and max(ys) > capacity  # it rises past the capacity
    assert [ln.get_ydata()[0] for ln in ax.lines if ln.get_label() == CAPACITY] == [capacity]
    assert series(ax, LARGEST) == ([largest], [truth(largest)])
    assert truth(largest) <= capacity < truth(largest + 1)
    assert f"batch {largest:,}" in [t.get_text() for t in ax.texts]
    assert f"the largest batch predicted to fit is {largest:,}" in d.header.value
    assert "fit over batch=2, 4, 8" in d.header.value and "unverified" in d.header.value
    # batch 253 is 32 times batch 8: answered, and said to be far beyond what was recorded
    assert "32× the largest recorded, batch=8: far beyond what was recorded" in d.header.value
    assert d.readout.layout.display == "none"  # no bars to point at
    still = d._still_bundle()
    assert f"alt='{html.escape(FIT_ALT)}'" in still["text/html"] and f"is {largest:,}" in still["text/plain"]
    assert base64.b64decode(still["image/png"]) == d.overview.value


def test_the_capacity_asked_for_redraws_the_line_and_the_largest(tmp_path):
    d = fit_dashboard(recorded(tmp_path), "2MiB")
    d.capacity.value = "1.5MiB"
    (ax,) = d.overview_fig.axes
    largest = largest_under(3 * MiB // 2)
    assert series(ax, LARGEST) == ([largest], [truth(largest)])
    d.capacity.value = "lots"  # a bad capacity: the curve without it, and the words say why
    (ax,) = d.overview_fig.axes
    assert series(ax, RECORDED)[0] == [2, 4, 8] and series(ax, PREDICTED)[0]
    assert not [ln for ln in ax.lines if ln.get_label() in (CAPACITY, LARGEST)]
    assert "capacity: &#x27;lots&#x27;" in d.header.value and "drawn without one" in d.header.value


def test_a_capacity_far_beyond_the_recorded_sizes_draws_logarithmic_axes(tmp_path):
    s = recorded(tmp_path)
    narrow = fit_figure(fit_of(s.intervals, truth(40)))  # batch 40 at most: five times the largest recorded
    assert narrow.axes[0].get_xscale() == narrow.axes[0].get_yscale() == "linear"
    assert series(narrow.axes[0], LARGEST)[0] == [40]
    far = fit_figure(fit_of(s.intervals, 2 * MiB)).axes[0]  # batch 253: the sizes logarithmic, the bytes not
    assert far.get_xscale() == "log" and far.get_yscale() == "linear" and "batch axis" in far.get_title(loc="left")
    wide = fit_of(s.intervals, "auto")  # the CPU: the memory available now
    assert wide.capacity_from == "the memory available now"
    (ax,) = fit_figure(wide).axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert series(ax, LARGEST)[0] == [largest_under(wide.capacity)]


def test_the_fit_view_is_offered_only_where_steps_were_recorded_with_a_scale(session, tmp_path):  # noqa: F811
    plain = Dashboard(session)
    assert "fit" not in [v for _, v in plain.view.options]
    with pytest.raises(ValueError, match=r"view='fit' is not one of .*\(fit: where a step was recorded with scale=\)"):
        Dashboard(session, view="fit")
    scaled = recorded(tmp_path)
    d = Dashboard(scaled, view="fit")
    assert [v for _, v in d.view.options][-1] == "fit" and d.view.value == "fit"
    assert d.capacity.layout.display == "" and "fit: every step recorded with scale=" in d.view_help.value
    d.view.value = "interval"  # back to the bars: the capacity box goes, the pointer's readout returns
    assert d.capacity.layout.display == "none" and d.readout.layout.display == ""
    assert f"alt='{html.escape(OVERVIEW_ALT)}'" in d._still_bundle()["text/html"]
    d.view.value = "fit"
    scaled.reset()  # the sizes forgotten: the view goes, and the first is shown
    assert "fit" not in [v for _, v in d.view.options] and d.view.value == "interval"


def test_too_few_sizes_or_a_refusal_draw_the_points_and_say_why(tmp_path):
    d = Dashboard(recorded(tmp_path / "two", sizes=(2, 4)), view="fit")
    (ax,) = d.overview_fig.axes
    assert series(ax, RECORDED) == ([2, 4], [truth(2), truth(4)])
    assert not [ln for ln in ax.lines if ln.get_label() == PREDICTED]
    assert any("record three or more to predict" in " ".join(t.get_text().split()) for t in ax.texts)
    mixed = recorded(tmp_path / "mixed", scale=lambda x: {"batch": x, "seq": 128 if x < 8 else 256})
    d = Dashboard(mixed, view="fit")
    assert "recordings differ in more than &#x27;batch&#x27;" in d.header.value
    assert len(series(d.overview_fig.axes[0], RECORDED)[0]) == 3


def test_the_fit_is_found_again_only_when_its_steps_or_the_capacity_change(tmp_path):
    s = recorded(tmp_path, sizes=(2, 4, 8))
    d = fit_dashboard(s, "2MiB")
    first = d.fit
    d.step.value = 0  # another step picked: the same fit, not read again
    assert d.fit is first
    snap = synthetic(PROGRAM, 16)
    snap["memsnap"].update(scale={"batch": 16}, run="b16")
    s.add(interval_from_snapshot(snap, dump_snapshot(snap, tmp_path / "b16" / "step1" / "x_rank0_pid1-abcdef.pickle")))
    assert d.fit is not first and d.fit.prediction.loo_error == 0.0  # four sizes: checked, exactly
    assert series(d.overview_fig.axes[0], RECORDED)[0] == [2, 4, 8, 16]


def test_the_fit_drawn_again_equals_a_fresh_figure(tmp_path):
    s = recorded(tmp_path)
    fig = fit_figure(fit_of(s.intervals, "auto"))  # logarithmic first
    again = fit_figure(fit_of(s.intervals, 2 * MiB), fig=fig)
    assert again is fig
    assert drawn(again) == drawn(fit_figure(fit_of(s.intervals, 2 * MiB)))


def test_the_magic_shows_the_fit_view_or_says_why_not(shell, tmp_path):
    with pytest.raises(UsageError, match=r"%memsnap show: view='fit' is not one of interval, cumulative"):
        shell.run_line_magic("memsnap", "show view=fit")
    with pytest.raises(UsageError, match=r"%memsnap show: not 'fit'; give view=NAME"):
        shell.run_line_magic("memsnap", "show fit")
    recorded(tmp_path / "files")
    shell.run_line_magic("memsnap", f"load {tmp_path / 'files'}")
    shell.run_line_magic("memsnap", "show view=fit")
    from memsnap_magic.recording.process_state import STATE

    d = STATE.live_dashboard()
    assert d.view.value == "fit" and series(d.overview_fig.axes[0], RECORDED)[0] == [2, 4, 8]
