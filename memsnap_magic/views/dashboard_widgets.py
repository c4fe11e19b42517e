"""The dashboard's widgets and how they are laid out: the view buttons, the rank and capacity
controls, the header, the overview and its readout, the step picker, and the step's detail.
What they do is ``dashboard``'s.
"""

from __future__ import annotations

import ipywidgets as w

from .headline import FINDINGS_CSS
from .overview import VIEW_LABELS
from .still import MAX_WIDTH, THEME_CSS

POINT_HINT = "point at a step's bars for its exact figures; click to open the step"
CAPACITY_HINT = "auto, 80GiB or bytes"


class DashboardWidgets:
    """The widget tree of a dashboard; ``root`` holds it all."""

    def __init__(self) -> None:
        labels = {"description_width": "70px"}  # both controls' labels line up
        self.view = w.ToggleButtons(
            options=list(VIEW_LABELS.items()),
            value="interval",
            description="view",
            style=dict(labels, button_width="110px"),
        )
        self.view.add_class("widget-inline-hbox")  # the label beside the buttons, aligned as "step"
        # the fit view's capacity: what the largest size that fits is asked against
        self.capacity = w.Text(
            value="auto",
            description="capacity",
            placeholder=CAPACITY_HINT,
            continuous_update=False,
            layout=w.Layout(display="none", width="230px"),
            style=labels,
        )
        self.group = w.Dropdown(
            description="rank/device", layout=w.Layout(display="none"), style={"description_width": "initial"}
        )
        self.view_help = w.HTML(layout=w.Layout(margin="0 0 0 76px"))
        self.step = w.Dropdown(description="step", style=labels)
        self.run = w.Dropdown(description="run", layout=w.Layout(display="none", width="240px"), style=labels)
        small = w.Layout(width="32px")
        self.prev = w.Button(icon="chevron-left", tooltip="previous step", layout=small)
        self.next = w.Button(icon="chevron-right", tooltip="next step", layout=small)
        self.follow = w.Checkbox(value=True, description="follow newest", indent=False)
        self.header = w.HTML()
        self.header.add_class("memsnap-headline")
        self.overview = w.Image(format="png")
        self.readout = w.HTML(f"<small style='opacity:0.75'>{POINT_HINT}</small>")
        self.readout.add_class("memsnap-readout")
        self.error = w.HTML()
        self.detail = w.Image(format="png")
        self.usage = w.HTML()
        self.blocks = w.HTML()
        self.root = w.VBox(
            [
                w.HTML(f"<style>{THEME_CSS} {FINDINGS_CSS}</style>"),
                self.header,
                w.HBox([self.view, self.group, self.capacity], layout=w.Layout(flex_flow="row wrap")),
                self.view_help,
                self.overview,
                self.readout,
                # wraps in a narrow output (a side bar open) instead of scrolling sideways
                w.HBox([self.run, self.step, self.prev, self.next, self.follow], layout=w.Layout(flex_flow="row wrap")),
                self.error,
                self.detail,
                self.usage,
                self.blocks,
            ]
        )
        self.root.add_class("memsnap-dashboard")
        self.root.layout.align_items = "flex-start"
        # images follow the output's width (up to a size where the text is already large); their
        # PNGs carry 2x the pixels, so text stays sharp
        for image in (self.overview, self.detail):
            image.layout = w.Layout(width="100%", max_width=MAX_WIDTH, height="auto", margin="6px 0")
