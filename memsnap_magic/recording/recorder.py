"""Record → run → dump → clear around any block of code: the engine behind ``%%memsnap``.

``Recorder`` is a context manager, so scripts and torchrun/Ray workers get the same files and
figures as the notebook magic. Whatever happens in the block, the snapshot is taken and written,
and recording is stopped (or kept on, for ``clear=False``); our own failures become one warning.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Literal

from ..core.names import run_label
from ..core.nogc import no_gc
from ..core.warn import blamed_on, caller_outside, warn
from ..files.writer import WRITER
from . import backends, dump, owners, steps
from . import options as opts
from .context import current_task, describe_recorder, resolve_rank
from .process_state import STATE
from .reach import Reach
from .roles import Watch, weakly

if TYPE_CHECKING:
    from ..results.intervals import Interval
    from ..results.session import Session
    from .backends import Backend


_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's code (its locals are not a dict of their own)
_STARTING = threading.Lock()  # two threads starting blocks at once: one owns the device, one is told


def _stop_left_on() -> None:
    """At exit, stop what a clear=false history left recording: PyTorch's profiler, still on
    while the interpreter tears down, crashes the process (its files are written already)."""
    with contextlib.suppress(Exception):
        STATE.stop_all()


atexit.register(_stop_left_on)  # before or after the writer's wait: the files are handed over already


class Recorder:
    """Record one interval (or the listed ``steps`` of a loop) and dump it in verl's layout.

    >>> with Recorder(step=3, device="cpu"):          # doctest: +SKIP
    ...     loss = model(batch).sum(); loss.backward()

    Keywords are the magic's options (below; ``%%memsnap?``), as Python values, over the
    session's ``%memsnap config`` defaults (a notebook's), or ``options=`` an ``Options`` the
    magic parsed; ``model=`` and ``optimizer=`` also take the objects. ``namespace``: where the
    CPU route looks for the tensors live at the interval's start, and where models and
    optimizers are found (default: the caller's module globals). ``report(interval, previous)``
    is called after each dump. ``start()`` and ``stop(error)`` are the same steps without ``with``.

    Options:
    """

    def __init__(
        self,
        step: int | None = None,
        *,
        options: opts.Options | None = None,
        namespace: dict[str, Any] | None = None,
        session: Session | None = None,
        report: Callable[[Interval, Interval | None], None] | None = None,
        **keywords: Any,
    ) -> None:
        # model=/optimizer= as objects (a script's locals); as names they are options like the rest
        # held weakly, as the namespace's models are: `del model` inside the block frees it there
        given = {
            k: weakly(keywords.pop(k))
            for k in ("model", "optimizer")
            if not isinstance(keywords.get(k), (str, type(None)))
        }
        self.session = session if session is not None else STATE.session
        if options is None:  # a notebook's %memsnap config defaults hold here too
            options = opts.from_keywords("Recorder", self.session.defaults, step=step, **keywords)
        elif step is not None or keywords:
            raise TypeError("Recorder: give options= or option keywords, not both")
        if namespace is not None and not isinstance(namespace, Mapping):
            raise TypeError(
                f"Recorder: namespace= is a mapping of names (globals(), vars(module)), not {type(namespace).__name__}"
            )
        self.options = options
        self.steps = options.steps
        caller = sys._getframe(1)
        # made in a function (a script's main()): its locals are walked too, found again on the
        # stack by its code at each walk (a frame kept would keep its locals alive after it returns)
        function = namespace is None and caller.f_code.co_flags & _CO_OPTIMIZED
        self.namespace = namespace if namespace is not None else caller.f_globals
        self.reach = Reach(self.namespace, caller.f_code if function else None, given, options)
        self.report = report
        self._joined: dict[int, Interval] = {}  # what each block recorded, by origin: the newest record known
        self._backend: Backend | None = None
        self._out = ""  # options.out made absolute when recording starts: where the files go
        self._current: int | None = None
        self._finishing: int | None = None  # the step whose dump is under way, as another thread is told
        self._begun: set[int] = set()  # the listed steps mark() began
        self._rank = 0
        self._watch: Watch | None = None  # this interval's parameters, gradients, optimizer state
        self._usage: dict[str, int] | None = None  # backend.usage() at the interval's start
        self.where: tuple[str, int] | None = None  # what our warnings point at: the with line, the %%memsnap line
        self._began_us = 0  # when the step being recorded began (µs since the epoch)
        self._where_ours = False  # where was found by start() (the magic pins its own)
        self._thread: threading.Thread | None = None  # the thread that started it
        self._task: Any = None  # and the asyncio task, if one did
        self._unrecorded = owners.Unrecorded()  # its `with` blocks entered while it records
        self._told_thread = False  # mark() from another thread was refused once, with a warning

    @property
    def intervals(self) -> list[Interval]:
        """What its blocks recorded, in order: each as the session holds it now (with what became
        known since: its cumulative figures, its file's size), else as last known."""
        return [self.session.current(iv) for iv in self._joined.values()]

    def start(self) -> Recorder:
        """Resolve the device and start recording; ``BackendError`` when it cannot record here.

        Inside a block that already records the same device (a ``Recorder`` in a ``%%memsnap``
        cell, a nested cell) this one records nothing and says so once: one history per device.
        """
        # this block's line (a recorder used again: its new block's), unless the magic pinned its own
        ours = self.where is None or self._where_ours
        here = caller_outside(__file__) if ours else self.where
        WRITER.report()  # a script's earlier block that could not be written says so now, at its line
        with _STARTING, blamed_on(here):  # check and claim the device as one step
            return self._start(here, ours)

    def _start(self, here: tuple[str, int] | None, ours: bool) -> Recorder:
        o = self.options
        try:
            # before the body can change directory; joined, not normalised: link/.. is where the link leads
            self._out = os.path.join(os.getcwd(), o.out)
        except OSError:  # the current directory was deleted: the write will say what went wrong
            self._out = o.out
        backend = backends.get_backend(backends.resolve_device(o.device))
        STATE.give_up_orphaned()  # a thread that ended while recording: nothing else can stop its session
        outer = owners.owner_of_family(backend)
        if outer is not None:  # PyTorch keeps one history per device family: the outer block owns it
            warn(
                f"memsnap: {backend.device} is already recorded by {owners.where_it_runs(outer)} "
                f"({describe_recorder(outer)}); this one runs unrecorded",
                stacklevel=2,
            )
            return self
        # it records: its warnings from now on point at its own block
        self.where, self._where_ours = here, ours
        # every check before anything changes: a refused block leaves a clear=false history running
        self._rank = resolve_rank(o.rank)
        step = o.step if o.step is not None or self.steps is not None else steps.next_step(self.session, o.run)
        training = self.reach.training_objects(self._quietly)  # a bad model=/optimizer= name stops the cell here
        backend.configure(o)  # refuses what the device cannot record before it applies anything
        record = dump.device_record(backend)
        chained = record.chain
        if backend.recording and chained is not None and (chained != (o.run or "") or self.steps is not None):
            why = (
                "a steps= loop records each listed step from a fresh history"
                if self.steps is not None
                else f"{run_label(o.run or '')} starts from a fresh history (a run's snapshots never hold another's)"
            )
            warn(
                f"memsnap: the clear=false history of {run_label(chained)} on {backend.device} ended here: {why}",
                stacklevel=2,
            )
            backend.end(keep=False)
            record.chain_steps = None
        self._begun = set()  # a recorder used again: its marks start over
        self._told_thread = False
        backend.owner = self
        thread, task = threading.current_thread(), current_task()  # read before recording: no traced calls after
        try:
            if self.steps is None:  # the one place a step number is picked
                self._current = step
                # made before recording starts: its walks stay out of the trace
                self._watch = self._quietly(self.reach.new_watch, backend, self._quietly, training)
                self._usage = self._quietly(backend.usage)
                self._began_us = time.time_ns() // 1000
                backend.begin(fresh=False, namespace=self.reach.tensors())
            else:
                backend.warm_up()
                backend.follow(
                    namespace=self.reach.tensors()
                )  # the steps before the first listed one count for its start
        except BaseException:  # nothing half-started is left recording, or hooked
            self._current = None
            if self._watch is not None:
                self._quietly(self._watch.detach)
                self._watch = None
            if backend.recording:
                self._quietly(backend.end, keep=False)
            if not backend.recording:  # its recording ended here: the device keeps no recorder
                record.end_chain()
            raise
        self._backend = backend
        self._thread, self._task = thread, task
        STATE.active.append(self)
        steps.MARKED.set(self)
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """Take, write and summarise the snapshot of the current interval; stop recording.

        Never raises: a failure of ours is one warning, and a KeyboardInterrupt while the
        snapshot is taken or written stops that and leaves recording off (the cell's own outcome
        stands)."""
        with blamed_on(self.where):
            self._stop(error)

    def _stop(self, error: BaseException | None = None) -> None:
        started, backend = self in STATE.active, self._backend
        mine = backend is not None and backend.owner is self  # never another's recording (after %memsnap off)
        if started and backend is not None and self.elsewhere():
            if self.orphaned():
                self.abandon()
                return
            warn(
                f"memsnap: {describe_recorder(self)} on {backend.device} was started in another thread, and "
                f"{backend.label} stops only there: call stop() in that thread; recording goes on",
                stacklevel=3,
            )
            return
        if started:
            self._task = None
        if steps.MARKED.get() is self:
            steps.MARKED.set(None)
        if started and self.steps is not None and not set(self.steps) <= self._begun:
            steps.say_unmarked(self)
        keep, step = not self.options.clear, self._current
        try:
            if step is not None:
                self._current, self._finishing = None, step
                self._finish(step, error, keep=keep, cleared=not keep)
        except KeyboardInterrupt:
            keep = False
            warn(
                f"memsnap: interrupted while taking or writing the snapshot of step {step}; "
                "nothing was written and recording is off",
                stacklevel=2,
            )
        finally:
            # once the dump ended the recording, a block in another thread may own the device:
            # what follows touches it only while it is still this one's
            mine = mine and backend is not None and backend.owner is self
            if not keep and mine and backend is not None and backend.recording:
                self._quietly(backend.end, keep=False)
            # the device stays claimed until its recording is off: a block another thread starts
            # meanwhile runs unrecorded, rather than finding PyTorch's profiler still on
            if started:
                with _STARTING:
                    STATE.active.remove(self)
            self._finishing = None
            watch, self._watch = self._watch, None  # a Ctrl-C in mark() left one unfinished: its hook comes off
            if watch is not None:
                self._quietly(watch.detach)
            if mine and backend is not None:  # which run a history left on goes on with
                record = dump.device_record(backend)
                if backend.recording:
                    record.chain = self.options.run or ""
                else:
                    record.end_chain()

    def __enter__(self) -> Recorder:
        return self._enter()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if not self._exit_unrecorded():
            self.stop(exc)
        return False

    async def __aenter__(self) -> Recorder:
        """``async with Recorder(step=N): await ...``: what a ``%%memsnap`` cell cannot await."""
        return self._enter()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if not self._exit_unrecorded():
            self.stop(exc)
        return False

    def _enter(self) -> Recorder:
        """``start()`` for a block. One entered while this recorder records (start() then warns
        it runs unrecorded) is counted, so that its exit leaves the recording to the block that
        owns it."""
        # the frame running the `with`: past __enter__ or __aenter__
        key = self._unrecorded.enter(depth=2) if self in STATE.active else None
        try:
            return self.start()
        except BaseException:  # no block, no exit to count
            if key is not None:
                self._unrecorded.leave(key)
            raise

    def _exit_unrecorded(self) -> bool:
        """Whether the block ending now (called from __exit__ or __aexit__) ran unrecorded."""
        return self._unrecorded.leave(depth=2)

    def reach_also(self, value: Any) -> None:
        """The body's result (a cell's ``Out``): live at the end, where no name holds it yet."""
        if self._backend is not None:
            self._quietly(self._backend.reach_also, value)

    def mark_step(self, step: int) -> None:
        """``mark(step)`` for this recorder: finish the step being recorded, start ``step`` if listed."""
        steps.advance(self, step)

    def task(self) -> Any:
        """The asyncio task that started this recording, or None (a thread's, or none yet)."""
        return self._task

    def recording(self) -> bool:
        """Whether this block's device is recording now (%memsnap off may have stopped it)."""
        return self._backend is not None and self._backend.recording

    def elsewhere(self) -> bool:
        """Whether this thread is not the one recording, on a backend bound to that thread."""
        backend = self._backend
        return backend is not None and backend.thread_bound and threading.current_thread() is not self._thread

    def orphaned(self) -> bool:
        """Whether this recording is bound to a thread that has ended (nothing else can stop it)."""
        return self.elsewhere() and self._thread is not None and not self._thread.is_alive()

    def abandon(self) -> None:
        """Give up a recording whose thread has ended, with one warning: nothing is dumped."""
        owners.give_up(self)

    def _quietly(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # our failure must never fail the user's cell
            device = self._backend.device if self._backend is not None else "?"
            warn(
                f"memsnap: {getattr(fn, '__name__', fn)} failed on {device}: {type(e).__name__}: {e}",
                stacklevel=3,
            )
            return None

    def _finish(self, step: int, error: BaseException | None, keep: bool, cleared: bool) -> None:
        """``keep``: leave recording on after the dump; ``cleared``: whether the history this
        snapshot holds is cleared before the next one (False only for ``clear=false``)."""
        # An accelerator's snapshot is up to millions of acyclic dicts and lists, made and walked
        # here: each collection meanwhile walks them all and frees nothing (a 210k-entry CUDA step's
        # took 379 ms with collections on, 338 ms off). Not on the CPU route, which holds them off
        # itself where it builds them: there the moment a collection frees a tensor held in a
        # cycle is the moment it is freed, and the figures of a clear=false chain depend on it
        backend = self._backend
        if backend is not None and not backend.host:
            with no_gc():
                dump.take_and_hand_over(self, step, error, keep, cleared)
        else:  # no context manager either: on the CPU route each call here is traced and read back
            dump.take_and_hand_over(self, step, error, keep, cleared)


Recorder.__doc__ = (Recorder.__doc__ or "") + "\n" + opts.help_text(indent=4)
