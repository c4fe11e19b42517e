"""Row 7: memory a session keeps over 200 steps, each summarised from a 200k-entry snapshot.

Each step builds its ``Interval`` the way ``Recorder._finish`` does (``summarize``, ``decimate``
to <= 2,000 points, ``alive_at`` for the top blocks) and adds it to a fresh ``Session``. The
session must keep summaries, never snapshots, so the RSS growth over the 200 steps should stay
far below the size of even one snapshot in memory (the reference, measured as the RSS taken by
building it); target growth <= 200 MB. To keep it fast the same snapshot dict is summarised 200
times; that the session does not keep it is checked (its reference count is unchanged at the
end). RSS is read from ``/proc/self/statm`` (tracemalloc would be too slow). One warm-up
interval is built before the first reading so numpy's and the allocator's first-use growth is
not counted. Quick mode: 20 steps of a 50k-entry snapshot.
"""

from __future__ import annotations

import gc
import sys

from common import Context, MiB, Row, drop_cached, interval_from, make_snapshot, rss_bytes

NAME = "session_memory"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.session_state import Session

    steps, entries = ctx.pick((200, 200_000), (20, 50_000))
    drop_cached()
    before = rss_bytes()
    snap = make_snapshot(entries, frames=4)
    snapshot_bytes = rss_bytes() - before
    interval_from(snap, 0)  # warm-up, not kept
    refs = (sys.getrefcount(snap), sys.getrefcount(snap["device_traces"][0]))
    s = Session()
    gc.collect()
    start = rss_bytes()
    for step in range(1, steps + 1):
        s.add(interval_from(snap, step))
    gc.collect()
    growth = rss_bytes() - start
    kept = (sys.getrefcount(snap), sys.getrefcount(snap["device_traces"][0])) != refs
    mb = growth / MiB
    return [
        Row(
            "session_memory",
            f"RSS growth, {steps} intervals from {entries:,}-entry snapshots",
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
