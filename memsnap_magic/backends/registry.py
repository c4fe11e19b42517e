"""The device families memsnap can record, as data: which module holds each one's backend.

Adding a family is a module in this package with a ``Backend`` subclass (see ``base``) and one
line in ``KINDS``. The ``device=`` option's allowed values and ``device=auto``'s order follow from
this table; reading it imports nothing (not torch, not the backend modules) until a class is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    module: str  # the module in this package that holds the family's backend
    cls: str  # its Backend subclass
    indexed: bool = True  # devices are named <kind>:<index>


# ``device=auto`` records the first family available here, in this order; the CPU always is.
KINDS: dict[str, Kind] = {
    "cuda": Kind("accelerator", "AcceleratorBackend"),  # CUDA and ROCm
    "xpu": Kind("accelerator", "AcceleratorBackend"),
    "npu": Kind("accelerator", "AcceleratorBackend"),  # Ascend, through torch_npu
    "cpu": Kind("cpu", "CpuBackend", indexed=False),
}


def backend_class(device: str) -> Any:
    """The backend class (a ``base.Backend`` subclass) of a device name (``cuda:1``, ``cpu``); None
    for a family we do not know.
    Its module loads now (text asks what a family can do without starting anything)."""
    kind = KINDS.get(device.partition(":")[0])
    if kind is None:
        return None
    return getattr(importlib.import_module(f".{kind.module}", __package__), kind.cls)


def trace_index(device: str) -> int:
    """Which ``device_traces`` entry of a snapshot holds ``device``: PyTorch keeps one per index of
    the family (``cuda:3`` → 3); a family without indices (the CPU) has its one trace at 0."""
    kind, _, index = device.partition(":")
    spec = KINDS.get(kind)
    return int(index) if index.isascii() and index.isdigit() and (spec is None or spec.indexed) else 0
