"""``mark(step)``: where a ``steps=`` block's listed steps begin. The block itself (``Recorder``)
ends one step and starts the next; this finds which block the calling code runs in.
"""

from __future__ import annotations

import contextlib
import operator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..core.errors import excerpt
from .context import current_task
from .process_state import STATE

if TYPE_CHECKING:
    from .recorder import Recorder


def mark(step: int) -> None:
    """Declare that ``step`` begins now, inside a ``steps=`` cell or ``Recorder(steps=...)``.

    Ends the step being recorded (its snapshot holds only that step) and starts recording
    again if ``step`` is listed. Outside such a block it does nothing, so the same loop runs
    with or without the magic. ``step`` is an integer (numpy's too), as ``steps=`` lists them:
    anything else is a ``TypeError`` in or out of a block, so a loop fails the same either way.
    """
    number = _step_number(step)
    recorder = MARKED.get()  # the block this code runs in: a task inherits it from where it was made
    if recorder is None or recorder not in STATE.active:
        recorder = STATE.active[-1] if STATE.active else None
        task = recorder.task() if recorder is not None else None
        if task is not None and not task.done() and task is not current_task():
            return  # another asyncio task's block (a sibling, made before it began): not this code's
    if recorder is not None and recorder.steps is not None:
        recorder.mark_step(number)


MARKED: ContextVar[Recorder | None] = ContextVar("memsnap_recording_block", default=None)


def _step_number(step: Any) -> int:
    if type(step) is not bool and "bool" not in str(getattr(step, "dtype", "")):  # True is not step 1
        with contextlib.suppress(TypeError):
            return operator.index(step)  # ints and numpy's; never a float truncated
    what = f"{type(step).__name__} {excerpt(step)}"
    raise TypeError(f"mark(step): step must be an integer, as steps= lists them, not {what}")
