"""Row 9: the dashboard's in-place refresh after a big cell, and its first render and refresh at 1,000 steps.

(a) A session with a few intervals and a ``Dashboard`` on it; then ``session.add`` of an
interval built from a 200k-entry snapshot, which redraws the overview and the new step's detail
in place. Timed is the ``add`` alone (the interval is built beforehand, as the recorder builds it
before adding). Target <= 0.3 s; the figure is absolute seconds, and its ratio to the target.
(b) ``Dashboard(session)`` construction, first render and the display bundle with 1,000 intervals;
target <= 1 s. (b') the refresh of (a) with those 1,000 steps on screen; target <= 0.3 s.
Both are absolute: the target is a latency a person notices, not a ratio to another tool. Medians
over repeats; each repeat of (a) adds a new step, like a new cell would.
(c) What a new step costs after ``%memsnap show`` ran three times / after it ran once: the same
``session.add`` of a 2,000-entry step with three dashboards made (the first two superseded) and
with one, interleaved. Target <= 1.1x: only the newest dashboard redraws.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import TYPE_CHECKING

from common import Context, Row, interleaved, interval_from, make_snapshot, ratio_row, snapshot, timed

if TYPE_CHECKING:
    from memsnap_magic.results.session import Session

NAME = "dashboard"
STEPS = 1_000  # a long session (the scale issue's size)


def _session(n: int) -> Session:
    from memsnap_magic.results.session import Session

    small = [make_snapshot(2_000, frames=4, seed=seed, live=200) for seed in range(10)]
    bases = [interval_from(small[i], 0) for i in range(len(small))]
    s = Session()
    for step in range(1, n + 1):
        iv = bases[step % len(bases)]
        s.add(replace(iv, step=step))
    return s


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.views.dashboard import Dashboard

    entries = ctx.pick(200_000, 50_000)
    big = interval_from(snapshot(entries, frames=4), 0)
    s = _session(5)
    dash = Dashboard(s)  # also warms matplotlib (fonts) before anything is timed
    refresh = []
    for n in range(ctx.repeats):
        iv = replace(big, step=100 + n)
        refresh.append(timed(lambda iv=iv: s.add(iv)))
    dash.close()

    many = _session(STEPS)
    renders = []
    for _ in range(ctx.pick(5, 2)):
        holder: list[Dashboard] = []

        def show(holder: list[Dashboard] = holder) -> None:  # what display() asks: the view, PNG, text
            holder.append(Dashboard(many))
            holder[0]._repr_mimebundle_()

        renders.append(timed(show))
        holder[0].close()
    a, b = statistics.median(refresh), statistics.median(renders)
    shows = _after_shows(ctx)
    dash = Dashboard(many)  # a refresh with 1,000 steps on screen (stepped areas, not bars)
    big_refresh = [timed(lambda n=n: many.add(replace(big, step=10_000 + n))) for n in range(ctx.repeats)]
    dash.close()
    c = statistics.median(big_refresh)
    return [
        shows,
        Row(
            "dashboard_refresh_many_steps",
            f"dashboard refresh on add, {entries:,}-entry step, {STEPS:,} steps on screen",
            "target 0.3 s",
            c,
            "s",
            "<= 0.3 s",
            c <= 0.3,
            {"times_s": big_refresh, "entries": entries, "intervals_before": STEPS, "ratio_to_target": c / 0.3},
            note=f"{c / 0.3:.2g}x target",
        ),
        Row(
            "dashboard_refresh",
            f"dashboard refresh on add, {entries:,}-entry step",
            "target 0.3 s",
            a,
            "s",
            "<= 0.3 s",
            a <= 0.3,
            {"times_s": refresh, "entries": entries, "intervals_before": 5, "ratio_to_target": a / 0.3},
            note=f"{a / 0.3:.2g}x target",
        ),
        Row(
            "dashboard_first_render",
            f"Dashboard() + first render + display bundle, {STEPS:,} steps",
            "target 1 s",
            b,
            "s",
            "<= 1 s",
            b <= 1.0,
            {"times_s": renders, "intervals": STEPS, "ratio_to_target": b},
            note=f"{b:.2g}x target",
        ),
    ]


def _after_shows(ctx: Context) -> Row:
    from memsnap_magic.recording.process_state import STATE
    from memsnap_magic.views.dashboard import Dashboard

    step = interval_from(make_snapshot(2_000, frames=4, seed=99, live=200), 0)
    sessions, shown = {}, {}
    for name, count in (("measured", 3), ("reference", 1)):
        STATE.live_dashboard = None
        sessions[name] = _session(20)
        shown[name] = [Dashboard(sessions[name]) for _ in range(count)]  # each supersedes the one before
    counter = iter(range(1_000, 10_000))

    def add(name: str) -> None:
        sessions[name].add(replace(step, step=next(counter)))

    times = interleaved({name: (lambda name=name: add(name)) for name in sessions}, ctx.repeats)
    live = {name: sum(not d.superseded for d in dashboards) for name, dashboards in shown.items()}
    for dashboards in shown.values():
        for d in dashboards:
            d.close()
    return ratio_row(
        "cell_after_three_shows",
        "a new step after %memsnap show ran 3 times",
        "the same after it ran once (20 steps, a 2,000-entry step added)",
        times,
        1.1,
        live_dashboards=live,
    )
