"""``memsnap``: summarise, plot and compare snapshot files outside a notebook.

    memsnap summarize outputs/profile            # every step and rank under a verl folder
    memsnap summarize a.pickle b.pickle --json   # records for scripts
    memsnap plot outputs/profile -o memory.png   # the dashboard's overview as a picture
    memsnap plot before=runs/a after=runs/b -o cmp.png   # two runs compared step by step
    memsnap diff step1/x.pickle step5/x.pickle   # what grew between two snapshots, and where
    memsnap check baseline/ new/ --peak 2%       # exit 1 when a step grew past the baseline's (CI)
    memsnap predict runs/ --at batch=64 --capacity 80GiB   # will it fit? from sizes recorded with scale=

A folder of step folders is a run, named after the folder (or after the run its files were
recorded into); NAME=PATH names it. Runs are compared, never merged.

Exit status: 0 on success (check: within the tolerances), 1 when check finds a step that grew past
them, 2 with a one-line message on bad input (unreadable or unsafe files, missing paths, bad
options), 130 when interrupted (what was read stays cached).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from ..core.clean import one_line
from ..core.errors import SnapshotError
from . import check, diff, plot, predict, summarize

COMMANDS = (summarize, plot, diff, check, predict)  # each adds its parser (``add``) and runs it (``run``)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        # one line, cleaned: argparse quotes what was typed (a file name from a glob, say)
        self.exit(2, f"memsnap: {one_line(message, 500)} (see memsnap --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memsnap",
        description=__doc__.replace("``", "").split("\n\n")[0],  # docstring markup, not for a terminal
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add(sub).set_defaults(run=command.run)
    return parser


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    """A warning as one line on stderr: ours say what happened; where in our code is noise here."""
    print(one_line(str(message)), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    for name in ("stdout", "stderr"):  # started with the stream closed (`>&-`): output goes nowhere
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (for the life of the process)
    args = build_parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # an ASCII terminal gets \xb1 for ±, not a traceback
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        status = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `memsnap summarize ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except SnapshotError as e:
        print(f"memsnap: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"memsnap: {one_line(f'{e.filename or args.command}: {e.strerror or e}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what was read stays cached; the rest is left unread
        print("memsnap: interrupted", file=sys.stderr)
        return 130
    return int(status or 0)
