"""The CPU route's profiler session: PyTorch's memory-only profiler (private API, ``torch._C``)
started, stopped and read with the least it costs; what stopped sessions reported, freed off the
cell's critical path; its start-up chatter kept off the user's stderr.

One ``_Profiler`` per process (``STATE.cpu_profiler``): its warm-up is paid once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

from ....core.nogc import no_gc
from ....files.writer import WRITER
from ..base import BackendError
from .events import check_instants


@contextlib.contextmanager
def _stderr_caught() -> Iterator[Callable[[], list[bytes]]]:
    """File descriptor 2 (what C++ code prints to) caught inside; the lines it got, once out.
    Left alone where the process has no stderr (``sys.stderr`` None: descriptor 2 was closed at
    start, and may be another file's now) or descriptor 2 is closed."""
    lines: list[bytes] = []
    try:
        if sys.stderr is None:
            raise OSError("no stderr")
        saved = os.dup(2)
    except OSError:
        yield lambda: lines
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    spool = _spool()
    os.dup2(spool, 2)
    try:
        yield lambda: lines
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        with contextlib.suppress(OSError):
            os.lseek(spool, 0, os.SEEK_SET)
            lines = _read_all(spool).splitlines(keepends=True)
        os.close(spool)


def _spool() -> int:
    """A descriptor to catch output in: in memory where the system has it, else a temporary
    file, else the null device."""
    with contextlib.suppress(Exception):
        return os.memfd_create("memsnap-stderr")
    with contextlib.suppress(Exception):
        fd, path = tempfile.mkstemp(prefix="memsnap-stderr-")
        os.unlink(path)
        return fd
    return os.open(os.devnull, os.O_RDWR)


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


class _Profiler:
    """The cheapest memory-only profiler session: user scope, no operator events; without stacks,
    no CPU activity either where this process allows (``_quiet_activities``)."""

    def __init__(self) -> None:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # before kineto starts: no USDT start/stop lines
        from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig

        # (state, report_input_shapes, profile_memory, with_stack, with_flops, with_modules, experimental)
        self._configs = {
            stacks: ProfilerConfig(ProfilerState.KINETO, False, True, stacks, False, False, _ExperimentalConfig())
            for stacks in (False, True)
        }
        self._activities = {ProfilerActivity.CPU}
        self._scopes = {RecordScope.USER_SCOPE}
        self._quiet: set[Any] | None = None  # a session without stacks records with these (``warm_up``)
        self._session_quiet = False  # the running session records with them
        self._warm = False
        self.running = False  # our session is on (a torch.profiler of the user's may still take it over)
        # What the last sessions reported, read and done with: PyTorch frees it in ~1 µs per event.
        self.spent: list[Any] = []
        self.events_read = 0  # allocation events the reader found in what is spent (the backend counts them)
        self._released: tuple[int, threading.Event] | None = None  # (pid, set once freed in the background)
        self._rss_at_start: int | None = None
        self._used_in: int | None = None  # the process that started a session (a fork's child cannot)
        # kineto started before us (a torch.profiler of the user's): it prints two USDT lines per session
        self._chatty = False
        self._started_in: int | None = None  # the thread that started the session
        self.ended_by_thread = False  # that thread stopped it as it ended (``_EndsWithThread``)

    def warm_up(self) -> None:
        """Pay the one-off start cost now and spend the allocator's once-per-process warning
        ("Memory block of unknown size…") with stderr silenced, so the user's cell shows neither."""
        if self._warm:
            return
        import torch

        victim = torch.empty(16)
        with _stderr_caught() as caught:
            self.start()
            del victim
            probe = torch.empty(16)  # an allocation and a free seen whole, for check_instants
            del probe
            check_instants(self.stop() or [])
            self._settle()
        self._chatty = any(line.startswith(b"USDT:") for line in caught())
        self._probe_quiet()
        self._warm = True

    def _probe_quiet(self) -> None:
        """``_quiet`` set to ``_quiet_activities`` where a probe session with them, opened and
        stopped as every session without stacks is, reports an allocation and its free as the
        CPU activity's does and says nothing but its known warning; else left None (every
        session keeps the CPU activity)."""
        import torch
        from torch._C._profiler import _ExtraFields_Allocation

        self._quiet = _quiet_activities(torch)
        if self._quiet is None:
            return
        try:
            with _stderr_caught() as caught:
                self.start()
                try:
                    probe = torch.empty(16)
                    ptr = probe.data_ptr()
                    del probe
                finally:
                    roots = self.stop() or []
            fields = [n.extra_fields for n in roots if type(n.extra_fields) is _ExtraFields_Allocation]
            seen = {(f.ptr, f.alloc_size) for f in fields}
            # the stop drops its known warning itself: what is caught here each session would say again
            recorded = {(ptr, 64), (ptr, -64)} <= seen and not caught()
        except Exception:  # an activity this build refuses: the CPU activity it is
            recorded = False
        finally:
            self._settle()
        if not recorded:
            self._quiet = None

    def start(self, stacks: bool = False) -> None:
        """``stacks``: with the Python tracer, which links each allocation to the calls around it."""
        from torch._C._autograd import _enable_profiler, _prepare_profiler

        if self._used_in not in (None, os.getpid()):
            raise BackendError(
                "device=cpu: this process was forked from one that had recorded on the CPU, and "
                "PyTorch's profiler hangs when started again in such a child; start the worker "
                "with multiprocessing's 'spawn' method (multiprocessing.get_context('spawn'))"
            )
        self._used_in = os.getpid()
        self._settle()  # no session starts while an old one's results are being freed
        config = self._configs[stacks]
        activities = self._quiet if self._quiet is not None and not stacks else self._activities
        self._rss_at_start = resident_bytes()
        # before the session: with the tracer on, each Python call until it stops is recorded and read back
        thread, main = threading.get_ident(), threading.current_thread() is threading.main_thread()
        self._without_chatter(_prepare_profiler, config, activities)
        self._without_chatter(_enable_profiler, config, activities, self._scopes)
        self._session_quiet = activities is self._quiet
        self.running = True
        self._started_in, self.ended_by_thread = thread, False
        if not main and not hasattr(_THREAD, "end"):
            _THREAD.end = _EndsWithThread(self)

    def stop(self) -> list[Any] | None:
        """Stop; the roots of the session's event tree (its allocation events, in time order). None
        when the session is not ours any more: a ``torch.profiler`` started meanwhile took it over
        (its end ended ours), or is running now (then it is left running, untouched)."""
        from torch._C._autograd import _disable_profiler, _profiler_enabled

        self.running = False
        if not _profiler_enabled() or public_profiler_running():
            return None
        hook = sys.getprofile()  # one the cell set while the tracer ran: PyTorch's stop removes it
        result = self._without_chatter(_disable_profiler, quiet=self._session_quiet)
        if hook is not None and type(hook).__name__ != "TraceContext" and sys.getprofile() is None:
            sys.setprofile(hook)
        with no_gc():  # the tree is an object per event: collections while building it walk them all
            roots = result.experimental_event_tree()
        # The session's own buffers (~0.5 KB an event) are freed later, unless it grew the
        # process by a GB or more: then memory comes first, and they go now, before the tree is read.
        rss, start = resident_bytes(), self._rss_at_start
        self.spent += [roots] if rss is None or start is None or rss - start > HEAVY_SESSION else [result, roots]
        return roots

    def _without_chatter(self, call: Callable[..., Any], *args: Any, quiet: bool = False) -> Any:
        """``call(*args)``. Where kineto was started before us, without our quiet log level, its
        USDT lines are kept out of the user's output, and so is the warning a quiet session's stop
        gives (it finds no CPU activity to match its events with); what else is said is passed on."""
        if not (self._chatty or quiet):
            return call(*args)
        caught: Callable[[], list[bytes]] | None = None
        try:
            with _stderr_caught() as caught:
                return call(*args)
        finally:  # what it printed before a failure too
            kept = [line for line in caught() if not _chatter(line)] if caught is not None else []
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))

    def end_with_thread(self) -> None:
        """Stop the session this thread started, as the thread ends: no other thread can (its
        results are dropped; the recording's owner says nothing was written)."""
        from torch._C._autograd import _disable_profiler, _profiler_enabled

        if not (self.running and self._started_in == threading.get_ident()):
            return
        if _profiler_enabled() and not public_profiler_running():
            with contextlib.suppress(Exception), _stderr_caught():
                _disable_profiler()
                self.running, self.ended_by_thread = False, True  # else clear_lost still clears

    def clear_lost(self) -> None:
        """Clear what a session left by a thread that ended (its Python tracer, callbacks):
        one session opened and closed here. PyTorch says what it finds on stderr: kept out.
        Nothing is left where the thread stopped its own session as it ended."""
        from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler

        self.running = False
        if self.ended_by_thread:
            return
        config = self._configs[True]
        with contextlib.suppress(Exception), _stderr_caught():
            _prepare_profiler(config, self._activities)
            _enable_profiler(config, self._activities, self._scopes)  # type: ignore[call-arg]  # torch's stubs lag: scopes
            _disable_profiler()

    def release(self) -> None:
        """Free what the stopped sessions reported off the cell's critical path: the background
        writer does it (before the cell's file), and the next session starts once it is done.
        Destroying a session's results costs ~1 µs per event (0.3-0.6 s after 300,000); those
        of a few events are freed here, for less than handing them over costs."""
        events, self.events_read = self.events_read, 0
        if events < FREE_HERE:
            self.spent.clear()
            return
        self._wait_for_release()
        spent, self.spent = self.spent, []
        done = threading.Event()
        self._released = (os.getpid(), done)
        # Freeing a big session holds the GIL throughout: the cell finishes and replies first.
        pause = YIELD_S if events >= YIELD_PAST else 0.0
        WRITER.submit(_freeing(spent, done, pause), "the CPU profiler's results")

    def _settle(self) -> None:
        """Free what is spent now, and wait for what is being freed in the background."""
        self.spent.clear()
        self.events_read = 0
        self._wait_for_release()

    def _wait_for_release(self) -> None:
        if self._released is not None:
            pid, done = self._released
            if pid == os.getpid():  # a fork's copy was never handed to its writer: nothing to wait for
                WRITER.release()  # paused while a cell runs, it would keep this cell waiting
                done.wait()
            self._released = None


def _quiet_activities(torch: Any) -> set[Any] | None:
    """The activities of a session without stacks: one kineto has no device for in this process
    (MTIA's), in place of the CPU's. PyTorch reports allocations to any profiler session whatever
    its activities, but builds kineto's CPU trace only with the CPU activity: an event and its
    metadata per allocation, about half the cost of stopping a session and freeing what it reported
    (a 40k-allocation session to its tree: 0.6x, ``benchmarks/bench_cpu_floor.py``'s ``quiet``
    rows; its stop 2x and its results' freeing 2.5x faster). That activity is also what starts the
    Python tracer and the user scopes, so sessions with stacks keep it. None where this build
    has no such activity or the process has an MTIA device."""
    from torch._C._profiler import ProfilerActivity

    activity = getattr(ProfilerActivity, "MTIA", None)
    mtia = getattr(torch, "mtia", None)
    try:
        present = mtia is not None and bool(mtia.is_available())
    except Exception:  # asking failed: assume it is there
        present = True
    return {activity} if activity is not None and not present else None


_CPU_TRACE_UNMATCHED = b"Failed to recover relationship between all profiler and kineto events"


def _chatter(line: bytes) -> bool:
    """Kineto's USDT start and stop lines, and the warning each quiet session's stop gives."""
    return line.startswith(b"USDT:") or _CPU_TRACE_UNMATCHED in line


HEAVY_SESSION = 1 << 30  # bytes a session grew the process by (~500,000 events) past which its buffers go at once
FREE_HERE = 64  # allocation events read below which freeing a session's results is cheaper than a hand-over
YIELD_PAST, YIELD_S = 20_000, 0.05  # past these events the freeing waits this long before it starts


_THREAD = threading.local()  # what a thread other than the main one holds until it ends


class _EndsWithThread:
    """Kept in a thread's local storage, which Python clears in that very thread as it ends: a
    profiler session still on then is stopped there (left on, it crashed the process at exit)."""

    def __init__(self, profiler: _Profiler) -> None:
        self.profiler = profiler

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.profiler.end_with_thread()


def _freeing(spent: list[Any], done: threading.Event, pause: float) -> Callable[[], None]:
    """A writer job freeing ``spent``; lists a chunk at a time, so the GIL changes hands between."""

    def job() -> None:
        try:
            time.sleep(pause)
            while spent:
                item = spent.pop()
                while isinstance(item, list) and item:
                    del item[-4096:]
                    WRITER.checkpoint()
                del item
                WRITER.checkpoint()
        finally:
            done.set()

    return job


def public_profiler_running() -> bool:
    """Whether a ``torch.profiler``/``torch.autograd.profiler`` session of the user's is on."""
    import torch.autograd.profiler as autograd_profiler

    return bool(getattr(autograd_profiler, "_is_profiler_enabled", False))


_STATM: dict[int, int] = {}  # pid -> descriptor of its /proc/self/statm (a fork's child opens its own)


@functools.cache
def _page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc/self/statm``); None elsewhere. Read through a
    descriptor kept open: 2 µs, not the 20 µs of opening the file for each of a cell's four reads."""
    try:
        pid = os.getpid()
        fd = _STATM.get(pid)
        if fd is None:
            for inherited in _STATM.values():  # the parent's: it reads the parent's figures
                os.close(inherited)
            _STATM.clear()
            fd = _STATM[pid] = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(fd, 256, 0).split()[1]) * _page_size()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
