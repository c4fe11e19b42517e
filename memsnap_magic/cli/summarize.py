"""``memsnap summarize``: a table (or JSON records) per step and rank, and the leak sites."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..core.clean import clean
from ..results.findings import leak_sites
from ..results.scan import default_jobs
from ..views.headline import Group, finding_lines, findings_text, group_label, groups
from ..views.report import interval_table
from ..views.words import fmt_bytes, step_list
from .paths import add_paths, read_session

_RECORD_KEYS = (
    "run",
    "step",
    "rank",
    "device",
    "tag",
    "scale",
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
    "kept_by",
)


def add(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "summarize",
        help="a table (or JSON) per step and rank",
        description="Baseline, peak, increase and trace entries of each snapshot. "
        "Folders are searched recursively; step and rank come from "
        "verl's step<N>/..._rank<R>_... layout.",
    )
    add_paths(p)
    p.add_argument("--json", action="store_true", help="print JSON records instead of a table")
    return p


def _leak_sites(s: Any) -> tuple[list[Group], list[tuple[Group, Any]], dict[Group, list[str]]]:
    """The session's groups, the leak sites flagged in each (findings.leak_sites), and each
    group's headline lines (the dashboard's words)."""
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


def run(args: argparse.Namespace) -> None:
    s = read_session(args.paths, args.jobs or default_jobs())
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
