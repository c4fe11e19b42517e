"""How a run and a file are named to people, wherever they are named: the cell's line, a
warning, the table, the dashboard."""

from __future__ import annotations

import os

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
