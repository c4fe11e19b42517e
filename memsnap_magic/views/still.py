"""The dashboard's still copy: its overview and table as plain HTML, a PNG and text, for a
notebook reopened without its kernel or exported; and the CSS that hides it while the live widget
shows, and turns the pictures dark in a dark theme."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

from ..results.intervals import Interval
from .headline import FINDINGS_CSS, Finding, finding_text, findings_html
from .report import interval_table

STILL = "memsnap-still"
MAX_WIDTH = "1100px"  # the figures' 11-pt text is 26 px there
# PNGs bake their colours in and the kernel cannot know the theme: in a dark theme (JupyterLab's
# attribute, VS Code's class) the pictures are inverted, hues turned back, so they are dark with
# light text instead of glaring white boxes. The selected view button takes the theme's brand colour.
_DARK = ("body[data-jp-theme-light='false']", "body.vscode-dark")
THEME_CSS = (
    ", ".join(f"{d} .memsnap-dashboard img, {d} .{STILL} img" for d in _DARK)
    + " {filter: invert(0.9) hue-rotate(180deg);} "
    + ".memsnap-dashboard .widget-toggle-button.mod-active {background: var(--jp-brand-color1, #1976d2);"
    + " color: var(--jp-ui-inverse-font-color1, #fff); font-weight: bold;}"
)
# The still copy follows the widget's output; a live dashboard (its DOM has the class below) hides it.
OVERVIEW_ALT = "memsnap overview: peak, kept and snapshot size per step"
FIT_ALT = "memsnap fit: the step's peak against the size recorded with scale=, predicted beyond, and the capacity"
_HIDE_WHILE_LIVE = f".jp-OutputArea-child:has(.memsnap-dashboard) ~ .jp-OutputArea-child .{STILL}{{display:none}}"


def still_bundle(
    overview_png: bytes,
    as_of: str,
    rows: Sequence[Interval],
    findings: Sequence[Finding],
    superseded: bool,
    alt: str = OVERVIEW_ALT,
) -> dict[str, Any]:
    """The still copy's MIME bundle: the picture as drawn ``as_of`` (the overview, or the view
    chosen, which ``alt`` names), the findings, the table of ``rows``."""
    png = base64.b64encode(overview_png).decode("ascii")
    table = interval_table(rows)
    state = "superseded by a newer dashboard" if superseded else "the live dashboard needs its kernel"
    shown = findings_html(findings)
    return {
        "text/html": (
            f"<div class='{STILL}'><style>{_HIDE_WHILE_LIVE} {THEME_CSS} {FINDINGS_CSS}</style>"
            f"<div style='font-size:smaller;opacity:0.75'>memsnap · still copy {html.escape(as_of)} · "
            f"{state}</div>{shown}"
            f"<img src='data:image/png;base64,{png}' style='width:100%;max-width:{MAX_WIDTH}' "
            f"alt='{html.escape(alt)}'>"
            # columns stay columns: monospace wherever it lands (nbconvert styles pre otherwise),
            # long paths scroll instead of wrapping mid-word
            "<pre style='font-size:smaller;font-family:monospace;white-space:pre;overflow-x:auto'>"
            f"{html.escape(table)}</pre></div>"
        ),
        "image/png": png,
        "text/plain": "\n".join([f"memsnap {as_of}", *map(finding_text, findings), table]),
    }
