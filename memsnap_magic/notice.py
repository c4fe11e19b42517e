"""How memsnap speaks of its own trouble: a warning that never fails the user's cell."""

from __future__ import annotations

import sys
import warnings

BACKGROUND = ("<memsnap background write>", 0)  # where a warning from no line of the user's reads as from


def warn(message: str, stacklevel: int = 2, where: tuple[str, int] | None = None) -> None:
    """One RuntimeWarning about our own trouble, which never raises: under ``-W error`` (or
    pytest's ``filterwarnings = error``) it is printed to stderr instead of failing the user's cell.

    Shown every time, as the user's filters allow: ``warnings.warn`` shows a text once per place
    it is raised from (Python's ``default`` action), and ours come from a few places in our code,
    so a second unwritable snapshot would pass in silence. ``where`` (file, line) names the
    place instead of the caller ``stacklevel`` up: for what no line of the user's caused."""
    if where is not None:
        try:
            warnings.warn_explicit(message, RuntimeWarning, where[0], where[1], module="memsnap_magic", registry={})
        except Exception:
            print(f"RuntimeWarning: {message}", file=sys.stderr)
        return
    try:
        try:
            frame = sys._getframe(stacklevel)
        except ValueError:  # a shallower stack: the outermost frame
            frame = sys._getframe(0)
            while frame.f_back is not None:
                frame = frame.f_back
        warnings.warn_explicit(
            message,
            RuntimeWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=frame.f_globals.get("__name__"),
            registry={},  # a fresh one: no memory of having shown this text from there before
            module_globals=frame.f_globals,
        )
    except Exception:
        print(f"RuntimeWarning: {message}", file=sys.stderr)
