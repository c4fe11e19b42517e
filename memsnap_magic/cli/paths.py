"""The PATH arguments of ``summarize`` and ``plot``: files and folders, ``NAME=PATH`` runs,
``--jobs``, read into a session of their own."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core.clean import clean
from ..files.layout import TAG_PATTERN
from ..results.scan import batches_apart, in_step_order, read_run
from ..results.session import Session
from ..views.report import skipped_line


def read_session(paths: Sequence[str], jobs: int = 1) -> Session:
    """Every PATH's snapshots; ``NAME=PATH`` puts them in the run NAME (a path that exists as
    written is a path, even with "=" in it)."""
    # paths in a row without a name are read together, as %memsnap load reads them: files without
    # a step are numbered on across them (a.pickle b.pickle are steps 1 and 2), and two folders
    # of one run are refused; the runs come in the order given
    batches: list[tuple[str | None, list[str]]] = []
    for given in paths:
        name, path = named(given)
        if name is not None:
            batches.append((name, [path]))
        elif batches and batches[-1][0] is None:
            batches[-1][1].append(given)
        else:
            batches.append((None, [given]))
    files: set[tuple[int, int]] = set()  # a file given again in another batch (p=run p=run) is read once
    progress = sys.stderr.isatty()
    read = [(batch, read_run(batch, run, progress, jobs, already=files)) for run, batch in batches]
    batches_apart(read)
    loaded = [iv for _, ivs in read for iv in ivs]
    s = Session()
    skipped = [old for old in s.add_all(in_step_order(loaded)) if old is not None]
    if skipped:  # a kernel restarted and wrote the step again: said, not silently dropped
        print(skipped_line(skipped), file=sys.stderr)
    return s


def named(given: str) -> tuple[str | None, str]:
    """``NAME=PATH`` → (NAME, PATH); a path that exists as written is a path, even with "=" in it."""
    found = re.fullmatch(rf"({TAG_PATTERN})=(.+)", given)
    if found and not Path(given).exists():
        return found.group(1), found.group(2)
    return None, given


def jobs(text: str) -> int:
    """``--jobs``: worker processes, 1 or more."""
    return whole(text, 1)


def whole(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"{clean(text, 40)!r}: give a whole number of {low} or more")
    return value


def add_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="snapshot files or folders; NAME=PATH names their run")
    p.add_argument(
        "--jobs",
        "-j",
        type=jobs,
        default=None,
        metavar="N",
        help="processes reading snapshots that have no summary yet (default: the cores; "
        "under 32 MiB in all, this process alone)",
    )
