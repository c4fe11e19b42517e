"""CUDA / ROCm, XPU and Ascend NPU: PyTorch's allocator history recorder.

All three expose ``<module>.memory._record_memory_history`` and ``_snapshot``; their keyword sets
differ by version, so only the keywords the installed signature has are passed. A fresh history
comes from ``clear_history=True`` where it exists, else from disabling and re-enabling (which
clears on every version).
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from . import BackendError

_CONTEXT = {"all": "all", "alloc": "alloc", "state": "state", "none": None}


class AcceleratorBackend:
    """Recording on one accelerator device through its ``torch.<kind>.memory`` module.

    PyTorch records every device of a kind at once and ``enabled=None`` stops and clears them
    all, so whether recording is on is kept per kind, shared by that kind's devices.
    """

    _recording: dict[str, bool] = {}

    def __init__(self, kind: str, index: int, device_module: ModuleType,
                 memory_module: ModuleType, clear_route: str = "auto") -> None:
        self.device = f"{kind}:{index}"
        self.kind, self.index = kind, index
        self.trace_index = index
        self._dev = device_module
        self._mem = memory_module
        params = inspect.signature(memory_module._record_memory_history).parameters
        self._params = set(params)
        has_flag = "clear_history" in params
        if clear_route == "flag" and not has_flag:
            raise BackendError(f"{self.device}: this torch has no clear_history=")
        self.clear_route = "toggle" if clear_route == "toggle" or not has_flag else "flag"
        self._settings: dict[str, Any] = {}

    @classmethod
    def for_device(cls, device: str) -> "AcceleratorBackend":
        import torch

        kind, _, index = device.partition(":")
        module = getattr(torch, kind)
        if kind == "cuda" and getattr(module, "get_allocator_backend", lambda: "native")() == "cudaMallocAsync":
            raise BackendError("the cudaMallocAsync allocator (PYTORCH_CUDA_ALLOC_CONF="
                               "backend:cudaMallocAsync) cannot record allocation history; "
                               "unset it to use %%memsnap on CUDA")
        return cls(kind, int(index), module, module.memory)

    @property
    def recording(self) -> bool:
        return self._recording.get(self.kind, False)

    @recording.setter
    def recording(self, value: bool) -> None:
        self._recording[self.kind] = value

    def configure(self, settings: dict[str, Any]) -> None:
        self._settings = {
            "context": _CONTEXT[settings.get("context", "all")],
            "stacks": settings.get("stacks", "python"),
            "max_entries": int(settings.get("max_entries", 100_000)),
        }

    def _record(self, enabled: str | None, **extra: Any) -> None:
        kwargs = dict(self._settings, **extra) if enabled else {}
        kwargs = {k: v for k, v in kwargs.items() if k in self._params}
        try:
            self._mem._record_memory_history(enabled, **kwargs)
        except RuntimeError as e:
            if "cudaMallocAsync" in str(e):
                raise BackendError(f"{self.device}: the cudaMallocAsync allocator cannot record "
                                   "allocation history; unset PYTORCH_CUDA_ALLOC_CONF="
                                   "backend:cudaMallocAsync") from None
            raise

    def begin(self, *, fresh: bool, namespace: dict[str, Any] | None = None) -> None:
        if self.recording and not fresh:
            return  # continuing a clear=false chain: history and peak stats span the chain
        if self.clear_route == "flag":
            self._record("all", clear_history=True)
        else:
            self._record(None)
            self._record("all")
        self.recording = True
        self._dev.reset_peak_memory_stats(self.index)

    def snapshot(self) -> dict[str, Any]:
        return self._mem._snapshot()

    def end(self, *, keep: bool) -> None:
        if keep:
            return
        self._record(None)
        self.recording = False

    def allocator_peak(self) -> int | None:
        return int(self._dev.max_memory_allocated(self.index))
