"""The dashboard's overview apart from its widgets: which intervals are on screen (a run; one
rank and device, or per step the busiest of all; every run side by side where several are
compared), the views offered and what each means, and the picture and words drawn for them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from ..core.names import run_label
from ..results.intervals import Interval
from ..results.session import Session, busiest
from . import charts
from .explain import run_comparisons
from .fit import Fit, fit_figure, fit_words, scaled_dims
from .headline import Finding, headline
from .words import count_of

ALL_RANKS = "all"
CUMULATIVE_MEANS = (
    "cumulative: what each snapshot would hold if the history were never cleared, every earlier "
    "step included (the ever-growing files memsnap avoids)"
)
VIEW_MEANS = {  # the caption under the view buttons: what the view chosen shows
    "interval": "per interval: each step's own snapshot, from a fresh history: its peak over its start, "
    "and what it kept",
    "cumulative": CUMULATIVE_MEANS,
    "both": "both: each step's own peak beside what a never-cleared snapshot would hold by then",
    "categories": "by category: each step's peak split into parameters, gradients, optimizer state, "
    "activations and other",
    "fit": "fit: every step recorded with scale= at the size it ran at, the peak predicted at other sizes "
    "(the step replayed), the capacity, and the largest size predicted to fit (all runs and ranks)",
}
RUN_FINDINGS = 4  # runs whose findings the header lists when runs are compared
VIEW_LABELS = {"per-interval": "interval", "cumulative": "cumulative", "both": "both", "by category": "categories"}
FIT = ("fit", "fit")  # offered where a step was recorded with scale=

Group = Any  # a (rank, device) pair, ALL_RANKS, or None (nothing recorded yet)


def offered_views(session: Session) -> list[tuple[str, str]]:
    """The view buttons' (label, view): the fit view too where a step was recorded with ``scale=``."""
    return list(VIEW_LABELS.items()) + [FIT] * bool(scaled_dims(session.intervals))


def run_intervals(session: Session, run: str) -> list[Interval]:
    return [iv for iv in session.intervals if iv.run == run]


def groups(ivs: list[Interval]) -> list[tuple[int, str]]:
    """The (rank, device) pairs of ``ivs``, in the order they first come."""
    seen: dict[tuple[int, str], None] = {}
    for iv in ivs:
        seen.setdefault((iv.rank, iv.device), None)
    return list(seen)


def shown(ivs: list[Interval], group: Group) -> list[Interval]:
    """A run's intervals of one rank and device; with ``ALL_RANKS``, per step the busiest."""
    if group == ALL_RANKS:
        return busiest(ivs)
    return [iv for iv in ivs if group is None or (iv.rank, iv.device) == group]


def compared(session: Session, group: Group) -> list[tuple[str, list[Interval]]]:
    """(label, intervals) of every run, on the shown rank, when several runs are compared."""
    runs = session.runs
    if len(runs) < 2 or group == ALL_RANKS:
        return []
    return [(r.label, shown(r.intervals, group)) for r in runs.values()]


@dataclass(frozen=True)
class Drawn:
    """The overview as drawn: its figure, the header's words and findings, and what the still
    copy says it shows (``as_of``) with the rows it tables."""

    fig: Any
    header: str
    lines: list[Finding]
    as_of: str
    rows: list[Interval]


def draw(
    session: Session, run: str, group: Group, view: str, selected: int | None, fit: Fit | None, figs: dict[str, Any]
) -> Drawn:
    """The overview of ``run`` on ``group`` in ``view`` with the ``selected`` step outlined;
    ``fit`` where the fit view is on. Each picture is drawn into its figure of ``figs`` again."""
    ivs = shown(run_intervals(session, run), group)
    runs = compared(session, group)
    header = f"<b>memsnap</b> · {count_of(len(ivs), 'step')}"
    lines: list[Finding] = []
    if fit is not None:  # every step recorded with scale=, of any run and rank: its words head it
        header += f" · fit over {html.escape(fit.dim)}"
        lines = [("", line) for line in fit_words(fit)]
        fig = figs["fit"] = fit_figure(fit, fig=figs.get("fit"))
    elif group == ALL_RANKS:
        here = run_intervals(session, run)
        header += f" · {len(groups(here))} ranks/devices"
        fig = figs["ranks"] = charts.ranks_figure(here, selected=selected, fig=figs.get("ranks"))
    elif runs:
        label = run_label(run)
        header += f" in run <b>{html.escape(label)}</b> · {len(runs)} runs compared"
        # every run's findings, the selected one's first: a leak in another run stays in view
        ordered = sorted(runs, key=lambda r: r[0] != label)[:RUN_FINDINGS]
        lines = [(name, line) for name, group_ivs in ordered if group_ivs for line in headline(group_ivs).splitlines()]
        lines += [("", line) for line in run_comparisons(label, runs)]
        at = ivs[selected] if selected is not None and selected < len(ivs) else None
        steps = sorted({iv.step for _, group_ivs in runs for iv in group_ivs})
        mark = None
        if at is not None:
            mark = ([name for name, _ in runs].index(label), steps.index(at.step))
        fig = figs["runs"] = charts.runs_figure(runs, view=view, selected=mark, fig=figs.get("runs"))
    else:
        lines = [("", line) for line in headline(ivs).splitlines()] if ivs else []
        fig = figs["overview"] = charts.overview_figure(ivs, view=view, selected=selected, fig=figs.get("overview"))
    # what the picture shows, in words, as drawn: a superseded copy keeps them after a reset
    as_of = f"as of step {ivs[-1].step} ({count_of(len(ivs), 'step')})" if ivs else "no steps yet"
    if runs:
        as_of += f" in run {run_label(run)}, {len(runs)} runs compared"
    return Drawn(fig, header, lines, as_of, list(session.intervals if runs else ivs))  # tabled when the copy is
