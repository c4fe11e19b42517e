"""The CPU route on allocation-heavy cells: a ``%%memsnap`` cell against the bare profiler session.

The loop makes tiny tensors (``torch.empty(4)``: one allocation and one free per iteration). The
reference is the **bare profiler session**, the floor the CPU route cannot go under: the cheapest
session that sees the same allocation events (CPU activity, user scope, ``profile_memory`` on,
nothing else) enabled, the loop, ``_disable_profiler()``, its results freed in the cell (as a cell's
output they would be kept until a later cell paid for freeing them). Everything the cell costs
beyond it is the magic's, the Python tracer that gives allocations their stacks included: reading
the events, the namespace walks, building, writing and summarising the snapshot. The cell leaves its
file and the freeing of PyTorch's results to the background writer; each call starts once that is
done, and the first two rows also time the cell with it waited for (``settled``). Rows:

- the cell with ``max_entries=1000`` on 300k events / the bare session (target <= 1.2x: what
  ``max_entries`` keeps out of the file must also stay out of the work), ``context=none`` in the note;
- 40k allocations (80k events) with every entry kept (target <= 1.5x), and the same with
  ``context=none`` (no tracer, no stacks) in the note;
- the cell at 2k, 200k and 1M events (the scaling: ratio, ours per event, RSS over the bare
  session's, each from fresh processes);
- peak RSS of a fresh process running the cell (300k events), above a fresh process running the
  bare session (target <= 150 MB); in the note the bare session's own growth (~2 KB per event),
  the same session with the Python tracer on, and the cell with ``context=none``;
- PyTorch's own floors under the first two rows, which no reader of its events can go under: the
  bare session with the Python tracer on (what the stacks cost inside PyTorch), and the bare session
  followed by reading every event's address and size through its Python API (the event tree and
  each event's fields, C-level passes), both as ratios to the bare session.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import textwrap

from common import (
    BARE,
    BARE_END,
    BARE_TRACER,
    REPO_ROOT,
    Context,
    Row,
    close_shell,
    interleaved,
    make_shell,
    run_cell,
    torch_threads,
)

NAME = "cpu_events"

# The least any reader of the bare session's events through PyTorch's Python API can do: the
# event tree, each event's fields, address and size, read by C-level passes and let go.
READ_EVERY_EVENT = """
from operator import attrgetter as _get
_fields = list(map(_get("extra_fields"), _disable_profiler().experimental_event_tree()))
list(map(_get("ptr"), _fields)), list(map(_get("alloc_size"), _fields))
del _fields
"""


def loop(events: int) -> str:
    return f"for _ in range({events // 2}):\n    t = torch.empty(4)\n"


def time_cells(
    ctx: Context, cells: dict[str, tuple[int, str]], repeats: dict[str, int], floors: tuple[str, ...] = ()
) -> dict[str, dict]:
    """Each named cell (``(events, magic line)``) against the bare session on the same loop,
    interleaved; for the cells in ``floors`` also PyTorch's floors: the bare session with the
    Python tracer on (what stacks cost PyTorch) and the bare session with every event read."""
    from memsnap_magic import wait_for_writes

    shell = make_shell(ctx.work / "cpu_events")
    try:
        run_cell(shell, "import torch")
        run_cell(shell, "%%memsnap device=cpu\nwarm = torch.ones(4)")  # the profiler's one-off start
        out = {}
        for name, (n, magic) in cells.items():
            bare = BARE + loop(n) + BARE_END
            calls = {
                "measured": lambda n=n, magic=magic: run_cell(shell, f"{magic}\n{loop(n)}"),
                "reference": lambda bare=bare: run_cell(shell, bare),
            }
            if name in floors:
                tracer, read = BARE_TRACER + loop(n) + BARE_END, BARE + loop(n) + READ_EVERY_EVENT
                # the cell with what it leaves to the background (its file, freeing PyTorch's results) done
                calls["settled"] = lambda cell=calls["measured"]: (cell(), wait_for_writes())
                calls["bare_tracer"] = lambda tracer=tracer: run_cell(shell, tracer)
                calls["read_every_event"] = lambda read=read: run_cell(shell, read)
            # each call starts once the writes before it are done: no reference pays for the cell's file
            out[name] = interleaved(calls, repeats.get(name, ctx.repeats), settle=wait_for_writes)
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
    kept = 80_000  # 40k allocations and their frees, every entry kept
    sizes = ctx.pick([2_000, 200_000, 1_000_000], [2_000, 60_000])
    cells = {
        "main": (main, "%%memsnap device=cpu max_entries=1000"),
        "main_no_stacks": (main, "%%memsnap device=cpu max_entries=1000 context=none"),
        "kept": (kept, "%%memsnap device=cpu max_entries=500000"),
        "kept_no_stacks": (kept, "%%memsnap device=cpu max_entries=500000 context=none"),
        **{f"scale_{n}": (n, "%%memsnap device=cpu max_entries=1000") for n in sizes},
    }
    with torch_threads(1):
        times = time_cells(
            ctx, cells, {f"scale_{n}": min(ctx.repeats, 3) for n in sizes if n >= 500_000}, floors=("main", "kept")
        )
    med = {k: {side: statistics.median(v) for side, v in t.items()} for k, t in times.items()}
    ratio = {k: m["measured"] / m["reference"] for k, m in med.items()}
    ours_us = {k: (m["measured"] - m["reference"]) / cells[k][0] * 1e6 for k, m in med.items()}
    floors = {  # PyTorch's, as ratios to the bare session: the tracer's, and reading every event
        k: {f: med[k][f] / med[k]["reference"] for f in ("bare_tracer", "read_every_event")} for k in ("main", "kept")
    }
    settled = {k: med[k]["settled"] / med[k]["reference"] for k in floors}
    beyond_tracer_us = {k: (med[k]["measured"] - med[k]["bare_tracer"]) / cells[k][0] * 1e6 for k in floors}
    rows = [
        Row(
            "cpu_cell_vs_bare",
            f"%%memsnap cell, CPU, {main:,} allocation events, max_entries=1000",
            "bare profiler session, same loop",
            ratio["main"],
            "x",
            "<= 1.2x",
            ratio["main"] <= 1.2,
            {
                "median_s": med["main"],
                "times_s": times["main"],
                "ours_us_per_event": ours_us["main"],
                "beyond_tracer_us_per_event": beyond_tracer_us["main"],
                "floors": floors["main"],
                "no_stacks_ratio": ratio["main_no_stacks"],
                "no_stacks_median_s": med["main_no_stacks"],
                "no_stacks_ours_us_per_event": ours_us["main_no_stacks"],
                "settled_ratio": settled["main"],
            },
            f"{settled['main']:.2f}x with its background work waited for; "
            f"{ours_us['main']:.2f} µs per event ours, {beyond_tracer_us['main']:.2f} beyond the session with "
            f"the tracer ({floors['main']['bare_tracer']:.2f}x); context=none: {ratio['main_no_stacks']:.2f}x, "
            f"{ours_us['main_no_stacks']:.2f} µs per event, reading every event alone "
            f"{floors['main']['read_every_event']:.2f}x; bare = {med['main']['reference']:.2f} s",
        ),
        Row(
            "cpu_cell_all_kept",
            f"the same, {kept:,} events, every entry kept (max_entries=500000), stacks on",
            "bare profiler session, same loop",
            ratio["kept"],
            "x",
            "<= 1.5x",
            ratio["kept"] <= 1.5,
            {
                "median_s": med["kept"],
                "times_s": times["kept"],
                "no_stacks_ratio": ratio["kept_no_stacks"],
                "no_stacks_median_s": med["kept_no_stacks"],
                "settled_ratio": settled["kept"],
                "floors": floors["kept"],
            },
            f"{settled['kept']:.2f}x with its background work waited for; context=none (no Python tracer): "
            f"{ratio['kept_no_stacks']:.2f}x; the session with the tracer alone {floors['kept']['bare_tracer']:.2f}x",
        ),
    ]
    read_us = (med["main"]["read_every_event"] - med["main"]["reference"]) / main * 1e6
    for name, key, what, extra in (
        (
            "cpu_floor_python_tracer",
            "bare_tracer",
            "the bare session with PyTorch's Python tracer on (what stacks cost PyTorch)",
            "",
        ),
        (
            "cpu_floor_read_every_event",
            "read_every_event",
            "the bare session, then every event's address and size read through PyTorch's API",
            f"{read_us:.2f} µs per event; ",
        ),
    ):
        rows.append(
            Row(
                name,
                f"{what}, {main:,} events",
                "bare profiler session, same loop",
                floors["main"][key],
                "x",
                "report only",
                None,
                {"at_kept": floors["kept"][key], "median_s": med["main"][key]},
                f"{extra}{floors['kept'][key]:.2f}x at {kept:,} events",
            )
        )
    peaks = {
        n: (
            peak_kib(BARE + loop(n) + BARE_END, str(ctx.work)),
            peak_kib(f"%%memsnap device=cpu max_entries=1000\n{loop(n)}", str(ctx.work)),
        )
        for n in sizes
    }
    on_top = {n: (cell[1] - bare[1]) / 1024 for n, (bare, cell) in peaks.items()}
    rows.append(
        Row(
            "cpu_cell_scaling",
            "the same at " + " → ".join(f"{n // 1000}k" for n in sizes) + " events: cell / bare (max over sizes)",
            "bare profiler session at that size",
            max(ratio[f"scale_{n}"] for n in sizes),
            "x",
            "report only",
            None,
            {
                "ratio": {n: ratio[f"scale_{n}"] for n in sizes},
                "ours_us_per_event": {n: ours_us[f"scale_{n}"] for n in sizes},
                "median_s": {n: med[f"scale_{n}"] for n in sizes},
                "rss_on_top_mib": on_top,
                "bare_peak_mib": {n: peaks[n][0][1] / 1024 for n in sizes},
            },
            "; ".join(
                f"{n // 1000}k: {ratio[f'scale_{n}']:.2f}x, {ours_us[f'scale_{n}']:.2f} µs/event ours, "
                f"RSS +{on_top[n]:.0f} MB over bare's {peaks[n][0][1] / 1024:.0f} MB"
                for n in sizes
            ),
        )
    )
    (start, bare_kib), (_, cell_kib) = (
        peak_kib(BARE + loop(main) + BARE_END, str(ctx.work)),
        (peak_kib(f"%%memsnap device=cpu max_entries=1000\n{loop(main)}", str(ctx.work))),
    )
    tracer_kib = peak_kib(
        BARE_TRACER + loop(main) + "_roots = _disable_profiler().experimental_event_tree()\ndel _roots\n",
        str(ctx.work),
    )[1]
    none_kib = peak_kib(f"%%memsnap device=cpu max_entries=1000 context=none\n{loop(main)}", str(ctx.work))[1]
    on_top_main = (cell_kib - bare_kib) / 1024
    rows.append(
        Row(
            "cpu_cell_rss_on_top",
            f"peak RSS of the cell above the bare session's, {main:,} events, max_entries=1000, fresh processes",
            "bare profiler session (its own peak in the note)",
            on_top_main,
            "MB",
            "<= 150 MB",
            on_top_main <= 150,
            {
                "bare_peak_mib": bare_kib / 1024,
                "cell_peak_mib": cell_kib / 1024,
                "start_peak_mib": start / 1024,
                "bare_with_tracer_peak_mib": tracer_kib / 1024,
                "no_stacks_cell_peak_mib": none_kib / 1024,
            },
            f"peaks {cell_kib / 1024:.0f} vs {bare_kib / 1024:.0f} MB; the session grew it "
            f"{(bare_kib - start) / 1024:.0f} MB, {(bare_kib - start) * 1024 / main:.0f} B per event; with "
            f"the Python tracer the bare session itself peaks at {tracer_kib / 1024:.0f} MB; context=none: "
            f"{(none_kib - bare_kib) / 1024:+.0f} MB",
        )
    )
    return rows
