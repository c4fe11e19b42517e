"""``memsnap``: summarise, plot and compare snapshot files outside a notebook.

    memsnap summarize outputs/profile            # every step and rank under a verl folder
    memsnap summarize a.pickle b.pickle --json   # records for scripts
    memsnap plot outputs/profile -o memory.png   # the dashboard's overview as a picture
    memsnap plot before=runs/a after=runs/b -o cmp.png   # two runs compared step by step
    memsnap diff step1/x.pickle step5/x.pickle   # what grew between two snapshots, and where
    memsnap check baseline/ new/ --peak 2% --kept 1MiB   # exit 1 when a step grew past them

A folder of step folders is a run, named after the folder (or after the run its files were
recorded into); NAME=PATH names it. Runs are compared, never merged.

Exit status: 0 on success, 1 when check finds a step past its tolerances, 2 with a one-line
message on bad input (unreadable or unsafe files, missing paths, bad options).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import stat
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..core.clean import clean, one_line
from ..core.errors import SnapshotError
from ..results.scan import default_jobs
from ..views.headline import Group, finding_lines, findings_text, group_label, groups
from ..views.text import files_phrase, fmt_bytes, interval_table, skipped_line, step_list

_RECORD_KEYS = (
    "run",
    "step",
    "rank",
    "device",
    "tag",
    "path",
    "baseline_allocated",
    "peak_allocated",
    "peak_increase",
    "kept",
    "end_allocated",
    "trace_entries",
    "cumulative_peak_allocated",
    "cumulative_trace_entries",
    "error",
    "by_category",
    "by_category_at_peak",
    "kept_by_site",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        from ..core.clean import one_line  # argparse quotes what was typed: a file name from a glob, say

        self.exit(2, f"memsnap: {one_line(message, 500)} (see memsnap --help)\n")


def _session(paths: Sequence[str], jobs: int = 1) -> Any:
    """Every PATH's snapshots; ``NAME=PATH`` puts them in the run NAME (a path that exists as
    written is a path, even with "=" in it)."""
    from ..results.scan import batches_apart, in_step_order, read_run
    from ..results.session import Session

    # paths in a row without a name are read together, as %memsnap load reads them: files without
    # a step are numbered on across them (a.pickle b.pickle are steps 1 and 2), and two folders
    # of one run are refused; the runs come in the order given
    batches: list[tuple[str | None, list[str]]] = []
    for given in paths:
        name, path = _named(given)
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


def _named(given: str) -> tuple[str | None, str]:
    """``NAME=PATH`` → (NAME, PATH); a path that exists as written is a path, even with "=" in it."""
    from ..files.layout import TAG_PATTERN

    named = re.fullmatch(rf"({TAG_PATTERN})=(.+)", given)
    if named and not Path(given).exists():
        return named.group(1), named.group(2)
    return None, given


def _leak_sites(s: Any) -> tuple[list[Group], list[tuple[Group, Any]], dict[Group, list[str]]]:
    """The session's groups, the leak sites flagged in each (findings.leak_sites), and each
    group's headline lines (the dashboard's words)."""
    from ..results.findings import leak_sites

    found_groups = groups(s.intervals)
    found = [(key, leak) for key, ivs in found_groups.items() for leak in leak_sites(ivs, [iv.step for iv in ivs])]
    return list(found_groups), found, {key: finding_lines(ivs) for key, ivs in found_groups.items()}


def _unicode(value: Any) -> Any:
    """Text as valid Unicode for strict JSON: a file name's undecodable bytes (held as lone
    surrogates) become ``\\xff`` escapes, as a terminal shows them; other values unchanged."""
    if not isinstance(value, str) or value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        try:
            return os.fsencode(value).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a surrogate no file name decodes to
            return value.encode("utf-8", "backslashreplace").decode("utf-8")


def cmd_summarize(args: argparse.Namespace) -> None:
    s = _session(args.paths, args.jobs or default_jobs())
    keys, found, said = _leak_sites(s)
    if args.json:
        records = []
        for iv, rec in zip(s.intervals, s.to_records()):
            row = {k: _unicode(rec[k]) for k in _RECORD_KEYS}
            key = (iv.run, iv.rank, iv.device)
            row["findings"] = [_unicode(line) for line in said[key]]  # its run's headline, one line each
            # as the text says them: each site with what it kept in this step, over its steps, and in all
            row["leak_sites"] = [
                {
                    "site": _unicode(leak.site),
                    "kept": leak.kept[leak.steps.index(iv.step)],
                    "steps": list(leak.steps),
                    "kept_per_step": list(leak.kept),
                    "kept_in_all": leak.total,
                    "since_step": leak.since,
                }
                for g, leak in found
                if g == key and iv.step in leak.steps
            ]
            records.append(row)
        json.dump(records, sys.stdout, indent=1, allow_nan=False)  # strict JSON: every figure is an int
        print()
        return
    print(interval_table(s.intervals))
    if s.intervals:
        print("\n" + findings_text(s.intervals))
    if found:
        print("\nleaks: allocation sites that kept memory in leaking steps")
        rows = sorted(found, key=lambda gl: -gl[1].total)
        when = [
            step_list(leak.steps) + (f" since step {leak.since}" if leak.since is not None else "") for _, leak in rows
        ]
        width = max(16, *map(len, when))
        for (key, leak), steps in zip(rows, when):
            each = sorted(leak.kept)[len(leak.kept) // 2]
            per = "per step" if len(leak.steps) > 1 else "        "
            where = group_label(key, keys)
            print(
                f"  {fmt_bytes(each, signed=True):>12} {per}  {steps:<{width}} {clean(leak.site)}"
                + (f"  ({where})" if where else "")
            )


def cmd_plot(args: argparse.Namespace) -> None:
    from ..results.session import busiest
    from ..views.charts import overview_figure, png, ranks_figure, runs_figure

    _check_output(args.output)
    s = _session(args.paths, args.jobs or default_jobs())
    runs = s.runs
    several = len({(iv.rank, iv.device) for iv in s.intervals}) > 1  # as the dashboard starts
    how = ""
    if len(runs) > 1:
        # one bar per run and step: of several ranks, the one with the highest peak
        fig = runs_figure([(run.label, busiest(run.intervals)) for run in runs.values()], view=args.view)
        if any(len({(iv.rank, iv.device) for iv in run.intervals}) > 1 for run in runs.values()):
            how = "; each step of a run from its rank with the highest peak"
    elif several:
        fig = ranks_figure(s.intervals)
    else:
        fig = overview_figure(s.intervals, view=args.view)
    data = png(fig)
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


def cmd_diff(args: argparse.Namespace) -> None:
    from ..files.layout import Meta
    from ..files.snapshot import load_snapshot
    from ..results.alive import alive_at
    from ..results.analysis import summarize
    from ..results.intervals import UNREADABLE, unreadable
    from ..results.stacks import learn_cells, site_bytes

    for path in (args.a, args.b):
        if os.path.isdir(path):
            raise SnapshotError(
                f"diff {clean(path)}: a folder; diff compares two snapshot files (summarize reads folders)"
            )
    figures, sites, kept = [], [], []
    for path in (args.a, args.b):
        snap = load_snapshot(path)
        try:
            learn_cells(Meta.from_snapshot(snap).cells)  # cells named as the recording kernel named them
            summary = summarize(snap)
            sites.append(site_bytes(alive_at(summary, top=0)))
            last = len(summary.events[1]) - 1
            at_end = alive_at(summary, index=last, top=0) if last >= 0 else []
            kept.append(site_bytes(b for b in at_end if not b["before"]))
        except UNREADABLE as e:
            raise unreadable(path, e) from None
        figures.append(summary)
    a, b = figures
    print(f"A: {clean(args.a)}\nB: {clean(args.b)}")
    for name in ("baseline_allocated", "peak_allocated", "peak_increase", "end_allocated"):
        va, vb = getattr(a, name), getattr(b, name)
        print(f"  {name:<20} {fmt_bytes(va):>12} -> {fmt_bytes(vb):>12}  ({fmt_bytes(vb - va, signed=True)})")
    print(f"  {'trace_entries':<20} {a.trace_entries:>12,} -> {b.trace_entries:>12,}")
    for title, (before, after) in (
        ("bytes alive at the peak", sites),
        ("bytes kept (allocated in the snapshot's window, alive at its end)", kept),
    ):
        growth = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
        ranked = sorted((kv for kv in growth.items() if kv[1]), key=lambda kv: -abs(kv[1]))[: args.top]
        print(f"\nallocation sites whose {title} changed most (B - A):")
        if not ranked:
            print("  (none)")
        for site, delta in ranked:
            print(f"  {fmt_bytes(delta, signed=True):>12}  {site}")


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when every step of NEW is within the tolerances of BASELINE's, 1 when one is not."""
    from ..results.scan import read_run
    from ..views.gate import compare, lines, records, unmatched

    runs = []
    for given, which in ((args.baseline, "BASELINE"), (args.new, "NEW")):
        name, path = _named(given)
        loaded = read_run([path], name, sys.stderr.isatty(), args.jobs or default_jobs())  # never empty
        names = sorted({iv.run for iv in loaded})
        if len(names) > 1:
            raise SnapshotError(
                f"{which} {clean(given)} holds {len(names)} runs ({', '.join(map(clean, names))}): "
                "give the folder of one run"
            )
        runs.append(loaded)
    verdict = compare(*runs, peak=args.peak, kept=args.kept)
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
    """``_unicode`` through lists and dicts."""
    if isinstance(value, dict):
        return {k: _unicode_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unicode_all(v) for v in value]
    return _unicode(value)


def _tolerance(text: str) -> Any:
    """``--peak`` / ``--kept``: a share (``2%``) or bytes (``1MiB``)."""
    from ..views.gate import parse_tolerance

    try:
        return parse_tolerance(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _count(text: str) -> int:
    """``--top``: a whole number, 0 or more."""
    return _whole(text, 0)


def _jobs(text: str) -> int:
    """``--jobs``: worker processes, 1 or more."""
    return _whole(text, 1)


def _whole(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"{clean(text, 40)!r}: give a whole number of {low} or more")
    return value


def _add_paths(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="snapshot files or folders; NAME=PATH names their run")
    p.add_argument(
        "--jobs",
        "-j",
        type=_jobs,
        default=None,
        metavar="N",
        help="processes reading snapshots that have no summary yet (default: the cores; "
        "under 32 MiB in all, this process alone)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memsnap",
        description=__doc__.replace("``", "").split("\n\n")[0],  # docstring markup, not for a terminal
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser(
        "summarize",
        help="a table (or JSON) per step and rank",
        description="Baseline, peak, increase and trace entries of each snapshot. "
        "Folders are searched recursively; step and rank come from "
        "verl's step<N>/..._rank<R>_... layout.",
    )
    _add_paths(p)
    p.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    p.set_defaults(run=cmd_summarize)
    p = sub.add_parser(
        "plot",
        help="the dashboard's overview as a PNG",
        description="The dashboard's overview as a PNG: each step's peak against what a never-cleared "
        "snapshot would show, what each step kept, and the snapshots' sizes. Several runs are "
        "compared step by step (runs of several ranks or devices by each step's rank with the "
        "highest peak); several ranks or devices of one run are drawn side by side.",
    )
    _add_paths(p)
    p.add_argument("-o", "--output", required=True, help="PNG file to write (*.png)")
    p.add_argument(
        "--view",
        choices=("interval", "cumulative", "both", "categories"),
        default="both",
        help="the peaks per step, as a never-cleared snapshot would show them, both (default), "
        "or each step's peak by category",
    )
    p.set_defaults(run=cmd_plot)
    p = sub.add_parser(
        "diff",
        help="what changed between two snapshots, and where",
        description="Baseline, peak, end and entries of two snapshot files side by side, then the "
        "allocation sites whose bytes alive at the peak, and whose bytes kept at the end, changed most.",
    )
    p.add_argument("a", help="the earlier snapshot")
    p.add_argument("b", help="the later snapshot")
    p.add_argument("--top", type=_count, default=10, help="how many allocation sites to list")
    p.set_defaults(run=cmd_diff)
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
    p.add_argument("--jobs", "-j", type=_jobs, default=None, metavar="N", help="processes reading snapshots")
    p.set_defaults(run=cmd_check)
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
        status = args.run(args)  # None, or check's 1 when a step grew past its tolerance
        sys.stdout.flush()
    except BrokenPipeError:  # `memsnap summarize ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except SnapshotError as e:
        print(f"memsnap: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what was read stays cached; the rest is left unread
        print("memsnap: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"memsnap: {one_line(f'{e.filename or args.command}: {e.strerror or e}')}", file=sys.stderr)
        return 2
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
