"""The background writer: snapshot files (and their summaries) written off the cell's critical path.

After a cell the user waits only for what the figures need: taking the snapshot, summarising
it, clearing the history. The pickle and its summary go to one daemon thread, written in the
order handed over, at most ``PENDING`` waiting at a time (each holds a snapshot in memory).
``wait()`` blocks until everything handed over is on disk and says what could not be written;
the magic calls it before every cell, ``%memsnap`` commands and exit call it, so nothing is lost
on a normal exit and a user's next cell never races our write. A write that fails leaves its
interval with ``path=None`` and becomes one warning at the next ``wait()``. A hard kill can lose
what is still pending: the newest file or two.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .notice import warn

if TYPE_CHECKING:
    from .intervals import Interval

PENDING = 1  # snapshots waiting while one is written: what a steps= loop may hold in memory


class Writer:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue(PENDING)
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self._failures: list[str] = []

    def submit(self, snap: dict[str, Any], path: Path, d: dict[str, Any] | None, interval: Interval | None) -> None:
        """Write ``snap`` to ``path`` and its summary (``d``) beside it, in the background;
        ``interval`` gets the file's size, or ``path=None`` if it could not be written."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                # none yet, or a fork's copy of ours (threads do not survive a fork)
                self._queue = queue.Queue(PENDING)
                self._thread = threading.Thread(target=self._run, name="memsnap-writer", daemon=True)
                self._pid = os.getpid()
                self._thread.start()
        self._queue.put((snap, path, d, interval))

    def wait(self) -> None:
        """Block until every snapshot handed over is written; warn once about each that was not."""
        if self._thread is not None and self._pid == os.getpid():
            self._queue.join()
        with self._lock:
            failures, self._failures = self._failures, []
        for message in failures:
            warn(message, stacklevel=3)

    def _run(self) -> None:
        while True:
            snap, path, d, interval = self._queue.get()
            try:
                message = write(snap, path, d, interval)
            except BaseException as e:  # the thread outlives anything, or wait() would block forever
                message = f"memsnap: could not write {path}: {type(e).__name__}: {e}"
                if interval is not None:
                    interval.path = None
            finally:
                del snap, d  # a snapshot is freed once written, not when the next one comes
                self._queue.task_done()
            if message is not None:
                with self._lock:
                    self._failures.append(message)


def write(snap: dict[str, Any], path: Path, d: dict[str, Any] | None, interval: Interval | None) -> str | None:
    """Write the snapshot, then its summary (``d``, where there is one); what went wrong, in
    one line, or None."""
    from .snapshot import dump_snapshot
    from .summaries import write_beside

    try:
        dump_snapshot(snap, path)
        size = path.stat().st_size
    except Exception as e:
        if interval is not None:
            interval.path = None
        step = f"step {interval.step}" if interval is not None else "the interval"
        return f"memsnap: could not write {path}: {_reason(e)}; {step} is kept in memory only"
    if interval is not None:
        interval.file_bytes = size
    if d is None:
        return None
    try:
        write_beside(path, d)
    except Exception as e:  # readers recompute what a summary would have said
        return f"memsnap: could not write the summary beside {path}: {_reason(e)}"
    return None


def _reason(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"


WRITER = Writer()
atexit.register(WRITER.wait)
