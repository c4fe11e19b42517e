"""What a snapshot must hold before analysis reads it, checked in time bounded by the file's size.

Every field analysis reads on every entry (action, size, address) is checked for type and range,
so a file that passes can be summarised. Sizes are capped at 2⁴⁸ bytes (beyond any device) and
every sum of them at 2⁶¹, so nothing overflows the int64 arrays analysis uses. What only a few
entries are read for (a stack's frames for the table's rows, times for the plot) is checked where
it is read: ``results.stacks`` reads frames defensively, ``results.analysis`` times. So the check costs a few C-level
passes over the entries, not a walk over every frame.

Pickle's memo lets a few bytes stand for a container used many times (``[trace] * 10**4``).
Each distinct container is checked once, and entries plus blocks are counted with their repeats
against a budget (by default one per byte of file), so what analysis walks later is bounded too.
Real files share frame lists and frame dicts heavily; sharing alone is never refused.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from ..core.errors import SnapshotError, excerpt

MAX_SIZE = 1 << 48  # bytes in one block or request
MAX_SUM = 1 << 61  # bytes in any sum of sizes (a trace's, an end state's): their sums fit int64 too
MAX_ADDRESS = 1 << 64  # segment and block addresses are unsigned
INT64 = 1 << 63  # trace addresses are int64, as PyTorch writes them; times too
MAX_INDEX = 1 << 31  # device indices, line numbers
EVENTS = frozenset({"alloc", "free", "free_requested", "free_completed"})  # analysis pairs these by address


def validate(snap: Any, budget: int | None = None) -> None:
    """Raise ``SnapshotError`` unless ``snap`` holds what analysis reads. ``budget``: the most
    trace entries, segments and blocks, counted with repeats, the file may stand for."""
    if type(snap) is not dict:
        raise SnapshotError(f"top level is {type(snap).__name__}, expected dict")
    for key in ("segments", "device_traces"):
        if key not in snap:
            raise SnapshotError(f"missing key {key!r}")
        if type(snap[key]) is not list:
            raise SnapshotError(f"{key!r} is {type(snap[key]).__name__}, expected list")
    check = _Check(budget)
    for d, trace in enumerate(snap["device_traces"]):
        if type(trace) is not list:
            raise SnapshotError(f"device_traces[{d}] is {type(trace).__name__}, expected list")
        check.count(len(trace))
        if check.first_time(trace, "trace"):
            _check_trace(trace, d)
    end_bytes: dict[int, int] = {}
    for s, seg in enumerate(snap["segments"]):
        if type(seg) is not dict or type(seg.get("blocks")) is not list:
            raise SnapshotError(f"segments[{s}] is not a segment with a blocks list: {excerpt(seg)}")
        check.count(1 + len(seg["blocks"]))
        if check.first_time(seg, "segment"):
            _check_segment(seg, s, check)
        device = seg["device"]
        end_bytes[device] = end_bytes.get(device, 0) + _bytes_bound(seg)
        if end_bytes[device] > MAX_SUM:
            raise SnapshotError(f"segments of device {device} add up to more than 2**61 bytes")


class _Check:
    """Which containers were checked already, and how much the file has stood for so far."""

    def __init__(self, budget: int | None) -> None:
        self.budget, self.counted = budget, 0
        self.seen: dict[str, set[int]] = {role: set() for role in ("trace", "segment", "block")}  # ids, per role

    def count(self, n: int) -> None:
        self.counted += n
        if self.budget is not None and self.counted > self.budget:
            raise SnapshotError(
                f"stands for more than {self.budget:,} trace entries and blocks, more than its size allows "
                "(a file that repeats its own parts)"
            )

    def first_time(self, container: Any, role: str) -> bool:
        seen, key = self.seen[role], id(container)
        if key in seen:
            return False
        seen.add(key)
        return True


def _check_trace(trace: list[Any], d: int) -> None:
    """Whole columns at C speed (traces reach millions of entries); entry by entry only to name a bad one."""
    n = len(trace)
    where = f"device_traces[{d}]"
    try:
        sizes: list[Any] = list(map(dict.get, trace, repeat("size", n)))  # checked as ints below
    except TypeError:  # dict.get on something that is not a dict
        i = next(i for i, e in enumerate(trace) if type(e) is not dict)
        raise SnapshotError(f"{where}[{i}] is not a dict: {excerpt(trace[i])}") from None
    addrs = list(map(dict.get, trace, repeat("addr", n)))
    ok = (
        set(map(type, map(dict.get, trace, repeat("action", n)))) <= {str}
        and set(map(type, sizes)) <= {int}
        and (not sizes or (min(sizes) >= 0 and max(sizes) < INT64))
        and _ints(addrs, -INT64, INT64)
    )
    # Events (allocs and frees) carry an address and at most 2**48 bytes; an oom entry may ask
    # for anything and has no address. Only files with such entries take the slower look.
    if ok and (None in addrs or (sizes and max(sizes) > MAX_SIZE)):
        events = [i for i, e in enumerate(trace) if e["action"] in EVENTS]
        ok = all(addrs[i] is not None and sizes[i] <= MAX_SIZE for i in events)
        sizes = [sizes[i] for i in events]
    if not ok:
        i = next(i for i, e in enumerate(trace) if not _entry_ok(e))
        raise SnapshotError(
            f"{where}[{i}] is not a trace entry (str action; alloc/free with int addr and int size "
            f"0..2**48): {excerpt(trace[i])}"
        )
    if sum(sizes) > MAX_SUM:
        raise SnapshotError(f"{where}: its sizes add up to more than 2**61 bytes")


def _ints(values: list[Any], low: int, high: int) -> bool:
    """Every value is an int in [low, high) or None."""
    kinds = set(map(type, values))
    if not kinds <= {int, type(None)}:
        return False
    present = values if type(None) not in kinds else [v for v in values if v is not None]
    return not present or (min(present) >= low and max(present) < high)


def _entry_ok(e: Any) -> bool:
    addr, size = e.get("addr"), e.get("size")
    event = e.get("action") in EVENTS
    return (
        type(e.get("action")) is str
        and type(size) is int
        and 0 <= size <= (MAX_SIZE if event else INT64 - 1)
        and ((addr is None and not event) or (type(addr) is int and -INT64 <= addr < INT64))
    )


def _check_segment(seg: dict[str, Any], s: int, check: _Check) -> None:
    where = f"segments[{s}]"
    device, address = seg.get("device"), seg.get("address")
    if not (type(device) is int and 0 <= device < MAX_INDEX and type(address) is int and 0 <= address < MAX_ADDRESS):
        raise SnapshotError(f"{where} lacks an int device and an int address >= 0: {excerpt(seg)}")
    for key in ("total_size", "allocated_size", "active_size", "requested_size"):
        value = seg.get(key)
        if value is not None and not (type(value) is int and 0 <= value <= MAX_SUM):
            raise SnapshotError(f"{where}.{key} is not an int of 0..2**61 bytes: {excerpt(value)}")
    end = address
    for b, block in enumerate(seg["blocks"]):
        if check.first_time(block, "block") and not _block_ok(block):
            raise SnapshotError(
                f"{where}.blocks[{b}] lacks an int size of 0..2**48 bytes or a str state: {excerpt(block)}"
            )
        if end >= MAX_ADDRESS:  # even an empty block starts at an address
            raise SnapshotError(f"{where}: its blocks run past address 2**64")
        end += block["size"]
    if end > MAX_ADDRESS:
        raise SnapshotError(f"{where}: its blocks run past address 2**64")


def _bytes_bound(seg: dict[str, Any]) -> int:
    """The most bytes analysis can count for a segment: its own sum or its blocks', whichever is larger."""
    blocks: int = sum(max(b["size"], b.get("requested_size") or 0) for b in seg["blocks"])  # checked ints
    return max(blocks, seg.get("requested_size") or 0)


def _block_ok(block: Any) -> bool:
    if type(block) is not dict:
        return False
    size, requested, address = block.get("size"), block.get("requested_size"), block.get("address")
    return (
        type(size) is int
        and 0 <= size <= MAX_SIZE
        and type(block.get("state")) is str
        and (requested is None or (type(requested) is int and 0 <= requested <= MAX_SIZE))
        and (address is None or (type(address) is int and 0 <= address < MAX_ADDRESS))
    )
