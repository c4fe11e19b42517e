"""Row 6: ``dump_snapshot`` (temp file, chmod, atomic rename) vs ``pickle.dump(protocol=4)``.

Why this reference: the dump is a protocol-4 pickle of the same dict; what ``dump_snapshot``
adds is the atomic write, which should cost little (target <= 1.2x). Both write the 200k-entry,
4-frame snapshot into the same folder, overwriting their own file each round. A write swings
by ±20% from one call to the next here (the disk is shared), so this row takes three times the
run's repeats: ~1 s a round.
"""

from __future__ import annotations

import pickle

from common import Context, Row, interleaved, ratio_row, snapshot

NAME = "dump"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.files.snapshot import dump_snapshot

    entries = ctx.pick(200_000, 50_000)
    snap = snapshot(entries, frames=4)
    folder = ctx.work / "dump"
    folder.mkdir(exist_ok=True)
    ours, plain_path = folder / "memsnap.pickle", folder / "plain.pickle"

    def plain() -> None:
        with open(plain_path, "wb") as f:
            pickle.dump(snap, f, protocol=4)

    times = interleaved({"measured": lambda: dump_snapshot(snap, ours), "reference": plain}, 3 * ctx.repeats)
    return [
        ratio_row(
            "dump_vs_pickle_dump",
            f"dump_snapshot, {entries:,} entries x 4 frames",
            "pickle.dump(protocol=4), same folder",
            times,
            1.2,
            entries=entries,
            file_bytes=ours.stat().st_size,
        )
    ]
