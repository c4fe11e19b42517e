"""``memsnap plot``: the dashboard's overview as a PNG; runs compared, ranks side by side."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path
from typing import Any

from ..core.clean import clean
from ..core.errors import SnapshotError
from ..results.scan import default_jobs
from ..results.session import busiest
from ..views.report import files_phrase
from .paths import add_paths, read_session


def add(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plot",
        help="the dashboard's overview as a PNG",
        description="The dashboard's overview as a PNG: each step's peak against what a never-cleared "
        "snapshot would show, what each step kept, and the snapshots' sizes. Several runs are "
        "compared step by step (runs of several ranks or devices by each step's rank with the "
        "highest peak); several ranks or devices of one run are drawn side by side.",
    )
    add_paths(p)
    p.add_argument("-o", "--output", required=True, help="PNG file to write (*.png)")
    p.add_argument(
        "--view",
        choices=("interval", "cumulative", "both", "categories"),
        default="both",
        help="the peaks per step, as a never-cleared snapshot would show them, both (default), "
        "or each step's peak by category",
    )
    return p


def run(args: argparse.Namespace) -> None:
    from ..views import charts  # here: matplotlib loads for a picture only, not for summarize

    _check_output(args.output)
    s = read_session(args.paths, args.jobs or default_jobs())
    runs = s.runs
    several = len({(iv.rank, iv.device) for iv in s.intervals}) > 1  # as the dashboard starts
    how = ""
    if len(runs) > 1:
        # one bar per run and step: of several ranks, the one with the highest peak
        fig = charts.runs_figure([(run.label, busiest(run.intervals)) for run in runs.values()], view=args.view)
        if any(len({(iv.rank, iv.device) for iv in run.intervals}) > 1 for run in runs.values()):
            how = "; each step of a run from its rank with the highest peak"
    elif several:
        fig = charts.ranks_figure(s.intervals)
    else:
        fig = charts.overview_figure(s.intervals, view=args.view)
    data = charts.png(fig)
    with open(args.output, "wb") as f:
        f.write(data)
    print(f"memsnap: wrote {clean(args.output)} ({files_phrase(s.intervals)}{how})")


def _check_output(path: str) -> None:
    """Refuse, before any work, an output the PNG cannot go to: another format's name, or a
    path that is not a regular file (a FIFO would block, a folder cannot be written)."""
    if Path(path).suffix.lower() != ".png":
        raise SnapshotError(f"-o {clean(path)}: the picture is a PNG; name the file *.png")
    if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise SnapshotError(f"-o {clean(path)}: not a regular file")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise SnapshotError(f"-o {clean(path)}: no folder {clean(folder)} to write it into")
