"""One step's figure: its allocated-memory timeline, decimated with its peaks kept."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import AutoLocator, NullLocator

from .chartkit import (
    CUMUL,
    RISE,
    byte_axis,
    panel_title,
    plain_text,
    reuse_figure,
)
from .words import fmt_bytes


# Fixed layout: constrained layout would double the drawing time.
def _detail_axes(fig: Figure) -> list[Any]:
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.15, right=0.985, top=0.8, bottom=0.17)
    return [ax]


@plain_text
def detail_figure(iv: Any, fig: Figure | None = None, *, name_rank: bool = False) -> Figure:
    """One step's allocated-memory timeline (decimated, peaks kept) with its peak marked.
    ``name_rank``: the title says the rank even when it is 0 (the session holds several)."""
    fig, (ax,) = reuse_figure(fig, "detail", 3.2, _detail_axes)
    where = f"{iv.device}, rank {iv.rank}" if name_rank or iv.rank != 0 else iv.device
    panel_title(
        ax,
        f"Step {iv.step} ({where}): allocated memory over the step\n"
        f"start {fmt_bytes(iv.baseline_allocated)} (dashed) · peak {fmt_bytes(iv.peak_allocated)} (▼)",
    )
    t, y = iv.time_us, iv.allocated
    if t is None or len(t) == 0:
        ax.text(
            0.5,
            0.5,
            "no allocations or frees recorded in this step",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="gray",
        )
        ax.xaxis.set_major_locator(NullLocator())
        ax.yaxis.set_major_locator(NullLocator())
        ax.set_xlabel("")
        return fig
    ms = (t - t[0]) / 1000.0
    # from the start, before the first event, to a little past the last: a step of one event
    # draws its rise, and a step that only frees has its peak (its start) on the line
    span = float(ms[-1] - ms[0])
    ms = np.concatenate(([ms[0]], ms, [ms[-1] + (span * 0.02 if span > 0 else 0.001)]))
    y = np.concatenate(([iv.baseline_allocated], y, [y[-1]]))
    ax.step(ms, y, where="post", color=RISE, linewidth=1.2, label="allocated")
    ax.axhline(
        iv.baseline_allocated,
        color="#6b7a90",
        linestyle="--",
        linewidth=1,
        label=f"start {fmt_bytes(iv.baseline_allocated)}",
    )
    peak_at = int(y.argmax())
    ax.plot([ms[peak_at]], [y[peak_at]], "v", color=CUMUL, markersize=9, label=f"peak {fmt_bytes(iv.peak_allocated)}")
    if span > 0:
        ax.xaxis.set_major_locator(AutoLocator())
        ax.set_xlabel("time since the step's first event (ms)")
    else:  # no time to show a scale of
        ax.xaxis.set_major_locator(NullLocator())
        ax.set_xlabel("every event at one instant")
    ax.margins(y=0.1)
    byte_axis(ax, from_zero=False)
    return fig
