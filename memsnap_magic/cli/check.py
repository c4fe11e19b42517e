"""``memsnap check BASELINE NEW``: a memory gate for CI, step by step (the comparison and its
words are ``views.gate``'s)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.clean import clean
from ..core.errors import SnapshotError
from ..results.scan import default_jobs, read_run
from ..views.gate import compare, lines, parse_tolerance, records, unmatched
from .paths import jobs, named
from .summarize import _unicode


def add(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "check",
        help="exit 1 when a step of NEW grew past BASELINE's",
        description="Compare two runs step by step (same step, rank and device): exit 0 when every "
        "step's peak and what it kept are within the tolerances of the baseline's, 1 when one is not "
        "(each such step on a line: the growth, the allocation site that grew most and what held it), "
        "2 on bad input. A tolerance is bytes (1MiB) or a share (2%: of the baseline step's peak for "
        "--peak, of its start for --kept).",
    )
    p.add_argument("baseline", help="the baseline run: a folder, a file or NAME=PATH")
    p.add_argument("new", help="the run to check, as BASELINE")
    p.add_argument("--peak", type=_tolerance, default="2%", help="how much a step's peak may grow (default: 2%%)")
    p.add_argument(
        "--kept", type=_tolerance, default="1MiB", help="how much more a step may keep at its end (default: 1MiB)"
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--jobs", "-j", type=jobs, default=None, metavar="N", help="processes reading snapshots")
    return p


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every step of NEW is within the tolerances of BASELINE's, 1 when one is not."""
    runs = []
    for given, which in ((args.baseline, "BASELINE"), (args.new, "NEW")):
        name, path = named(given)
        loaded = read_run([path], name, sys.stderr.isatty(), args.jobs or default_jobs())  # never empty
        names = sorted({iv.run for iv in loaded})
        if len(names) > 1:
            raise SnapshotError(
                f"{which} {clean(given)} holds {len(names)} runs ({', '.join(map(clean, names))}): "
                "give the folder of one run"
            )
        runs.append(loaded)
    verdict = compare(runs[0], runs[1], peak=args.peak, kept=args.kept)
    if not verdict.checks:
        raise SnapshotError(f"{clean(args.baseline)} and {clean(args.new)} share no step (same step, rank and device)")
    if args.json:
        json.dump(_unicode_all(records(verdict)), sys.stdout, indent=1, allow_nan=False)
        print()
    else:
        several = len({(c.rank, c.device) for c in verdict.checks}) > 1
        for line in unmatched(verdict):
            print(clean(line), file=sys.stderr)
        for line in lines(verdict, several):
            print(clean(line))
    return 1 if verdict.failed else 0


def _unicode_all(value: Any) -> Any:
    """``_unicode`` through lists and dicts, keys too (a prediction's sites key its bytes)."""
    if isinstance(value, dict):
        return {_unicode(k): _unicode_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unicode_all(v) for v in value]
    return _unicode(value)


def _tolerance(text: str) -> Any:
    """``--peak`` / ``--kept``: a share (``2%``) or bytes (``1MiB``)."""
    try:
        return parse_tolerance(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
