"""How an option's value is read: from a token's text (the magic) or a Python value (``Recorder``).

Each ``Value`` says what is allowed (for help and errors) and raises ``ValueError`` with a short
reason; ``options`` adds the key and the allowed values to the message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from ..core.devices import KINDS
from ..files.layout import MAX_STEP, NAME_BYTES, TAG_PATTERN
from ..files.meta import SCALE_NAME, SCALE_NAMES, SCALE_RESERVED


class Value:
    """How one option's values are read: ``parse`` a token's text, ``coerce`` a Python value."""

    _allowed = ""
    _metavar = ""

    @property
    def allowed(self) -> str:
        """What the user may write, for help and errors."""
        return self._allowed

    @property
    def metavar(self) -> str:
        """The placeholder in the usage line (``N``, ``DIR``, ``all|alloc``)."""
        return self._metavar

    def parse(self, text: str) -> Any:
        return self.check(text)

    def coerce(self, value: Any) -> Any:
        return self.parse(value) if isinstance(value, str) else self.check(value)

    def check(self, value: Any) -> Any:
        return value


class Integer(Value):
    """A whole number in ``lowest..MAX_STEP-1``: larger ones are no step, rank or ring size a file may hold."""

    def __init__(self, lowest: int, metavar: str = "N") -> None:
        self.lowest, self._metavar = lowest, metavar
        self._allowed = f"an integer from {lowest} to {MAX_STEP - 1:,}"

    def parse(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("not an integer") from None
        return self.check(value)

    def check(self, value: Any) -> int:
        if type(value) is bool or not hasattr(value, "__index__"):
            raise ValueError("not an integer")
        value = int(value)
        if value < self.lowest:
            raise ValueError("too small")
        if value >= MAX_STEP:
            raise ValueError("too large")
        return value


class Steps(Value):
    _allowed, _metavar = "comma-separated integers", "1,5,10"
    _one = Integer(0)

    def parse(self, text: str) -> tuple[int, ...]:
        return self.check([self._one.parse(p.strip()) for p in text.split(",") if p.strip()])

    def check(self, value: Any) -> tuple[int, ...]:
        if not isinstance(value, Iterable):
            raise ValueError("not a list of steps")
        steps = tuple(sorted({self._one.check(v) for v in value}))
        if not steps:
            raise ValueError("empty list")
        return steps


class Choice(Value):
    def __init__(self, *values: str) -> None:
        self.values = values
        self._allowed, self._metavar = ", ".join(values), "|".join(values)

    def check(self, value: Any) -> str:
        if value not in self.values:
            raise ValueError("not one of the allowed values")
        return value


class Choices(Value):
    """Several of a fixed set, comma-separated (``skip_actions=segment_map,segment_unmap``)."""

    def __init__(self, *values: str) -> None:
        self.values = values
        self._allowed, self._metavar = "comma-separated: " + ", ".join(values), ",".join(values[:2]) + ",..."

    def parse(self, text: str) -> tuple[str, ...]:
        return self.check([p.strip() for p in text.split(",") if p.strip()])

    def check(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise ValueError("not a list")
        items = list(value)  # str subclasses (numpy's str_) read as the str they are
        if not items or any(not isinstance(v, str) or str(v) not in self.values for v in items):
            raise ValueError("not one or more of the allowed values")
        return tuple(dict.fromkeys(map(str, items)))


class Boolean(Value):
    _allowed, _metavar = "true, false", "true|false"
    _words: ClassVar[dict[str, bool]] = {
        "true": True,
        "1": True,
        "yes": True,
        "on": True,
        "false": False,
        "0": False,
        "no": False,
        "off": False,
    }

    def parse(self, text: str) -> bool:
        if text.lower() not in self._words:
            raise ValueError("not a boolean")
        return self._words[text.lower()]

    def check(self, value: Any) -> bool:
        if type(value) is not bool:
            raise ValueError("not a boolean")
        return value


class Device(Value):
    """``auto`` or a family from the backends' registry, with an index where the family has one.
    Read from the registry at each use, so a family added to it is an allowed value at once."""

    @staticmethod
    def _names() -> tuple[list[str], list[str]]:
        plain = ["auto", *(k for k, kind in KINDS.items() if not kind.indexed)]
        return plain, [k for k, kind in KINDS.items() if kind.indexed]

    @property
    def allowed(self) -> str:
        plain, indexed = self._names()
        return ", ".join([*plain, *(f"{k}, {k}:K" for k in indexed)])

    @property
    def metavar(self) -> str:
        plain, indexed = self._names()
        return "|".join([*plain, *(f"{k}|{k}:K" for k in indexed)])

    def check(self, value: Any) -> str:
        plain, indexed = self._names()
        kind, colon, index = value.partition(":") if isinstance(value, str) else ("", "", "")
        if not ((kind in plain and not colon) or (kind in indexed and (not colon or _is_index(index)))):
            raise ValueError("not a device name")
        return value


class Tag(Value):
    _allowed, _metavar = f"letters, digits, _ . - (not first: . -), at most 100 ({NAME_BYTES} bytes as UTF-8)", "NAME"

    def __init__(self, begins: str = "a file name") -> None:
        self.begins = begins

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(r"\w[\w.-]*", value):
            raise ValueError(
                f"only letters, digits, '_', '.', '-', not starting with '.' or '-' (it begins {self.begins})"
            )
        if not re.fullmatch(TAG_PATTERN, value):
            raise ValueError(f"{len(value)} characters; at most 100")
        if len(value.encode()) > NAME_BYTES:  # \w is never a surrogate: it encodes
            raise ValueError(f"{len(value.encode())} bytes as UTF-8; at most {NAME_BYTES} fit in {self.begins}")
        return value


class Folder(Value):
    _allowed, _metavar = "a folder", "DIR"

    def coerce(self, value: Any) -> str:
        return self.check(os.fspath(value) if isinstance(value, os.PathLike) else value)

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"a path is a str or os.PathLike, not {type(value).__name__}")
        if not value:
            raise ValueError("empty path")
        if "\0" in value:
            raise ValueError("a path cannot hold a NUL character")
        return os.path.expanduser(value)  # out=~/runs: a shell would have expanded it


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


class Name(Value):
    """A Python name in the cell's namespace, dotted for attributes (``trainer.model``)."""

    _allowed, _metavar = "a name in the namespace (dotted for attributes)", "NAME"

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
            raise ValueError("not a Python name (letters, digits, _; dots between names)")
        return value


class Scale(Value):
    """The sizes a step is recorded at, ``batch:8,seq:128``: what ``predict`` fits a step's
    allocations against. A name is a keyword of ``predict(batch=64)``: an identifier, and none of
    its own keywords."""

    _allowed = (
        f"NAME:SIZE[,NAME:SIZE] (at most {SCALE_NAMES}; NAME: letters, digits, _, not first a digit, "
        f"not {', '.join(SCALE_RESERVED)}; SIZE: an integer from 1 to {MAX_STEP - 1:,})"
    )
    _metavar = "NAME:SIZE"
    _size = Integer(1)

    def parse(self, text: str) -> dict[str, int]:
        pairs = []
        for part in text.split(","):
            name, colon, size = part.strip().partition(":")
            if not colon:
                raise ValueError(f"{part.strip()!r} is not NAME:SIZE")
            pairs.append((self._name(name.strip()), self._sized(name.strip(), self._size.parse, size.strip())))
        return self._checked(pairs)

    def check(self, value: Any) -> dict[str, int]:
        if not isinstance(value, Mapping):
            raise ValueError(f"a mapping of names to sizes ({{'batch': 8}}), not {type(value).__name__}")
        return self._checked([(self._name(k), self._sized(k, self._size.check, v)) for k, v in value.items()])

    @staticmethod
    def _name(name: Any) -> str:
        if not isinstance(name, str) or not re.fullmatch(SCALE_NAME, name):
            raise ValueError(f"{name!r} is no name (letters, digits, _, not first a digit, at most 32)")
        if name in SCALE_RESERVED:
            raise ValueError(f"{name!r} is a keyword of predict(), so it cannot name a dimension")
        return name

    @staticmethod
    def _sized(name: str, read: Any, size: Any) -> int:
        try:
            value: int = read(size)
        except ValueError as e:
            raise ValueError(f"{name}'s size {size!r} is {e}") from None
        return value

    @staticmethod
    def _checked(pairs: list[tuple[str, int]]) -> dict[str, int]:
        if not pairs:
            raise ValueError("empty")
        if len(pairs) > SCALE_NAMES:
            raise ValueError(f"{len(pairs)} names; at most {SCALE_NAMES}")
        scale = dict(pairs)
        if len(scale) < len(pairs):
            twice = next(name for name, _ in pairs if sum(n == name for n, _ in pairs) > 1)
            raise ValueError(f"{twice!r} given twice")
        return scale
