"""Numbers and lists as people read them, in every view: bytes in binary units, step numbers as
ranges, counted nouns."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.names import number_list

__all__ = ["count_of", "fmt_bytes", "number_list", "step_list"]  # number_list: the names' own, said here too

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    """Binary units, as torch and memory_viz print them: ``4.0 MiB``, ``+512 B``."""
    if n is None:
        return "—"
    sign = ("+" if n > 0 else "-" if n < 0 else "±") if signed else ("-" if n < 0 else "")
    value = float(abs(n))
    # compared as printed, and never four digits before the point: 1,048,568 B is 1.0 MiB, not
    # 1024.0 KiB, and 1,024,000 B is 1.0 MiB, not 1000.0 KiB (it read as a thousand of a unit)
    for unit in _UNITS:
        if unit == _UNITS[-1] or (value < 1000 if unit == "B" else round(value, 1) < 1000):
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


def count_of(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'s' * (n != 1)}"
