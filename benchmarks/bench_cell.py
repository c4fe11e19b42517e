"""Row 4: a ``%%memsnap`` cell on the CPU backend vs the same cell without the magic.

The cell runs 15 training steps (forward, backward, ``opt.step()``, ``zero_grad()``) of a
3-layer MLP (512 -> 1024 -> 1024 -> 10, batch 64, SGD) in an in-process IPython shell
(history off, cwd a scratch folder, the magic's summary line swallowed). The reference is the
identical cell run plainly in the same shell, so the ratio is everything the magic adds:
profiler on/off, namespace walks, building, writing and summarising the snapshot
(target <= 1.25x). ``torch.set_num_threads(1)`` keeps the 2-core machine's noise down; the
profiler's one-off start is paid by a warm-up round (row 5 measures it).
"""

from __future__ import annotations

from common import (
    MLP_SETUP,
    Context,
    Row,
    close_shell,
    interleaved,
    make_shell,
    mlp_steps,
    ratio_row,
    run_cell,
    torch_threads,
)

NAME = "cell"
STEPS = 15


def run(ctx: Context) -> list[Row]:
    from memsnap_magic import session

    shell = make_shell(ctx.work / "cell")
    body = mlp_steps(STEPS)
    try:
        with torch_threads(1):
            run_cell(shell, MLP_SETUP)
            times = interleaved(
                {"measured": lambda: run_cell(shell, "%%memsnap\n" + body), "reference": lambda: run_cell(shell, body)},
                ctx.repeats,
            )
        entries = session().intervals[-1].trace_entries
    finally:
        close_shell(shell)
        session().reset()
    return [
        ratio_row(
            "cell_overhead",
            f"%%memsnap cell, CPU, {STEPS} MLP steps",
            "same cell without the magic",
            times,
            1.25,
            steps=STEPS,
            torch_threads=1,
            trace_entries=entries,
        )
    ]
