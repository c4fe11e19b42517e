"""Row 1: ``summarize`` of a 200k-entry snapshot (4 frames per entry) vs ``pickle.load`` of its file.

Why this reference: whoever analyses a snapshot file has to load it first, so loading is the
floor of the work; the analysis should be a small extra on top of it (target <= 0.10x). The
snapshot is summarised as loaded from the file, as ``load_snapshot`` + ``summarize`` would see it.
Both sides run with the garbage collector on, as in a notebook. Most of that load time is the
collector's (full collections over the freshly built containers), so ``pickle.load`` with the
collector off is timed alongside and kept in the JSON (``reference_gc_off``) for comparison.
"""

from __future__ import annotations

import gc
import pickle
import statistics

from common import Context, Row, interleaved, ratio_row, snapshot

NAME = "summarize"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.analysis import summarize

    entries = ctx.pick(200_000, 50_000)
    path = ctx.work / "summarize.pickle"
    path.write_bytes(pickle.dumps(snapshot(entries, frames=4), protocol=4))
    snap = pickle.loads(path.read_bytes())  # summarised as loaded from the file

    def load() -> None:
        with open(path, "rb") as f:
            pickle.load(f)

    def load_gc_off() -> None:
        gc.disable()
        try:
            load()
        finally:
            gc.enable()

    times = interleaved({"measured": lambda: summarize(snap), "reference": load,
                         "reference_gc_off": load_gc_off}, ctx.repeats)
    gc_off = statistics.median(times["measured"]) / statistics.median(times["reference_gc_off"])
    return [ratio_row("summarize_vs_pickle_load", f"summarize, {entries:,} entries x 4 frames",
                      "pickle.load of the same file", times, 0.10,
                      entries=entries, frames_per_entry=4, file_bytes=path.stat().st_size,
                      ratio_vs_load_gc_off=gc_off)]
