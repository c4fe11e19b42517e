"""Row 5: the first ``%%memsnap`` cell of a fresh process vs the later ones.

The first cell pays one-off costs: importing the recorder, backend and analysis modules and
starting the profiler for the first time (``_Profiler.warm_up``). Each sample is a fresh
subprocess (``--child``) that sets up the MLP of row 4, runs the plain cell once (torch's own
warm-up), then one ``%%memsnap`` cell (the first) and then magic and plain cells in turn. The
reference is the median of the later magic cells of the same process; reported are first/later
and the absolute time the first cell adds over them. No target: this is reported, not judged.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from common import MLP_SETUP, Context, Row, interleaved, make_shell, mlp_steps, run_cell, timed, torch_threads

NAME = "first_cell"
STEPS = 15


def child(work: Path, later: int) -> None:
    shell = make_shell(work)
    body = mlp_steps(STEPS)
    with torch_threads(1):
        run_cell(shell, MLP_SETUP)
        run_cell(shell, body)
        first = timed(lambda: run_cell(shell, "%%memsnap\n" + body))
        times = interleaved(
            {"magic": lambda: run_cell(shell, "%%memsnap\n" + body), "plain": lambda: run_cell(shell, body)},
            later,
            warmup=0,
        )
    print(json.dumps({"first": first, **times}))


def run(ctx: Context) -> list[Row]:
    processes = ctx.pick(5, 1)
    later = ctx.pick(5, 3)
    samples = []
    for n in range(processes):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(ctx.work / f"first{n}"), str(later)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        samples.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first = statistics.median(s["first"] for s in samples)
    later_magic = statistics.median(statistics.median(s["magic"]) for s in samples)
    later_plain = statistics.median(statistics.median(s["plain"]) for s in samples)
    value = first / later_magic
    added = first - later_magic
    return [
        Row(
            "first_cell",
            "first %%memsnap cell of a process / later ones",
            "later %%memsnap cells, same process",
            value,
            "x",
            "report only",
            None,
            {
                "first_s": first,
                "later_magic_s": later_magic,
                "later_plain_s": later_plain,
                "first_added_s": added,
                "processes": processes,
                "later_cells_per_process": later,
                "samples": samples,
                "steps": STEPS,
                "torch_threads": 1,
            },
            note=f"+{added:.3f} s",
        )
    ]


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child":
    child(Path(sys.argv[2]), int(sys.argv[3]))
