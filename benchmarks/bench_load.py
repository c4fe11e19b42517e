"""Row 2: ``load_snapshot`` (no-globals unpickler + schema validation) vs plain ``pickle.load``.

Why this reference: ``load_snapshot`` is ``pickle.load`` made safe for other people's files, so
the price of that safety is exactly the ratio to the unsafe call on the same file (target <= 1.25x).
Both read the whole file from the page cache; the 200k-entry, 4-frame snapshot of row 1 is used.
"""

from __future__ import annotations

import pickle

from common import Context, Row, interleaved, ratio_row, snapshot

NAME = "load"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.snapshot import load_snapshot

    entries = ctx.pick(200_000, 50_000)
    path = ctx.work / "load.pickle"
    path.write_bytes(pickle.dumps(snapshot(entries, frames=4), protocol=4))

    def plain() -> None:
        with open(path, "rb") as f:
            pickle.load(f)

    times = interleaved({"measured": lambda: load_snapshot(path), "reference": plain}, ctx.repeats)
    return [
        ratio_row(
            "load_snapshot_vs_pickle_load",
            f"load_snapshot, {entries:,} entries x 4 frames",
            "pickle.load of the same file",
            times,
            1.25,
            entries=entries,
            frames_per_entry=4,
            file_bytes=path.stat().st_size,
        )
    ]
