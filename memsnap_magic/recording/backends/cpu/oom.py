"""A CPU cell that ran out of memory: the allocator's error found in what the cell raised, the
bytes it asked for, what the system had free, and the failing line's stack, as a trace entry."""

from __future__ import annotations

import os
import re
from typing import Any

from ....files.snapshot import proc_bytes

# What the CPU allocator raises when malloc fails (c10/core/impl/alloc_cpu.cpp): a RuntimeError
_ALLOCATOR_FAILED = re.compile(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (\d{1,19}) bytes"
)


def allocator_failure(error: BaseException | None) -> tuple[BaseException, int] | None:
    """The CPU allocator's out-of-memory error in ``error`` or what it was raised from (a few
    links: a library may wrap it), and the bytes it asked for."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, RuntimeError):
            found = _ALLOCATOR_FAILED.search(str(error)[:4096])
            if found is not None and int(found.group(1)) < 1 << 63:
                return error, int(found.group(1))
        # the chain the traceback shows: `raise ... from None` hides a handled failure
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        seen += 1
    return None


def available_bytes() -> int | None:
    """Memory a new allocation could still get (Linux ``MemAvailable``), where the system says."""
    available = proc_bytes("/proc/meminfo", b"MemAvailable:")
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def traceback_frames(error: BaseException) -> list[dict[str, Any]]:
    """The failing request's stack, innermost first, in PyTorch's frame format: the traceback
    runs from the cell down to the line whose call asked for the memory."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append({"filename": code.co_filename, "line": tb.tb_lineno, "name": code.co_name})
        tb = tb.tb_next
    return frames[::-1]
