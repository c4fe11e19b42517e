"""What the framework callbacks share: which steps are listed, one ``Recorder`` around each
listed optimizer step, and never a recording left on by a step that raised.

A framework's callback sees where a step begins and ends; most never see an exception
(Hugging Face's ``TrainerCallback`` has no such event). A step that raised leaves its
``Recorder`` on, so it is stopped, its file written with what it knows of the error, at the first
of: the framework's error event where there is one (Lightning's ``on_exception``,
``transformers.recording``), the next step or the start or end of training, the end of the
notebook cell that ran it, the interpreter's exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Iterable, Sequence
from types import CodeType
from typing import Any

from ..core.warn import warn
from ..files.writer import WRITER
from ..recording import options as opts
from ..recording.process_state import STATE
from ..recording.recorder import Recorder  # imported before our exit handler is registered: theirs run after ours

# options a callback does not take: the trainer numbers the steps and holds the model and
# optimizer; steps= gives each listed step a fresh history, so no clear=false
NOT_OPTIONS = ("step", "clear", "model", "optimizer")
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # memsnap_magic/


class UnfinishedStep(Exception):
    """What a step's file records as its error when its end was never seen: it raised where the
    callback could not see the exception (a ``TrainerCallback`` sees none; wrap the training in
    ``integrations.transformers.recording`` to record the exception itself), or the program
    stopped during it."""


class StepRecording:
    """The listed steps of one callback, and the ``Recorder`` of the step being recorded."""

    def __init__(self, prog: str, steps: Iterable[int], keywords: dict[str, Any], frameworks: Sequence[str]) -> None:
        for key in NOT_OPTIONS:
            if key in keywords:
                raise TypeError(
                    f"{prog}: {key}= is not an option of a callback (the trainer numbers the steps and "
                    "holds the model and optimizer; each listed step is recorded from a fresh history)"
                )
        defaults = {k: v for k, v in STATE.session.defaults.items() if k not in (*NOT_OPTIONS, "steps")}
        given = {k: v for k, v in keywords.items() if v is not None}
        base = opts.from_keywords(prog, defaults, steps=steps, **given)  # every value checked now
        assert base.steps is not None
        self.prog = prog
        self.steps = frozenset(base.steps)
        self.options = {**defaults, **given}
        self.frameworks = tuple(frameworks)
        self.recorder: Recorder | None = None
        self.step: int | None = None  # the step being recorded
        self._thread: threading.Thread | None = None
        self._codes: frozenset[CodeType] = frozenset()  # the framework's frames around the step
        self.where: tuple[str, int] | None = None  # the user's line that started training
        self._told: set[str] = set()

    def begin(
        self, step: int, device: str | None, rank: int | None, model: Any = None, optimizers: Sequence[Any] = ()
    ) -> None:
        """Step ``step`` begins: record it if listed (its device and rank are the trainer's unless
        given). One left on by a step that raised is stopped first. Never raises."""
        if self.recorder is not None:
            if self.step == step:  # a later micro-batch of the step being recorded
                return
            self.unfinished()
        if step not in self.steps:
            return
        self.where, self._codes = _places(self.frameworks)
        try:
            keywords = {"device": device, "rank": rank, **self.options}
            options = opts.from_keywords(self.prog, None, step=step, **keywords)
            given: dict[str, Any] = {"model": model} if model is not None else {}
            namespace: dict[str, Any] = {}
            if len(optimizers) == 1:
                given["optimizer"] = optimizers[0]
            else:  # several (a GAN's), or none: found there, each labelled
                namespace = {f"optimizer_{n}": o for n, o in enumerate(optimizers)}
            recorder = Recorder(options=options, namespace=namespace, **given)
            recorder.where = self.where  # our warnings point at the user's line that started training
            recorder.start()
        except Exception as e:  # our failure, or a device we cannot record: never the training's
            self.say_once(f"memsnap: {self.prog} cannot record step {step}: {type(e).__name__}: {e}")
            return
        self.recorder, self.step, self._thread = recorder, step, threading.current_thread()
        _LIVE.add(self)
        _watch_cells()

    def end(self, error: BaseException | None = None) -> None:
        """The step being recorded ended (``error``: how it failed): its file is written and
        recording stops. Never raises (``Recorder.stop`` turns our trouble into a warning)."""
        recorder, self.recorder, self.step = self.recorder, None, None
        _LIVE.discard(self)
        if recorder is not None:
            recorder.stop(error)

    def unfinished(self) -> None:
        """Stop a recording whose step never reached its end; its file says ``UnfinishedStep``."""
        if self.recorder is not None:
            self.end(UnfinishedStep(f"step {self.step} never reached its end"))

    def raised_here(self, error: BaseException | None) -> bool:
        """Whether ``error`` passed through the framework's frames that ran the step being recorded."""
        tb = error.__traceback__ if error is not None else None
        while tb is not None:
            if tb.tb_frame.f_code in self._codes:
                return True
            tb = tb.tb_next
        return False

    def say_once(self, message: str) -> None:
        """One warning per message and callback, at the user's line that started training."""
        if message not in self._told:
            self._told.add(message)
            warn(message, where=self.where)


def device_name(device: Any) -> str | None:
    """A ``torch.device`` as a ``device=`` value (``cpu``, ``cuda:0``), or None."""
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if not isinstance(kind, str):
        return None
    return kind if index is None or kind == "cpu" else f"{kind}:{index}"


def _places(frameworks: Sequence[str]) -> tuple[tuple[str, int] | None, frozenset[CodeType]]:
    """The user's line that started training (the first frame outside the frameworks, torch and
    us), and the code of the frameworks' frames on the way (an exception that ends the program
    from inside this step passes through them)."""
    dirs = [os.path.dirname(m.__file__) + os.sep for m in map(sys.modules.get, frameworks) if m and m.__file__]
    theirs = tuple(dirs)
    skip = (*theirs, *_dirs("torch", "contextlib"), _OURS + os.sep)
    codes = []
    frame: Any = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(theirs):
            codes.append(frame.f_code)
        elif not name.startswith(skip):
            return (name, frame.f_lineno), frozenset(codes)
        frame = frame.f_back
    return None, frozenset(codes)


def _dirs(*modules: str) -> list[str]:
    found = []
    for name in modules:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            found.append(path if name == "contextlib" else os.path.dirname(path) + os.sep)
    return found


_LIVE: set[StepRecording] = set()  # recordings on now (held strongly: a dropped callback's step is still written)


def _cell_ended(result: Any = None) -> None:
    """IPython's ``post_run_cell``: a recording that outlives the cell that started it never
    reached its step's end; stopped here, with the cell's exception where it raised."""
    error = getattr(result, "error_in_exec", None)
    for recording in [r for r in _LIVE if r._thread is threading.current_thread()]:
        if isinstance(error, BaseException) and recording.raised_here(error):
            recording.end(error)
        else:
            recording.unfinished()


_WATCHING: weakref.WeakSet[Any] = weakref.WeakSet()  # the IPython shells whose cells we watch


def _watch_cells() -> None:
    """In IPython, have the end of each cell stop what a step that raised left on (once)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or shell in _WATCHING:
        return
    with contextlib.suppress(Exception):  # an IPython without events: the other stops remain
        shell.events.register("post_run_cell", _cell_ended)
        _WATCHING.add(shell)


def _at_exit() -> None:
    """At exit, write what a step that raised left recording (the error that ended the program,
    where it came from inside that step) before our writer's last wait and the recorder's own
    handler, which would stop the recording without a file."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    for recording in list(_LIVE):
        if isinstance(error, BaseException) and recording.raised_here(error):
            recording.end(error)
        else:
            recording.unfinished()
    WRITER.wait()


atexit.register(_at_exit)  # after the writer's and recorder's, so it runs before them
