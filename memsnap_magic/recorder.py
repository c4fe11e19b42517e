"""Record → run → dump → clear around any block of code: the engine behind ``%%memsnap``.

``Recorder`` is a context manager, so scripts and torchrun/Ray workers get the same files and
figures as the notebook magic. Whatever happens in the block, the snapshot is taken and written,
and recording is stopped (or kept on, for ``clear=False``); our own failures become one warning.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from . import options
from .session_state import Interval, Session, interval_from_snapshot
from .session_state import session as _default_session

_active: list["Recorder"] = []


def mark(step: int) -> None:
    """Declare that ``step`` begins now, inside a ``steps=`` cell or ``Recorder(steps=...)``.

    Ends the step being recorded (its snapshot holds only that step) and starts recording
    again if ``step`` is listed. Outside such a block it does nothing, so the same loop runs
    with or without the magic.
    """
    if _active and _active[-1].steps is not None:
        _active[-1]._mark(int(step))


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


def snapshot_path(out: str | os.PathLike[str], step: int, tag: str, rank: int) -> Path:
    """verl's layout: ``<out>/step<N>/<tag>_rank<R>_pid<P>.pickle``."""
    return Path(out) / f"step{step}" / f"{tag}_rank{rank}_pid{os.getpid()}.pickle"


class Recorder:
    """Record one interval (or the listed ``steps`` of a loop) and dump it in verl's layout.

    >>> with Recorder(step=3, device="cpu"):          # doctest: +SKIP
    ...     loss = model(batch).sum(); loss.backward()

    Options are the magic's (``%%memsnap?``). ``namespace``: where the CPU route looks for the
    tensors live at the interval's start (default: the caller's module globals). ``start()`` and
    ``stop(error)`` are the same steps without a ``with`` block.
    """

    def __init__(self, step: int | None = None, *, steps: list[int] | tuple[int, ...] | None = None,
                 out: str | os.PathLike[str] = options.DEFAULT_OUT, tag: str = "torch_memory",
                 device: str = "auto", rank: int | None = None, max_entries: int = 100_000,
                 context: str = "all", stacks: str = "python", clear: bool = True,
                 namespace: dict[str, Any] | None = None, session: Session | None = None,
                 report: Callable[[Interval, Interval | None], None] | None = None) -> None:
        given = {"step": step, "steps": ",".join(map(str, steps)) if steps is not None else None,
                 "out": os.fspath(out), "tag": tag, "device": device, "rank": rank,
                 "max_entries": max_entries, "context": context, "stacks": stacks, "clear": clear}
        line = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in given.items() if v is not None)
        self.options = options.parse(line, prog="Recorder")
        self.steps: tuple[int, ...] | None = self.options["steps"]
        self.namespace = namespace if namespace is not None else sys._getframe(1).f_globals
        self.session = session if session is not None else _default_session()
        self.report = report
        self.intervals: list[Interval] = []
        self._backend: Any = None
        self._current: int | None = None
        self._rank = 0

    def start(self) -> "Recorder":
        """Resolve the device and start recording; ``BackendError`` when it cannot record here."""
        from .backends import get_backend, resolve_device

        opts = self.options
        self._backend = get_backend(resolve_device(opts["device"]), opts)
        self._rank = resolve_rank(opts["rank"])
        if self.steps is None:
            self._current = opts["step"] if opts["step"] is not None else self.session.next_step()
            self._backend.begin(fresh=False, namespace=self.namespace)
        else:
            getattr(self._backend, "warm_up", lambda: None)()
        _active.append(self)
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """Take, write and summarise the snapshot of the current interval; stop recording."""
        if self in _active:
            _active.remove(self)
        keep = not self.options["clear"]
        if self._current is not None:
            self._finish(self._current, error, keep=keep, cleared=not keep)
            self._current = None
        if not keep and self._backend is not None and self._backend.recording:
            self._quietly(self._backend.end, keep=False)

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self.stop(exc)
        return False

    def _mark(self, step: int) -> None:
        assert self.steps is not None
        listed = step in self.steps
        if self._current is not None:  # on for a listed step: its begin(fresh=True) clears
            self._finish(self._current, None, keep=listed, cleared=True)
            self._current = None
        if listed:  # mark() runs inside the user's loop: our failure must not stop it
            self._quietly(self._backend.begin, fresh=True, namespace=self.namespace)
            self._current = step if self._backend.recording else None

    def _quietly(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # our failure must never fail the user's cell
            warnings.warn(f"memsnap: {getattr(fn, '__name__', fn)} failed on "
                          f"{self._backend.device}: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=3)
            return None

    def _finish(self, step: int, error: BaseException | None, keep: bool, cleared: bool) -> None:
        """``keep``: leave recording on after the dump; ``cleared``: whether the history this
        snapshot holds is cleared before the next one (False only for ``clear=false``)."""
        from .snapshot import dump_snapshot

        backend, opts = self._backend, self.options
        end_us = time.time_ns() // 1000
        snap = self._quietly(backend.snapshot)
        allocator_peak = self._quietly(backend.allocator_peak)
        if snap is None:
            self._quietly(backend.end, keep=False)
            return
        error_name = type(error).__name__ if error is not None else None
        snap["memsnap"] = {"step": step, "rank": self._rank, "device": backend.device,
                           "tag": opts["tag"], "pid": os.getpid(), "end_us": end_us,
                           "error": error_name, "clear": cleared,
                           "allocator_peak_allocated": allocator_peak}
        path: Path | None = snapshot_path(opts["out"], step, opts["tag"], self._rank)
        file_bytes = None
        try:
            dump_snapshot(snap, path)
            file_bytes = path.stat().st_size
        except Exception as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
            warnings.warn(f"memsnap: could not write {path}: {reason}; the interval is kept "
                          "in memory only", RuntimeWarning, stacklevel=3)
            path = None
        finally:
            self._quietly(backend.end, keep=keep)
        iv = self._quietly(interval_from_snapshot, snap, backend.trace_index,
                           max_entries=opts["max_entries"], step=step, rank=self._rank,
                           device=backend.device, path=path, error=error_name,
                           allocator_peak_allocated=allocator_peak, clear=cleared, tag=opts["tag"],
                           file_bytes=file_bytes,
                           context="none" if backend.device == "cpu" else opts["context"])
        if iv is None:
            return
        previous = self.session.previous(iv)
        self.session.add(iv)
        self.intervals.append(iv)
        if self.report is not None:
            self._quietly(self.report, iv, previous)
