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
