"""Hugging Face ``Trainer``: record listed optimizer steps into verl's layout.

    from memsnap_magic.integrations.transformers import MemsnapCallback, recording

    trainer = Trainer(..., callbacks=[MemsnapCallback(steps=[1, 5, 10], out="memsnap", run="exp1")])
    trainer.train()

    with recording(trainer, steps=[1, 5, 10], out="memsnap"):   # also records a step's exception
        trainer.train()

Steps are numbered as the trainer counts them, from 1: ``state.global_step`` once the step is
done, so the step in progress is ``global_step + 1``. One file per listed step and rank (the
trainer's process index), its micro-batches under gradient accumulation included; parameters,
gradients and optimizer state are labelled from the trainer's model and optimizer.

A ``TrainerCallback`` sees no exception: a step that raises leaves its recording on until the
next step, the start or end of training, the end of the notebook cell or the interpreter's exit,
which write its file with the error ``UnfinishedStep`` (or, at exit, the error that ended the
program). ``recording(trainer, ...)`` sees the exception, so that step's file names it (an out of
memory error included).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from . import missing
from ._steps import StepRecording, UnfinishedStep, device_name

try:
    from transformers import TrainerCallback
except ImportError as e:
    raise missing("transformers", "transformers", e) from None

__all__ = ["MemsnapCallback", "UnfinishedStep", "recording"]

_FRAMEWORKS = ("transformers", "accelerate")


class MemsnapCallback(TrainerCallback):
    """Record the listed optimizer steps of a ``Trainer``, each into its own snapshot file.

    ``steps``: the steps to record, numbered from 1 as the trainer counts them. The other
    keywords are ``Recorder``'s options (``out``, ``run``, ``tag``, ``device``, ``rank``,
    ``max_entries``, ``context``, ``stacks``, ``compile_context``, ``skip_actions``, ``wait``),
    checked here; ``device`` defaults to the trainer's device (``args.device``) and ``rank`` to
    its process index. Recording never changes what the training does: a failure of ours is
    one warning, and the step runs unrecorded.
    """

    def __init__(self, *, steps: Iterable[int], **options: Any) -> None:
        self.recording = StepRecording("MemsnapCallback", steps, options, _FRAMEWORKS)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recording.unfinished()  # an earlier train() that raised mid-step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step + 1
        if step not in self.recording.steps and self.recording.recorder is None:
            return  # an unlisted step: nothing more to do
        optimizer = _unwrapped(kwargs.get("optimizer"))
        self.recording.begin(
            step,
            device=_device(args),
            rank=getattr(args, "process_index", None),
            model=kwargs.get("model"),
            optimizers=[optimizer] if optimizer is not None else [],
        )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.recording.recorder is not None:
            self.recording.end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recording.unfinished()


def _device(args: Any) -> str | None:
    """The trainer's device (``args.device``); None where it cannot say (``auto`` decides)."""
    try:
        return device_name(args.device)
    except Exception:
        return None


def _unwrapped(optimizer: Any) -> Any:
    """The torch optimizer under accelerate's ``AcceleratedOptimizer`` (whose ``step`` PyTorch's
    optimizer hooks do not see), or the optimizer as it is."""
    import torch

    seen = 0
    while optimizer is not None and seen < 8:
        inner = getattr(optimizer, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            break
        optimizer, seen = inner, seen + 1
    return optimizer


class recording:  # lower case: used as a function, `with recording(trainer, ...)`
    """``with recording(trainer, steps=[...], **options): trainer.train()``: the trainer gets a
    ``MemsnapCallback`` for the block (without ``steps``, the ones it has already), and a step
    that raises has its file written with that exception, recording off, before the exception
    goes on unchanged."""

    def __init__(self, trainer: Any, *, steps: Iterable[int] | None = None, **options: Any) -> None:
        self.trainer = trainer
        self.added: MemsnapCallback | None = None
        if steps is not None:
            self.added = MemsnapCallback(steps=steps, **options)
            self.callbacks = [self.added]
        else:
            if options:
                raise TypeError("recording(trainer): options go with steps=, for the callback it adds")
            handler = getattr(trainer, "callback_handler", None)
            self.callbacks = [c for c in getattr(handler, "callbacks", []) if isinstance(c, MemsnapCallback)]
            if not self.callbacks:
                raise TypeError("recording(trainer): the trainer has no MemsnapCallback; give steps=[...] to add one")

    def __enter__(self) -> MemsnapCallback:
        if self.added is not None:
            self.trainer.add_callback(self.added)
        return self.callbacks[0]

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        try:
            for callback in self.callbacks:
                if exc is not None and callback.recording.recorder is not None:
                    callback.recording.end(exc)
                else:
                    callback.recording.unfinished()
        finally:
            if self.added is not None:
                self.trainer.remove_callback(self.added)
        return False
