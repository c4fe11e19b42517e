"""The dashboard: per-step overview, view control, and one step's detail, from stock ipywidgets.

It reads the session and never touches torch. Plots are PNGs in ``Image`` widgets, so they
update in place, survive in saved widget state, and need no custom JavaScript of ours: clicks and
hovers on the overview come from ipyevents (a small, maintained widget library) in the PNG's own
pixels, and ``pointing`` maps them to steps. Displayed, the dashboard also carries a still copy
(``still``: an ``image/png`` and a text table) for reopened notebooks and frontends without widgets.
"""

from __future__ import annotations

import base64
import html
import weakref
from typing import Any

import ipywidgets as w
from ipyevents import Event
from IPython.display import display

from ..core.names import run_label
from ..recording.process_state import STATE
from ..results.intervals import Interval
from ..results.session import Session, recorded_before
from . import charts, overview, timeline
from .dashboard_widgets import POINT_HINT, DashboardWidgets
from .explain import bar_figures, blocks_table, caveats, failure_banner, ranks_figures, usage_line
from .fit import Fit, fit_of
from .headline import Finding, findings_html
from .overview import ALL_RANKS, FIT, VIEW_MEANS, offered_views
from .overview import CUMULATIVE_MEANS as CUMULATIVE_MEANS  # importable from here, as before
from .pointing import bar_at
from .report import interval_table
from .still import FIT_ALT, OVERVIEW_ALT, still_bundle


class Dashboard(DashboardWidgets):
    """Overview of every step, a view control, and the selected step's timeline and top blocks."""

    def __init__(self, session: Session | None = None, view: str | None = None) -> None:
        self.session = session if session is not None else STATE.session
        if view is not None and view not in (value for _, value in offered_views(self.session)):
            offered = ", ".join(value for _, value in offered_views(self.session))
            fit = "" if FIT in offered_views(self.session) else " (fit: where a step was recorded with scale=)"
            raise ValueError(f"dashboard: view={view!r} is not one of {offered}{fit}")
        super().__init__()
        self.overview_fig: Any = None
        self.detail_fig: Any = None
        self._figs: dict[str, Any] = {}  # drawn into again at each refresh (see chartkit.reuse_figure)
        self._overview_png = b""
        self._drawn: tuple[str, list[Interval]] = ("no steps yet", [])  # the still copy's words and rows, as drawn
        self._updating = False
        self._shown_step: int | None = None  # the step number on show, kept when the run changes
        self.findings: list[Finding] = []  # the headline's lines; in the fit view, the fit's
        self.fit: Fit | None = None  # what the fit view shows, once drawn
        self._fit_key: Any = None  # the steps and capacity ``fit`` was found for
        self._fit_drawn = False  # whether the picture drawn last is the fit's
        self.view.observe(self._on_view, "value")
        self.capacity.observe(lambda _: self._draw_overview() if self.view.value == FIT[1] else None, "value")
        self.group.observe(lambda _: self.refresh(), "value")
        self.run.observe(lambda _: self.refresh(), "value")
        self.step.observe(self._on_step, "value")
        self.prev.on_click(lambda _: self._move(-1))
        self.next.on_click(lambda _: self._move(1))
        self.follow.observe(lambda change: self.refresh(newest=True) if change["new"] else None, "value")
        # clicks and leaving at once; moves at most every 80 ms (each is a round trip to the kernel)
        self._events = [
            Event(source=self.overview, watched_events=["click", "mouseleave"]),
            Event(source=self.overview, watched_events=["mousemove"], wait=80, throttle_or_debounce="throttle"),
        ]
        for event in self._events:
            event.on_dom_event(self._on_pointer)
        self.superseded = False
        self._still: Any = None  # the display handle of the still copy, once displayed
        self.session.subscribe(self._on_session)
        previous = STATE.live_dashboard() if STATE.live_dashboard is not None else None
        if previous is not None and previous is not self:
            previous.supersede()
        STATE.live_dashboard = weakref.ref(self)  # weakly: a dashboard nobody shows may go
        self.refresh(newest=True)
        if view is not None:
            self.view.value = view

    def _on_view(self, _: Any) -> None:
        self.capacity.layout.display = "" if self.view.value == FIT[1] else "none"
        if not self._updating:  # a refresh draws once, at its end
            self._draw_overview()

    def _offer_views(self) -> None:
        """The view buttons: the fit view too where a step was recorded with ``scale=``; the view
        chosen stays (a reset that forgot the sizes goes back to the first)."""
        offered = offered_views(self.session)
        if [tuple(o) for o in self.view.options] != offered:
            chosen = self.view.value
            self.view.options = offered  # which selects the first
            if chosen in (value for _, value in offered):
                self.view.value = chosen

    def _on_session(self, _: Session) -> None:
        """A step added, or the session reset: then the step picked is gone, and the next one
        recorded is shown (following the newest again)."""
        if not self.session.intervals and not self.follow.value:
            self.follow.value = True  # which refreshes
            return
        self.refresh(newest=self.follow.value)

    def _on_step(self, _: Any) -> None:
        if not self._updating:  # the user picked a step: stay on it as new steps arrive
            with self.follow.hold_trait_notifications():
                self.follow.value = self.step.value == self._newest(self.shown())
        self._draw_step()

    def _on_pointer(self, event: dict[str, Any]) -> None:
        """A click on a step's bar opens it; hovering shows its figures; leaving, the hint."""
        kind, x, y = event.get("event"), event.get("dataX"), event.get("dataY")
        if self.view.value == FIT[1]:  # no step bars to point at (the readout is hidden there)
            return
        iv = self._bar_at(x, y) if isinstance(x, (int, float)) and isinstance(y, (int, float)) else None
        if kind == "click" and iv is not None:
            if iv.run != self.run.value:
                self.run.value = iv.run  # a compared run's bar: open that run
            self.step.value = self.shown().index(iv)
        elif kind == "mousemove" and iv is not None:
            if self.group.value == ALL_RANKS:
                self.readout.value = ranks_figures([i for i in self._run_intervals() if i.step == iv.step])
            else:
                compared = len(self.session.runs) > 1
                self.readout.value = (
                    f"run <b>{html.escape(run_label(iv.run))}</b> · " if compared else ""
                ) + bar_figures(iv)
        elif kind in ("mousemove", "mouseleave"):
            self.readout.value = f"<small style='opacity:0.75'>{POINT_HINT}</small>"

    def _bar_at(self, x: float, y: float) -> Interval | None:
        """The interval whose bar (or column) is under pixel (x, y) of the overview's PNG."""
        return bar_at(self.overview_fig, x, y, self.shown(), self._compared())

    def _move(self, by: int) -> None:
        if self.step.value is not None:
            self.step.value = min(max(self.step.value + by, 0), len(self.step.options) - 1)

    def supersede(self) -> None:
        """Stop redrawing and leave a static copy, marked: a newer dashboard is the live one."""
        if self.superseded:
            return
        self.superseded = True
        self.session.unsubscribe(self._on_session)
        for event in self._events:
            event.close()
        steps = [iv.step for iv in self.shown()]
        note = w.HTML("<i>superseded by a newer dashboard" + (f" · as of step {steps[-1]}" if steps else "") + "</i>")
        still = w.Image(value=self._overview_png, format="png", layout=self.overview.layout)
        self._update_still()
        old = self.root.children
        self.root.children = (note, still)
        for widget in old:
            _close_all(widget)

    # which intervals are on screen
    def _run_intervals(self, run: str | None = None) -> list[Interval]:
        return overview.run_intervals(self.session, self.run.value if run is None else run)

    def groups(self) -> list[tuple[int, str]]:
        return overview.groups(self._run_intervals())

    def shown(self, run: str | None = None) -> list[Interval]:
        """The selected run's intervals of one rank; with "all ranks", per step the rank with
        the highest peak."""
        return overview.shown(self._run_intervals(run), self.group.value)

    def _compared(self) -> list[tuple[str, list[Interval]]]:
        """(label, intervals) of every run, on the shown rank, when several runs are compared."""
        return overview.compared(self.session, self.group.value)

    def selected(self) -> Interval | None:
        ivs = self.shown()
        return ivs[self.step.value] if self.step.value is not None and self.step.value < len(ivs) else None

    def _newest(self, ivs: list[Interval]) -> int | None:
        """Where in ``ivs`` the interval recorded last is (steps are in step order, and a cell may
        record an earlier step than those before it), or its step (another rank shown); None
        when it is not among them (another run)."""
        last = self.session.last
        if last is None:
            return None
        for n, iv in enumerate(ivs):
            if iv is last:
                return n
        return next((n for n, iv in enumerate(ivs) if (iv.run, iv.step) == (last.run, last.step)), None)

    def refresh(self, newest: bool = False) -> None:
        """Re-read the session: new steps extend the overview; ``newest`` selects the last step."""
        if self._updating:
            return
        self._updating = True
        try:
            self._offer_views()
            runs = list(self.session.runs)
            self.run.options = [(run_label(r), r) for r in runs]
            last = self.session.last
            if newest and last is not None and last.run in runs:
                self.run.value = last.run  # following the newest step, into its run
            elif runs and self.run.value not in runs:
                self.run.value = runs[-1]
            self.run.layout.display = "" if len(runs) > 1 else "none"
            groups = self.groups()
            keys: list[Any] = [ALL_RANKS] * (len(groups) > 1) + groups
            self.group.options = [("all ranks" if k == ALL_RANKS else f"rank {k[0]} · {k[1]}", k) for k in keys]
            if keys and self.group.value not in keys:
                self.group.value = keys[0]
            self.group.layout.display = "" if len(groups) > 1 else "none"
            ivs = self.shown()
            keep = self.step.value
            same = [n for n, iv in enumerate(ivs) if iv.step == self._shown_step]  # another run's same step
            if same and not newest:
                keep = same[0]
            tagged = len({iv.tag for iv in ivs}) > 1
            self.step.options = [
                (f"{iv.step}" + (f" {iv.tag}" if tagged else "") + (f" ({iv.error})" if iv.error else ""), n)
                for n, iv in enumerate(ivs)
            ]
            if ivs:
                if newest or keep is None or keep >= len(ivs):
                    at = self._newest(ivs)
                    self.step.value = len(ivs) - 1 if at is None else at
                else:
                    self.step.value = keep
        finally:
            self._updating = False
        self._draw_step()

    def _draw_overview(self) -> None:
        fit = self._fit() if self.view.value == FIT[1] else None
        drawn = overview.draw(
            self.session, self.run.value, self.group.value, self.view.value, self.step.value, fit, self._figs
        )
        self.overview_fig = drawn.fig
        self.view_help.value = f"<small style='opacity:0.75'>{html.escape(VIEW_MEANS[self.view.value])}</small>"
        self.findings = drawn.lines  # the headline's lines (the fit's words in its view), for the still copy too
        self._fit_drawn = fit is not None
        self.readout.layout.display = "none" if fit is not None else ""  # no bars to point at there
        self._drawn = (drawn.as_of, drawn.rows)
        self.header.value = drawn.header + findings_html(drawn.lines)
        self._overview_png = charts.png(self.overview_fig)
        self.overview.value = self._overview_png
        self._update_still()

    def _fit(self) -> Fit | None:
        """The fit of every step recorded with ``scale=``, found again only when those steps or
        the capacity changed (it reads their files)."""
        chosen = [iv for iv in self.session.intervals if iv.scale]
        capacity = self.capacity.value.strip() or None
        key = ([(iv.origin, iv.path, tuple(iv.scale.items())) for iv in chosen if iv.scale], capacity)
        if key != self._fit_key:
            self.fit, self._fit_key = fit_of(self.session.intervals, capacity), key
        return self.fit

    def _draw_step(self) -> None:
        if self._updating:
            return
        iv = self.selected()
        self._shown_step = iv.step if iv is not None else None
        at, last = self.step.value, len(self.step.options) - 1
        self.prev.disabled, self.next.disabled = at is None or at <= 0, at is None or at >= last  # at the ends
        self.detail.layout.display = "none" if iv is None else ""  # an empty image shows as broken
        if iv is None:
            self.detail_fig = None
            self.detail.value = b""
            self.error.value = ""
            self.blocks.value = ""
            self.usage.value = ""
            self._draw_overview()
            return
        self.error.value = failure_banner(iv)
        self.detail_fig = self._figs["detail"] = timeline.detail_figure(
            iv, fig=self._figs.get("detail"), name_rank=len({rank for rank, _ in self.groups()}) > 1
        )
        self.detail.value = charts.png(self.detail_fig)
        self.blocks.value = blocks_table(iv, recorded_before(iv, self._run_intervals(iv.run)))
        lines = [*caveats(iv), usage_line(iv)]
        self.usage.value = "<br>".join(f"<small>{html.escape(line)}</small>" for line in lines if line)
        self._draw_overview()  # the selected step is outlined there

    def close(self) -> None:
        """Close the widgets; the session then stops updating this dashboard."""
        self.session.unsubscribe(self._on_session)
        for event in self._events:
            event.close()
        _close_all(self.root)

    def _ipython_display_(self) -> None:
        """The live widget, and beside it a still copy (the overview and the table) kept current
        through a display id: a notebook reopened without its kernel, or exported, shows the copy
        (JupyterLab saves no widget state by default and does not fall back to a widget output's
        image). While the widget is live, CSS hides the copy."""
        display(self._widget_bundle(), raw=True)
        self._still = display(self._still_bundle(), raw=True, display_id=True)

    def _widget_bundle(self) -> dict[str, Any]:
        bundle = self.root._repr_mimebundle_()
        bundle["text/plain"] = "memsnap dashboard (live while its kernel runs; a still copy follows)"
        return bundle

    def _still_bundle(self) -> dict[str, Any]:
        as_of, rows = self._drawn
        alt = FIT_ALT if self._fit_drawn else OVERVIEW_ALT
        return still_bundle(self._overview_png, as_of, rows, self.findings, self.superseded, alt)

    def _update_still(self) -> None:
        if self._still is not None:
            self._still.update(self._still_bundle(), raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """For callers that format instead of displaying: the widget with the still copy's image."""
        bundle = self.root._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self._overview_png).decode("ascii")
        bundle["text/plain"] = interval_table(self.session.intervals)
        return bundle


def _close_all(widget: w.Widget) -> None:
    for child in getattr(widget, "children", ()):
        _close_all(child)
    widget.close()


def dashboard(session: Session | None = None, view: str | None = None) -> Dashboard:
    """The dashboard of the current session; display it (``%memsnap show`` does). ``view``: the
    view it opens on (``interval``, ``cumulative``, ``both``, ``categories``, or ``fit`` where a
    step was recorded with ``scale=``)."""
    return Dashboard(session, view)
