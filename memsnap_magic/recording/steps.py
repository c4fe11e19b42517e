"""``mark(step)``: where a ``steps=`` block's listed steps begin. This finds which block the
calling code runs in, and what a mark does there (``advance``): the step being recorded ends,
a listed step begins, an unlisted one is followed; and, as the block ends, which listed steps
never began.
"""

from __future__ import annotations

import contextlib
import operator
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..core.errors import excerpt
from ..core.names import brief_numbers
from ..core.warn import warn
from ..files.layout import MAX_STEP
from .context import current_task, describe_recorder
from .options import OptionError
from .process_state import STATE

if TYPE_CHECKING:
    from ..results.session import Session
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


def advance(rec: Recorder, step: int) -> None:
    """``mark(step)`` in ``rec``'s block: finish the step being recorded, begin ``step`` if it is
    listed (else follow it: what it leaves counts for the next listed step's start)."""
    backend = rec._backend
    if rec.steps is None or backend is None:
        return
    if rec.elsewhere():
        if not rec._told_thread:
            rec._told_thread = True
            warn(
                f"memsnap: mark({step}) ran in another thread than the one recording, and "
                f"{backend.label} changes steps only there: this mark and any others from that "
                "thread are ignored",
                stacklevel=4,
            )
        return
    listed = step in rec.steps
    if rec._current is not None:  # on for a listed step whose begin(fresh=True) clears in place
        rec._finish(rec._current, None, keep=listed and backend.clears_in_place, cleared=True)
        rec._current = None
        if not listed:  # an unrecorded step: what it allocates and frees still counts for the next start
            rec._quietly(backend.follow, namespace=rec.reach.tensors())
    if listed:  # mark() runs inside the user's loop: our failure must not stop it
        rec._begun.add(step)
        rec._watch = rec._quietly(rec.reach.new_watch, backend, rec._quietly)
        rec._usage = rec._quietly(backend.usage)
        rec._began_us = time.time_ns() // 1000
        rec._quietly(backend.begin, fresh=True, namespace=rec.reach.tensors())
        rec._current = step if backend.recording else None
        if rec._current is None and rec._watch is not None:
            rec._quietly(rec._watch.detach)
            rec._watch = None


def say_unmarked(rec: Recorder) -> None:
    """A steps= loop that never reached some listed steps, or never called ``mark``."""
    missing = [s for s in rec.steps or () if s not in rec._begun]
    if not rec._begun:
        first = missing[0]
        what = f"no listed step began: call mark(step) at the start of each step of the loop (mark({first}) …)"
    else:
        what = (
            f"step{'s' * (len(missing) > 1)} {brief_numbers(missing)} never began "
            f"(no mark() for {'them' if len(missing) > 1 else 'it'})"
        )
    warn(f"memsnap: {describe_recorder(rec)}: {what}; nothing was recorded for them", stacklevel=3)


def next_step(session: Session, run: str | None) -> int:
    """The step a block without ``step=`` records: the one after its run's highest, which a file
    loaded into the run may have set."""
    step = session.next_step(run or "")
    if step >= MAX_STEP:
        where = f"run {run!r}" if run else "this session"
        raise OptionError(
            f"{where} already holds step {step - 1:,}, the highest a file can hold; "
            f"give step= (0 to {MAX_STEP - 1:,}) or another run="
        )
    return step
