"""Row 1: ``summarize`` of a 200k-entry snapshot (4 frames per entry) vs ``pickle.load`` of its file.

Why this reference: whoever analyses a snapshot file has to load it first, so loading is the
floor of the work; the analysis should be a small extra on top of it (target <= 0.10x). The
snapshot is summarised as loaded from the file, as ``load_snapshot`` + ``summarize`` would see it.
Both sides run with the garbage collector on, as in a notebook. Most of that load time is the
collector's (full collections over the freshly built containers), so ``pickle.load`` with the
collector off is timed alongside and kept in the JSON (``reference_gc_off``) for comparison.
What each ``%%memsnap`` cell runs is ``summarize`` plus ``alive_at`` for the table of blocks
alive at the peak; that pair is timed too and kept as ``ratio_with_top_blocks``.

Row 1b runs the same on a snapshot tiled from a real CUDA step (``tiled_cuda_snapshot``): it
shares its frames between entries as PyTorch's files do, so its load is cheaper per entry. Row 1c
times, in the same interleaved run, the whole ``digest`` of that snapshot (figures, timeline, the
blocks alive at the peak and at the end, sites, what it held only for a while): what every
``%%memsnap`` cell and ``memsnap summarize`` of a file without a summary run (issue 44: <= 0.11x;
reading the action, size and address of every entry, which it must, is ~0.09x of it).
"""

from __future__ import annotations

import pickle
import statistics
from typing import Any, Callable

from common import Context, Row, interleaved, pickle_loads_of, ratio_row, snapshot, tiled_cuda_snapshot

NAME = "summarize"


def run(ctx: Context) -> list[Row]:
    entries = ctx.pick(200_000, 50_000)
    # the real one first: the synthetic snapshot stays cached for the next benchmarks, and a
    # bigger heap changes how often the collector runs during the reference load
    real, digest = measure(
        ctx,
        "summarize_real_vs_pickle_load",
        f"summarize, {entries:,} entries tiled from a real CUDA step",
        lambda: tiled_cuda_snapshot(entries),
        limit=None,
        digest_row=("digest_real_vs_pickle_load", 0.11),
    )
    synthetic = measure(
        ctx,
        "summarize_vs_pickle_load",
        f"summarize, {entries:,} entries x 4 frames",
        lambda: snapshot(entries, frames=4),
        limit=0.10,
        frames_per_entry=4,
    )[0]
    return [synthetic, real, digest]


def measure(
    ctx: Context,
    name: str,
    what: str,
    build: Callable[[], dict[str, Any]],
    limit: float | None,
    digest_row: tuple[str, float] | None = None,
    **details: Any,
) -> list[Row]:
    """The ``summarize`` row; with ``digest_row`` (its name and limit), then a row for ``digest``,
    timed in the same interleaved run against the same reference."""
    from memsnap_magic.results.alive import alive_at
    from memsnap_magic.results.analysis import summarize
    from memsnap_magic.results.intervals import digest

    path = ctx.work / f"{name}.pickle"
    path.write_bytes(pickle.dumps(build(), protocol=4))
    snap = pickle.loads(path.read_bytes())  # summarised as loaded from the file

    load, load_gc_off = pickle_loads_of(path)

    times = interleaved(
        {
            "measured": lambda: summarize(snap),
            "reference": load,
            "reference_gc_off": load_gc_off,
            "with_top_blocks": lambda: alive_at(summarize(snap)),
            **({"digest": lambda: digest(snap)} if digest_row else {}),
        },
        ctx.repeats,
    )
    med = {k: statistics.median(v) for k, v in times.items()}
    facts = {"entries": len(snap["device_traces"][0]), "file_bytes": path.stat().st_size}
    rows = [
        ratio_row(
            name,
            what,
            "pickle.load of the same file",
            times,
            limit,
            **facts,
            ratio_vs_load_gc_off=med["measured"] / med["reference_gc_off"],
            ratio_with_top_blocks=med["with_top_blocks"] / med["reference"],
            **details,
        )
    ]
    if digest_row:
        rows.append(
            ratio_row(
                digest_row[0],
                what.replace("summarize", "digest (every %%memsnap cell's)"),
                "pickle.load of the same file",
                {"measured": times["digest"], "reference": times["reference"]},
                digest_row[1],
                **facts,
                ratio_vs_load_gc_off=med["digest"] / med["reference_gc_off"],
                summarize_ratio=med["measured"] / med["reference"],
            )
        )
    return rows
