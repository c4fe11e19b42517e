"""Training steps recorded at one size each, for ``test_prediction`` and ``bench_predict``.

Run as ``python predict_workloads.py WORKLOAD SIZE OUT [DEVICE]``: builds the workload's model (same
seed at every size) on DEVICE (default ``cpu``), runs one warm-up step (so AdamW's state exists),
then records one step with ``memsnap_magic.Recorder(step=1, device=DEVICE, out=OUT,
scale={DIMS[WORKLOAD]: SIZE})``, and prints the written file's path.
Each size runs in its own process, as a user recording sizes in separate runs would.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
from torch import nn

Step = tuple[Callable[[], None], dict[str, object]]
DEVICE = "cpu"  # where models and data live (main() sets it from the command line)


def _train(model: nn.Module, batch: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Step:
    """One training step of ``model`` with AdamW, and the names the recorder finds state under."""
    model = model.to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        x, y = batch()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {"model": model, "opt": opt}


def mlp(size: int) -> Step:
    """An MLP over ``size`` = the batch."""
    model = nn.Sequential(nn.Linear(2048, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    return _train(model, lambda: (torch.randn(size, 2048, device=DEVICE), torch.randint(0, 10, (size,), device=DEVICE)))


class _Tagger(nn.Module):
    """A transformer encoder layer (dropout on, its default) and a linear head per token."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x)).flatten(0, 1)


def transformer(size: int) -> Step:
    """A ``TransformerEncoderLayer`` + head over ``size`` = the sequence length (batch 2)."""
    model = _Tagger()
    return _train(
        model, lambda: (torch.randn(2, size, 64, device=DEVICE), torch.randint(0, 10, (2 * size,), device=DEVICE))
    )


class _Encoder(nn.Module):
    """Transformer encoder layers (six by default) and a head: a step of a few thousand allocations."""

    def __init__(self, layers: int = 6) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(x)).flatten(0, 1)


def encoder(size: int, layers: int = 6) -> Step:
    """``_Encoder`` over ``size`` = the sequence length (batch 2): what ``bench_predict`` times."""
    return _train(
        _Encoder(layers),
        lambda: (torch.randn(2, size, 64, device=DEVICE), torch.randint(0, 10, (2 * size,), device=DEVICE)),
    )


def encoder24(size: int) -> Step:
    """``encoder`` with 24 layers: a step of some 5,000 allocations."""
    return encoder(size, 24)


class _Branchy(nn.Module):
    """An MLP whose forward takes another branch (a wide hidden layer) from batch 8 on."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(2048, 128)
        self.narrow = nn.Linear(128, 128)
        self.wide_in = nn.Linear(128, 2048)
        self.wide_out = nn.Linear(2048, 128)
        self.out = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        if x.shape[0] >= 8:  # noqa: SIM108 - a line each: the stacks tell the two branches apart
            h = self.wide_out(torch.relu(self.wide_in(h)))
        else:
            h = torch.relu(self.narrow(h))
        return self.out(h)


def branch(size: int) -> Step:
    """``_Branchy`` over ``size`` = the batch."""
    return _train(
        _Branchy(), lambda: (torch.randn(size, 2048, device=DEVICE), torch.randint(0, 10, (size,), device=DEVICE))
    )


def conv(size: int) -> Step:
    """A small conv net over ``size`` = the image side (batch 4): the held-out workload."""
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, 10),
    )
    return _train(
        model, lambda: (torch.randn(4, 3, size, size, device=DEVICE), torch.randint(0, 10, (4,), device=DEVICE))
    )


class _Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, 64, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0]).flatten(0, 1)


def lstm(size: int) -> Step:
    """An LSTM + head over ``size`` = the sequence length (batch 4): another held-out workload."""
    return _train(
        _Lstm(), lambda: (torch.randn(4, size, 32, device=DEVICE), torch.randint(0, 10, (4 * size,), device=DEVICE))
    )


WORKLOADS = {
    "mlp": mlp,
    "transformer": transformer,
    "encoder": encoder,
    "encoder24": encoder24,
    "branch": branch,
    "conv": conv,
    "lstm": lstm,
}

# the dimension each workload's size is: what its files' scale names
DIMS = {
    "mlp": "batch",
    "branch": "batch",
    "conv": "side",
    **dict.fromkeys(("transformer", "encoder", "encoder24", "lstm"), "seq"),
}


def main() -> None:
    name, size, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    global DEVICE
    device = DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    from memsnap_magic import Recorder, wait_for_writes

    torch.manual_seed(0)
    torch.set_num_threads(1)
    step, names = WORKLOADS[name](size)
    step()  # warm-up: the optimizer's state exists from here on
    scale = {DIMS[name]: size}
    with Recorder(
        step=1, device=device, out=str(out), wait=True, namespace=names, model="model", optimizer="opt", scale=scale
    ):
        step()
    wait_for_writes()
    print(next(out.rglob("*.pickle")))


if __name__ == "__main__":
    main()
