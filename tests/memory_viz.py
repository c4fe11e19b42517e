"""A Python port of the parts of memory_viz's Active Memory Timeline that decide its numbers.

Follows ``process_alloc_data`` in pytorch's torch/utils/viz/process_alloc_data.js (no private
pools, no summarised band): allocs and ``free``/``free_completed`` are matched by address, an
unmatched free and an end-state ``active_allocated`` block the trace never allocated are
"initially allocated", and the replay's running total is what the viewer stacks and scales to.
"""

from __future__ import annotations

from typing import Any


def _block_addresses(seg: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    out, running = [], seg["address"]
    for b in seg["blocks"]:
        addr = b.get("addr", b.get("address", running))  # older viewers compute it like this
        out.append((addr, b))
        running += b["size"]
    return out


def replay(snap: dict[str, Any], device: int) -> tuple[int, int, int]:
    """(bytes initially allocated, largest total over the timeline, total at the end)."""
    elements: list[int] = []
    initially: list[int] = []
    actions: list[int] = []
    addr_to_alloc: dict[Any, int] = {}
    for e in snap["device_traces"][device]:
        if e["action"] == "alloc":
            elements.append(e["size"])
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in ("free", "free_completed"):
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e["size"])
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        for addr, b in _block_addresses(seg):
            if b["state"] == "active_allocated" and addr not in addr_to_alloc:
                elements.append(b["requested_size"])
                initially.append(len(elements) - 1)
    current = set(initially)
    total = start = sum(elements[i] for i in initially)
    highest = total
    for elem in actions:
        if elem in current:
            current.remove(elem)
            total -= elements[elem]
        else:
            current.add(elem)
            total += elements[elem]
        highest = max(highest, total)
    return start, highest, total


# --- "Allocator State History": the viewer replays backwards from the end state ----------------


class ViewerError(Exception):
    """Where the viewer's JavaScript throws (a TypeError reading ``occupied`` or ``addr`` of nothing)."""


def _annotated(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The viewer's ``annotate_snapshot``: an adjacent free_requested + free_completed at one
    address becomes one ``free``."""
    out: list[dict[str, Any]] = []
    for e in trace:
        if (
            e["action"] == "free_completed"
            and out
            and out[-1]["action"] == "free_requested"
            and out[-1]["addr"] == e["addr"]
        ):
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(dict(e))
    return out


def replay_backwards(snap: dict[str, Any], device: int) -> int:
    """Undo the device's events from the newest, as ``simulate_memory`` does for every index the
    user can click, and check what ``draw`` needs at each: every block inside a live segment.
    Raises ``ViewerError`` where the viewer throws; returns the number of states checked."""
    segments: list[list[int]] = []  # [address, size]
    blocks: dict[int, int] = {}
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        segments.append([seg["address"], seg["total_size"]])
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]

    def containing(addr: int) -> list[int] | None:
        return next((s for s in segments if s[0] <= addr < s[0] + s[1]), None)

    def check_block(addr: int, i: int) -> None:
        if containing(addr) is None:
            raise ViewerError(f"state before event {i + 1}: block {addr:#x} lies in no segment")

    for addr in blocks:
        check_block(addr, len(snap["device_traces"][device]) - 1)
    events = _annotated(snap["device_traces"][device])
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        action, addr = e["action"], e.get("addr")
        if action in ("free", "free_completed"):
            blocks[addr] = e["size"]
            check_block(addr, i - 1)
        elif action == "free_requested":
            if addr not in blocks:
                raise ViewerError(f"event {i}: free_requested of block {addr:#x}, which is not there")
        elif action == "alloc":
            blocks.pop(addr, None)
        elif action in ("segment_free", "segment_unmap"):
            segments.append([addr, e["size"]])
        elif action in ("segment_alloc", "segment_map"):
            end = addr + e["size"]
            seg = next((s for s in segments if s[0] <= addr and end <= s[0] + s[1]), None)
            if seg is None:
                raise ViewerError(f"event {i}: undoing {action} of {addr:#x}, a segment that is not there")
            seg_end = seg[0] + seg[1]
            segments.remove(seg)
            segments.extend(part for part in ([seg[0], addr - seg[0]], [end, seg_end - end]) if part[1] > 0)
            for b in blocks:  # blocks left in the removed range are drawn in no segment
                if addr <= b < end:
                    raise ViewerError(f"state before event {i}: block {b:#x} lies in no segment")
    return len(events)


def legend(snap: dict[str, Any]) -> list[str]:
    """The categories the viewer's legend lists (``annotate_snapshot``), in first-seen order.

    Raises as the viewer does when entries carry categories but none is ``unknown``: its code
    then pushes onto ``snapshot.categores`` (a typo) and throws."""
    seen: list[str] = []
    for trace in snap["device_traces"]:
        for e in trace:
            if "category" in e and e["category"] not in seen:
                seen.append(e["category"])
    if seen and "unknown" not in seen:
        raise TypeError("Cannot read properties of undefined (reading 'push')  [snapshot.categores]")
    return seen


def colours(snap: dict[str, Any], device: int) -> dict[str, int]:
    """Bytes the Active Memory Timeline draws in each category's colour over the trace's
    allocations (``element.category || 'unknown'``): allocs, and frees of blocks live before."""
    out: dict[str, int] = {}
    allocated: set[Any] = set()
    for e in snap["device_traces"][device]:
        if e["action"] == "alloc":
            allocated.add(e["addr"])
            out[e.get("category", "unknown")] = out.get(e.get("category", "unknown"), 0) + e["size"]
        elif e["action"] in ("free", "free_completed") and e["addr"] not in allocated:
            out[e.get("category", "unknown")] = out.get(e.get("category", "unknown"), 0) + e["size"]
        elif e["action"] in ("free", "free_completed"):
            allocated.discard(e["addr"])
    return out


def restored_stacks(snap: dict[str, Any], device: int) -> list[tuple[Any, list[dict[str, Any]]]]:
    """The stack the Allocator State History shows for each block it restores, newest first.

    Replaying backwards, undoing a free puts its block back with the free entry's ``frames``: that
    is all the viewer has of a block freed inside the trace. An empty stack it shows as "block
    was allocated before _record_history was enabled"."""
    return [
        (e["addr"], e.get("frames") or [])
        for e in reversed(_annotated(snap["device_traces"][device]))
        if e["action"] in ("free", "free_completed")
    ]


def segment_colours(snap: dict[str, Any], device: int) -> dict[str, int]:
    """Bytes the Active Cached Segment Timeline draws in each category's colour: its elements are
    the segment events (``segment_alloc``, and ``segment_free`` of segments live before), coloured
    by ``element.category || 'unknown'`` as the memory timeline's are."""
    out: dict[str, int] = {}
    made: set[Any] = set()
    for e in snap["device_traces"][device]:
        category = e.get("category", "unknown")
        if e["action"] in ("segment_alloc", "segment_map"):
            made.add(e["addr"])
            out[category] = out.get(category, 0) + e["size"]
        elif e["action"] in ("segment_free", "segment_unmap") and e["addr"] not in made:
            out[category] = out.get(category, 0) + e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            made.discard(e["addr"])
    return out
