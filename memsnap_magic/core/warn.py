"""How memsnap speaks of its own trouble: a warning that never fails the user's cell, blamed on
the user's line that caused it, and said once per process where once is enough."""

from __future__ import annotations

import sys
import warnings
from contextvars import ContextVar
from typing import Any

BACKGROUND = ("<memsnap background write>", 0)  # where a warning from no line of the user's reads as from
_BLAMED: ContextVar[tuple[str, int] | None] = ContextVar("memsnap_blamed", default=None)


class blamed_on:  # used as a function: ``with blamed_on(where):``
    """Warnings inside point at ``where`` (the user's ``with`` line, a ``%%memsnap`` line), not
    at the line of ours that raised them. A class, not a generator: on the CPU route the calls a
    ``%%memsnap`` cell makes while recording are traced and read back, and this takes fewer."""

    __slots__ = ("token", "where")

    def __init__(self, where: tuple[str, int] | None) -> None:
        self.where = where

    def __enter__(self) -> None:
        self.token = _BLAMED.set(self.where)

    def __exit__(self, *exc: object) -> None:
        _BLAMED.reset(self.token)


def blamed() -> tuple[str, int] | None:
    """The place warnings are blamed on now (``blamed_on``), or None."""
    return _BLAMED.get()


def caller_outside(filename: str) -> tuple[str, int]:
    """The file and line of the nearest caller whose code is not in ``filename``."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename == filename:
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def warn(message: str, stacklevel: int = 2, where: tuple[str, int] | None = None) -> None:
    """One RuntimeWarning about our own trouble, which never raises: under ``-W error`` (or
    pytest's ``filterwarnings = error``) it is printed to stderr instead of failing the user's cell.

    Shown every time, as the user's filters allow: ``warnings.warn`` shows a text once per place
    it is raised from (Python's ``default`` action), and ours come from a few places in our code,
    so a second unwritable snapshot would pass in silence. ``where`` (file, line) names the
    place instead of the caller ``stacklevel`` up: for what no line of the user's caused.
    Inside ``blamed_on`` its place is the default."""
    where = where if where is not None else _BLAMED.get()
    module: str | None
    globals_: dict[str, Any] | None
    try:
        if where is not None:
            (filename, lineno), module, globals_ = where, "memsnap_magic", None
        else:
            try:
                frame = sys._getframe(stacklevel)
            except ValueError:  # a shallower stack: the outermost frame
                frame = sys._getframe(0)
                while frame.f_back is not None:
                    frame = frame.f_back
            filename, lineno = frame.f_code.co_filename, frame.f_lineno
            module, globals_ = frame.f_globals.get("__name__"), frame.f_globals
        warnings.warn_explicit(
            message,
            RuntimeWarning,
            filename,
            lineno,
            module=module,
            registry={},  # a fresh one: no memory of having shown this text from there before
            module_globals=globals_,
        )
    except Exception:
        print(f"RuntimeWarning: {message}", file=sys.stderr)


WARNED: set[str] = set()  # keys of the one-time warnings given in this process (a reset keeps them)


def warn_once(key: str, message: str) -> None:
    """Warn with ``message`` the first time ``key`` comes up in this process (at the line that
    called the caller, as ``warn(stacklevel=3)``)."""
    if key not in WARNED:
        WARNED.add(key)
        warn(message, stacklevel=3)
