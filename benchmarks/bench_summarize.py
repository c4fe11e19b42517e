"""Row 1: ``summarize`` of a 200k-entry snapshot (4 frames per entry) vs ``pickle.load`` of its file.

Why this reference: whoever analyses a snapshot file has to load it first, so loading is the
floor of the work; the analysis should be a small extra on top of it (target <= 0.10x). The
snapshot is summarised as loaded from the file, as ``load_snapshot`` + ``summarize`` would see it.
Both sides run with the garbage collector on, as in a notebook.
"""

from __future__ import annotations

import pickle

from common import Context, Row, interleaved, ratio_row, snapshot

NAME = "summarize"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.analysis import summarize

    entries = ctx.pick(200_000, 50_000)
    path = ctx.work / "summarize.pickle"
    with open(path, "wb") as f:
        pickle.dump(snapshot(entries, frames=4), f, protocol=4)
    with open(path, "rb") as f:
        snap = pickle.load(f)

    def load() -> None:
        with open(path, "rb") as f:
            pickle.load(f)

    times = interleaved({"measured": lambda: summarize(snap), "reference": load}, ctx.repeats)
    return [ratio_row("summarize_vs_pickle_load", f"summarize, {entries:,} entries x 4 frames",
                      "pickle.load of the same file", times, 0.10,
                      entries=entries, frames_per_entry=4, file_bytes=path.stat().st_size)]
