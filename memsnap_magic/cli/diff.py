"""``memsnap diff``: two snapshot files side by side, and the allocation sites that changed most."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..core.clean import clean
from ..core.errors import SnapshotError
from ..files.meta import Meta
from ..files.snapshot import load_snapshot
from ..results.alive import alive_at
from ..results.analysis import summarize
from ..results.intervals import UNREADABLE, unreadable
from ..results.stacks import learn_cells, site_bytes
from ..views.words import fmt_bytes
from .paths import whole


def add(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "diff",
        help="what changed between two snapshots, and where",
        description="Baseline, peak, end and entries of two snapshot files side by side, then the "
        "allocation sites whose bytes alive at the peak, and whose bytes kept at the end, changed most.",
    )
    p.add_argument("a", help="the earlier snapshot")
    p.add_argument("b", help="the later snapshot")
    p.add_argument("--top", type=_count, default=10, help="how many allocation sites to list")
    return p


def run(args: argparse.Namespace) -> None:
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


def _count(text: str) -> int:
    """``--top``: a whole number, 0 or more."""
    return whole(text, 0)
