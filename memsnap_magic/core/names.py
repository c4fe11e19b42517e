"""How a run and a file are named to people, wherever they are named: the cell's line, a
warning, the table, the dashboard."""

from __future__ import annotations

import os
from collections.abc import Sequence

from .clean import clean


def run_label(name: str) -> str:
    """How a run is named to people: the session's own run has no name of its own."""
    return name or "this session"


def shown_path(path: os.PathLike[str] | str) -> str:
    """A file's path to print: relative to the current directory where it lies below it (short,
    as the user wrote ``out=``), else as it is (never normalised: ``link/..`` is where the link
    leads); printable whatever the file's name holds."""
    text = os.fspath(path)
    try:
        here = os.path.join(os.getcwd(), "")
    except OSError:  # the current directory was deleted
        here = ""
    if here and text.startswith(here) and len(text) > len(here):
        text = text[len(here) :]
    return clean(text)


def brief_numbers(numbers: Sequence[int], parts: int = 6) -> str:
    """``number_list`` cut to its first ``parts`` parts and its last number, for a message about a
    long ``steps=`` list: ``1, 3, 5, 7, 9, 11, …, 19999 (10,000 in all)``."""
    whole = number_list(numbers).split(", ")
    if len(whole) <= parts + 1:
        return ", ".join(whole)
    return f"{', '.join(whole[:parts])}, …, {whole[-1]} ({len(numbers):,} in all)"


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
