"""``load_snapshot`` (no-globals unpickler + schema validation) vs plain ``pickle.load``.

Why this reference: ``load_snapshot`` is ``pickle.load`` made safe for other people's files, so
the price of that safety is the ratio to the unsafe call on the same file. Both read the whole
file from the page cache. ``load_snapshot`` pauses the cyclic garbage collector while it
unpickles (a snapshot has no cycles), which is most of why it comes out faster; each row also
times ``pickle.load`` with the collector paused the same way (``reference_gc_off_s``), the price
of the safety alone.

- ``load_snapshot_vs_pickle_load``: the 200k-entry, 4-frame synthetic snapshot (target <= 1.25x).
- ``load_snapshot_real_vs_pickle_load``: 200k entries tiled from a real CUDA step, whose shared
  frames make ``pickle.load`` cheap per entry (target <= 1.1x).
- ``load_snapshot_peak_rss``: the peak resident memory the load adds, in a fresh process per
  reading, ``load_snapshot`` over ``pickle.load`` (target <= 1.05x). The same ratio for the
  tiled real step is kept in its details (``real_ratio``): there the schema's two column lists
  outlast the unpickler's memo, where the synthetic file's memo was larger.
"""

from __future__ import annotations

import pickle
import statistics
import subprocess
import sys
from pathlib import Path

from common import REPO_ROOT, Context, Row, interleaved, pickle_loads_of, ratio_row, snapshot, tiled_cuda_snapshot

NAME = "load"

PEAK = """
import pickle, sys
from memsnap_magic.files.snapshot import load_snapshot

def high_water():
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1])

start = high_water()
if sys.argv[1] == "load_snapshot":
    snap = load_snapshot(sys.argv[2])
else:
    with open(sys.argv[2], "rb") as f:
        snap = pickle.load(f)
print(high_water() - start)
"""


def _peak_kib(how: str, path: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, how, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO_ROOT)},
    )
    return int(proc.stdout.split()[-1])


def _timed_row(ctx: Context, name: str, what: str, path: Path, limit: float, **details: object) -> Row:
    from memsnap_magic.files.snapshot import load_snapshot

    plain, plain_gc_off = pickle_loads_of(path)
    times = interleaved(
        {"measured": lambda: load_snapshot(path), "reference": plain, "gc_off": plain_gc_off}, ctx.repeats
    )
    gc_off = times.pop("gc_off")
    row = ratio_row(name, what, "pickle.load of the same file", times, limit, **details)
    row.details["reference_gc_off_s"] = gc_off
    safety = statistics.median(times["measured"]) / statistics.median(gc_off)
    row.details["vs_pickle_load_gc_off"] = safety
    row.note = f"{safety:.2f}x pickle.load with the collector paused too"
    return row


def run(ctx: Context) -> list[Row]:
    entries = ctx.pick(200_000, 50_000)
    path = ctx.work / "load.pickle"
    path.write_bytes(pickle.dumps(snapshot(entries, frames=4), protocol=4))
    real = ctx.work / "load_real.pickle"
    real.write_bytes(pickle.dumps(tiled_cuda_snapshot(entries), protocol=4))
    rows = [
        _timed_row(
            ctx,
            "load_snapshot_vs_pickle_load",
            f"load_snapshot, {entries:,} entries x 4 frames",
            path,
            1.25,
            entries=entries,
            frames_per_entry=4,
            file_bytes=path.stat().st_size,
        ),
        _timed_row(
            ctx,
            "load_snapshot_real_vs_pickle_load",
            f"load_snapshot, {entries:,} entries tiled from a real CUDA step",
            real,
            1.1,
            entries=entries,
            file_bytes=real.stat().st_size,
        ),
    ]
    peaks: dict[Path, dict[str, list[int]]] = {}
    med: dict[Path, dict[str, float]] = {}
    for file in (path, real):  # alternated, a fresh process per reading
        peaks[file] = {"load_snapshot": [], "pickle.load": []}
        for _ in range(ctx.pick(3, 1)):
            for how in peaks[file]:
                peaks[file][how].append(_peak_kib(how, file))
        med[file] = {k: statistics.median(v) for k, v in peaks[file].items()}
    value = med[path]["load_snapshot"] / med[path]["pickle.load"]
    real_ratio = med[real]["load_snapshot"] / med[real]["pickle.load"]
    rows.append(
        Row(
            "load_snapshot_peak_rss",
            f"peak RSS added by load_snapshot, {entries:,} entries x 4 frames",
            "peak RSS added by pickle.load of the same file (fresh processes)",
            value,
            "x",
            "<= 1.05x",
            value <= 1.05,
            {
                "peak_kib": peaks[path],
                "file_bytes": path.stat().st_size,
                "real_peak_kib": peaks[real],
                "real_ratio": real_ratio,
            },
            note=(
                f"{med[path]['load_snapshot'] / 1024:.0f} vs {med[path]['pickle.load'] / 1024:.0f} MB; "
                f"tiled real step {real_ratio:.3f}x"
            ),
        )
    )
    return rows
