"""Reading trace columns and pairing events by address, at C speed: the shared base of
``analysis`` (an interval's figures) and ``alive`` (the blocks live at an event).

Reading a field of every trace entry is most of the cost of both, so a column is read with
``itemgetter`` mapped over the list, and addresses only for the events that must be paired.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ..files.pending import Pending


def column(trace: list[dict[str, Any]] | Pending, key: str, default: Any, dtype: Any = np.int64) -> np.ndarray:
    """One field of every entry, read at C speed (``itemgetter`` mapped over the list); a trace
    whose entries are still to build (``files.pending``) gives its column as it holds it."""
    if type(trace) is Pending:
        held = trace.column(key, default)
        if held is not None:
            return held if dtype is object else held.astype(dtype, copy=False)
    n = len(trace)
    try:
        return np.fromiter(map(itemgetter(key), trace), dtype=dtype, count=n)
    except KeyError:  # some entry lacks it: an old trace's time_us, say
        return np.fromiter(map(dict.get, trace, repeat(key, n), repeat(default, n)), dtype=dtype, count=n)


class Actions:
    """Each entry's ``action`` of a trace, asked as a mask (``is_``) or for a few entries (``at``):
    a list's column read once and compared as objects (no per-entry hashing); a trace still to
    build answers from its signed sizes, comparing no string per block entry."""

    def __init__(self, trace: list[dict[str, Any]] | Pending) -> None:
        self._pending = trace if type(trace) is Pending and not trace.ready else None
        self._column = column(trace, "action", None, object) if self._pending is None else None

    def is_(self, name: str) -> np.ndarray:
        if self._pending is not None:
            return self._pending.is_action(name)
        assert self._column is not None
        found: np.ndarray = np.equal(self._column, name)
        return found

    def at(self, index: np.ndarray) -> np.ndarray:
        """The actions at ``index``, as objects."""
        if self._pending is not None:
            found = np.empty(len(index), dtype=object)
            found[:] = self._pending.actions_at(index)
            return found
        assert self._column is not None
        picked: np.ndarray = self._column[index]
        return picked


# Entries picked here and there cost ~8x an entry of a pass over the whole list (cache misses).
SPARSE = 8


def addresses(trace: list[dict[str, Any]] | Pending, entries: np.ndarray) -> np.ndarray:
    """``addr`` of some trace entries (alloc and free entries always carry one)."""
    if len(entries) > len(trace) // SPARSE or (type(trace) is Pending and not trace.ready):  # columns it holds
        picked: np.ndarray = column(trace, "addr", 0)[entries]
        return picked.astype(np.uint64)
    rows = map(trace.__getitem__, entries.tolist())
    # read as int64, as PyTorch writes them (int64_t(ptr)), then compared as unsigned
    return np.fromiter(map(itemgetter("addr"), rows), dtype=np.int64, count=len(entries)).astype(np.uint64)


def end_blocks(
    segments: list[dict[str, Any]], device: int, at_least: int = 0
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """(address, requested size, block dict) of the device's allocated blocks at the snapshot's
    end, those of ``at_least`` bytes (segments smaller than that are skipped whole)."""
    addrs, sizes, blocks = [], [], []
    for seg in segments:
        total = seg.get("total_size")
        if seg["device"] != device or (total is not None and total < at_least):
            continue
        a = seg["address"]
        for b in seg["blocks"]:
            size = b.get("requested_size") or b["size"]
            if b["state"] == "active_allocated" and size >= at_least:
                addrs.append(a)
                sizes.append(size)
                blocks.append(b)
            a += b["size"]
    return np.asarray(addrs, dtype=np.uint64), np.asarray(sizes, dtype=np.int64), blocks


def by_address(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Events grouped by their addresses ``a`` (in time order), each address's events in time
    order: the order, the sorted addresses, and which sorted positions start and end a group."""
    order = np.argsort(a, kind="stable")
    a = a[order]
    change = np.ones(len(a) + 1, dtype=bool)
    change[1:-1] = a[1:] != a[:-1]
    return order, a, change[:-1], change[1:]


def paired(
    trace: list[dict[str, Any]] | Pending, entries: np.ndarray, read: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``by_address`` of the addresses of trace ``entries`` (``read`` reads them). A trace still
    to build keeps it for the next reader of the same entries: its labels and its digest pair
    the same events, in the same cell."""
    memo = trace.memo if type(trace) is Pending and not trace.ready else None
    if memo is not None:
        found = memo.get("paired")
        if found is not None and np.array_equal(found[0], entries):
            result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = found[1]
            return result
    result = by_address(read(entries))
    if memo is not None:
        memo["paired"] = (entries, result)
    return result


def sorted_contains(sorted_values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``np.isin(query, sorted_values)`` for an ascending ``sorted_values``, without sorting again."""
    if not len(sorted_values):
        return np.zeros(len(query), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_values, query), len(sorted_values) - 1)
    found: np.ndarray = sorted_values[pos] == query
    return found
