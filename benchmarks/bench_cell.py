"""Row 4: a ``%%memsnap`` cell on the CPU backend vs the same cell without the magic.

The cell runs 15 training steps (forward, backward, ``opt.step()``, ``zero_grad()``) of a
3-layer MLP (512 -> 1024 -> 1024 -> 10, batch 64, SGD) in an in-process IPython shell
(history off, cwd a scratch folder, the magic's summary line swallowed). The reference is the
identical cell run plainly in the same shell, so the ratio is everything the magic adds:
profiler on/off, namespace walks, building, writing and summarising the snapshot
(target <= 1.25x); in the note, PyTorch's own part: its bare profiler session with the Python
tracer on (as the magic opens it for stacks) around the same body. ``torch.set_num_threads(1)``
keeps the 2-core machine's noise down; the profiler's one-off start is paid by a warm-up round
(row 5 measures it).

Second row: ``steps=1,10`` over a 10-step loop calling ``mark(step)``, against the same loop
without the magic: two recorded steps, and the eight between them followed by a memory-only
profiler session (no tracer) so that step 10 starts where the loop really stands (target <= 1.25x).

Third row: the fixed cost of the magic on a cell that does nothing (``_tiny = 1``), in that same
shell (the MLP and its optimizer in the namespace, as in a training notebook): milliseconds added
over the plain cell, the difference of the medians (target <= 2.5 ms, issue 44's); in the note,
PyTorch's part: its profiler session with the tracer switched on and off around the same cell
(the imports and config it needs made once beforehand, as the magic makes them once per process),
IPython's: a cell magic that only runs its body, and all three again timed without the collection
each call follows elsewhere (a full collection reads every object of the process, leaving the
caches cold for the call). Fourth: the same once the session holds 2,000 more recorded steps, as
a ratio to the third (target <= 1.25x: the session's bookkeeping per cell does not grow with its
length).

The file is written in the background, so each row times what the user waits for: every call
starts once the writes before it are done (untimed), so no plain cell pays for the recorded one
before it. Each row also times the recorded cell with its write waited for (``with_write``,
in the note), the magic's whole work.
"""

from __future__ import annotations

import statistics

from common import (
    BARE_END,
    BARE_ON,
    BARE_TRACER,
    BARE_TRACER_SETUP,
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
LOOP_STEPS, LISTED = 10, "1,10"  # steps= records these; the others are followed by a memory-only session
LATE_STEPS = 2000  # recorded cells before the fixed cost is timed again


def marked_loop(steps: int) -> str:
    """A cell body: ``steps`` MLP training steps, each starting with ``mark(step)``."""
    body = mlp_steps(1).split("\n", 1)[1]  # the loop's body, indented
    return f"for step in range(1, {steps + 1}):\n    mark(step)\n{body}"


def run(ctx: Context) -> list[Row]:
    from memsnap_magic import session, wait_for_writes

    def written(code: str) -> None:
        run_cell(shell, code)
        wait_for_writes()

    shell = make_shell(ctx.work / "cell")
    body = mlp_steps(STEPS)
    try:
        with torch_threads(1):
            run_cell(shell, MLP_SETUP)
            times = interleaved(
                {
                    "measured": lambda: run_cell(shell, "%%memsnap\n" + body),
                    "reference": lambda: run_cell(shell, body),
                    "with_write": lambda: written("%%memsnap\n" + body),
                    # PyTorch's part: its profiler session with the tracer on, around the same body
                    "bare_session": lambda: run_cell(shell, BARE_TRACER + body + BARE_END),
                },
                ctx.repeats,
                settle=wait_for_writes,
            )
            entries = session().intervals[-1].trace_entries
            run_cell(shell, BARE_TRACER_SETUP)  # the tiny cell's bare session is the session alone
            # IPython's part: a cell magic that only runs its body
            shell.register_magic_function(lambda line, cell: exec(cell, shell.user_ns), "cell", "bare_magic")
            tiny_cells = {
                "measured": lambda: run_cell(shell, "%%memsnap\n_tiny = 1"),
                "reference": lambda: run_cell(shell, "_tiny = 1"),
                "with_write": lambda: written("%%memsnap\n_tiny = 1"),
                "bare_session": lambda: run_cell(shell, BARE_ON + "_tiny = 1\n" + BARE_END),
                "bare_magic": lambda: run_cell(shell, "%%bare_magic\n_tiny = 1"),
            }
            tiny = interleaved(tiny_cells, ctx.repeats * 3, settle=wait_for_writes)
            # the same without the collection before each call: what the cost is with the caches
            # as the cell before left them (a full collection reads every object the process holds)
            del tiny_cells["with_write"]  # the whole write is the same work warm or cold
            warm = interleaved(tiny_cells, ctx.repeats * 3, settle=wait_for_writes, collect=False)
            loop = marked_loop(LOOP_STEPS)
            gaps = interleaved(
                {
                    "measured": lambda: run_cell(shell, f"%%memsnap steps={LISTED}\n" + loop),
                    "reference": lambda: run_cell(shell, loop),  # mark() outside a steps= cell does nothing
                    "with_write": lambda: written(f"%%memsnap steps={LISTED}\n" + loop),
                },
                ctx.repeats,
                settle=wait_for_writes,
            )
            early_steps = len(session().intervals)
            for _ in range(ctx.pick(LATE_STEPS, 200)):  # a long session: thousands of recorded cells
                run_cell(shell, "%%memsnap\n_tiny = 1")
            wait_for_writes()
            late_steps = len(session().intervals)
            late = interleaved(
                {
                    "measured": lambda: run_cell(shell, "%%memsnap\n_tiny = 1"),
                    "reference": lambda: run_cell(shell, "_tiny = 1"),
                },
                ctx.repeats * 3,
                settle=wait_for_writes,
            )
    finally:
        close_shell(shell)
        session().reset()
    overhead = ratio_row(
        "cell_overhead",
        f"%%memsnap cell, CPU, {STEPS} MLP steps",
        "same cell without the magic",
        times,
        1.25,
        steps=STEPS,
        torch_threads=1,
        trace_entries=entries,
    )
    gap = ratio_row(
        "steps_gap_overhead",
        f"%%memsnap steps={LISTED} over {LOOP_STEPS} MLP steps (the 8 between followed unrecorded)",
        "same loop without the magic",
        gaps,
        1.25,
        steps=LOOP_STEPS,
        listed=LISTED,
        torch_threads=1,
    )
    for row, t in ((overhead, times), (gap, gaps)):
        whole = _ratio(t, "with_write")
        row.details["with_write_ratio"] = whole
        row.note = f"{whole:.3g}x with the write waited for"
    bare = _ratio(times, "bare_session")
    overhead.details["bare_session_ratio"] = bare
    overhead.note += f"; PyTorch's bare profiler session with the tracer on, around the same body: {bare:.3g}x"
    return [overhead, _fixed_cost(tiny, warm), _late_cost(tiny, late, early_steps, late_steps), gap]


def _ratio(times: dict[str, list[float]], key: str = "measured") -> float:
    return statistics.median(times[key]) / statistics.median(times["reference"])


def _added_ms(times: dict[str, list[float]], key: str = "measured") -> float:
    """Milliseconds ``key`` adds to the plain cell, the difference of the medians."""
    return (statistics.median(times[key]) - statistics.median(times["reference"])) * 1000


def _fixed_cost(times: dict[str, list[float]], warm: dict[str, list[float]]) -> Row:
    added, whole, bare, magic = (
        _added_ms(times, key) for key in ("measured", "with_write", "bare_session", "bare_magic")
    )
    warm_added, warm_bare, warm_magic = (_added_ms(warm, key) for key in ("measured", "bare_session", "bare_magic"))
    ratio = _ratio(times)
    return Row(
        "tiny_cell_fixed_cost",
        "%%memsnap on a cell that does nothing (_tiny = 1), model and optimizer in the namespace",
        "the same cell without the magic",
        added,
        "ms",
        "<= 2.5 ms",
        added <= 2.5,
        {
            "times_s": times,
            "ratio": ratio,
            "repeats": len(times["measured"]),
            "with_write_ms": whole,
            "bare_session_ms": bare,
            "bare_magic_ms": magic,
            "warm": {
                "times_s": warm,
                "added_ms": warm_added,
                "bare_session_ms": warm_bare,
                "bare_magic_ms": warm_magic,
            },
        },
        note=f"{ratio:.2g}x the plain cell; +{whole:.1f} ms with the write waited for; PyTorch's bare profiler "
        f"session with the tracer on, around the same cell: +{bare:.1f} ms; IPython's part, a cell magic that "
        f"only runs its body: +{magic:.2f} ms. With no collection before each call (the caches as the cell "
        f"before left them): +{warm_added:.1f} ms, PyTorch's part +{warm_bare:.1f} ms, IPython's +{warm_magic:.2f} ms",
    )


def _late_cost(early: dict[str, list[float]], late: dict[str, list[float]], early_steps: int, late_steps: int) -> Row:
    """The fixed cost once the session holds thousands of steps, against the same early on: the
    session's own bookkeeping per cell must not grow with its length."""
    early_ms, late_ms = _added_ms(early), _added_ms(late)
    ratio = late_ms / early_ms
    return Row(
        "tiny_cell_late_in_a_long_session",
        f"the fixed cost above once the session holds {late_steps:,} steps",
        f"the same at {early_steps} steps",
        ratio,
        "x",
        "<= 1.25x",
        ratio <= 1.25,
        {"times_s": late, "early_ms": early_ms, "late_ms": late_ms, "steps": [early_steps, late_steps]},
        note=f"+{late_ms:.1f} ms vs +{early_ms:.1f} ms",
    )
