"""Lightning: record listed optimizer steps into verl's layout.

    from memsnap_magic.integrations.lightning import MemsnapCallback

    trainer = lightning.pytorch.Trainer(..., callbacks=[MemsnapCallback(steps=[1, 5, 10], out="memsnap")])

A step is an optimizer step, numbered from 1 as ``trainer.global_step + 1`` during its batches:
with ``accumulate_grad_batches=k`` its file holds all k batches. One file per listed step and
rank (``trainer.global_rank``); parameters, gradients and optimizer state are labelled from the
LightningModule and the trainer's optimizers. A step that fails (Ctrl-C included) has its file
written with the exception, from ``on_exception``. A batch that steps several optimizers (manual
optimization) is several steps as ``global_step`` counts them: it is recorded whole, as the step
it began.

Built on ``lightning.pytorch`` (``pip install "memsnap_magic[lightning]"``); where only the older
``pytorch_lightning`` package is installed, on that.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import missing
from ._steps import StepRecording, UnfinishedStep, device_name

try:
    from lightning.pytorch import Callback

    _FRAMEWORKS = ("lightning", "lightning_fabric")
except ImportError as e:
    if (e.name or "").partition(".")[0] != "lightning":
        raise  # lightning is there, and something it imports failed: its own message says what
    try:
        from pytorch_lightning import Callback  # type: ignore[assignment]

        _FRAMEWORKS = ("pytorch_lightning", "lightning_fabric")
    except ImportError as e2:
        raise missing("lightning", "lightning", e if e2.name == "pytorch_lightning" else e2) from None

__all__ = ["MemsnapCallback", "UnfinishedStep"]


class MemsnapCallback(Callback):
    """Record the listed optimizer steps of a Lightning ``Trainer``, each into its own file.

    ``steps``: the steps to record, numbered from 1 as the trainer counts them
    (``trainer.global_step + 1`` during the step). The other keywords are ``Recorder``'s options
    (``out``, ``run``, ``tag``, ``device``, ``rank``, ``max_entries``, ``context``, ``stacks``,
    ``compile_context``, ``skip_actions``, ``wait``), checked here; ``device`` defaults to the
    trainer's root device and ``rank`` to its global rank. Recording never changes what the
    training does: a failure of ours is one warning, and the step runs unrecorded.
    """

    def __init__(self, *, steps: Iterable[int], **options: Any) -> None:
        self.recording = StepRecording("MemsnapCallback", steps, options, _FRAMEWORKS)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.recording.unfinished()  # an earlier fit() whose step ended without on_exception

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step + 1
        if step not in self.recording.steps and self.recording.recorder is None:
            return  # an unlisted step: nothing more to do
        self.recording.begin(
            step,
            device=_device(trainer),
            rank=getattr(trainer, "global_rank", None),
            model=pl_module,
            optimizers=list(getattr(trainer, "optimizers", None) or []),
        )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # the optimizer stepped in this batch once the trainer counts the step as done; until
        # then (accumulating) the recording goes on into the next batch
        step, now = self.recording.step, trainer.global_step
        if step is not None and now >= step:
            self.recording.end()
            inside = [s for s in sorted(self.recording.steps) if step < s <= now]
            if inside:  # several optimizer steps in one batch (manual optimization, two optimizers)
                self.recording.say_once(
                    f"memsnap: MemsnapCallback: the batch of step {step} also made optimizer step"
                    f"{'s' * (len(inside) > 1)} {', '.join(map(str, inside))}: a batch is recorded whole, "
                    f"in the file of the step it began"
                )

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.recording.recorder is not None:
            self.recording.end(exception)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # still on: training ended inside a step, before its optimizer stepped
        self.recording.unfinished()


def _device(trainer: Any) -> str | None:
    """The trainer's root device; None where it cannot say (``auto`` decides)."""
    try:
        return device_name(trainer.strategy.root_device)
    except Exception:
        return None
