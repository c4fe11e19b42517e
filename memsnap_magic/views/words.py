"""Numbers and lists as people read them, in every view: bytes in binary units, step numbers as
ranges, counted nouns."""

from __future__ import annotations

from collections.abc import Sequence

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    """Binary units, as torch and memory_viz print them: ``4.0 MiB``, ``+512 B``."""
    if n is None:
        return "—"
    sign = ("+" if n > 0 else "-" if n < 0 else "±") if signed else ("-" if n < 0 else "")
    value = float(abs(n))
    for unit in _UNITS:  # compared as printed: 1,048,568 B is 1.0 MiB, not 1024.0 KiB
        if unit == _UNITS[-1] or (value < 1024 if unit == "B" else round(value, 1) < 1024):
            break
        value /= 1024
    text = f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    return sign + text


def step_list(steps: Sequence[int]) -> str:
    """``step 4`` for one, ``steps 3–4`` for consecutive numbers, ``steps 1, 5, 10``, ``steps 1–40, 50``."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if list(steps) == list(range(steps[0], steps[0] + len(steps))):
        return f"steps {steps[0]}–{steps[-1]}"
    return f"steps {number_list(steps)}"


def number_list(numbers: Sequence[int]) -> str:
    """Ascending numbers, runs of three or more as ranges: ``1–40, 50, 60, 61``."""
    parts: list[str] = []
    start = 0
    for n in range(1, len(numbers) + 1):
        if n == len(numbers) or numbers[n] != numbers[n - 1] + 1:
            run = numbers[start:n]
            parts += [f"{run[0]}–{run[-1]}"] if len(run) >= 3 else map(str, run)
            start = n
    return ", ".join(parts)


def count_of(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'s' * (n != 1)}"
