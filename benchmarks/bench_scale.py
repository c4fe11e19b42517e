"""Row 3: ``summarize`` time per trace entry at 10k, 100k and 1M entries (flat within 1.5x).

The reference is ``summarize`` itself at the other sizes: the ratio of the largest to the
smallest time per entry shows any super-linear step (or a fixed cost that dominates small
snapshots). Entries carry one frame each here, not four: 1M entries with four frame lists would
need well over a GB and frames are never read by ``summarize``. The sizes are timed in turn
(10k, 100k, 1M, 10k, ...), each sample calling ``summarize`` often enough to cover as many
entries as one call at the largest size (100 calls at 10k), so a short hiccup of the shared
machine cannot dominate the small sizes. Quick mode uses 10k, 30k and 100k.

At 10k the calls go round 10 copies of the snapshot (pickled and loaded again, so each has its
own dicts; 100k entries in all, more than the last-level cache holds), not 100 times through
one. ``summarize`` spends most of its time fetching two fields from every entry's dict: one
10k-entry snapshot summarised 100 times in a row stays in the cache and ran at 155-355 ns per
entry from run to run, while a real snapshot is summarised once, whatever its size.
"""

from __future__ import annotations

import pickle
import statistics
from functools import partial

from common import Context, Row, drop_cached, interleaved, make_snapshot

NAME = "scale"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.analysis import summarize

    drop_cached()
    sizes = ctx.pick((10_000, 100_000, 1_000_000), (10_000, 30_000, 100_000))
    calls = {n: max(1, sizes[-1] // n) for n in sizes}  # every sample covers as many entries
    copies = {}
    for n in sizes:  # copies made by pickle: each has its own dicts, as a loaded snapshot has
        blob = pickle.dumps(make_snapshot(n, frames=1, seed=n), protocol=4)
        copies[n] = [pickle.loads(blob) for _ in range(min(calls[n], -(-100_000 // n)))]

    def sample(n: int) -> None:
        for i in range(calls[n]):
            summarize(copies[n][i % len(copies[n])])

    times = interleaved({str(n): partial(sample, n) for n in sizes}, ctx.repeats)
    per_entry = {n: statistics.median(times[str(n)]) / (n * calls[n]) for n in sizes}
    value = max(per_entry.values()) / min(per_entry.values())
    ns = {str(n): round(t * 1e9, 1) for n, t in per_entry.items()}
    note = ", ".join(f"{n // 1000}k: {ns[str(n)]:.0f} ns" for n in sizes)
    return [Row("summarize_scale", "summarize time/entry, max/min over sizes",
                f"summarize at {', '.join(f'{n:,}' for n in sizes)} entries (1 frame each)",
                value, "x", "<= 1.5x", value <= 1.5,
                {"ns_per_entry": ns, "times_s": times, "calls_per_sample": calls, "repeats": ctx.repeats,
                 "frames_per_entry": 1}, note=note)]
