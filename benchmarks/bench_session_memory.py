"""Row 7: memory a session keeps over 200 steps, each summarised from a 200k-entry snapshot.

Each step builds its ``Interval`` the way ``Recorder._finish`` does (``summarize``, ``decimate``
to <= 2,000 points, ``alive_at`` for the top blocks) and adds it to a fresh ``Session``. The
session must keep summaries, never snapshots, so what it holds after the 200 steps should stay
far below the size of even one snapshot in memory (the reference); target <= 200 MB. To keep it
fast the same snapshot dict is summarised 200 times; that the session does not keep it is checked
(its reference count is unchanged at the end). Both are measured with ``tracemalloc`` (Python's
and numpy's allocations), which doubles the loop's time: the RSS said nothing in a full run,
where memory freed by the benchmarks before it took a whole snapshot without growing (it read
0 MB for the snapshot itself). One warm-up interval is built first so first-use caches are not
counted. Quick mode: 20 steps of a 50k-entry snapshot.

``session_memory_steps``: a session must stay flat in its number of steps. Sessions of 50 and
of 1,000 steps are built the way a warm ``%memsnap load`` builds them, each interval decoded from
its own summary (one of the 200k-entry snapshot's, so no two share a list or an array), and the
bytes each holds are measured with ``tracemalloc``: bytes per step at 1,000 over bytes per step
at 50, target <= 1.1x. Quick mode: 20 and 200 steps.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

from common import Context, MiB, Row, drop_cached, interval_from, make_snapshot

NAME = "session_memory"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.results.session import Session

    steps, entries = ctx.pick((200, 200_000), (20, 50_000))
    drop_cached()
    gc.collect()
    tracemalloc.start()
    try:
        snap = make_snapshot(entries, frames=4)
        snapshot_bytes = tracemalloc.get_traced_memory()[0]
        interval_from(snap, 0)  # warm-up, not kept
        refs = (sys.getrefcount(snap), sys.getrefcount(snap["device_traces"][0]))
        s = Session()
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        for step in range(1, steps + 1):
            s.add(interval_from(snap, step))
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    kept = (sys.getrefcount(snap), sys.getrefcount(snap["device_traces"][0])) != refs
    return [_steps_row(ctx, snap, entries), *_growth_row(steps, entries, growth, snapshot_bytes, kept)]


def _steps_row(ctx: Context, snap: dict, entries: int) -> Row:
    from memsnap_magic.files import summaries
    from memsnap_magic.results.intervals import digest, interval_from_digest
    from memsnap_magic.results.session import Session

    d = digest(snap)
    st = os.stat(__file__)
    obj = summaries.encode(d, st)
    sizes = ctx.pick((50, 1000), (20, 200))
    per_step = {}
    for n in sizes:
        gc.collect()
        tracemalloc.start()
        s = Session()
        for step in range(1, n + 1):
            s.add(interval_from_digest(summaries.decode(obj, st), position=step))
        gc.collect()
        per_step[n] = tracemalloc.get_traced_memory()[0] / n
        tracemalloc.stop()
        del s
    value = per_step[sizes[1]] / per_step[sizes[0]]
    return Row(
        "session_memory_steps",
        f"bytes per step of a session of {sizes[1]:,} steps",
        f"bytes per step of a session of {sizes[0]} steps (each from a {entries:,}-entry snapshot's summary)",
        value,
        "x",
        "<= 1.1x",
        value <= 1.1,
        {"bytes_per_step": {str(n): round(b) for n, b in per_step.items()}},
        note=", ".join(f"{n:,} steps: {b / 1024:.0f} KiB each" for n, b in per_step.items()),
    )


def _growth_row(steps: int, entries: int, growth: int, snapshot_bytes: int, kept: bool) -> list[Row]:
    mb = growth / MiB
    return [
        Row(
            "session_memory",
            f"memory a session holds after {steps} intervals from {entries:,}-entry snapshots (tracemalloc)",
            f"one snapshot in memory ({snapshot_bytes / MiB:.0f} MB)",
            mb,
            "MB",
            "<= 200 MB",
            mb <= 200 and not kept,
            {
                "steps": steps,
                "entries": entries,
                "frames_per_entry": 4,
                "growth_bytes": growth,
                "snapshot_bytes": snapshot_bytes,
                "growth_per_step_bytes": growth / steps,
                "session_keeps_snapshot": kept,
                "same_snapshot_reused": True,
            },
            note=f"{growth / max(snapshot_bytes, 1):.2g}x one snapshot",
        )
    ]
