"""Numbers and lists as people read them, in every view: bytes in binary units, step numbers as
ranges, counted nouns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.names import number_list
from ..core.units import fmt_bytes

__all__ = [
    "count_of",
    "fmt_bytes",
    "number_list",
    "scale_text",
    "step_list",
]  # number_list, fmt_bytes: said below views too


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


def scale_text(scale: Mapping[str, int] | None) -> str:
    """The sizes a step ran at as ``scale=`` takes them: ``batch:8,seq:128`` (none: empty)."""
    return ",".join(f"{name}:{size}" for name, size in (scale or {}).items())
