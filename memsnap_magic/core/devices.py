"""The device families memsnap can record, as data: which module of ``recording.backends`` holds
each one's backend, and which trace of a snapshot holds a device.

Adding a family is a module in ``recording/backends/`` with a ``Backend`` subclass (see
``recording.backends.base``) and one line in ``KINDS``. The ``device=`` option's allowed values and
``device=auto``'s order follow from this table; reading it imports nothing (not torch, not the
backend modules): ``recording.backends.backend_class`` loads a family's class when asked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    module: str  # the module of ``recording.backends`` that holds the family's backend
    cls: str  # its Backend subclass
    indexed: bool = True  # devices are named <kind>:<index>


# ``device=auto`` records the first family available here, in this order; the CPU always is.
KINDS: dict[str, Kind] = {
    "cuda": Kind("accelerator", "AcceleratorBackend"),  # CUDA and ROCm
    "xpu": Kind("accelerator", "AcceleratorBackend"),
    "npu": Kind("accelerator", "AcceleratorBackend"),  # Ascend, through torch_npu
    "cpu": Kind("cpu.backend", "CpuBackend", indexed=False),
}


def trace_index(device: str) -> int:
    """Which ``device_traces`` entry of a snapshot holds ``device``: PyTorch keeps one per index of
    the family (``cuda:3`` → 3); a family without indices (the CPU) has its one trace at 0."""
    kind, _, index = device.partition(":")
    spec = KINDS.get(kind)
    return int(index) if index.isascii() and index.isdigit() and (spec is None or spec.indexed) else 0
