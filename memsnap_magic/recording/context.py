"""What a block runs in: its thread's asyncio task, its rank, and how another block names it
when it warns that a device is taken."""

from __future__ import annotations

import os
import sys
from typing import Any

from ..core.names import brief_numbers


def current_task() -> Any:
    """The asyncio task running now in this thread, or None (asyncio not in use)."""
    asyncio = sys.modules.get("asyncio")
    loop = asyncio._get_running_loop() if asyncio is not None else None  # None, not an error, without one
    return asyncio.current_task(loop) if asyncio is not None and loop is not None else None


def describe_recorder(recorder: Any) -> str:
    steps = getattr(recorder, "steps", None)
    if steps:  # as written, unless the list is long
        listed = ",".join(map(str, steps))
        return f"steps={listed}" if len(listed) <= 60 else f"steps= {brief_numbers(steps)}"
    step = getattr(recorder, "_current", None)
    return f"step {step if step is not None else getattr(recorder, '_finishing', '?')}"  # its dump under way


def resolve_rank(explicit: int | None = None) -> int:
    """Explicit ``rank=``, else ``$RANK`` (torchrun, verl), else torch.distributed's rank, else
    the ipyparallel engine id when running on an engine, else 0."""
    if explicit is not None:
        return explicit
    env = os.environ.get("RANK", "")
    if env.isdigit():
        return int(env)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    engine_id = getattr(getattr(shell, "kernel", None), "engine_id", None)
    return engine_id if isinstance(engine_id, int) and engine_id >= 0 else 0
