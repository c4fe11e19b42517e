"""Row 3: ``summarize`` time per trace entry at 10k, 100k and 1M entries (flat within 1.5x).

The reference is ``summarize`` itself at the other sizes: the ratio of the largest to the
smallest time per entry shows any super-linear step, or a fixed cost that dominates small
snapshots. ``summarize`` has one: it reads the snapshot's end state (its segments, 1,000 here),
which does not grow with the trace. So each size is also timed on the same snapshot with an empty
trace, and the row reports that fixed cost and the ratio without it (time per trace entry) beside
its value. The samples are three times the run's repeats: the timed part is ~10 s of this row,
making the 1M-entry snapshot most of the rest.

Entries carry one frame each here, not four: 1M entries with four frame lists would need well
over a GB and frames are never read by ``summarize``. The sizes are timed in turn (10k, 100k,
1M, 10k, ...), each sample calling ``summarize`` often enough to cover as many entries as one
call at the largest size (100 calls at 10k), so a short hiccup of the shared machine cannot
dominate the small sizes. Quick mode uses 10k, 30k and 100k.

The calls go round copies of each snapshot (pickled and loaded again, so each has its own
dicts; 100k entries in all at 10k), not 100 times through one: ``summarize`` spends most of its
time fetching two fields from every entry's dict, and one 10k-entry snapshot summarised 100
times in a row stays in the CPU cache (155-355 ns per entry from run to run), while a real
snapshot is summarised once, whatever its size.

Where the entries lie in memory moves the figure as much as the size does, so it is held the
same at every size: each copy is loaded into fresh memory, while the generated snapshot is still
alive. Loaded into the garbage its generator just freed instead, the 1M-entry snapshot ran at
246-296 ns per entry (against 286-335 in fresh memory), the 10k copies slower, and the row read
1.67x; mixing the two across sizes, as this row once did, read 1.32-1.52x. The empty-trace
copies are 10 per size (one at the largest) so their segments are as cold as in the full calls.
"""

from __future__ import annotations

import pickle
import statistics
from functools import partial
from typing import Any

from common import Context, Row, drop_cached, interleaved, make_snapshot

NAME = "scale"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.results.analysis import summarize

    drop_cached()
    sizes = ctx.pick((10_000, 100_000, 1_000_000), (10_000, 30_000, 100_000))
    calls = {n: max(1, sizes[-1] // n) for n in sizes}  # every sample covers as many entries
    full: dict[int, list[dict[str, Any]]] = {}
    bare: dict[int, list[dict[str, Any]]] = {}  # the same end state, no trace
    for n in sizes:  # the generated snapshot stays alive, so every copy lies in fresh memory
        snap = make_snapshot(n, frames=1, seed=n)
        blob = pickle.dumps(snap, protocol=4)
        full[n] = [pickle.loads(blob) for _ in range(min(calls[n], -(-100_000 // n)))]
        blob = pickle.dumps(dict(snap, device_traces=[[]]), protocol=4)
        bare[n] = [pickle.loads(blob) for _ in range(min(calls[n], 10))]

    def sample(copies: list[dict[str, Any]], n: int) -> None:
        for i in range(calls[n]):
            summarize(copies[i % len(copies)])

    fns = {}
    for n in sizes:
        fns[str(n)] = partial(sample, full[n], n)
        fns[f"{n} end state only"] = partial(sample, bare[n], n)
    times = interleaved(fns, 3 * ctx.repeats)
    per_call = {n: statistics.median(times[str(n)]) / calls[n] for n in sizes}
    fixed = {n: statistics.median(times[f"{n} end state only"]) / calls[n] for n in sizes}
    per_entry = {n: (per_call[n] - fixed[n]) / n for n in sizes}
    plain = {n: per_call[n] / n for n in sizes}
    value = max(plain.values()) / min(plain.values())
    trace_ratio = max(per_entry.values()) / min(per_entry.values())
    ns = {str(n): round(t * 1e9, 1) for n, t in plain.items()}
    note = (
        ", ".join(f"{n // 1000}k: {ns[str(n)]:.0f} ns" for n in sizes)
        + f"; of which {statistics.median(fixed.values()) * 1e3:.2g} ms per call is the end state;"
        + f" {trace_ratio:.2f}x without it"
    )
    return [
        Row(
            "summarize_scale",
            "summarize time per entry, max/min over sizes",
            f"summarize at {', '.join(f'{n:,}' for n in sizes)} entries (1 frame each)",
            value,
            "x",
            "<= 1.5x",
            value <= 1.5,
            {
                "ns_per_entry": ns,
                "end_state_ms": {str(n): round(t * 1e3, 3) for n, t in fixed.items()},
                "segments": {str(n): len(full[n][0]["segments"]) for n in sizes},
                "ns_per_trace_entry": {str(n): round(t * 1e9, 1) for n, t in per_entry.items()},
                "ratio_per_trace_entry": trace_ratio,
                "times_s": times,
                "calls_per_sample": calls,
                "repeats": 3 * ctx.repeats,
                "frames_per_entry": 1,
            },
            note=note,
        )
    ]
