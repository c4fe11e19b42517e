"""The CPU route on allocation-heavy cells: a ``%%memsnap`` cell against the bare profiler session.

The loop makes tiny tensors (``torch.empty(4)``: one allocation and one free per iteration). The
reference is the **bare profiler session**, the floor the CPU route cannot go under: the cheapest
session that sees the same allocation events (CPU activity, user scope, ``profile_memory`` on,
nothing else) enabled, the loop, ``_disable_profiler()``. Everything the cell costs beyond it is
the magic's: reading the events, the namespace walks, building, writing and summarising the
snapshot. Rows:

- the cell with ``max_entries=1000`` on 300k events / the bare session (target <= 1.25x: what
  ``max_entries`` keeps out of the file must also stay out of the work);
- the same at 20k and 600k events (the scaling; ours per event in the note);
- peak RSS of a fresh process running the cell, above a fresh process running the bare session
  (target <= 150 MB), and the bare session's own peak (the profiler's buffer, ~2 KB per event).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import textwrap

from common import REPO_ROOT, Context, Row, close_shell, interleaved, make_shell, run_cell, torch_threads

NAME = "cpu_events"

BARE = """
from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig
_config = ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig())
_prepare_profiler(_config, {ProfilerActivity.CPU})
_enable_profiler(_config, {ProfilerActivity.CPU}, {RecordScope.USER_SCOPE})
"""


def loop(events: int) -> str:
    return f"for _ in range({events // 2}):\n    t = torch.empty(4)\n"


def time_sizes(ctx: Context, sizes: list[int]) -> dict[int, dict[str, list[float]]]:
    shell = make_shell(ctx.work / "cpu_events")
    try:
        run_cell(shell, "import torch")
        run_cell(shell, "%%memsnap device=cpu\nwarm = torch.ones(4)")  # the profiler's one-off start
        out = {}
        for n in sizes:
            bare = BARE + loop(n) + "_disable_profiler()\n"
            out[n] = interleaved(
                {
                    "measured": lambda n=n: run_cell(shell, f"%%memsnap device=cpu max_entries=1000\n{loop(n)}"),
                    "reference": lambda bare=bare: run_cell(shell, bare),
                },
                ctx.repeats,
            )
        return out
    finally:
        close_shell(shell)


PEAK = """
import io, contextlib, sys
from IPython.core.interactiveshell import InteractiveShell

def high_water():  # this process's own peak RSS, KiB (ru_maxrss would carry the parent's over a fork)
    return int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1])

sh = InteractiveShell.instance()
sh.run_line_magic("load_ext", "memsnap_magic")
with contextlib.redirect_stdout(io.StringIO()):
    sh.run_cell("import torch")
    sh.run_cell("%%memsnap device=cpu\\nwarm = torch.ones(4)")
    start = high_water()
    assert sh.run_cell(sys.argv[1]).success
print(start, high_water())
"""


def peak_kib(cell: str, cwd: str) -> tuple[int, int]:
    """A fresh process's peak RSS before and after it runs ``cell`` (KiB), the same imports and
    warm-up before it whatever the cell."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PEAK), cell],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "MPLBACKEND": "Agg", "KINETO_LOG_LEVEL": "6"},
        check=True,
    )
    start, end = proc.stdout.split()[-2:]
    return int(start), int(end)


def run(ctx: Context) -> list[Row]:
    main = ctx.pick(300_000, 60_000)
    sizes = ctx.pick([20_000, main, 600_000], [20_000, main])
    with torch_threads(1):
        times = time_sizes(ctx, sizes)
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    ratio = {n: m["measured"] / m["reference"] for n, m in med.items()}
    ours_us = {n: (m["measured"] - m["reference"]) / n * 1e6 for n, m in med.items()}
    scale_note = ", ".join(f"{n // 1000}k: {ratio[n]:.2f}x ({ours_us[n]:.2f} µs/event ours)" for n in sizes)
    rows = [
        Row(
            "cpu_cell_vs_bare",
            f"%%memsnap cell, CPU, {main:,} allocation events, max_entries=1000",
            "bare profiler session, same loop",
            ratio[main],
            "x",
            "<= 1.25x",
            ratio[main] <= 1.25,
            {"median_s": med[main], "times_s": times[main], "ours_us_per_event": ours_us[main]},
            f"{ours_us[main]:.2f} µs per event ours; bare = {med[main]['reference']:.2f} s",
        ),
        Row(
            "cpu_cell_scaling",
            "the same, at each size: cell / bare (max over sizes)",
            "bare profiler session at that size",
            max(ratio.values()),
            "x",
            "report only",
            None,
            {"ratio": ratio, "ours_us_per_event": ours_us, "median_s": med},
            scale_note,
        ),
    ]
    events = ctx.pick(300_000, 60_000)
    start, bare_kib = peak_kib(BARE + loop(events) + "_disable_profiler()\n", str(ctx.work))
    _, cell_kib = peak_kib(f"%%memsnap device=cpu max_entries=1000\n{loop(events)}", str(ctx.work))
    on_top = (cell_kib - bare_kib) / 1024
    rows.append(
        Row(
            "cpu_cell_rss_on_top",
            f"peak RSS of the cell above the bare session's, {events:,} events, fresh processes",
            "bare profiler session (its own peak in the note)",
            on_top,
            "MB",
            "<= 150 MB",
            on_top <= 150,
            {"bare_peak_mib": bare_kib / 1024, "cell_peak_mib": cell_kib / 1024, "start_peak_mib": start / 1024},
            f"peaks {cell_kib / 1024:.0f} vs {bare_kib / 1024:.0f} MB; the session grew it "
            f"{(bare_kib - start) / 1024:.0f} MB, {(bare_kib - start) * 1024 / events:.0f} B per event",
        )
    )
    return rows
