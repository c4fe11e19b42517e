"""The background writer on CPU: what a cell's user waits for after its body, with the file
written in the background (the default) against ``wait=true`` (written before the cell returns),
and the plain cell right after each; and a plain compute cell run right after a recorded cell (a
notebook run top to bottom: its write still pending), timed whole from its start to its end,
against the same cell once the write is done (``next_compute_cell``).

The cell allocates ``tensors`` small tensors and keeps them (a long trace, a big file). On CPU
stopping the profiler and walking its events dominate the after-cell work, so the saving is
reported without a target; the GPU target (<= 0.75x of a bare ``_snapshot()`` + ``pickle.dump``)
is ``gpu_check``'s ``large_trace``. Quick mode: 3,000 tensors.
"""

from __future__ import annotations

import statistics
import time

from common import Context, Row, close_shell, make_shell, run_cell

NAME = "write"


def run(ctx: Context) -> list[Row]:
    tensors = ctx.pick(40_000, 3_000)
    shell = make_shell(ctx.work / "write")
    try:
        run_cell(shell, "import time, torch\nkeep = []")
        body = f"keep = [torch.empty(16) for _ in range({tensors})]\n_t_end = time.perf_counter()\n"
        cells = {
            "background": f"%%memsnap device=cpu step=1\n{body}",
            "wait": f"%%memsnap device=cpu step=1 wait=true\n{body}",
        }
        after: dict[str, list[float]] = {k: [] for k in cells}
        following: dict[str, list[float]] = {k: [] for k in cells}
        for r in range(ctx.repeats + 1):  # the first round warms up, untimed
            for name in cells if r % 2 == 0 else reversed(list(cells)):
                run_cell(shell, cells[name])
                done = time.perf_counter()
                t0 = time.perf_counter()
                run_cell(shell, "pass")
                if r:
                    after[name].append(done - shell.user_ns["_t_end"])
                    following[name].append(time.perf_counter() - t0)
        compute = (
            "_t0 = time.perf_counter()\n"
            "for _ in range(10000):\n"
            "    torch.ones(64).add_(1).sum()\n"
            "_t = time.perf_counter() - _t0"
        )
        racing: list[float] = []  # the cell's whole time, from its start to its end, as a user sees it
        alone: list[float] = []
        inside: dict[str, list[float]] = {"racing": [], "alone": []}  # the timed loop's alone
        from memsnap_magic import session, wait_for_writes

        for r in range(ctx.repeats + 1):
            order = ("racing", "alone") if r % 2 == 0 else ("alone", "racing")
            for name in order:
                run_cell(shell, cells["background"])
                if name == "alone":
                    wait_for_writes()
                t0 = time.perf_counter()
                run_cell(shell, compute)
                wall = time.perf_counter() - t0
                if r:
                    (racing if name == "racing" else alone).append(wall)
                    inside[name].append(shell.user_ns["_t"])
            wait_for_writes()
        iv = session().intervals[-1]
        entries = iv.trace_entries
        file_mb = (iv.file_bytes or 0) / 1e6
    finally:
        close_shell(shell)
    med = {k: statistics.median(v) for k, v in after.items()}
    nxt = {k: statistics.median(v) for k, v in following.items()}
    value = med["background"] / med["wait"]
    race, calm = statistics.median(racing), statistics.median(alone)
    return [
        Row(
            "background_write",
            "after-body latency of a %%memsnap cell, file written in the background",
            f"the same cell with wait=true: {tensors:,} tensors kept, {entries:,} entries, {file_mb:.1f} MB file",
            value,
            "x",
            "report only (CPU)",
            None,
            {
                "median_after_body_s": med,
                "median_next_cell_s": nxt,
                "after_body_s": after,
                "next_cell_s": following,
                "repeats": ctx.repeats,
                "trace_entries": entries,
            },
            note=f"{med['background'] * 1e3:.0f} vs {med['wait'] * 1e3:.0f} ms; the next cell "
            f"{nxt['background'] * 1e3:.0f} vs {nxt['wait'] * 1e3:.1f} ms",
        ),
        Row(
            "next_compute_cell",
            "a plain compute cell (10,000 small torch ops) right after a recorded cell, its write going on",
            "the same cell once the write is done",
            race / calm,
            "x",
            "<= 1.15",
            race / calm <= 1.15,
            {"racing_s": racing, "alone_s": alone, "in_cell_s": inside, "repeats": ctx.repeats},
            note=f"{race * 1e3:.0f} vs {calm * 1e3:.0f} ms, the whole cell (its loop alone: "
            f"{statistics.median(inside['racing']) * 1e3:.0f} vs {statistics.median(inside['alone']) * 1e3:.0f} ms)",
        ),
    ]
