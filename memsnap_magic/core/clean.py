"""Text from outside made safe to print: a file's names and paths, an exception's message.

A snapshot or summary may hold control characters, terminal escapes, bidirectional overrides or
lone surrogates; every layer that shows such text passes it through ``clean`` first.
"""

from __future__ import annotations

# C0 and C1 controls, DEL, the bidirectional overrides that reorder what a terminal shows, and
# lone surrogates (a pickle may hold them; no terminal or JSON encoder takes them)
_CONTROLS = dict.fromkeys(
    [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)], "?"
)


def clean(text: str, limit: int = 300) -> str:
    """Text a file supplied (a path, a frame's name), safe to print: no control characters or
    escape sequences, at most ``limit`` characters."""
    text = str(text).translate(_CONTROLS)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = 300) -> str:
    """A message on one line (its line breaks become spaces), cleaned."""
    return clean(" ".join(str(text).split()), limit)
