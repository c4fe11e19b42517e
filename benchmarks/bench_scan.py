"""Folder scans: a warm ``memsnap summarize`` against unpickling the folder, and a cold scan on
every core against one process.

The folder is a foreign run in verl's layout, 2 ranks x 10 steps, each file a 200k-entry
snapshot tiled from a real CUDA step (``tiled_cuda_snapshot``), with no summaries beside it: the
first read caches each file's summary in ``$MEMSNAP_CACHE_DIR`` (a scratch folder here).

- ``warm_scan``: ``memsnap summarize FOLDER --json`` run in this process (``cli.main``; the
  interpreter's own start, ~0.2 s with numpy, is not ours to shrink) once every summary is
  cached, against ``pickle.load`` of the 20 files. Its JSON must be byte-identical to the cold
  run's. Target <= 0.02x.
- ``cold_scan_jobs``: the same command on an empty cache with ``--jobs`` = the cores (2 here)
  against ``--jobs 1``. Target <= 0.65x on 2 cores.

Quick mode: 2 ranks x 3 steps of 20k entries.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
from pathlib import Path

from common import Context, Row, interleaved, ratio_row, tiled_cuda_snapshot

NAME = "scan"


def _folder(root: Path, steps: int, ranks: int, entries: int) -> list[Path]:
    from memsnap_magic.files.meta import META_KEY

    snap = tiled_cuda_snapshot(entries)
    # a foreign run's files say nothing of their step, the layout does (the recorded step's would
    # make all 20 files one step and rank)
    snap.pop(META_KEY, None)
    blob = pickle.dumps(snap, protocol=4)
    files = []
    for step in range(1, steps + 1):
        for rank in range(ranks):
            path = root / "profile" / f"step{step}" / f"torch_memory_rank{rank}.pickle"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
            files.append(path)
    return files


def _summarize(folder: Path, jobs: int | None = None) -> str:
    from memsnap_magic.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["summarize", str(folder), "--json", *(["--jobs", str(jobs)] if jobs else [])])
    assert code == 0
    return out.getvalue()


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.results.scan import default_jobs

    steps, ranks, entries = ctx.pick((10, 2, 200_000), (3, 2, 20_000))
    cache = ctx.work / "scan-cache"
    os.environ["MEMSNAP_CACHE_DIR"] = str(cache)
    files = _folder(ctx.work / "scan", steps, ranks, entries)
    folder = ctx.work / "scan" / "profile"
    mb = sum(p.stat().st_size for p in files) / 1e6

    def load_all() -> None:
        for path in files:
            with open(path, "rb") as f:
                pickle.load(f)

    def cold(jobs: int) -> str:
        shutil.rmtree(cache, ignore_errors=True)
        return _summarize(folder, jobs)

    cores = default_jobs()
    cold_out = cold(1)
    warm_out = _summarize(folder)
    identical = warm_out == cold_out
    warm = interleaved({"measured": lambda: _summarize(folder), "reference": load_all}, ctx.repeats)
    scans = interleaved({"measured": lambda: cold(cores), "reference": lambda: cold(1)}, max(2, ctx.repeats // 2))
    parallel_identical = cold(cores) == cold_out
    # every file its own record: files taken for one step (as when they carried the recorded
    # step's metadata) would scan one and make the row read far better than the scan is
    records = len(json.loads(cold_out))
    workload = f"{len(files)} files ({ranks} ranks x {steps} steps) of {entries:,} entries, {mb:.0f} MB"
    warm_row = ratio_row(
        "warm_scan",
        "memsnap summarize --json, every summary cached",
        f"pickle.load of the folder's files: {workload}",
        warm,
        0.02,
        files=len(files),
        megabytes=round(mb, 1),
        identical_to_cold=identical,
        records=records,
    )
    warm_row.passed = bool(warm_row.passed) and identical and records == len(files)
    warm_row.note = "JSON byte-identical to the cold run" if identical else "JSON DIFFERS from the cold run"
    jobs_row = ratio_row(
        "cold_scan_jobs",
        f"memsnap summarize --json on an empty cache, --jobs {cores}",
        f"the same with --jobs 1: {workload}",
        scans,
        0.65,
        cores=cores,
        identical_to_serial=parallel_identical,
    )
    jobs_row.passed = bool(jobs_row.passed) and parallel_identical and cores >= 2 and records == len(files)
    jobs_row.note = f"{cores} cores" + ("" if parallel_identical else "; output DIFFERS from --jobs 1")
    if records != len(files):
        warm_row.note += f"; {records} records for {len(files)} files"
        jobs_row.note += f"; {records} records for {len(files)} files"
    os.environ.pop("MEMSNAP_CACHE_DIR", None)
    return [warm_row, jobs_row]
