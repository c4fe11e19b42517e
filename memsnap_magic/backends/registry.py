"""The device families memsnap can record, as data: which module holds each one's backend.

Adding a family is a module in this package with a ``Backend`` subclass (see ``base``) and one
line in ``KINDS``. The ``device=`` option's allowed values and ``device=auto``'s order follow from
this table; reading it imports nothing (not torch, not the backend modules).
"""

from __future__ import annotations

from dataclasses import dataclass


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
