"""Run every benchmark, print one table, save JSON per benchmark and a summary.

    .venv/bin/python benchmarks/run.py [--quick] [--only NAME ...] [--out-dir DIR]

Each figure is measured in this run against its reference (see each ``bench_*.py``), medians over
interleaved repeats. ``--quick`` (smaller sizes, fewer repeats, well under a minute; what
``tests/test_benchmarks.py`` runs) marks its JSON ``"quick": true``. Results go to
``benchmarks/results/<name>.json`` and ``summary.json`` unless ``--out-dir`` is given. With
``--only``, the rows of the benchmarks run replace theirs in an existing summary and the others
stay; ``runs`` says which run (commit, date) each benchmark's rows come from.
Exit status: 0 when every benchmark ran, whether or not it met its target; 1 when one crashed
(its traceback is in its JSON and on stderr).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("MPLBACKEND", "Agg")

from common import Context, Row

BENCHMARKS = (
    "summarize",
    "load",
    "scale",
    "cell",
    "cpu_events",
    "cpu_floor",
    "first_cell",
    "dump",
    "session_memory",
    "snapshot_size",
    "dashboard",
    "scan",
    "write",
    "options",
    "retention",
    "predict",
)
RESULTS = Path(__file__).resolve().parent / "results"


def code_version() -> dict[str, Any]:
    """The commit measured, and whether the package had uncommitted changes."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=RESULTS.parent.parent, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    return {
        "git_commit": git("rev-parse", "HEAD") or None,
        "package_modified": bool(git("status", "--porcelain", "--", "memsnap_magic")),
    }


def machine() -> dict[str, Any]:
    import numpy
    import torch

    return {
        **code_version(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def run_one(name: str, ctx: Context) -> dict[str, Any]:
    cwd = os.getcwd()
    t0 = time.perf_counter()
    try:
        module = importlib.import_module(f"bench_{name}")
        rows: list[Row] = module.run(ctx)
        error = None
    except Exception:
        rows, error = [], traceback.format_exc()
        print(f"benchmark {name} crashed:\n{error}", file=sys.stderr)
    finally:
        os.chdir(cwd)
    return {
        "benchmark": name,
        "quick": ctx.quick,
        "repeats": ctx.repeats,
        "seconds": round(time.perf_counter() - t0, 2),
        "error": error,
        "rows": [asdict(r) for r in rows],
    }


def table(results: list[dict[str, Any]]) -> str:
    head = ("row", "what", "reference", "measured", "target", "result")
    lines = [head]
    for res in results:
        if res["error"]:
            lines.append((res["benchmark"], "CRASHED", "", "", "", "error"))
        for r in res["rows"]:
            row = Row(**r)
            verdict = {True: "pass", False: "FAIL", None: "-"}[row.passed]
            lines.append((row.name, row.what, row.reference, row.measured(), row.target, verdict))
    widths = [max(len(line[c]) for line in lines) for c in range(len(head))]
    out = [" | ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def _merged(path: Path, new: dict[str, Any], ran: set[str]) -> dict[str, Any]:
    """``new``'s rows over those of an earlier summary at ``path`` of the same kind (quick or
    not): a partial rerun into the results folder keeps the other benchmarks' rows."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return new
    if old.get("quick") != new["quick"] or not isinstance(old.get("rows"), dict):
        return new
    runs = {k: v for k, v in old.get("runs", {}).items() if k not in ran}
    # a benchmark that ran now has only its rows of now (one it no longer reports goes)
    dropped = {name for k, v in old.get("runs", {}).items() if k in ran for name in v.get("rows", [])}
    kept = {name: row for name, row in old["rows"].items() if name not in new["rows"] and name not in dropped}
    crashed = [b for b in old.get("crashed", []) if b not in ran] + new["crashed"]
    return {**new, "crashed": crashed, "runs": {**runs, **new["runs"]}, "rows": {**kept, **new["rows"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats (< ~60 s)")
    parser.add_argument(
        "--only", nargs="+", choices=BENCHMARKS, metavar="NAME", help=f"run only these: {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--repeats", type=int, help="interleaved repeats (default 7, quick 3)")
    args = parser.parse_args(argv)
    names = [n for n in BENCHMARKS if not args.only or n in args.only]
    repeats = args.repeats or (3 if args.quick else 7)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memsnap_bench_") as tmp:
        for name in names:
            work = Path(tmp) / name
            work.mkdir()
            print(f"running {name} ...", file=sys.stderr, flush=True)
            res = run_one(name, Context(quick=args.quick, repeats=repeats, work=work))
            res["machine"] = info
            (args.out_dir / f"{name}.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
            results.append(res)
    summary = {
        "quick": args.quick,
        "repeats": repeats,
        "machine": info,
        "seconds": round(time.perf_counter() - t0, 1),
        "crashed": [r["benchmark"] for r in results if r["error"]],
        "runs": {
            r["benchmark"]: {
                "git_commit": info.get("git_commit"),
                "date": info.get("date"),
                "rows": [row["name"] for row in r["rows"]],
            }
            for r in results
        },
        "rows": {
            row["name"]: {k: row[k] for k in ("what", "reference", "value", "unit", "target", "passed", "note")}
            for r in results
            for row in r["rows"]
        },
    }
    if args.only:
        summary = _merged(args.out_dir / "summary.json", summary, set(names))
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(table(results))
    print(
        f"\n{'quick' if args.quick else 'full'} run, {repeats} interleaved repeats, "
        f"{summary['seconds']} s; JSON in {args.out_dir}"
    )
    return 1 if summary["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
