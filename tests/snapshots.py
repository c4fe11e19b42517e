"""Hand-built snapshots in PyTorch's schema, and a brute-force reference replay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def entry(action: str, addr: int, size: int, t: int = 0, **extra: Any) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, **extra}


def alloc(addr: int, size: int, t: int = 0) -> list[dict[str, Any]]:
    return [entry("alloc", addr, size, t)]


def free(addr: int, size: int, t: int = 0) -> list[dict[str, Any]]:
    return [entry("free_requested", addr, size, t), entry("free_completed", addr, size, t)]


def snapshot(trace: list[dict[str, Any]], live: dict[int, int], device: int = 0, n_devices: int = 1) -> dict[str, Any]:
    """``live``: address -> requested size of the blocks allocated at the end (one segment each)."""
    segments = [
        {
            "device": device,
            "address": a,
            "total_size": s,
            "stream": 0,
            "blocks": [{"size": s, "requested_size": s, "state": "active_allocated", "frames": []}],
        }
        for a, s in sorted(live.items())
    ]
    traces: list[list[dict[str, Any]]] = [[] for _ in range(n_devices)]
    traces[device] = trace
    return {"segments": segments, "device_traces": traces}


def reference(snap: dict[str, Any], device: int) -> tuple[int, int, int]:
    """(baseline, peak, end) by the snapshot format doc's recipe, one event at a time."""
    trace = snap["device_traces"][device]
    has_completed = any(e["action"] == "free_completed" for e in trace)
    live: dict[int, int] = {}
    baseline, deltas = 0, []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif e["action"] == ("free_completed" if has_completed else "free_requested"):
            size = live.pop(e["addr"], None)
            if size is None:
                size = e["size"]
                baseline += size
            deltas.append(-size)
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in live:
                baseline += b.get("requested_size") or b["size"]
            addr += b["size"]
    cur = peak = baseline
    for d in deltas:
        cur += d
        peak = max(peak, cur)
    return baseline, peak, cur


def value_paths(obj: Any, prefix: tuple[Any, ...] = (), items: int | None = None) -> Iterator[tuple[Any, ...]]:
    """Every key path into nested dicts and lists (``items``: the first few of each list), for
    tests that put a hostile value at any one of them."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from value_paths(v, (*prefix, k), items)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:items]):
            yield from value_paths(v, (*prefix, i), items)
