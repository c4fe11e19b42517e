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
    """Watches one interval: the storages at its start now, at each optimizer step, at ``finish``."""

    def __init__(self, device: str, modules: list[Any], optimizers: list[Any]) -> None:
        self.device = device
        self.modules, self.optimizers = modules, optimizers
        self.roles = Roles(start=self.storages())
        self._handles = []
        for opt in optimizers:
            self._handles.append(opt.register_step_pre_hook(lambda o, args, kwargs: self._seen()))
            self._handles.append(opt.register_step_post_hook(lambda o, args, kwargs: self._seen()))

    def _seen(self) -> None:
        self.roles.timed.append((time.time_ns() // 1000, self.storages()))

    def finish(self) -> Roles:
        """The end's storages; the hooks removed."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
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
