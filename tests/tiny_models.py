"""Tiny models trained by the real frameworks on the CPU, built from configs (no downloads), with
a leak or a failure planted in chosen steps. Shared by the integration tests, the benchmark and
the scripts those tests start in another process.

The leak: in each forward pass of a listed step, the model keeps a copy of an activation of
exactly 2 MiB in a list it holds (``model.kept``), so a leaking step keeps 2 MiB per micro-batch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import torch

LEAK = 2 << 20  # bytes a leaking forward pass keeps
BATCH, SEQ, VOCAB, WIDTH = 8, 32, 500, 64


class PlantedFailure(RuntimeError):
    """Raised by a model in a chosen step, standing for any step that fails."""


def tokens(n: int = 64) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))


# ---- Hugging Face ---------------------------------------------------------------------------


class TokenData(torch.utils.data.Dataset):
    """Random token ids as a causal LM's inputs and labels."""

    def __init__(self, n: int = 64) -> None:
        self.ids = tokens(n)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _planted_hook(module: Any, inputs: Any, output: Any) -> None:
    """After each forward pass of the transformer: count it, and in a listed step keep 2 MiB
    of its activation, or raise."""
    if not module.training:
        return
    module.passes += 1
    step = (module.passes - 1) // module.accumulate + 1
    if step in module.fail_steps:
        raise PlantedFailure(f"planted failure in step {step}")
    if step in module.leak_steps:
        keep_activation(module, output.last_hidden_state)


def keep_activation(module: Any, hidden: torch.Tensor) -> None:
    """The leak: 2 MiB made from the activation, kept by the module (8 × 32 × 64 × 32 floats)."""
    module.kept.append(hidden.detach().repeat(1, 1, LEAK // (hidden.numel() * hidden.element_size())))


def hf_model(leak_steps: Collection[int] = (), fail_steps: Collection[int] = (), accumulate: int = 1) -> Any:
    """A 2-layer GPT-2 of width 64 and vocabulary 500 with the leak or failure planted."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=WIDTH, n_head=2, vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    body = model.transformer
    body.passes, body.accumulate, body.kept = 0, accumulate, []
    body.leak_steps, body.fail_steps = set(leak_steps), set(fail_steps)
    body.register_forward_hook(_planted_hook)
    return model


def hf_trainer(
    folder: Path,
    callbacks: Sequence[Any] = (),
    steps: int = 6,
    accumulate: int = 1,
    **planted: Any,
) -> Any:
    """A ``Trainer`` on the CPU for ``steps`` optimizer steps of batch 8 (AdamW, no logging, no saving)."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        str(folder / "hf-output"),
        use_cpu=True,
        report_to=[],
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=accumulate,
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    model = hf_model(accumulate=accumulate, **planted)
    return Trainer(
        model=model, args=args, train_dataset=TokenData(BATCH * accumulate * steps), callbacks=list(callbacks)
    )


# ---- Lightning ------------------------------------------------------------------------------


def lightning_module(leak_steps: Collection[int] = (), fail_steps: Collection[int] = (), accumulate: int = 1) -> Any:
    """A LightningModule of similar size (embedding 500 × 64, an MLP of width 256), leak or failure planted."""
    import lightning.pytorch as L

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, WIDTH)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 256), torch.nn.GELU(), torch.nn.Linear(256, WIDTH))
            self.head = torch.nn.Linear(WIDTH, VOCAB)
            self.passes, self.accumulate, self.kept = 0, accumulate, []
            self.leak_steps, self.fail_steps = set(leak_steps), set(fail_steps)
            self.interrupt_steps: set[int] = set()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            (ids,) = batch
            hidden = self.mlp(self.embed(ids))
            self.passes += 1
            step = (self.passes - 1) // self.accumulate + 1
            if step in self.fail_steps:
                raise PlantedFailure(f"planted failure in step {step}")
            if step in self.interrupt_steps:
                raise KeyboardInterrupt
            if step in self.leak_steps:
                keep_activation(self, hidden)
            logits = self.head(hidden)
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    return Tiny()


def lightning_fit(module: Any, callbacks: Sequence[Any] = (), steps: int = 6, accumulate: int = 1) -> Any:
    """Fit ``module`` on the CPU for ``steps`` optimizer steps of batch 8; the trainer."""
    import lightning.pytorch as L

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens(BATCH * accumulate * steps)), BATCH)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )
    trainer.fit(module, data)
    return trainer


def two_optimizer_module() -> Any:
    """A LightningModule with manual optimization stepping two AdamW optimizers per batch (a GAN's
    shape): each batch is two optimizer steps as ``trainer.global_step`` counts them."""
    import lightning.pytorch as L

    class Two(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.first = torch.nn.Linear(SEQ, 256)
            self.second = torch.nn.Linear(256, SEQ)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            (ids,) = batch
            x = ids.float()
            one, two = self.optimizers()
            loss = self.second(self.first(x)).pow(2).mean()
            one.zero_grad()
            two.zero_grad()
            self.manual_backward(loss)
            one.step()
            two.step()

        def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
            return torch.optim.AdamW(self.first.parameters()), torch.optim.AdamW(self.second.parameters())

    torch.manual_seed(0)
    return Two()
