"""Long ``%%memsnap`` lines: a ``steps=`` list of 100,000 steps against one of 10,000.

Why this reference: the work on a line should grow with its length, no faster. The row times the
whole magic on a cell whose loop marks nothing (the steps never begin: no recording is taken, the
line is read and the warning said) at both lengths, in one shell; 10x the steps should cost ~10x
(target <= 15x). IPython's own expansion of ``$name``/``{expr}``, which costs ~1 ms per 1,000
characters, is skipped for lines that hold neither.
"""

from __future__ import annotations

import warnings

from common import Context, Row, close_shell, interleaved, make_shell, ratio_row

NAME = "options"


def run(ctx: Context) -> list[Row]:
    shell = make_shell(ctx.work / "options")
    small, large = ctx.pick((10_000, 100_000), (1_000, 10_000))

    def cell(n: int) -> str:
        return f"%%memsnap steps={','.join(map(str, range(1, n + 1)))} device=cpu\n_x = 1\n"

    cells = {"reference": cell(small), "measured": cell(large)}

    def run_cell(code: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "steps … never began", every call
            assert shell.run_cell(code).success

    try:
        times = interleaved({k: (lambda c=c: run_cell(c)) for k, c in cells.items()}, ctx.repeats)
    finally:
        close_shell(shell)
    return [
        ratio_row(
            "long_steps_line",
            f"a %%memsnap cell with steps= of {large:,} steps",
            f"the same with {small:,} steps",
            times,
            15.0,
            small=small,
            large=large,
        )
    ]
