"""``SnapshotError`` and ``excerpt``: how a bad file is reported, in one bounded line.

Every layer that reads a file, or a value a user gave, says what is wrong through these, so a
message never grows with what the file holds.
"""

from __future__ import annotations

import reprlib
from typing import Any

from .clean import one_line


class SnapshotError(ValueError):
    """A snapshot file is unsafe, unreadable or not in PyTorch's snapshot schema.

    Its message is one printable line of bounded length, whatever a file's name or content held."""

    def __init__(self, message: object = "") -> None:
        super().__init__(one_line(str(message), MESSAGE_LIMIT))


MESSAGE_LIMIT = 1000  # characters of a SnapshotError's message


class _Excerpt(reprlib.Repr):
    """``repr`` with every part capped: a message never grows with what the file holds."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 3, 6, 6, 6
        self.maxset = self.maxfrozenset = 6
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # str() of a huge int is slow, and refused past 4300 digits
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_instance(self, x: Any, level: int) -> str:
        if isinstance(x, (bytes, bytearray)):
            return f"<{type(x).__name__} of {len(x)}>"
        return super().repr_instance(x, level)


_EXCERPT = _Excerpt()


def excerpt(value: Any, limit: int = 200) -> str:
    """A short, one-line picture of ``value`` for an error message."""
    try:
        text = _EXCERPT.repr(value)
    except Exception:  # a value no repr can describe cheaply
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
