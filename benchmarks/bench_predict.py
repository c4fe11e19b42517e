"""``predict`` over three recorded sizes vs ``load_snapshot`` of the files it reads.

Why this reference: a prediction has to read the recorded steps first, so loading them is the
floor of its work; issue 42 asks that the whole prediction (reading the files included) take at
most 1.5x that (target <= 1.5x). The step is a real one: six ``TransformerEncoderLayer`` blocks,
a head and AdamW (``tests/predict_workloads.py``, workload ``encoder``), recorded on the CPU at
sequence lengths 64, 128 and 256, each in its own process, and predicted at 1024. Quick mode
records the one-layer ``transformer`` workload instead. The prediction's analysis alone (from
snapshots already loaded) is timed alongside and kept in the JSON (``analysis_only_s``).

Not in ``run.py``'s list (its test pins the rows every run reports); run it on its own:

    .venv/bin/python benchmarks/bench_predict.py [--quick] [--repeats N]

which writes ``benchmarks/results/predict.json`` (or ``--out-dir``) and prints the row.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import REPO_ROOT, Context, Row, interleaved, ratio_row

NAME = "predict"
SIZES = (64, 128, 256)
TARGET = 1024


def _record(workload: str, size: int, out: Path) -> Path:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "predict_workloads.py"), workload, str(size), str(out)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},  # this checkout, not an installed copy
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def run(ctx: Context) -> list[Row]:
    from memsnap_magic import load_snapshot
    from memsnap_magic.results.prediction import predict

    workload = ctx.pick("encoder", "transformer")
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda s: _record(workload, s, ctx.work / f"{workload}_{s}"), SIZES))
    recorded = [(p, {"seq": s}) for p, s in zip(paths, SIZES)]
    loaded = [(load_snapshot(p), {"seq": s}) for p, s in zip(paths, SIZES)]
    prediction = predict(recorded, at={"seq": TARGET})
    times = interleaved(
        {
            "measured": lambda: predict(recorded, at={"seq": TARGET}),
            "reference": lambda: [load_snapshot(p) for p in paths],
            "analysis_only": lambda: predict(loaded, at={"seq": TARGET}),
        },
        max(ctx.repeats, ctx.pick(15, 5)),
    )
    entries = sum(len(snap["device_traces"][0]) for snap, _ in loaded)
    row = ratio_row(
        "predict_vs_load",
        f"predict(3 files of the {workload} step, seq {'/'.join(map(str, SIZES))}) at seq {TARGET}",
        "load_snapshot of the same 3 files",
        times,
        1.5,
        workload=workload,
        entries=entries,
        file_bytes=sum(p.stat().st_size for p in paths),
        analysis_only_s=statistics.median(times["analysis_only"]),
        predicted_peak=prediction.peak_allocated,
    )
    row.note = f"{entries:,} entries"
    return [row]


def main(argv: list[str] | None = None) -> int:
    """Run this benchmark alone, as ``run.py`` runs each: its JSON and its line of the table."""
    import argparse
    import json
    import tempfile

    from run import RESULTS, machine, run_one, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    with tempfile.TemporaryDirectory(prefix="memsnap_bench_") as tmp:
        res = run_one(NAME, Context(quick=args.quick, repeats=repeats, work=Path(tmp)))
    res["machine"] = machine()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{NAME}.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(table([res]))
    return 1 if res["error"] else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
