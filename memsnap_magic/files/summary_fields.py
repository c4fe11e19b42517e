"""What each field of a summary file may hold: a check per field, whose docstring says what it
allows (``summaries.decode`` quotes it when a file breaks it). Summaries are untrusted input, as
snapshots are, so every value is checked for type, range and size before it is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..core.clean import clean
from .schema import INT64, MAX_SUM

ITEMS = 1 << 10  # blocks, sites, categories
# A file's sizes sum to at most MAX_SUM (schema), so a baseline (end + frees - allocations) or a
# peak lies within three times that: what a digest can hold, and what a summary may.
BYTES = 3 * MAX_SUM
_DEVICE = re.compile(r"[A-Za-z0-9_.-]{1,32}(:[0-9]{1,9})?").fullmatch


# Checks of plain JSON values; each one's docstring says what it allows.
def _check(doc: str) -> Callable[[Callable[[Any], bool]], Callable[[Any], bool]]:
    def name(fn: Callable[[Any], bool]) -> Callable[[Any], bool]:
        fn.__doc__ = doc
        return fn

    return name


def _int(v: Any, low: int = 0, high: int = BYTES) -> bool:
    return type(v) is int and low <= v <= high


def _str(v: Any) -> bool:
    return type(v) is str and len(v) <= 4096


def _text(v: Any) -> bool:
    """A site or a category: text we cleaned before writing it, so clean as read."""
    return _str(v) and clean(v, 4096) == v


def list_of(v: Any, item: Callable[[Any], bool]) -> bool:
    return type(v) is list and len(v) <= ITEMS and all(item(x) for x in v)


def pair(v: Any) -> bool:
    return type(v) is list and len(v) == 2 and _int(v[0], -INT64, 1 << 64) and _int(v[1])


@_check("a list of [site, bytes, blocks]")
def _sites(v: Any) -> bool:
    return list_of(v, lambda r: type(r) is list and len(r) == 3 and _text(r[0]) and _int(r[1]) and _int(r[2]))


@_check("null or a dict of category: bytes")
def _categories(v: Any) -> bool:
    return v is None or (type(v) is dict and len(v) <= ITEMS and all(_text(k) and _int(n) for k, n in v.items()))


def _frame(f: Any) -> bool:
    return (
        type(f) is dict
        and f.keys() == {"filename", "line", "name"}
        and _str(f["filename"])
        and _int(f["line"], 0, 1 << 31)
        and _str(f["name"])
    )


def _block(b: Any) -> bool:
    return (
        type(b) is dict
        and b.keys() == {"size", "addr", "before", "frames", "category", "made_in"}
        and (b["made_in"] is None or _int(b["made_in"]))
        and _int(b["size"])
        and _int(b["addr"], -INT64, 1 << 64)
        and type(b["before"]) is bool
        and list_of(b["frames"], _frame)
        and (b["category"] is None or _text(b["category"]))
    )


@_check("a list of blocks")
def _blocks(v: Any) -> bool:
    return list_of(v, _block)


@_check("null or an out-of-memory report")
def _oom(v: Any) -> bool:
    return v is None or (
        type(v) is dict
        and v.keys() == {"requested", "site", "device_free", "allocated", "by_category", "sites"}
        and (v["requested"] is None or _int(v["requested"], 0, 1 << 62))
        and (v["site"] is None or _text(v["site"]))
        and (v["device_free"] is None or _int(v["device_free"], 0, 1 << 62))
        and _int(v["allocated"], -BYTES)
        and _categories(v["by_category"])
        and _sites(v["sites"])
    )


# The digest's plain fields and their checks: one line here declares a per-step fact a snapshot
# gives (an ``Interval`` field of the same name, computed by ``results.intervals.digest``), and
# every summary written since carries it. ``VERSION`` goes up with any change to this table.
VERSION = 6  # 6: meta holds scale (the sizes a step was recorded at)
FIELDS: dict[str, Callable[[Any], bool]] = {
    "device": _check("a device name (cuda:0)")(lambda v: type(v) is str and _DEVICE(v) is not None),
    "baseline_allocated": _check("a byte count")(lambda v: _int(v, -BYTES)),
    "peak_allocated": _check("a byte count")(lambda v: _int(v, -BYTES)),
    "end_allocated": _check("a byte count")(lambda v: _int(v, -BYTES)),
    "trace_entries": _check("a count")(lambda v: _int(v, 0, INT64)),
    "top_blocks": _blocks,
    "kept_by_site": _sites,
    "held_by_site": _sites,
    "transient": _check("a byte count")(lambda v: _int(v)),
    "by_category": _categories,
    "by_category_at_peak": _categories,
    "oom": _oom,
}

# The digest's fields with an encoding of their own in a summary (``summaries.encode``): the
# blocks made and kept (address: size) and the decimated timeline
ENCODED = ("born", "time_us", "allocated")
