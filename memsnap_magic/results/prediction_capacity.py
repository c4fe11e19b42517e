"""The memory a predicted peak is compared with: a capacity given (``80GiB``), or, asked for
``auto``, found from the recorded files (an accelerator's) or from this machine (the CPU).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..core.units import parse_bytes


def auto_capacity(metas: Iterable[Mapping[str, Any]]) -> tuple[int, str] | None:
    """A capacity where none is given, and how it was found: on an accelerator the device's total
    less the most that was in use outside PyTorch at the recorded steps (from each file's
    ``usage_start``/``usage_end``: total - free - reserved); on the CPU the memory available now
    (``MemAvailable``). None where neither is known."""
    totals, outside, cpu = [], [], True
    for meta in metas:
        cpu = cpu and str(meta.get("device", "")).startswith("cpu")
        for key in ("usage_start", "usage_end"):
            usage = meta.get(key)
            if isinstance(usage, Mapping) and all(type(usage.get(k)) is int for k in ("total", "free", "reserved")):
                totals.append(usage["total"])
                outside.append(usage["total"] - usage["free"] - usage["reserved"])
    if totals:
        return min(totals) - max(outside), "the device's memory less what was in use outside PyTorch"
    if cpu:
        try:
            with open("/proc/meminfo") as f:
                kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
            return kib * 1024, "the memory available now"
        except (OSError, StopIteration, ValueError, IndexError):
            return None
    return None


def parse_capacity(capacity: int | str) -> int:
    """Bytes from ``80GiB``, ``80 GB``, ``512MiB`` or a whole number of bytes (``core.units``)."""
    if isinstance(capacity, np.integer):
        capacity = int(capacity)
    try:
        return parse_bytes(capacity)
    except ValueError as e:
        raise ValueError(f"capacity: {e}") from None
