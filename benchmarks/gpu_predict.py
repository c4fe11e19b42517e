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

``fit_under_cap`` is issue 42's check of the answer itself: the largest batch of a transformer
block predicted to fit under a cap the allocator enforces (``set_per_process_memory_fraction``),
that batch run (it must fit) and 10 % more (it must run out of memory). ``gpu_check.py``'s
``prediction`` section runs it in a process of its own, and ``check`` beside it.
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


def check(device: str, work: Path, jobs: int, cases: tuple[Any, ...] = CASES) -> list[dict[str, Any]]:
    """Each case recorded at its sizes and target (processes of their own), predicted at the
    target from the sizes, against the target's own recording."""
    from memsnap_magic import load_snapshot, summarize
    from memsnap_magic.results.prediction import PredictionRefused, predict

    wanted = [(w, s) for w, _, sizes, target in cases for s in (*sizes, target)]
    with ThreadPoolExecutor(jobs) as pool:
        paths = dict(zip(wanted, pool.map(lambda ws: _record(*ws, work / f"{ws[0]}_{ws[1]}", device), wanted)))
    rows = []
    for workload, dim, sizes, target in cases:
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


def accurate(rows: list[dict[str, Any]], within: float = 0.05) -> bool:
    """``check``'s rows as expected: the branching step refused, every other predicted within
    ``within`` of its recorded peak (and of the allocator's, where it kept one)."""

    def as_expected(row: dict[str, Any]) -> bool:
        if row["workload"] == "branch":
            return "refused" in row
        if "refused" in row:
            return False
        blocks = row.get("blocks_error")
        return abs(row["error"]) <= within and (blocks is None or abs(blocks) <= within)

    return bool(rows) and all(map(as_expected, rows))


def fit_under_cap(
    device: str,
    out: str,
    cap: int,
    d_model: int,
    nhead: int,
    ff: int,
    seq: int,
    sizes: tuple[int, ...] = (2, 4, 8),
    more: float = 0.10,
) -> dict[str, Any]:
    """Will it fit, answered and then tried: a ``TransformerEncoderLayer`` + head + AdamW over
    ``batch`` (sequences of ``seq``), recorded at ``sizes`` with ``scale=batch:N``, then the largest
    batch predicted to fit under ``cap`` bytes run, and ``more`` (10 %) more.

    On CUDA the cap is the allocator's own (``torch.cuda.set_per_process_memory_fraction``), which
    bounds what it *reserves*; the prediction is of allocated bytes (blocks rounded to 512 B), so
    the largest reserved-minus-allocated gap seen at the recorded steps is taken off the cap first
    and the margin left is stated. The batch predicted must run; the larger one must raise
    ``OutOfMemoryError``. On the CPU nothing enforces a cap (no gap either): both batches are
    recorded and their peaks compared with it. Run it in a process of its own: the cap stays.
    """
    import math

    import torch

    from memsnap_magic import Recorder
    from memsnap_magic.results.prediction import predict
    from memsnap_magic.results.session import Session

    cuda = device.startswith("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(d_model, nhead, ff, batch_first=True), torch.nn.Linear(d_model, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    names = {"model": model, "opt": opt}

    def step(batch: int) -> None:
        x = torch.randn(batch, seq, d_model, device=device)
        y = torch.randint(0, 10, (batch * seq,), device=device)
        torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()

    def recorded(batch: int, session: Session) -> int:
        """``batch`` run under the recorder; the reserved-minus-allocated gap of its peak (CUDA)."""
        if cuda:
            torch.cuda.empty_cache()  # reserved from here on is what this step needs, cached blocks apart
            torch.cuda.reset_peak_memory_stats()
        with Recorder(
            step=1,
            run=f"b{batch}",
            device=device,
            out=out,
            wait=True,
            namespace=names,
            model="model",
            optimizer="opt",
            scale={"batch": batch},
            session=session,
        ):
            step(batch)
        return torch.cuda.max_memory_reserved() - torch.cuda.max_memory_allocated() if cuda else 0

    step(sizes[0])  # warm-up: AdamW's state exists from here on
    session = Session()
    gaps = {b: recorded(b, session) for b in sizes}
    p = predict(session, at={"batch": sizes[-1]})
    gap = max(gaps.values())
    largest = p.largest(cap - gap)
    result: dict[str, Any] = {
        "device": device,
        "cap": cap,
        "sizes": list(sizes),
        "recorded_peaks": {str(b): p.recorded[float(b)] for b in sizes},
        "loo_error": p.loo_error,
        "gaps": {str(b): g for b, g in gaps.items()},
        "gap": gap,
        "largest": largest,
    }
    if not largest:
        result.update(ok=False, why="nothing grows with batch, or not even batch 1 fits")
        return result
    bigger = max(largest + 1, math.ceil(largest * (1 + more)))
    predicted = p.blocks_at(largest)
    result.update(
        predicted_blocks=predicted,
        margin=cap - gap - predicted,  # what the prediction leaves of the cap, the gap added
        bigger=bigger,
        predicted_bigger=p.blocks_at(bigger),
    )
    if cuda:
        total = torch.cuda.get_device_properties(torch.device(device)).total_memory
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(cap / total, torch.device(device))
        result["fraction"] = cap / total
        ran = {}
        for batch in (largest, bigger):
            torch.cuda.reset_peak_memory_stats()
            try:
                step(batch)
                ran[batch] = {"fits": True}
            except torch.cuda.OutOfMemoryError as e:
                ran[batch] = {"fits": False, "error": str(e).splitlines()[0][:300]}
            opt.zero_grad(set_to_none=True)
            ran[batch].update(
                max_allocated=torch.cuda.max_memory_allocated(), max_reserved=torch.cuda.max_memory_reserved()
            )
            torch.cuda.empty_cache()
        result["largest_ran"], result["bigger_ran"] = ran[largest], ran[bigger]
    else:  # no cap to hit: each batch's peak, recorded, against it
        ran = {}
        for batch in (largest, bigger):
            later = Session()
            recorded(batch, later)
            peak = later.intervals[-1].peak_allocated
            ran[batch] = {"fits": peak <= cap, "peak_allocated": peak}
        result["largest_ran"], result["bigger_ran"] = ran[largest], ran[bigger]
    result["ok"] = result["largest_ran"]["fits"] and not result["bigger_ran"]["fits"]
    return result


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
