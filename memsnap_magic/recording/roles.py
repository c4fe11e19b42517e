"""Which storages are parameters, gradients and optimizer state, seen where the recorder can see
them: at an interval's start and end, and at every optimizer step (gradients
made by ``backward`` and dropped by ``zero_grad`` inside one step are alive at the optimizer's
step, whichever order the loop runs in). ``results.labels`` then labels the snapshot's blocks.

Models and optimizers are the ones named (``%%memsnap model=net optimizer=opt``,
``Recorder(model=..., optimizer=...)``), else every ``nn.Module`` and ``Optimizer`` bound to a
name in the cell's namespace at its start or end.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.categories import GRADIENT, OPTIMIZER_STATE, PARAMETER
from ..results.labels import Roles, Storages
from .backends.cpu.objects import instance_dict, module_dicts


def training_objects(namespace: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """The ``nn.Module`` and ``Optimizer`` objects bound to names in ``namespace``."""
    import torch

    # a dict subclass's own values() is not run (a namespace given to a Recorder may be one)
    values = list(dict.values(namespace) if issubclass(type(namespace), dict) else namespace.values())  # type: ignore[arg-type]  # a dict there
    # by type(): isinstance would read a proxy's __class__, running its code
    modules = [v for v in values if issubclass(type(v), torch.nn.Module)]
    optimizers = [v for v in values if issubclass(type(v), torch.optim.Optimizer)]
    return _unique(modules), _unique(optimizers)


def module_parameters(modules: Iterable[Any]) -> list[Any]:
    """The parameters of ``modules`` and their submodules, read from torch's own ``_parameters``
    and ``_modules`` dicts (what ``parameters()`` reads): a model's override of it is not run."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    stack = list(modules)
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        attrs = instance_dict(module)  # None: a module keeping its attributes its own way, not read
        own = module_dicts(attrs) if attrs is not None else {}
        found.update((id(p), p) for p in dict.values(own.get("_parameters", {})) if p is not None)
        stack.extend(child for child in dict.values(own.get("_modules", {})) if child is not None)
    return list(found.values())


def _unique(objects: Iterable[Any]) -> list[Any]:
    return list({id(o): o for o in objects}.values())


class Watch:
    """Watches one interval: the storages at its start now, the gradients at each optimizer step,
    everything again at ``finish``.

    Made before recording starts and finished after it stops, so the walks over modules stay out
    of the trace (on the CPU route the profiler's Python tracer would record every call). The
    step hook (PyTorch's global one: optimizers made inside the cell step through it too) runs
    while recording: it reads only the gradients of the stepping optimizer's parameters on this
    device, a few C calls each; the optimizer's state outlives the step, so the end sees it.

    Models and optimizers are held weakly: ``del model`` in the cell frees it as it would
    without us. ``named_model``/``named_optimizer``: only the named one counts (its parameters'
    gradients, its steps); else ``rediscover()`` adds those bound by the end (made in the cell).
    """

    def __init__(
        self,
        device: str,
        modules: list[Any],
        optimizers: list[Any],
        *,
        named_model: bool = False,
        named_optimizer: bool = False,
        rediscover: Callable[[], tuple[list[Any], list[Any]]] | None = None,
    ) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self.device = device
        try:
            self._torch_device: Any = torch.device(device)
        except RuntimeError:  # a device type this torch does not name (a stand-in's): compared as text
            self._torch_device = None
        self._tensor, self._strided = torch.Tensor, torch.strided
        self._modules, self._optimizers = _refs(modules), _refs(optimizers)
        self._named_model, self._named_optimizer = named_model, named_optimizer
        self._rediscover = rediscover
        # the named model's parameters (ids: the hook must not keep them alive), the named optimizer
        self._param_ids = {id(p) for p in module_parameters(modules)} if named_model else None
        self._stepping = {id(o) for o in optimizers} if named_optimizer else None
        start = self.storages()
        # also a moment like an optimizer step's: a clear=false snapshot holds blocks made in the
        # steps before, which the start saw in their roles
        self.roles = Roles(start=start, timed=[(time.time_ns() // 1000, start)] if start else [])
        self._handle: Any = register_optimizer_step_pre_hook(self._at_step)

    def _at_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._stepping is not None and id(optimizer) not in self._stepping:
            return
        seen: Storages = {}
        only, device, strided = self._param_ids, self._torch_device, self._strided
        try:
            params = [p for group in optimizer.param_groups for p in group["params"]]
        except Exception:  # an optimizer of its own making
            params = []
        for p in params:
            try:
                grad = p.grad
                if grad is None or grad.layout != strided:
                    continue  # sparse gradients have no storage to match
                if grad.device != device if device is not None else _device(grad) != self.device:
                    continue
                if only is not None and id(p) not in only:
                    continue
                storage = grad.untyped_storage()
                seen[storage.data_ptr()] = (storage.nbytes(), GRADIENT)
            except Exception:  # a subclass we cannot read: never a failure of the user's step
                continue
        self.roles.timed.append((time.time_ns() // 1000, seen))

    def detach(self) -> None:
        """Take the hook off (the interval is over, or failed)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def finish(self) -> Roles:
        """The end's storages (with the models and optimizers bound by then), the hook removed."""
        self.detach()
        if self._rediscover is not None:
            modules, optimizers = self._rediscover()
            if not self._named_model:
                self._modules = _refs([*_alive(self._modules), *modules])
            if not self._named_optimizer:
                self._optimizers = _refs([*_alive(self._optimizers), *optimizers])
        self.roles.end = self.storages()
        return self.roles

    def storages(self) -> Storages:
        """Address -> (bytes, category) of every parameter, gradient and optimizer-state storage on
        this device, now."""
        found: Storages = {}
        optimizers = _alive(self._optimizers)
        params = {id(p): p for p in module_parameters(_alive(self._modules))}
        if not self._named_model:  # a named model's are the parameters; else every optimizer's too
            for opt in optimizers:
                for group in opt.param_groups:
                    params.update((id(p), p) for p in group["params"])
        for p in params.values():
            self._add(found, p, PARAMETER)
            if p.grad is not None:
                self._add(found, p.grad, GRADIENT)
        for opt in optimizers:
            for state in opt.state.values():
                for value in state.values() if isinstance(state, dict) else ():
                    # LBFGS keeps its history as lists of tensors
                    for tensor in value if isinstance(value, (list, tuple)) else (value,):
                        self._add(found, tensor, OPTIMIZER_STATE)
        return found

    def _add(self, found: Storages, tensor: Any, category: str) -> None:
        if not isinstance(tensor, self._tensor) or tensor.layout != self._strided or _device(tensor) != self.device:
            return
        try:
            storage = tensor.untyped_storage()
            nbytes, ptr = storage.nbytes(), storage.data_ptr()
        except Exception:  # a subclass without a storage of its own (DTensor, fake tensors)
            return
        if nbytes:
            found.setdefault(ptr, (nbytes, category))


def _refs(objects: Iterable[Any]) -> list[Callable[[], Any]]:
    return [weakly(o) for o in _unique(objects)]


def weakly(value: Any) -> Callable[[], Any]:
    """A weak reference to ``value``, or a function returning it where it takes none (the rare
    class that does not)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def _alive(refs: list[Callable[[], Any]]) -> list[Any]:
    return [o for o in (r() for r in refs) if o is not None]


def _device(tensor: Any) -> str:
    d = tensor.device
    return d.type if d.type == "cpu" else f"{d.type}:{d.index if d.index is not None else 0}"
