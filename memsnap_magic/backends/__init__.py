"""Recording backends: one small interface, one file per device family.

A backend turns recording on and off and returns a snapshot dict in PyTorch's schema. It knows
nothing of files, sessions or IPython. Instances are kept per device, so recording left on by a
``clear=false`` cell is found again by the next cell and stopped by ``stop_all()``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Protocol

_ACCELERATORS = ("cuda", "xpu", "npu")


class BackendError(RuntimeError):
    """The requested device cannot record here (missing, or an allocator that cannot record)."""


class Backend(Protocol):
    device: str          # "cpu", "cuda:0", ...
    trace_index: int     # which device_traces entry holds this device
    recording: bool

    def begin(self, *, fresh: bool, namespace: dict[str, Any] | None = None) -> None:
        """Start an interval: a fresh history if ``fresh`` or not recording; reset peak stats."""

    def snapshot(self) -> dict[str, Any]:
        """The snapshot dict of everything recorded so far; recording goes on."""

    def end(self, *, keep: bool) -> None:
        """``keep``: leave recording on (cumulative). Otherwise stop and clear the history."""

    def allocator_peak(self) -> int | None:
        """The allocator's own peak since ``begin`` (bytes, rounded), where it keeps one."""


_live: dict[str, Backend] = {}


def _available(kind: str) -> bool:
    import torch

    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    if kind == "npu":
        if "torch_npu" not in sys.modules and importlib.util.find_spec("torch_npu") is None:
            return False
        import torch_npu  # noqa: F401  (registers torch.npu)

        return torch.npu.is_available()
    return False


def resolve_device(device: str) -> str:
    """``auto``/``cuda``/``cuda:K``/... → a concrete ``kind:index`` or ``cpu``; BackendError if absent."""
    if device == "cpu":
        return "cpu"
    import torch

    kind, _, index = device.partition(":")
    if kind == "auto":
        for k in _ACCELERATORS:
            if _available(k):
                return f"{k}:{getattr(torch, k).current_device()}"
        return "cpu"
    if not _available(kind):
        raise BackendError(f"device={device}: this machine has no {kind.upper()} device "
                           f"(torch {torch.__version__}); use device=cpu or device=auto")
    module = getattr(torch, kind)
    i = int(index) if index else module.current_device()
    count = module.device_count()
    if i >= count:
        raise BackendError(f"device={device}: only {count} {kind} device(s) here "
                           f"(indices 0..{count - 1})")
    return f"{kind}:{i}"


def get_backend(device: str, settings: dict[str, Any]) -> Backend:
    """The backend for a concrete device from ``resolve_device``, reused across cells."""
    backend = _live.get(device)
    if backend is None:
        if device == "cpu":
            from .cpu import CpuBackend

            backend = CpuBackend()
        else:
            from .accelerator import AcceleratorBackend

            backend = AcceleratorBackend.for_device(device)
        _live[device] = backend
    backend.configure(settings)  # type: ignore[attr-defined]
    return backend


def recording_devices() -> list[str]:
    return [name for name, b in _live.items() if b.recording]


def stop_all() -> list[str]:
    """Stop every recording we started; returns the devices that were recording."""
    stopped, failures = [], []
    for name, backend in _live.items():
        if backend.recording:
            try:
                backend.end(keep=False)
                stopped.append(name)
            except Exception as e:  # try every backend; report what could not stop
                failures.append(f"{name}: {type(e).__name__}: {e}")
    if failures:
        import warnings

        warnings.warn("memsnap: could not stop recording on " + "; ".join(failures),
                      RuntimeWarning, stacklevel=2)
    return stopped
