"""Record → run → dump → clear around any block of code: the engine behind ``%%memsnap``.

``Recorder`` is a context manager, so scripts and torchrun/Ray workers get the same files and
figures as the notebook magic. Whatever happens in the block, the snapshot is taken and written,
and recording is stopped (or kept on, for ``clear=False``); our own failures become one warning.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import operator
import os
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Literal

from ..core.devices import trace_index
from ..core.errors import excerpt
from ..core.names import brief_numbers, run_label, shown_path
from ..core.nogc import no_gc
from ..core.warn import blamed_on, caller_outside, warn
from ..files import layout, snapshot
from ..files.layout import MAX_STEP, META_KEY, Meta, exception_name, snapshot_path, step_mark
from ..files.writer import WRITER
from ..results import intervals, labels, stacks
from . import backends
from . import options as opts
from .process_state import STATE, ChainSteps
from .retention import walk_after
from .roles import Watch, training_objects, weakly

if TYPE_CHECKING:
    from pathlib import Path
    from types import FrameType

    from ..results.intervals import Interval
    from ..results.session import Session
    from .backends import Backend
    from .backends.base import Names


_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's code (its locals are not a dict of their own)
_STARTING = threading.Lock()  # two threads starting blocks at once: one owns the device, one is told


def _stop_left_on() -> None:
    """At exit, stop what a clear=false history left recording: PyTorch's profiler, still on
    while the interpreter tears down, crashes the process (its files are written already)."""
    with contextlib.suppress(Exception):
        STATE.stop_all()


atexit.register(_stop_left_on)  # before or after the writer's wait: the files are handed over already


def mark(step: int) -> None:
    """Declare that ``step`` begins now, inside a ``steps=`` cell or ``Recorder(steps=...)``.

    Ends the step being recorded (its snapshot holds only that step) and starts recording
    again if ``step`` is listed. Outside such a block it does nothing, so the same loop runs
    with or without the magic. ``step`` is an integer (numpy's too), as ``steps=`` lists them:
    anything else is a ``TypeError`` in or out of a block, so a loop fails the same either way.
    """
    number = _step_number(step)
    recorder = _MARKED.get()  # the block this code runs in: a task inherits it from where it was made
    if recorder is None or recorder not in STATE.active:
        recorder = STATE.active[-1] if STATE.active else None
        task = recorder._task if recorder is not None else None
        if task is not None and not task.done() and task is not _current_task():
            return  # another asyncio task's block (a sibling, made before it began): not this code's
    if recorder is not None and recorder.steps is not None:
        recorder.mark_step(number)


_MARKED: ContextVar[Recorder | None] = ContextVar("memsnap_recording_block", default=None)


def _step_number(step: Any) -> int:
    if type(step) is not bool and "bool" not in str(getattr(step, "dtype", "")):  # True is not step 1
        with contextlib.suppress(TypeError):
            return operator.index(step)  # ints and numpy's; never a float truncated
    what = f"{type(step).__name__} {excerpt(step)}"
    raise TypeError(f"mark(step): step must be an integer, as steps= lists them, not {what}")


def _current_task() -> Any:
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
        self._given = {
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
        self._caller_code = caller.f_code if function else None
        self.namespace = namespace if namespace is not None else caller.f_globals
        self.report = report
        self.intervals: list[Interval] = []
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
        # `with` blocks of this recorder entered while it records (its own nested, another thread's or
        # task's, a generator's): each runs unrecorded, and its exit must not end the recording. By
        # the frame running the `with`, where its exit runs too, whatever thread or task that is then
        self._unrecorded: dict[int, int] = {}
        self._told_thread = False  # mark() from another thread was refused once, with a warning

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
        outer = next(
            (
                r
                for r in STATE.active
                if r._backend is not None and r._backend.family == backend.family and r._backend.recording
            ),
            None,
        )
        if outer is not None:  # PyTorch keeps one history per device family: the outer block owns it
            task = _current_task()
            where = (
                "a block in another thread"
                if outer._thread is not threading.current_thread()
                else "a block in another asyncio task"
                if outer._task is not None and not outer._task.done() and task is not None and outer._task is not task
                else "an enclosing block"
            )
            warn(
                f"memsnap: {backend.device} is already recorded by {where} "
                f"({describe_recorder(outer)}); this one runs unrecorded",
                stacklevel=2,
            )
            return self
        # it records: its warnings from now on point at its own block
        self.where, self._where_ours = here, ours
        # every check before anything changes: a refused block leaves a clear=false history running
        self._rank = resolve_rank(o.rank)
        step = o.step if o.step is not None or self.steps is not None else self._next_step()
        training = self._training_objects()  # a bad model=/optimizer= name stops the cell here
        backend.configure(o)  # refuses what the device cannot record before it applies anything
        chained = STATE.chains.get(backend.device)
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
            STATE.chain_steps.pop(backend.device, None)
        self._begun = set()  # a recorder used again: its marks start over
        self._told_thread = False
        backend.owner = self
        try:
            if self.steps is None:  # the one place a step number is picked
                self._current = step
                # made before recording starts: its walks stay out of the trace
                self._watch = self._quietly(self._new_watch, backend, training)
                self._usage = self._quietly(backend.usage)
                self._began_us = time.time_ns() // 1000
                backend.begin(fresh=False, namespace=self._reach())
            else:
                backend.warm_up()
                backend.follow(namespace=self._reach())  # the steps before the first listed one count for its start
        except BaseException:  # nothing half-started is left recording, or hooked
            self._current = None
            if self._watch is not None:
                self._quietly(self._watch.detach)
                self._watch = None
            if backend.recording:
                self._quietly(backend.end, keep=False)
            raise
        self._backend = backend
        self._thread, self._task = threading.current_thread(), _current_task()
        STATE.active.append(self)
        _MARKED.set(self)
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
        if started and backend is not None and self._elsewhere():
            if self._orphaned():
                self._abandon()
                return
            warn(
                f"memsnap: {describe_recorder(self)} on {backend.device} was started in another thread, and "
                f"{backend.label} stops only there: call stop() in that thread; recording goes on",
                stacklevel=3,
            )
            return
        if started:
            self._task = None
        if _MARKED.get() is self:
            _MARKED.set(None)
        if started and self.steps is not None and not set(self.steps) <= self._begun:
            self._say_unmarked()
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
                if backend.recording:
                    STATE.chains[backend.device] = self.options.run or ""
                else:
                    STATE.chains.pop(backend.device, None)
                    STATE.chain_steps.pop(backend.device, None)

    def _next_step(self) -> int:
        """The step after the run's highest, which a file loaded into it may have set."""
        run = self.options.run
        step = self.session.next_step(run or "")
        if step >= MAX_STEP:
            where = f"run {run!r}" if run else "this session"
            raise opts.OptionError(
                f"{where} already holds step {step - 1:,}, the highest a file can hold; "
                f"give step= (0 to {MAX_STEP - 1:,}) or another run="
            )
        return step

    def _say_unmarked(self) -> None:
        """A steps= loop that never reached some listed steps, or never called ``mark``."""
        missing = [s for s in self.steps or () if s not in self._begun]
        if not self._begun:
            first = missing[0]
            what = f"no listed step began: call mark(step) at the start of each step of the loop (mark({first}) …)"
        else:
            what = (
                f"step{'s' * (len(missing) > 1)} {brief_numbers(missing)} never began "
                f"(no mark() for {'them' if len(missing) > 1 else 'it'})"
            )
        warn(f"memsnap: {describe_recorder(self)}: {what}; nothing was recorded for them", stacklevel=3)

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
        counted = self in STATE.active
        if counted:
            key = id(sys._getframe(2))  # the frame running the `with` (past __enter__ or __aenter__)
            self._unrecorded[key] = self._unrecorded.get(key, 0) + 1
        try:
            return self.start()
        except BaseException:  # no block, no exit to count
            if counted:
                self._exit_unrecorded(key)
            raise

    def _exit_unrecorded(self, key: int | None = None) -> bool:
        """Whether the block ending now (called from __exit__ or __aexit__) ran unrecorded."""
        if key is None:
            key = id(sys._getframe(2))
        count = self._unrecorded.get(key, 0)
        if not count:
            return False
        if count == 1:
            del self._unrecorded[key]
        else:
            self._unrecorded[key] = count - 1
        return True

    def reach_also(self, value: Any) -> None:
        """The body's result (a cell's ``Out``): live at the end, where no name holds it yet."""
        if self._backend is not None:
            self._quietly(self._backend.reach_also, value)

    def mark_step(self, step: int) -> None:
        """``mark(step)`` for this recorder: finish the step being recorded, start ``step`` if listed."""
        if self.steps is None or self._backend is None:
            return
        if self._elsewhere():
            if not self._told_thread:
                self._told_thread = True
                warn(
                    f"memsnap: mark({step}) ran in another thread than the one recording, and "
                    f"{self._backend.label} changes steps only there: this mark and any others from that "
                    "thread are ignored",
                    stacklevel=3,
                )
            return
        listed = step in self.steps
        if self._current is not None:  # on for a listed step whose begin(fresh=True) clears in place
            self._finish(self._current, None, keep=listed and self._backend.clears_in_place, cleared=True)
            self._current = None
            if not listed:  # an unrecorded step: what it allocates and frees still counts for the next start
                self._quietly(self._backend.follow, namespace=self._reach())
        if listed:  # mark() runs inside the user's loop: our failure must not stop it
            self._begun.add(step)
            self._watch = self._quietly(self._new_watch, self._backend)
            self._usage = self._quietly(self._backend.usage)
            self._began_us = time.time_ns() // 1000
            self._quietly(self._backend.begin, fresh=True, namespace=self._reach())
            self._current = step if self._backend.recording else None
            if self._current is None and self._watch is not None:
                self._quietly(self._watch.detach)
                self._watch = None

    def _elsewhere(self) -> bool:
        """Whether this thread is not the one recording, on a backend bound to that thread."""
        backend = self._backend
        return backend is not None and backend.thread_bound and threading.current_thread() is not self._thread

    def _orphaned(self) -> bool:
        """Whether the thread that started this recording has ended (``_elsewhere`` holds then)."""
        return self._thread is not None and not self._thread.is_alive()

    def _abandon(self) -> None:
        """Give up a recording whose thread has ended, with one warning: nothing is dumped."""
        backend = self._backend
        running = self in STATE.active  # else a clear=false history its block left on
        if running:
            STATE.active.remove(self)
        if backend is not None and backend.owner is self and backend.recording:
            warn(
                f"memsnap: the thread that started {describe_recorder(self)} on {backend.device} has ended, "
                f"and {backend.label}'s session with it: nothing was written"
                if running
                else f"memsnap: the clear=false history on {backend.device} was recorded by a thread that has "
                "ended, and its session went with it: it is given up, and what records next starts a fresh one",
                where=self.where,
            )
            self._quietly(backend.abandon)
            STATE.chains.pop(backend.device, None)
            STATE.chain_steps.pop(backend.device, None)
        self._current = None
        watch, self._watch = self._watch, None
        if watch is not None:
            self._quietly(watch.detach)

    def _names(self) -> dict[str, Any]:
        """The namespace, with the locals of the function that made this recorder while it runs
        (a script's ``main()``), read afresh each time."""
        code = self._caller_code
        if code is None:
            return self.namespace
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        if frame is None:  # it has returned (a recorder made in a helper): its locals are gone
            return self.namespace
        local = frame.f_locals
        names = {**self.namespace, **local}
        if type(local) is dict:
            # Python 3.11-3.12 keep this copy in the frame until the next read, and with it every
            # local: a del after the block would free nothing. Emptied, it holds none (any read
            # fills it again first); 3.13's f_locals is a view of the frame and keeps nothing
            local.clear()
        return names

    def _reach(self) -> Names:
        """Where the CPU route finds the tensors live at the start and end: the namespace itself,
        else a function giving the names and the objects given as they are when called (a copy
        kept would keep every object in it alive)."""
        return self.namespace if self._caller_code is None and not self._given else self._reach_now

    def _reach_now(self) -> dict[str, Any]:
        given = {f"<{key}=>": ref() for key, ref in self._given.items()}
        return {**self._names(), **{key: value for key, value in given.items() if value is not None}}

    def _training_objects(self) -> tuple[list[Any], list[Any]]:
        """The models and optimizers whose tensors the dump labels: named, given, else found."""
        o, found = self.options, {}
        for key in ("model", "optimizer"):
            name = getattr(o, key)
            if key in self._given:
                value = self._given[key]()
                found[key] = [value] if value is not None else []
            elif name is not None:
                head, *rest = name.split(".")
                names = self._names()
                if head not in names:
                    raise opts.OptionError(f"{key}={name}: no {head!r} in the namespace")
                value = names[head]
                for n, attr in enumerate(rest, start=1):
                    if not hasattr(value, attr):
                        raise opts.OptionError(f"{key}={name}: {'.'.join([head, *rest[: n - 1]])} has no {attr!r}")
                    value = getattr(value, attr)
                found[key] = [value]
        import torch

        kinds = {
            "model": (torch.nn.Module, "torch.nn.Module"),
            "optimizer": (torch.optim.Optimizer, "torch.optim.Optimizer"),
        }
        for key, values in found.items():
            kind, public = kinds[key]
            for value in values:  # none: a given object since freed
                if not issubclass(type(value), kind):  # by type(): a proxy's __class__ is not run
                    named = "the object given" if key in self._given else getattr(o, key)
                    raise opts.OptionError(f"{key}={named}: that is a {type(value).__name__}, not a {public}")
        if len(found) == 2:
            return found["model"], found["optimizer"]
        modules, optimizers = self._quietly(training_objects, self._names()) or ([], [])
        return found.get("model", modules), found.get("optimizer", optimizers)

    def _new_watch(self, backend: Backend, training: tuple[list[Any], list[Any]] | None = None) -> Watch | None:
        """A watch over the models and optimizers ``training`` (found again when not given); none
        for a block given an empty namespace and no model= or optimizer=: it asked to label nothing."""
        named = {key for key in ("model", "optimizer") if key in self._given or getattr(self.options, key) is not None}
        if not named and self._caller_code is None and not self.namespace:
            return None
        if training is None:
            training = self._training_objects()
        return Watch(
            backend.device,
            *training,
            named_model="model" in named,
            named_optimizer="optimizer" in named,
            rediscover=None if len(named) == 2 else lambda: training_objects(self._names()),
        )

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
        with no_gc() if backend is not None and not backend.host else contextlib.nullcontext():
            self._snapshot_and_hand_over(step, error, keep, cleared)

    def _snapshot_and_hand_over(self, step: int, error: BaseException | None, keep: bool, cleared: bool) -> None:
        # Until the snapshot is taken every Python call is recorded on CPU (the tracer): as few as can be.
        backend, o = self._backend, self.options
        assert backend is not None
        watch, self._watch = self._watch, None
        if not backend.recording or backend.owner is not self:  # %memsnap off or %unload_ext ran inside the block
            if watch is not None:
                self._quietly(watch.detach)
            warn(
                f"memsnap: recording of step {step} on {backend.device} was stopped inside the block "
                "(%memsnap off?); nothing was written",
                stacklevel=4,
            )
            return
        end_us = time.time_ns() // 1000
        # one step's mark is given to the entries as they are built; a clear=false history's several, by stamp
        this_step, chained = step_mark(step, o.run), STATE.chain_steps.get(backend.device)
        try:
            usage = self._quietly(backend.usage)
            snap = self._quietly(backend.snapshot_marked, this_step if chained is None or not chained.marks else None)
        finally:
            if watch is not None:  # its hooks come off the optimizers whatever happens next
                self._quietly(watch.detach)
        allocator_peak = self._quietly(backend.allocator_peak) if backend.has_allocator_peak else None

        if snap is None:
            self._quietly(backend.end, keep=False)
            return
        failed = self._quietly(backend.failed_request, error, end_us) if error is not None else None
        if failed is not None:  # before labelling: the entry is marked like the others
            snap["device_traces"][trace_index(backend.device)].append(failed)
        roles = self._quietly(watch.finish) if watch is not None else None  # recording is off here
        # a clear=false history holds the steps before this one: each entry says which it came from,
        # and their blocks take the roles seen while those steps ran
        before = STATE.chain_steps.pop(backend.device, None) or ChainSteps()
        if roles is not None and before.timed:
            roles.timed[:0] = before.timed
        if roles:
            self._quietly(labels.label_snapshot, snap, trace_index(backend.device), roles, end_us)
        marks = [*before.marks, (self._began_us, this_step)]
        self._quietly(layout.stamp, snap, trace_index(backend.device), marks)
        if keep:
            timed = [*roles.timed, (end_us, roles.end)] if roles is not None else before.timed
            timed = [(t, seen) for t, seen in timed if seen]
            STATE.chain_steps[backend.device] = ChainSteps(marks, timed)
        meta = Meta(
            step=step,
            rank=self._rank,
            device=backend.device,
            tag=o.tag,
            pid=os.getpid(),
            end_us=end_us,
            error=exception_name(error) if error is not None else None,
            clear=cleared,
            allocator_peak_allocated=allocator_peak,
            context=o.context if backend.records_stacks else "none",
            max_entries=o.max_entries,
            incomplete=backend.incomplete or (self._quietly(backend.incomplete_because, error) if error else None),
            freed_unseen=backend.freed_unseen or None,
            run=o.run,
            usage_start=self._usage,
            usage_end=usage,
        )
        snap[META_KEY] = meta.to_dict()
        path: Path = snapshot_path(self._out or o.out, step, o.tag, self._rank, o.run)
        try:
            d = self._quietly(intervals.digest, snap, kept_blocks=True)
        finally:
            self._quietly(backend.end, keep=keep)
        made = d.pop("kept_blocks", None) if d is not None else None  # for the walk, never in a summary
        if d is not None:  # what the summary shows names its cells as this kernel does, read anywhere
            self._quietly(_name_cells, snap, d)
        iv = self._quietly(intervals.interval_from_digest, d, path, run=o.run or "") if d is not None else None
        # who keeps what the step kept, where that passed the leak floor; never walked into the
        # CPU route's recording (a clear=false chain's, still on), whose tracer would record the walk
        if iv is not None and made and not (backend.host and backend.recording):
            self._quietly(walk_after, snap, d, iv, made, self._reach(), backend.device)
        write = functools.partial(write_files, snap, path, d, iv, trim=not backend.users_frames_only)
        if o.wait or iv is None:
            self._write_now(write)
        if iv is not None:
            last = STATE.last_end.pop(backend.device, None)  # what the last cleared interval here ended with
            # a full ring dropped the oldest entries: its baseline is the window's start, not the
            # interval's; the steps between two listed ones of a steps= loop were followed, not unseen
            followed = self.steps is not None and bool(self.intervals)
            if last is not None and not iv.overflowed and not followed:
                iv.moved_since, iv.moved = last[0], iv.baseline_allocated - last[1]
            if cleared:
                STATE.last_end[backend.device] = (step, iv.end_allocated)
            previous = self.session.previous(iv)
            self.session.add(iv)
            self.intervals.append(iv)
            if self.report is not None:
                self._quietly(self.report, iv, previous)
            elif iv.incomplete:  # a block's figures, with no line printed to say it
                warn(f"memsnap: step {step} on {backend.device} is incomplete: {iv.incomplete}", stacklevel=4)
        if not (o.wait or iv is None):  # after what the user waits for: the figures, the report
            try:  # blocks while the write before waits: a Ctrl-C there means no file
                WRITER.submit(write, str(path), self.where)
            except BaseException:
                iv.path = None
                raise

    @staticmethod
    def _write_now(write: Callable[[], str | None]) -> None:
        message = write()
        if message is not None:
            warn(message, stacklevel=5)


def _name_cells(snap: dict[str, Any], d: dict[str, Any]) -> None:
    """The In[N] of the cells the digest's blocks were made in, into its meta and the file's."""
    cells = stacks.cells_in(b["frames"] for b in d["top_blocks"])
    if cells:
        d["meta"] = replace(d["meta"], cells=cells)
        snap[META_KEY]["cells"] = cells


def _all_cells(snap: dict[str, Any]) -> None:
    """Every cell the file's stacks pass through, into its meta (``memsnap diff`` names them all)."""
    meta = snap.get(META_KEY)
    if type(meta) is not dict:
        return
    frames = [e.get("frames") for t in snap.get("device_traces") or () for e in t]
    frames += [b.get("frames") for seg in snap.get("segments") or () for b in seg.get("blocks") or ()]
    found = stacks.cells_in(frames)
    if found:
        meta["cells"] = {**(meta.get("cells") or {}), **found}


def write_files(
    snap: dict[str, Any], path: Path, d: dict[str, Any] | None, interval: Interval | None, trim: bool = False
) -> str | None:
    """Write the snapshot, then its summary (``d``, where there is one); what went wrong, in
    one line, or None. ``interval`` gets the file's size, or ``path=None`` if it was not written.
    ``trim``: cut its stacks at the user's outermost frame first (PyTorch's run down through the
    shell and kernel: ~20 frames of IPython, ipykernel and asyncio under every cell)."""
    from ..files import summaries  # here: numpy loads with the first dump, not with %load_ext

    try:
        if trim:
            stacks.keep_user_frames(snap)
        _all_cells(snap)
        snapshot.dump_snapshot(snap, path)
        size = path.stat().st_size
    except Exception as e:
        if interval is not None:
            interval.path = None
        step = f"step {interval.step}" if interval is not None else "the interval"
        return f"memsnap: could not write {shown_path(path)}: {_reason(e)}; {step} is kept in memory only"
    if interval is not None:
        interval.file_bytes = size
    if d is None:
        return None
    try:
        summaries.write_beside(path, d)
    except Exception as e:  # readers recompute what a summary would have said
        return f"memsnap: could not write the summary beside {shown_path(path)}: {_reason(e)}"
    return None


def _reason(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"


Recorder.__doc__ = (Recorder.__doc__ or "") + "\n" + opts.help_text(indent=4)
