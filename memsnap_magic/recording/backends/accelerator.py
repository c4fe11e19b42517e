"""CUDA / ROCm, XPU and Ascend NPU: PyTorch's allocator history recorder.

All three expose ``<module>.memory._record_memory_history`` and ``_snapshot``; their keyword sets
differ by version, so only the keywords the installed signature has are passed. A fresh history
comes from ``clear_history=True`` where it exists, else from disabling and re-enabling (which
clears on every version).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..process_state import STATE
from .base import Backend, BackendError, Names

if TYPE_CHECKING:
    from ..options import Options

_CONTEXT = {"all": "all", "alloc": "alloc", "state": "state", "none": None}


@functools.cache
def _installed(package: str) -> bool:
    """Whether ``package`` can be imported: asked once (``device=auto`` asks on every cell, and
    the search of ``sys.path`` costs as much as the rest of resolving the device)."""
    return importlib.util.find_spec(package) is not None


class AcceleratorBackend(Backend):
    """Recording on one accelerator device through its ``torch.<kind>.memory`` module.

    PyTorch records every device of a kind at once and ``enabled=None`` stops and clears them
    all, so one device of a kind owns the history at a time (``STATE.recording_kinds``); another
    device of that kind cannot start while a ``clear=false`` chain on the owner goes on.
    """

    label = "PyTorch's allocator history"

    def __init__(
        self, kind: str, index: int, device_module: ModuleType, memory_module: ModuleType, clear_route: str = "auto"
    ) -> None:
        self.device = f"{kind}:{index}"
        self.kind, self.index = kind, index
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
    def available(cls, kind: str) -> bool:
        import torch

        if kind == "npu" and "torch_npu" not in sys.modules:
            if not _installed("torch_npu"):
                return False
            import torch_npu  # noqa: F401  (registers torch.npu)
        module = getattr(torch, kind, None)
        return module is not None and module.is_available()

    @classmethod
    def current_index(cls, kind: str) -> int:
        import torch

        return int(getattr(torch, kind).current_device())

    @classmethod
    def device_count(cls, kind: str) -> int:
        import torch

        return int(getattr(torch, kind).device_count())

    @classmethod
    def for_device(cls, device: str) -> AcceleratorBackend:
        import torch

        kind, _, index = device.partition(":")
        module = getattr(torch, kind)
        if kind == "cuda" and getattr(module, "get_allocator_backend", lambda: "native")() == "cudaMallocAsync":
            raise BackendError(
                "the cudaMallocAsync allocator (PYTORCH_CUDA_ALLOC_CONF="
                "backend:cudaMallocAsync) cannot record allocation history; "
                "unset it to use %%memsnap on CUDA"
            )
        return cls(kind, int(index), module, module.memory)

    @property
    def recording(self) -> bool:
        return STATE.recording_kinds.get(self.kind) == self.device

    @recording.setter
    def recording(self, value: bool) -> None:
        if value:
            STATE.recording_kinds[self.kind] = self.device
        elif self.recording:
            del STATE.recording_kinds[self.kind]

    def configure(self, options: Options) -> None:
        self._settings = {
            "context": _CONTEXT[options.context],
            "stacks": options.stacks,
            "max_entries": options.max_entries,
        }
        newer = {"compile_context": options.compile_context or None, "skip_actions": options.skip_actions}
        for key, value in newer.items():
            if value is None:
                continue
            if key not in self._params:
                import torch

                raise BackendError(
                    f"{key}=: this torch ({torch.__version__}) records history without it "
                    f"(its _record_memory_history takes {', '.join(sorted(self._params))}); leave it out"
                )
            self._settings[key] = list(value) if isinstance(value, tuple) else value

    def _record(self, enabled: str | None, **extra: Any) -> None:
        kwargs = dict(self._settings, **extra) if enabled else {}
        kwargs = {k: v for k, v in kwargs.items() if k in self._params}
        try:
            self._mem._record_memory_history(enabled, **kwargs)
        except RuntimeError as e:
            if "cudaMallocAsync" in str(e):
                raise BackendError(
                    f"{self.device}: the cudaMallocAsync allocator cannot record "
                    "allocation history; unset PYTORCH_CUDA_ALLOC_CONF="
                    "backend:cudaMallocAsync"
                ) from None
            raise

    def begin(self, *, fresh: bool, namespace: Names | None = None) -> None:
        owner = STATE.recording_kinds.get(self.kind)
        if owner is not None and owner != self.device:  # one history per kind: clearing it would cut that chain
            raise BackendError(
                f"{self.device}: {owner} is still recording (a clear=false chain); "
                f"end it with a clear=true cell on {owner} or %memsnap off first"
            )
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
        if keep or not self.recording:
            return
        self._record(None)
        self.recording = False

    def allocator_peak(self) -> int | None:
        return int(self._dev.max_memory_allocated(self.index))

    def usage(self) -> dict[str, int] | None:
        found: dict[str, int] = {}
        info = getattr(self._dev, "mem_get_info", None)
        if info is not None:
            free, total = info(self.index)
            found.update(free=int(free), total=int(total))
        reserved = getattr(self._dev, "memory_reserved", None)
        if reserved is not None:
            found["reserved"] = int(reserved(self.index))
        return found or None
