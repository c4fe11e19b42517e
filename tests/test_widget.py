"""Dashboard logic, headless: assert on the plotted data, not on pixels."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsnap_magic.results.intervals import Interval
from memsnap_magic.results.session import Session
from memsnap_magic.results.stacks import frame_lines
from memsnap_magic.views.chartkit import AT_START, NEVER_CLEARED, THIS_STEP
from memsnap_magic.views.dashboard import Dashboard
from memsnap_magic.views.explain import blocks_table

MiB = 1 << 20


def interval(step, base, peak, end, entries=100, clear=True, error=None, rank=0, device="cpu"):
    t = np.arange(4, dtype=np.int64) * 1000 + step * 10**6
    return Interval(
        step=step,
        rank=rank,
        device=device,
        path=None,
        baseline_allocated=base,
        peak_allocated=peak,
        end_allocated=end,
        trace_entries=entries,
        clear=clear,
        error=error,
        time_us=t,
        allocated=np.array([base, peak, (base + peak) // 2, end]),
        top_blocks=[
            {
                "size": peak - base,
                "addr": 1,
                "before": False,
                "frames": [
                    {"filename": "/lib/model.py", "line": 3, "name": "forward"},
                    {"filename": "/tmp/ipykernel_9/123.py", "line": 2, "name": "<module>"},
                ],
            },
            {"size": base, "addr": 2, "before": True, "frames": []},
        ],
    )


@pytest.fixture
def session():
    s = Session()
    s.add(interval(1, 10 * MiB, 30 * MiB, 10 * MiB))
    s.add(interval(2, 10 * MiB, 50 * MiB, 14 * MiB))
    s.add(interval(3, 14 * MiB, 34 * MiB, 14 * MiB, error="OutOfMemoryError"))
    return s


def bars(ax, label):
    """Heights of the bar series ``label`` (one collection per series), or [] if not drawn."""
    found = [c for c in ax.collections if c.get_label() == label]
    return [[float(np.ptp(p.vertices[:, 1])) for p in found[0].get_paths()]] if found else []


def line(ax, label):
    return [ln for ln in ax.lines if ln.get_label() == label]


def test_overview_plots_interval_and_cumulative_peaks(session):
    d = Dashboard(session)
    d.view.value = "both"
    peak_ax, kept_ax, size_ax = d.overview_fig.axes
    (base,) = bars(peak_ax, AT_START)
    (rise,) = bars(peak_ax, THIS_STEP)
    assert base == [10 * MiB, 10 * MiB, 14 * MiB]
    assert rise == [20 * MiB, 40 * MiB, 20 * MiB]
    (cumul,) = line(peak_ax, NEVER_CLEARED)
    assert list(cumul.get_ydata()) == [30 * MiB, 50 * MiB, 50 * MiB]
    assert bars(kept_ax, "_kept") == [[0, 4 * MiB, 0]]
    assert list(line(size_ax, NEVER_CLEARED)[0].get_ydata()) == [100, 200, 300]
    assert "OutOfMemoryError" in [t.get_text() for t in peak_ax.texts]
    (failed,) = line(peak_ax, "_failed")
    assert list(failed.get_xdata()) == [2]
    assert d.overview.value[:4] == b"\x89PNG" and "<b>leak:</b> step 2 kept +4.0 MiB" in d.header.value
    # the findings come right after the title, one block each, marked by their kind
    assert d.header.value.index("memsnap-finding memsnap-leak") < d.header.value.index("memsnap-finding memsnap-spike")


def test_view_control_changes_the_series_drawn(session):
    from memsnap_magic.views.chartkit import VIEW_TITLES
    from memsnap_magic.views.dashboard import CUMULATIVE_MEANS

    d = Dashboard(session)
    assert d.view.value == "interval"  # the per-step story first; never cleared one click away
    assert "never cleared" in CUMULATIVE_MEANS and "cumulative" not in d.view_help.value  # says the view shown
    captions = {}
    for view in ("cumulative", "both", "categories", "interval"):
        d.view.value = view
        captions[view] = d.view_help.value
    assert CUMULATIVE_MEANS.split(":")[0] in captions["cumulative"] and "by category" in captions["categories"]
    assert len(set(captions.values())) == 4 and captions["interval"].count("per interval") == 1
    titles = set()
    views = (("interval", (True, False)), ("cumulative", (False, True)), ("both", (True, True)))
    for view, drawn in (*views, ("categories", (False, False))):  # unlabelled steps: grey bars
        d.view.value = view
        peak_ax, kept_ax, _ = d.overview_fig.axes
        assert (bool(bars(peak_ax, THIS_STEP)), bool(line(peak_ax, NEVER_CLEARED))) == drawn
        titles.add(d.overview_fig._suptitle.get_text())
        # the selected step (the newest) stays outlined in every view
        outlined = [p for p in peak_ax.patches if p.get_label() == "_selected"] + line(peak_ax, "_selected")
        assert outlined, view
        assert [p.get_x() + 0.4 for p in kept_ax.patches if p.get_label() == "_selected"] == [2]
    assert titles == set(VIEW_TITLES.values())


def test_choosing_a_step_redraws_the_detail(session):
    d = Dashboard(session)
    assert d.step.value == 2  # newest first
    assert "Step 3 raised OutOfMemoryError" in d.error.value
    d.step.value = 1
    ax = d.detail_fig.axes[0]
    assert "Step 2" in ax.get_title(loc="left")
    assert max(line(ax, "allocated")[0].get_ydata()) == 50 * MiB
    assert d.error.value == ""
    assert "40.0 MiB" in d.blocks.value and "forward (/lib/model.py:3)" in d.blocks.value
    assert d.blocks.value.index("notebook cell") < d.blocks.value.index("/lib/model.py")
    assert "live before this step" in d.blocks.value
    outlined = [p for p in d.overview_fig.axes[0].patches if p.get_label() == "_selected"]
    assert len(outlined) == 1 and outlined[0].get_x() < 1 < outlined[0].get_x() + 0.8


def test_new_intervals_extend_the_overview_in_place(session):
    d = Dashboard(session)
    session.add(interval(4, 14 * MiB, 20 * MiB, 14 * MiB))
    assert len(d.step.options) == 4 and d.step.value == 3
    assert len(bars(d.overview_fig.axes[0], THIS_STEP)[0]) == 4
    session.add(interval(2, 1 * MiB, 2 * MiB, 1 * MiB))  # a re-run step replaces its bar
    assert len(d.step.options) == 4
    assert bars(d.overview_fig.axes[0], THIS_STEP)[0][1] == 1 * MiB


def test_several_ranks_show_max_min_and_imbalance_then_one_rank(session):
    session.add(interval(1, 0, 70 * MiB, 0, rank=1))
    session.add(interval(2, 0, 45 * MiB, 0, rank=1))
    d = Dashboard(session)
    assert d.group.layout.display == "" and d.group.value == "all"
    assert [label for label, _ in d.group.options] == ["all ranks", "rank 0 · cpu", "rank 1 · cpu"]
    peak_ax, gap_ax = d.overview_fig.axes
    assert bars(peak_ax, "largest") == [[70 * MiB, 50 * MiB, 34 * MiB]]
    assert bars(peak_ax, "smallest") == [[30 * MiB, 45 * MiB, 34 * MiB]]
    assert bars(gap_ax, "imbalance") == [[40 * MiB, 5 * MiB, 0]]
    assert [(iv.step, iv.rank) for iv in d.shown()] == [(1, 1), (2, 0), (3, 0)]  # the top rank per step
    d.step.value = 0
    assert "rank 1" in d.detail_fig.axes[0].get_title(loc="left")
    d.step.value = 1  # step 2's top rank is 0: named too, beside rank 1
    assert "(cpu, rank 0)" in d.detail_fig.axes[0].get_title(loc="left")
    d.group.value = (1, "cpu")
    assert [iv.rank for iv in d.shown()] == [1, 1] and len(d.step.options) == 2
    assert bars(d.overview_fig.axes[0], THIS_STEP) == [[70 * MiB, 45 * MiB]]


def test_single_group_hides_the_selector(session):
    assert Dashboard(session).group.layout.display == "none"


def test_displayed_bundle_has_widget_png_and_text(session):
    d = Dashboard(session)
    bundle = d._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"} <= set(bundle)
    assert "cum. peak" in bundle["text/plain"]


def test_dashboards_are_not_kept_alive_by_the_session(session):
    d = Dashboard(session)
    ref = weakref.ref(d)
    d.close()
    del d
    gc.collect()
    assert ref() is None
    session.add(interval(9, 0, 1, 0))  # a dead listener is skipped


def test_empty_session_draws_a_hint():
    d = Dashboard(Session())
    assert "no intervals yet" in next(t.get_text() for t in d.overview_fig.axes[0].texts)
    assert d.detail.value == b""


def test_frame_lines_and_reasons():
    iv = replace(
        interval(1, 0, 1, 0, device="cuda:0"),
        context="none",
        top_blocks=[{"size": 1, "addr": 1, "before": False, "frames": []}],
    )
    table = blocks_table(iv)
    assert "context=none" in table
    assert frame_lines([{"filename": "<ipython-input-3-abc>", "line": 2, "name": "f"}]) == ["f (cell In[3]:2)"]


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


# the shape of a real stack from the H200 run (tests/data/cuda_step.pickle), innermost first
SITE = "/opt/torch/.venv/lib/python3.12/site-packages"
REAL_STACK = [
    frame("_in_projection_packed", f"{SITE}/torch/nn/functional.py", 5843),
    frame("forward", f"{SITE}/torch/nn/modules/transformer.py", 954),
    frame("train_step", "<ipython-input-1-31c07619d8ec>", 13),
    frame("<module>", "<ipython-input-12-cf1dc36827bf>", 2),
    frame("run", "/work/main/memsnap_magic/execute.py", 53),
    frame("memsnap", "/work/main/memsnap_magic/magic.py", 75),
    frame("run_cell_magic", f"{SITE}/IPython/core/interactiveshell.py", 2644),
    frame("<module>", "<ipython-input-11-463fe9ae15df>", 1),  # the %%memsnap line itself
    frame("run_code", f"{SITE}/IPython/core/interactiveshell.py", 3823),
]


def test_frame_lines_drop_the_magic_and_what_runs_it():
    # cells first, then the innermost library frames, with paths from site-packages on
    assert frame_lines(REAL_STACK) == [
        "train_step (cell In[1]:13)",
        "<module> (cell In[12]:2)",
        "_in_projection_packed (torch/nn/functional.py:5843)",
        "forward (torch/nn/modules/transformer.py:954)",
    ]
    assert frame_lines(REAL_STACK, limit=50)[-1] == "forward (torch/nn/modules/transformer.py:954)"
    # a Jupyter kernel names cells by a temporary file; a script's own files keep their path
    kernel = [frame("f", "/tmp/ipykernel_4242/3196435227.py", 3), frame("main", "/home/u/memsnap_magic/train.py", 9)]
    assert frame_lines(kernel) == ["f (notebook cell 3196435227:3)", "main (/home/u/memsnap_magic/train.py:9)"]
    other = [frame("f", "/tmp/ipykernel_4242/77.py", 3)]  # another cell, its code hashed apart
    assert frame_lines(other) == ["f (notebook cell 77:3)"]


def test_the_step_a_user_picked_stays_while_new_steps_arrive(session):
    d = Dashboard(session)
    assert d.follow.value and d.step.value == 2  # follows the newest until a step is picked
    d.step.value = 0
    assert not d.follow.value
    session.add(interval(4, 14 * MiB, 20 * MiB, 14 * MiB))
    assert d.step.value == 0 and "Step 1" in d.detail_fig.axes[0].get_title(loc="left")
    d.next.click()
    assert d.step.value == 1 and not d.follow.value
    d.prev.click()
    d.prev.click()  # stops at the first step
    assert d.step.value == 0
    d.follow.value = True  # back to following: the newest now, and each one that comes
    assert d.step.value == 3
    session.add(interval(5, 14 * MiB, 20 * MiB, 14 * MiB))
    assert d.step.value == 4
    d.step.value = 4  # picking the newest keeps following
    assert d.follow.value


def test_following_the_newest_means_the_step_recorded_last_not_the_highest(session):
    d = Dashboard(session)
    session.add(interval(7, 14 * MiB, 20 * MiB, 14 * MiB))
    assert d.step.value == 3 and d.follow.value
    session.add(interval(0, 0, 3 * MiB, 1 * MiB))  # an earlier step recorded later: listed first
    assert [iv.step for iv in d.shown()] == [0, 1, 2, 3, 7]
    assert d.step.value == 0 and d.follow.value and "Step 0" in d.detail_fig.axes[0].get_title(loc="left")
    d.step.value = 2  # the user picks step 2; an earlier step arriving does not move the pick
    session.add(interval(-1, 0, 1 * MiB, 0))
    assert d.shown()[d.step.value].step == 2 and not d.follow.value
    d.step.value = 0  # picking the newest (step -1, listed first) follows again
    assert d.follow.value


def test_blocks_are_dated_by_the_steps_recorded_before_not_the_lower_steps():
    from memsnap_magic.results.session import recorded_before

    one, twelve, fifteen, other = (
        replace(interval(n, 0, MiB, 0), end_us=end) for n, end in ((1, 100), (12, 300), (15, 200), (15, 50))
    )
    other = replace(other, rank=1)
    ivs = [one, twelve, fifteen, other]  # step order, as the session keeps them
    assert recorded_before(fifteen, ivs) == [one]  # step 12 ran after 15: it made none of 15's blocks
    assert [iv.step for iv in recorded_before(twelve, ivs)] == [1, 15]  # oldest first: the latest wins
    ivs[1] = twelve = replace(twelve, end_us=None)  # a file that does not say when: step order
    assert [iv.step for iv in recorded_before(fifteen, ivs)] == [1, 12]


def test_the_newest_is_the_interval_recorded_last_among_tags_of_one_step(session):
    d = Dashboard(session)
    for tag in ("b", "a"):
        session.add(replace(interval(7, 0, MiB, 0), tag=tag))
    assert d.selected() is session.last and d.follow.value
    session.add(interval(8, 0, MiB, 0))
    d.step.value = next(n for n, iv in enumerate(d.shown()) if iv.tag == "a")
    assert not d.follow.value  # the user picked an older one


def test_showing_a_dashboard_again_leaves_one_live(session):
    old = Dashboard(session)
    new = Dashboard(session)
    assert old.superseded and not new.superseded
    note, still = old.root.children
    assert "superseded by a newer dashboard · as of step 3" in note.value
    assert still.value == old._overview_png and still.value[:4] == b"\x89PNG"
    drawn = old._overview_png
    session.add(interval(4, 14 * MiB, 20 * MiB, 14 * MiB))  # only the live one redraws
    assert old._overview_png == drawn and old.step.options != new.step.options
    assert [label for label, _ in new.step.options][-1] == "4"


def test_a_superseded_still_copy_keeps_the_words_of_its_picture(session):
    """After %memsnap reset and a new show, the old still copy said "no steps yet" beside the old
    picture and headline: its words are those of what it drew."""
    old = Dashboard(session)
    words = old._still_bundle()["text/plain"]
    new = Dashboard(session)
    session.reset()
    assert old.superseded and not new.superseded
    after = old._still_bundle()
    assert "as of step 3 (3 steps)" in after["text/plain"] and "no steps yet" not in after["text/plain"]
    assert after["text/plain"] == words and "superseded by a newer dashboard" in after["text/html"]


def test_a_live_dashboard_forgets_the_steps_a_reset_forgot_and_follows_the_next(session):
    d = Dashboard(session)
    assert len(d.step.options) == 3
    session.reset()
    assert d.step.options == () and d.step.value is None and d.run.options == ()
    assert "0 steps" in d.header.value and "no steps yet" in d._still_bundle()["text/plain"]
    assert "no intervals yet" in next(t.get_text() for t in d.overview_fig.axes[0].texts)
    d._move(1)  # the buttons, with nothing to move to
    session.add(interval(7, 1 * MiB, 3 * MiB, 1 * MiB))
    assert [label for label, _ in d.step.options] == ["7"] and d.selected().step == 7


def test_a_dashboard_redraws_once_for_a_load_not_once_per_file(session, monkeypatch):
    d = Dashboard(session)
    drawn, draw = [], d._draw_overview
    monkeypatch.setattr(d, "_draw_overview", lambda: (drawn.append(len(session.intervals)), draw()))
    replaced = session.add_all([interval(step, MiB, 2 * MiB, MiB) for step in range(2, 40)])
    assert drawn == [39] and sum(r is not None for r in replaced) == 2  # steps 2 and 3 were there
    assert len(bars(d.overview_fig.axes[0], THIS_STEP)[0]) == 39


def _png_point(fig, ax, x, y):
    """Where data point (x, y) of ``ax`` lies in the figure's PNG, in its pixels (as ipyevents'
    dataX/dataY report it for an Image widget, whatever size the page shows it at)."""
    from memsnap_magic.views.chartkit import SCALE

    px, py = ax.transData.transform((x, y))
    return px * SCALE, (fig.bbox.height - py) * SCALE


def _send(d, event, x=None, y=None):
    """Deliver a DOM event the way the browser does: through the Event widget's message handler."""
    content = {"event": event}
    if x is not None:
        content.update(dataX=round(x), dataY=round(y))
    watching = next(e for e in d._events if event in e.watched_events)
    watching._handle_mouse_msg(None, content, [])


def test_clicking_a_steps_bar_opens_it_and_hovering_shows_exact_figures(session):
    d = Dashboard(session)
    fig = d.overview_fig
    peak_ax, kept_ax, _ = fig.axes
    _send(d, "click", *_png_point(fig, peak_ax, 0, 20 * MiB))  # step 1's bar
    assert d.step.value == 0 and "Step 1" in d.detail_fig.axes[0].get_title(loc="left")
    assert d.follow.value is False  # the user picked a step: new steps leave it there
    _send(d, "click", *_png_point(fig, kept_ax, 1.3, 0))  # within step 2's column, in another panel
    assert d.step.value == 1
    _send(d, "click", *_png_point(fig, peak_ax, 1.6, MiB))  # nearer step 3: that one
    assert d.step.value == 2
    _send(d, "click", 2, 2)  # the figure's corner: off every panel, nothing changes
    assert d.step.value == 2

    _send(d, "mousemove", *_png_point(fig, peak_ax, 1, 5 * MiB))
    shown = d.readout.value
    assert "step 2" in shown and f"peak 50.0 MiB ({50 * MiB:,} B)" in shown
    assert f"start 10.0 MiB ({10 * MiB:,} B)" in shown and f"kept +4.0 MiB (+{4 * MiB:,} B)" in shown
    assert "100 entries" in shown and "200 entries" in shown  # its own, and never cleared
    _send(d, "mouseleave")
    assert "click to open the step" in d.readout.value


def test_hovering_across_ranks_names_the_largest_and_smallest(session):
    session.add(interval(1, 0, 70 * MiB, 0, rank=1))
    d = Dashboard(session)
    peak_ax = d.overview_fig.axes[0]
    _send(d, "mousemove", *_png_point(d.overview_fig, peak_ax, 0, MiB))
    assert "largest peak 70.0 MiB" in d.readout.value and "(rank 1 · cpu)" in d.readout.value
    assert f"gap 40.0 MiB ({40 * MiB:,} B)" in d.readout.value
    _send(d, "click", *_png_point(d.overview_fig, peak_ax, 2, MiB))
    assert d.step.value == 2


def test_a_superseded_dashboard_stops_listening_to_the_pointer(session):
    old = Dashboard(session)
    Dashboard(session)
    assert old.superseded and all(e.comm is None for e in old._events)


@given(st.integers(-(2**50), 2**50))
def test_bytes_read_as_a_number_under_1000_of_their_unit(n):
    from memsnap_magic.views.words import fmt_bytes

    number, unit = fmt_bytes(n).lstrip("-").split()
    assert float(number) < 1000 or unit == "TiB"
    scale = 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)
    assert abs(float(number) * scale - abs(n)) <= 0.05 * scale + 0.5  # rounded to one decimal


def test_a_byte_count_just_under_a_unit_reads_in_that_unit():
    from memsnap_magic.views.words import fmt_bytes

    assert fmt_bytes(1048568) == "1.0 MiB" and fmt_bytes(999) == "999 B" and fmt_bytes(1024) == "1.0 KiB"
    # never four digits before the point: a thousand of a unit read as a typo of the next one
    assert fmt_bytes(1023) == "1.0 KiB" and fmt_bytes(1_024_000) == "1.0 MiB" and fmt_bytes(-(1000 << 20)) == "-1.0 GiB"


def test_one_step_under_two_tags_is_told_apart(session):
    for tag in ("fwd", "bwd"):
        session.add(replace(interval(4, 0, MiB, 0), tag=tag))
    from memsnap_magic.views.report import interval_table

    rows = interval_table(session.intervals).splitlines()
    assert rows[0].split()[:4] == ["step", "rank", "device", "tag"]
    assert [r.split()[3] for r in rows[-2:]] == ["fwd", "bwd"]
    d = Dashboard(session)
    assert [label for label, _ in d.step.options][-2:] == ["4 fwd", "4 bwd"]


def test_blocks_of_one_site_reached_through_different_cells_show_only_what_they_share():
    helper = frame("t", "<ipython-input-1-aa>", 4)
    iv = replace(
        interval(3, 0, 2 * MiB, 2 * MiB),
        top_blocks=[
            {"size": MiB, "addr": 1, "before": True, "frames": [helper, frame("<module>", "<ipython-input-2-bb>", 2)]},
            {"size": MiB, "addr": 2, "before": True, "frames": [helper, frame("<module>", "<ipython-input-3-cc>", 2)]},
        ],
    )
    table = blocks_table(iv)
    assert "2 × 1.0 MiB" in table and "t (cell In[1]:4)" in table and "reached through different calls" in table
    assert "cell In[2]" not in table and "cell In[3]" not in table  # neither caller is named for both
    iv.top_blocks[1]["frames"] = iv.top_blocks[0]["frames"]
    assert "cell In[2]:2" in blocks_table(iv) and "different calls" not in blocks_table(iv)


def test_the_interval_table_lines_up_under_wide_run_names():
    import re
    from unicodedata import east_asian_width

    from memsnap_magic.views.report import interval_table

    wide, narrow = interval(1, MiB, 2 * MiB, MiB), interval(2, MiB, 3 * MiB, MiB)
    wide, narrow = replace(wide, run="日本"), replace(narrow, run="abcdefg")
    shown = [
        "".join("xx" if east_asian_width(c) == "W" else c for c in line)
        for line in interval_table([wide, narrow]).splitlines()
    ]
    assert len({re.match(r"\S+\s+", line).end() for line in shown}) == 1  # the step column starts at one place


def _one_step(step, base, values, t0=0):
    return replace(
        interval(step, base, max(base, *values), values[-1]),
        time_us=np.arange(len(values), dtype=np.int64) * 1000 + t0,
        allocated=np.array(values, dtype=np.int64),
    )


@pytest.mark.parametrize(
    "base, values",
    [(1 * MiB, [3 * MiB]), (16 * MiB, [0]), (16 * MiB, [8 * MiB, 0]), (2 * MiB, [2 * MiB, 5 * MiB, 1 * MiB])],
    ids=["one allocation", "a free at once", "frees only", "rise and fall"],
)
def test_a_steps_timeline_starts_at_its_start_and_marks_its_peak_on_the_line(base, values):
    from memsnap_magic.views import charts as plots

    iv = _one_step(4, base, values)
    ax = plots.detail_figure(iv).axes[0]
    (curve,) = line(ax, "allocated")
    x, y = (np.asarray(v, dtype=float) for v in curve.get_data())
    assert y[0] == base and y[-1] == values[-1] and x[-1] > x[0]  # a line, even of one event
    (marker,) = [ln for ln in ax.lines if ln.get_label().startswith("peak")]
    mx, my = (float(v[0]) for v in marker.get_data())
    assert my == iv.peak_allocated == max(y)
    assert mx == x[int(np.argmax(y))]  # where the line first reaches it
    one_instant = len(values) == 1
    assert (ax.get_xlabel() == "every event at one instant") == one_instant
    assert (len(ax.get_xticks()) == 0) == one_instant  # no time scale where no time passed


def test_an_empty_dashboard_hides_its_step_picture_and_counts_entries_in_whole_numbers():
    d = Dashboard(Session())
    assert d.detail.layout.display == "none"
    size_ax = d.overview_fig.axes[-1]
    d.overview_fig.canvas.draw()
    labels = [t.get_text() for t in size_ax.get_yticklabels() if t.get_text()]
    assert labels and len(set(labels)) == len(labels)  # no "0, 0, 0, 1" from fractional ticks
    assert all(float(v).is_integer() for v in size_ax.get_yticks())
    d.session.add(interval(1, MiB, 2 * MiB, MiB))
    assert d.detail.layout.display == "" and d.detail.value[:4] == b"\x89PNG"


def test_a_reset_brings_a_dashboard_back_to_following_the_newest(session):
    d = Dashboard(session)
    d.step.value = 0  # picked: it stops following
    assert not d.follow.value
    session.reset()
    assert d.follow.value
    for step in (4, 5):
        session.add(interval(step, MiB, 2 * MiB, MiB))
    assert d.selected().step == 5


def test_the_step_buttons_are_off_at_the_ends(session):
    d = Dashboard(session)
    assert (d.prev.disabled, d.next.disabled) == (False, True)  # on the newest of three
    d._move(-1)
    assert (d.prev.disabled, d.next.disabled) == (False, False)
    d._move(-1)
    assert (d.prev.disabled, d.next.disabled) == (True, False)
    session.reset()
    assert d.prev.disabled and d.next.disabled
