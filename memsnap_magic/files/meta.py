"""The ``memsnap`` block in each of our files (``Meta``): what the recorder knew when it wrote
the file (step, rank, device, run, sizes, who held its memory, ...), each field with the rule a
read block must meet. Files without one (verl's, torchtitan's) are named by their path
(``layout``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..core.errors import SnapshotError, excerpt
from .layout import MAX_STEP, TAG_PATTERN

META_KEY = "memsnap"
SCALE_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
SCALE_NAMES = 8  # dimensions one file may name
SCALE_RESERVED = ("recorded", "at", "capacity", "run", "steps", "device", "rounding")


@dataclass(frozen=True)
class Meta:
    """The ``memsnap`` block of a snapshot: what the recorder knew when it wrote the file.

    Files without one give every field as missing (None). A block that is there is ours, so a
    value of the wrong type or range is a broken file (``SnapshotError``), never a session that
    later fails on a step number of 5,000 digits.
    """

    step: int | None = None
    rank: int | None = None
    device: str | None = None
    tag: str | None = None
    pid: int | None = None
    end_us: int | None = None  # when the snapshot was taken (µs since the epoch)
    error: str | None = None  # the exception type name if the cell raised
    clear: bool = True  # False: the history went on into the next snapshot (clear=false)
    allocator_peak_allocated: int | None = None
    context: str | None = None  # which events carry stacks; "none" where the recorder keeps none
    max_entries: int | None = None  # the trace ring's size
    incomplete: str | None = None  # why the snapshot holds less than the interval did
    run: str | None = None  # the named run it was recorded into (run=...); None: the session's own
    usage_start: dict[str, int] | None = None  # Backend.usage() at the interval's start and end
    usage_end: dict[str, int] | None = None
    # bytes of blocks from before recording began whose free no event dates: counted to the end
    freed_unseen: int | None = None
    cells: dict[str, int] | None = None  # the In[N] the kernel gave the cell files its stacks pass through
    scale: dict[str, int] | None = None  # the sizes it was recorded at (scale=batch:8): name -> size
    # who kept the step's memory alive (``recording.retention``): rows [path, bytes, blocks], each
    # path's route, the bytes no path reached, the blocks by row, old optimizers, the walk's extent
    holders: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict, which deep-copies every field (~20 µs a cell); the dicts are
        # the only mutable ones
        d = {name: getattr(self, name) for name in _META_FIELDS}
        for key in ("usage_start", "usage_end", "cells", "scale", "holders"):
            if d[key] is not None:
                d[key] = dict(d[key])
        return d

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> Meta:
        raw = snap.get(META_KEY)
        if raw is None:
            return cls()
        if type(raw) is not dict:
            raise SnapshotError(f"its {META_KEY!r} block is {type(raw).__name__}, expected dict")
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = raw.get(f.name)
            if value is None:
                continue
            check = _RULES[f.name]
            if not check(value):
                raise SnapshotError(f"its {META_KEY}.{f.name} is not {check.__doc__}: {excerpt(value)}")
            values[f.name] = value
        return cls(**values)


def _count(high: int) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return type(value) is int and 0 <= value < high

    check.__doc__ = f"an int of 0..{high - 1:,}"
    return check


def _name(pattern: str, what: str) -> Callable[[Any], bool]:
    match = re.compile(pattern).fullmatch

    def check(value: Any) -> bool:
        return type(value) is str and match(value) is not None

    check.__doc__ = what
    return check


def _exception_name(value: Any) -> bool:
    """an exception's name"""
    return type(value) is str and 0 < len(value) <= 200 and all(p.isidentifier() for p in value.split("."))


def exception_name(error: BaseException) -> str:
    """The name a file records for the exception a block raised: its class's, or the nearest base
    class's when the class was given a name no code could spell (``type("a b", (Exception,), {})``)."""
    return next(c.__name__ for c in type(error).__mro__ if _exception_name(c.__name__))


def _usage(value: Any) -> bool:
    """a dict of free/total/reserved/rss byte counts"""
    return (
        type(value) is dict
        and set(value) <= {"free", "total", "reserved", "rss"}
        and all(type(v) is int and 0 <= v < 1 << 62 for v in value.values())
    )


def _cells(value: Any) -> bool:
    """a dict of at most 10,000 cell file names and their In[N]"""
    return (
        type(value) is dict
        and len(value) <= 10_000
        and all(type(k) is str and 0 < len(k) <= 1024 and type(v) is int and 0 < v < 1 << 31 for k, v in value.items())
    )


_SCALE_NAME = re.compile(SCALE_NAME).fullmatch


def _scale(value: Any) -> bool:
    """a dict of 1 to 8 dimension names (identifiers, not a keyword of predict) and sizes of 1 or more"""
    return (
        type(value) is dict
        and 0 < len(value) <= SCALE_NAMES
        and all(
            type(k) is str and _SCALE_NAME(k) is not None and k not in SCALE_RESERVED and type(v) is int
            for k, v in value.items()
        )
        and all(0 < v < MAX_STEP for v in value.values())
    )


_HOLDER_TEXT = 1024  # characters of a path or a type name


def _text(value: Any, limit: int = _HOLDER_TEXT) -> bool:
    return type(value) is str and len(value) <= limit and value.isprintable()


def _holders(value: Any) -> bool:
    """who held the step's blocks: rows of [path, bytes, blocks], routes, blocks, counts"""
    if type(value) is not dict or set(value) != HOLDER_KEYS:
        return False
    rows, routes, blocks = value["rows"], value["routes"], value["blocks"]
    return (
        type(rows) is list
        and len(rows) <= 64
        and all(type(r) is list and len(r) == 3 and _text(r[0]) and _big(r[1]) and _big(r[2]) for r in rows)
        and type(routes) is list
        and len(routes) == len(rows)
        and all(
            type(route) is list
            and 0 < len(route) <= 256
            and all(type(hop) is list and len(hop) == 3 and all(_text(x) for x in hop) for hop in route)
            for route in routes
        )
        and type(blocks) is list
        and len(blocks) <= 256
        and all(
            type(b) is list
            and len(b) == 3
            and type(b[0]) is int
            and -(1 << 63) <= b[0] < 1 << 64
            and _big(b[1])
            and type(b[2]) is int
            and 0 <= b[2] < len(rows)
            for b in blocks
        )
        and _big(value["unreached"])
        and _big(value["objects"])
        and (value["cut"] is None or _text(value["cut"], 100))
        and type(value["optimizers"]) is list
        and len(value["optimizers"]) <= 64
        and all(_text(p) for p in value["optimizers"])
    )


HOLDER_KEYS = {"rows", "routes", "blocks", "unreached", "objects", "cut", "optimizers"}


def _big(value: Any) -> bool:
    """A byte count or a count of blocks."""
    return type(value) is int and 0 <= value < 1 << 62


def _boolean(value: Any) -> bool:
    """true or false"""
    return type(value) is bool


_RULES: dict[str, Callable[[Any], bool]] = {
    "step": _count(MAX_STEP),
    "rank": _count(MAX_STEP),
    "device": _name(r"[A-Za-z0-9_.-]{1,32}(:[0-9]{1,9})?", "a device name (cuda:0)"),
    "tag": _name(TAG_PATTERN, "a tag of letters, digits, _ . -"),
    "pid": _count(MAX_STEP),
    "end_us": _count(1 << 63),
    "error": _exception_name,
    "clear": _boolean,
    "allocator_peak_allocated": _count(1 << 61),
    "context": _name(r"[a-z]{1,16}", "a context name (all, alloc, state, none)"),
    "max_entries": _count(MAX_STEP),
    "incomplete": _name(r"[ -~]{1,300}", "a short printable note"),
    "run": _name(TAG_PATTERN, "a run name of letters, digits, _ . -"),
    "usage_start": _usage,
    "usage_end": _usage,
    "freed_unseen": _count(1 << 62),
    "cells": _cells,
    "scale": _scale,
    "holders": _holders,
}
_META_FIELDS = tuple(f.name for f in fields(Meta))
