"""Who owns a device's recording. One history per device family: a block started while another
block records the family runs unrecorded, and says which block owns it; the ``with`` blocks of
a recorder entered while it records are counted, so that their exits leave the recording to
the block that owns it. A recording whose thread has ended is given up (nothing else can stop it).
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from ..core.warn import warn
from .context import current_task, describe_recorder
from .dump import device_record
from .process_state import STATE

if TYPE_CHECKING:
    from .backends import Backend
    from .recorder import Recorder


def owner_of_family(backend: Backend) -> Recorder | None:
    """The running block that records ``backend``'s device family, if one does: PyTorch keeps
    one history per family."""
    return next(
        (
            r
            for r in STATE.active
            if r._backend is not None and r._backend.family == backend.family and r._backend.recording
        ),
        None,
    )


def where_it_runs(outer: Recorder) -> str:
    """Where the block that owns the recording runs, seen from this thread and task."""
    task = current_task()
    if outer._thread is not threading.current_thread():
        return "a block in another thread"
    if outer._task is not None and not outer._task.done() and task is not None and outer._task is not task:
        return "a block in another asyncio task"
    return "an enclosing block"


class Unrecorded:
    """The ``with`` blocks of one recorder entered while it records (its own nested, another
    thread's or task's, a generator's): each runs unrecorded, and its exit must not end the
    recording. Counted by the frame running the ``with``, where its exit runs too, whatever
    thread or task that is then."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def enter(self, depth: int) -> int:
        """Count the block whose ``with`` runs ``depth`` frames above the caller; its key."""
        key = id(sys._getframe(depth + 1))
        self._counts[key] = self._counts.get(key, 0) + 1
        return key

    def leave(self, key: int | None = None, depth: int = 0) -> bool:
        """Whether the block ending now (its ``with`` ``depth`` frames above the caller, or the
        ``key`` ``enter`` gave) ran unrecorded; it counts no more."""
        if key is None:
            key = id(sys._getframe(depth + 1))
        count = self._counts.get(key, 0)
        if not count:
            return False
        if count == 1:
            del self._counts[key]
        else:
            self._counts[key] = count - 1
        return True


def give_up(rec: Recorder) -> None:
    """Give up ``rec``'s recording, whose thread has ended, with one warning: nothing is dumped."""
    backend = rec._backend
    running = rec in STATE.active  # else a clear=false history its block left on
    if running:
        STATE.active.remove(rec)
    if backend is not None and backend.owner is rec and backend.recording:
        warn(
            f"memsnap: the thread that started {describe_recorder(rec)} on {backend.device} has ended, "
            f"and {backend.label}'s session with it: nothing was written"
            if running
            else f"memsnap: the clear=false history on {backend.device} was recorded by a thread that has "
            "ended, and its session went with it: it is given up, and what records next starts a fresh one",
            where=rec.where,
        )
        rec._quietly(backend.abandon)
        device_record(backend).end_chain()
    rec._current = None
    watch, rec._watch = rec._watch, None
    if watch is not None:
        rec._quietly(watch.detach)
