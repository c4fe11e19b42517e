"""Which storages are parameters, gradients and optimizer state, seen where the recorder can see
them: at an interval's start and end, and at every step of an optimizer it knows of (gradients
made by ``backward`` and dropped by ``zero_grad`` inside one step are alive at the optimizer's
step, whichever order the loop runs in). ``categories`` then labels the snapshot's blocks.

Models and optimizers are the ones named (``%%memsnap model=net optimizer=opt``,
``Recorder(model=..., optimizer=...)``), else every ``nn.Module`` and ``Optimizer`` bound to a
name in the cell's namespace.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PARAMETER, GRADIENT, OPTIMIZER_STATE = "parameter", "gradient", "optimizer_state"
Storages = dict[int, tuple[int, str]]  # storage address -> (bytes, category)


@dataclass
class Roles:
    """What was seen: storages live at the start, at each optimizer step (with the time, µs since
    the epoch as trace entries carry it), and at the end."""

    start: Storages = field(default_factory=dict)
    timed: list[tuple[int, Storages]] = field(default_factory=list)
    end: Storages = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.start or self.timed or self.end)


def training_objects(namespace: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """The ``nn.Module`` and ``Optimizer`` objects bound to names in ``namespace``."""
    import torch

    values = list(namespace.values())
    modules = [v for v in values if isinstance(v, torch.nn.Module)]
    optimizers = [v for v in values if isinstance(v, torch.optim.Optimizer)]
    return _unique(modules), _unique(optimizers)


def _unique(objects: Iterable[Any]) -> list[Any]:
    return list({id(o): o for o in objects}.values())


class Watch:
    """Watches one interval: the storages at its start now, the gradients at each optimizer step,
    everything again at ``finish``.

    Made before recording starts and finished after it stops, so the walks over modules stay out
    of the trace (on the CPU route the profiler's Python tracer would record every call). The
    step hook runs while recording: it reads only the gradients of the optimizer's parameters on
    this device, a few C calls each; the optimizer's state outlives the step, so the end sees it.
    """

    def __init__(self, device: str, modules: list[Any], optimizers: list[Any]) -> None:
        self.device = device
        self.modules, self.optimizers = modules, optimizers
        start = self.storages()
        # also a moment like an optimizer step's: a clear=false snapshot holds blocks made in the
        # steps before, which the start saw in their roles
        self.roles = Roles(start=start, timed=[(time.time_ns() // 1000, start)] if start else [])
        here = [p for opt in optimizers for group in opt.param_groups for p in group["params"]]
        self._params = [p for p in here if _device(p) == device]
        self._handles = [opt.register_step_pre_hook(self._at_step) for opt in optimizers]

    def _at_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        seen: Storages = {}
        for p in self._params:
            grad = p.grad
            if grad is not None:
                storage = grad.untyped_storage()
                seen[storage.data_ptr()] = (storage.nbytes(), GRADIENT)
        self.roles.timed.append((time.time_ns() // 1000, seen))

    def detach(self) -> None:
        """Take the hooks off the optimizers (the interval is over, or failed)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def finish(self) -> Roles:
        """The end's storages, the hooks removed."""
        self.detach()
        self.roles.end = self.storages()
        return self.roles

    def storages(self) -> Storages:
        """Address -> (bytes, category) of every parameter, gradient and optimizer-state storage on
        this device, now."""
        found: Storages = {}
        params = {id(p): p for m in self.modules for p in m.parameters()}
        for opt in self.optimizers:
            for group in opt.param_groups:
                params.update((id(p), p) for p in group["params"])
        for p in params.values():
            self._add(found, p, PARAMETER)
            if p.grad is not None:
                self._add(found, p.grad, GRADIENT)
        for opt in self.optimizers:
            for state in opt.state.values():
                for value in state.values() if isinstance(state, dict) else ():
                    self._add(found, value, OPTIMIZER_STATE)
        return found

    def _add(self, found: Storages, tensor: Any, category: str) -> None:
        import torch

        if not isinstance(tensor, torch.Tensor) or tensor.is_sparse or _device(tensor) != self.device:
            return
        storage = tensor.untyped_storage()
        if storage.nbytes():
            found.setdefault(storage.data_ptr(), (storage.nbytes(), category))


def _device(tensor: Any) -> str:
    d = tensor.device
    return d.type if d.type == "cpu" else f"{d.type}:{d.index if d.index is not None else 0}"
