"""The CPU route's snapshot builder as it was before it read the profiler's events by columns
(kept as the reference: the new one must give the same snapshot, entry for entry). Two corrections
since, made to both: a start block's first reported free takes the size its tensor had, since the
allocator's table may hold a stale size for that address; and a start block freed unreported is
freed just before the first allocation that takes any of its bytes, at its address or not (two
live blocks never overlap). This reader had only the same address, so a real session whose
allocator handed such a block's bytes out at another address failed the comparison, now and then."""

from __future__ import annotations

from typing import Any


def walk_events(roots: list[Any]) -> list[tuple[int, int, int]]:
    """``[(time_ns, ptr, signed size)]`` of the CPU allocation events, walked node by node."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int, int]] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            f = node.extra_fields
            if f.device.type == "cpu" and f.alloc_size:
                events.append((node.start_time_ns, f.ptr, f.alloc_size))
        stack.extend(node.children)
    events.sort(key=lambda e: e[0])
    return events


def build_snapshot(
    events: list[tuple[int, int, int]],
    live_start: dict[int, int],
    live_end: dict[int, int],
    end_us: int,
    max_entries: int,
) -> dict[str, Any]:
    """PyTorch-schema snapshot from raw allocator events plus the walked live storages."""
    seen_first: dict[int, str] = {}  # addr -> first action in the window
    for _, ptr, size in events:
        seen_first.setdefault(ptr, "alloc" if size > 0 else "free")
    # Baseline blocks freed without a report: their address was allocated anew inside the window,
    # or they are gone at the end and the window never mentions them.
    silent = {
        p: n
        for p, n in live_start.items()
        if seen_first.get(p) == "alloc" or (p not in seen_first and p not in live_end)
    }
    trace: list[dict[str, Any]] = []
    live: dict[int, int] = {}
    freed: set[int] = set()  # addresses freed so far
    for t_ns, ptr, size in events:
        t_us = t_ns // 1000
        if size > 0:
            for old in sorted(q for q, n in silent.items() if q < ptr + size and ptr < q + n):
                trace += _free_entries(old, silent.pop(old), t_us)
            trace.append({"action": "alloc", "addr": ptr, "size": size, "stream": 0, "time_us": t_us})
            live[ptr] = size
        else:
            known = live_start.get(ptr) if seen_first.get(ptr) == "free" and ptr not in freed else None
            freed.add(ptr)
            live.pop(ptr, None)
            trace += _free_entries(ptr, known or -size, t_us)
    for ptr, size in silent.items():
        trace += _free_entries(ptr, size, end_us)
    freed_in_trace = {ptr for _, ptr, size in events if size < 0}
    blocks = dict(live)
    for ptr, size in live_start.items():
        if ptr in live_end and ptr not in freed_in_trace and ptr not in blocks:
            blocks[ptr] = size
    segments = [
        {
            "device": 0,
            "address": ptr,
            "total_size": size,
            "allocated_size": size,
            "active_size": size,
            "requested_size": size,
            "stream": 0,
            "segment_type": "large",
            "segment_pool_id": (0, 0),
            "is_expandable": False,
            "frames": [],
            "blocks": [
                {"address": ptr, "size": size, "requested_size": size, "state": "active_allocated", "frames": []}
            ],
        }
        for ptr, size in sorted(blocks.items())
    ]
    return {"segments": segments, "device_traces": [trace[-max_entries:]], "allocator_settings": {}}


def _free_entries(ptr: int, size: int, t_us: int) -> list[dict[str, Any]]:
    return [
        {"action": a, "addr": ptr, "size": size, "stream": 0, "time_us": t_us}
        for a in ("free_requested", "free_completed")
    ]
