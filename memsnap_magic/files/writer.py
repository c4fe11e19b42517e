"""The background writer: snapshot files (and their summaries) written off the cell's critical path.

After a cell the user waits only for what the figures need: taking the snapshot, summarising
it, clearing the history. Writing the pickle and its summary (``recording.dump.write_files``) is a job
for one daemon thread, run in the order handed over, at most ``PENDING`` waiting at a time (each
holds a snapshot in memory). It imports nothing of ours but ``core.warn``, so the loader can wait
on it.
``wait()`` blocks until everything handed over is on disk and says what could not be written;
a ``%%memsnap`` cell, ``%memsnap`` commands, the loaders and exit call it, so nothing is lost on a
normal exit and nothing of ours reads a file half there. A plain cell does not wait: the writer
pauses while it runs (``hold``: jobs stop at their next ``checkpoint``, a pickle frame or a chunk
freed), so the cell has the interpreter to itself and the write goes on once it is done. The
thread only writes: what a write changes elsewhere (the session's record of its interval: the
file's size, or ``path=None`` where it failed) comes back as a ``Done`` that ``wait()`` and
``report()`` apply on the thread that calls them (the next cell does), and a failure becomes one
warning there. A hard kill can lose
what is still pending: the newest file or two. A multiprocessing worker waits as it ends (its
``os._exit`` runs no ``atexit`` handler, so multiprocessing's own exit finalizers do it).
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import time
from typing import Callable, NamedTuple, Optional, Union

from ..core.warn import blamed, warn

PENDING = 1  # snapshots waiting while one is written: what a steps= loop may hold in memory
HOLD_S = 1.0  # the longest a hold pauses the jobs (a long cell, or one whose end no event tells)


class Done(NamedTuple):
    """What a job did: what went wrong (one line) or None, and ``then``: what its outcome
    changes elsewhere, run by whoever waits or reports, never on the writer's thread."""

    message: str | None
    then: Callable[[], None]


# writes something; returns what went wrong, in one line, or None, or a Done
Job = Callable[[], Union[str, Done, None]]
Where = Optional[tuple[str, int]]  # the line a failure is said at: the block's that recorded it


class Writer:
    """One daemon thread running write jobs in the order handed over."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Job, str, Where]] = queue.Queue(PENDING)
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self._failures: list[tuple[str, Where]] = []
        self._done: list[Callable[[], None]] = []  # the ``then`` of each job done, to apply in order
        self._go = threading.Event()  # cleared by hold(): jobs pause while a cell runs
        self._go.set()
        self._until = 0.0  # when the current hold lapses (time.monotonic())

    def hold(self) -> None:
        """Pause the jobs at their next ``checkpoint`` until ``release()``, at most ``HOLD_S``:
        the user's cell runs without a write sharing the interpreter with it (a write held it
        for up to 5 ms at a time, and a plain cell slowed several-fold while one went on)."""
        self._until = time.monotonic() + HOLD_S
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def checkpoint(self) -> None:
        """Where a job may pause (between slices of its work): while held, on the writer's own
        thread, until released or the hold lapses. Free when not held."""
        if not self._go.is_set() and threading.current_thread() is self._thread:
            self._go.wait(max(0.0, self._until - time.monotonic()))

    def submit(self, job: Job, what: str, where: Where = None) -> None:
        """Run ``job`` (which writes ``what``) in the background, after the jobs before it;
        blocks while ``PENDING`` jobs already wait. A failure is said at ``where``."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                # none yet, or a fork's copy of ours (threads do not survive a fork)
                self._queue = queue.Queue(PENDING)
                self._thread = threading.Thread(target=self._run, name="memsnap-writer", daemon=True)
                self._pid = os.getpid()
                self._thread.start()
                _wait_when_a_worker_ends(self)
        self._queue.put((job, what, where))

    def wait(self) -> None:
        """Block until every job handed over is done; warn once about each that failed.
        Costs nothing when there is nothing to wait for (before every cell, every load)."""
        self.release()
        if self._thread is not None and self._pid == os.getpid():
            self._queue.join()
        self._say(ours_first=False)

    def report(self, ours_first: bool = True) -> None:
        """Say what failed so far, without waiting (a script's next block, a notebook's next
        plain cell: the writes of the one before go on)."""
        self._say(ours_first)

    def _say(self, ours_first: bool) -> None:
        """Apply what the jobs done so far changed; then one warning per failed job, at the line
        of the block that recorded it, unless the caller blames another place (a notebook's next
        cell says it from the background)."""
        with self._lock:
            failures, self._failures = self._failures, []
            done, self._done = self._done, []
        for then in done:
            try:
                then()
            except Exception as e:  # one result that cannot be applied must not lose the others
                warn(f"memsnap: applying a background write failed: {type(e).__name__}: {e}", stacklevel=4)
        for message, where in failures:
            warn(message, stacklevel=4, where=where if ours_first or blamed() is None else None)

    def _run(self) -> None:
        while True:
            job, what, where = self._queue.get()
            self.checkpoint()
            message, then = None, None
            try:
                out = job()
                message, then = out if isinstance(out, Done) else (out, None)
            except BaseException as e:  # the thread outlives anything, or wait() would block forever
                message = f"memsnap: could not write {what}: {type(e).__name__}: {e}"
            finally:
                del job  # what it holds (a snapshot) is freed once written, not when the next comes
                with self._lock:  # before the job counts as done: a wait() then sees it
                    if then is not None:
                        self._done.append(then)
                    if message is not None:
                        self._failures.append((message, where))
                self._queue.task_done()


def _wait_when_a_worker_ends(writer: Writer) -> None:
    """A multiprocessing worker (forked, Linux's default) ends through ``os._exit``, which runs
    no ``atexit`` handler: its exit runs multiprocessing's finalizers instead."""
    util = sys.modules.get("multiprocessing.util")  # a worker has it; nothing is imported for it
    if util is not None:
        util.Finalize(None, writer.wait, exitpriority=100)


WRITER = Writer()
atexit.register(WRITER.wait)


def wait_for_writes() -> None:
    """Block until every snapshot recorded so far is on disk; warn about any that could not be
    written (``wait=true`` does this per cell).

    In IPython every ``%%memsnap`` cell starts by waiting; ``%memsnap`` commands,
    ``load_snapshot``, the folder readers and interpreter exit wait too. Code that opens its own
    dumps another way (``open``, a viewer) calls this first: a plain cell does not wait."""
    WRITER.wait()
