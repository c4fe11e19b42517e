"""``predict`` on a real accelerator: small recorded sizes against the size recorded at the target.

Run it on the GPU machine from the repository root (torch with CUDA installed)::

    python benchmarks/gpu_predict.py --out-dir "$OUT"

Each workload of ``tests/predict_workloads.py`` is recorded at each size in its own process on
the device (a warm-up step, then one recorded step), a few processes at a time; then the step is
predicted at the target from the smaller sizes and compared with the target's own recording:
``peak_allocated`` (requested bytes) with ``summarize``'s peak of that file, and ``peak_blocks``
(each block rounded to 512 B) with ``torch.cuda.max_memory_allocated`` over the recorded step
(the file's ``allocator_peak_allocated``). A refusal is reported with its line. Without CUDA the
same runs on the CPU (``--device cpu``), where nothing is rounded. Results: ``predict_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = (  # workload, dimension, recorded sizes, target
    ("mlp", "batch", (2, 4, 8), 64),
    ("transformer", "seq", (64, 128, 256), 512),
    ("encoder", "seq", (256, 512, 1024), 2048),
    ("conv", "side", (8, 16, 24), 48),
    ("branch", "batch", (2, 4, 8), 64),
)


def _record(workload: str, size: int, out: Path, device: str) -> Path:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "predict_workloads.py"), workload, str(size), str(out), device],
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout, not an installed copy
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode:
        raise RuntimeError(f"{workload} {size}: {proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def check(device: str, work: Path, jobs: int) -> list[dict[str, Any]]:
    from memsnap_magic import load_snapshot, summarize
    from memsnap_magic.results.prediction import PredictionRefused, predict

    wanted = [(w, s) for w, _, sizes, target in CASES for s in (*sizes, target)]
    with ThreadPoolExecutor(jobs) as pool:
        paths = dict(zip(wanted, pool.map(lambda ws: _record(*ws, work / f"{ws[0]}_{ws[1]}", device), wanted)))
    rows = []
    for workload, dim, sizes, target in CASES:
        truth_snap = load_snapshot(paths[workload, target])
        truth = summarize(truth_snap).peak_allocated
        allocator = (truth_snap.get("memsnap") or {}).get("allocator_peak_allocated")
        row: dict[str, Any] = {"workload": workload, "dim": dim, "sizes": sizes, "target": target, "recorded": truth}
        row["recorded_allocator_peak"] = allocator
        t0 = time.perf_counter()
        try:
            p = predict([(paths[workload, s], {dim: s}) for s in sizes], at={dim: target})
        except PredictionRefused as refused:
            row["refused"] = refused.line
        else:
            row.update(
                predicted=p.peak_allocated,
                error=(p.peak_allocated - truth) / truth,
                predicted_blocks=p.peak_blocks,
                blocks_error=(p.peak_blocks - allocator) / allocator if allocator else None,
                unaligned_bytes=p.unaligned_bytes,
                growth=[str(g) for g in p.growth[:3]],
                largest_under_recorded=p.largest(truth),
            )
        row["seconds"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/memsnap_predict_work"))
    parser.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    parser.add_argument("--jobs", type=int, default=4, help="recording processes at a time")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    rows = check(device, args.work_dir, args.jobs)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(f"predict on {name} · torch {torch.__version__}")
    for r in rows:
        head = f"{r['workload']:12s} {r['dim']}={r['target']} from {'/'.join(map(str, r['sizes']))}:"
        if "refused" in r:
            print(f"{head} refused: {r['refused']}")
            continue
        blocks = f", blocks {r['blocks_error']:+.2%} vs max_memory_allocated" if r["blocks_error"] is not None else ""
        print(
            f"{head} predicted {r['predicted']:,} recorded {r['recorded']:,} ({r['error']:+.2%}){blocks}; "
            f"largest under the recorded peak: {r['largest_under_recorded']}; unaligned {r['unaligned_bytes']:,} B"
        )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {"device": name, "torch": torch.__version__, "rows": rows}
    (args.out_dir / "predict_gpu.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
