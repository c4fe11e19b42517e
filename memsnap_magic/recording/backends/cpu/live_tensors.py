"""The CPU tensors reachable from the user's namespace, walked within a budget.

The CPU route cannot see blocks allocated while it was not recording; these are found here
instead: module parameters, buffers and tensor attributes, gradients, optimizer state, tensors in containers
(deques too), object attributes and slots a few levels deep, numpy views of tensors, the
buffers of sparse and nested tensors, the closures, defaults and class attributes of the
functions and classes the namespace's own module defined (a few ms, unlike a full
``gc.get_objects()`` walk).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import chain, islice, repeat
from types import FunctionType, ModuleType
from typing import Any

from .objects import (
    CLASS_DICT,
    CONTAINERS,
    MACHINERY,
    MODULE_ATTRS,
    SCALARS,
    TYPE_MODULE,
    TensorFields,
    builtin_iter,
    dunder,
    held_by_function,
    instance_dict,
    is_ndarray,
    module_members,
    name_of,
    ndarray_base,
    no_torch_function,
    optimizer_state,
    package_of,
    same_module,
    saved_tensors,
    slot_values,
    slots_of,
    subclass_attrs,
    tensor_buffers,
)

_WALK_DEPTH = 4
_WALK_LIMIT = 50_000  # objects looked at per walk, skipped ones included: a huge namespace costs ~50 ms


def live_storages(
    roots: Any,
    depth: int = _WALK_DEPTH,
    limit: int = _WALK_LIMIT,
    storages: dict[int, Any] | None = None,
    graphs: bool = False,
) -> dict[int, int]:
    """``{data_ptr: nbytes}`` of CPU tensor storages reachable from ``roots`` within ``depth`` hops.

    Every object looked at is charged to ``limit`` (an int in a list of ten million costs one),
    and no container is copied past what is left of it, so the walk's cost is bounded whatever
    the namespace holds; tensors past the limit go unseen. ``storages``, when given, receives the
    storage objects by address (for ``Watch.see``). ``graphs``: also the tensors the autograd
    graph of each tensor found holds for its backward (a loss kept in a list holds its forward's
    activations), each node charged to ``limit`` too.

    The walk runs none of the user's code: containers are read through the built-in types'
    own methods (a subclass's ``values`` or ``__iter__`` is not called), an object's attributes
    only through a plain instance ``__dict__``, tensor subclasses with their
    ``__torch_function__`` off, and saved tensors never unpacked (an unpack hook may recompute
    a checkpointed forward, or hand its tensor out once).
    """
    import torch

    with no_torch_function():
        return _walk(torch, roots, depth, limit, storages, graphs)


def _walk(
    torch: Any, roots: Any, depth: int, limit: int, storages: dict[int, Any] | None, graphs: bool
) -> dict[int, int]:
    """Breadth first: every name of the namespace is looked at before what its objects hold, so a
    large container (a vocabulary, a dataset's index) cannot spend the budget before a tensor
    named after it; a queue, not recursion, so a model nested a thousand deep is read whole."""
    found: dict[int, int] = {}
    seen: set[int] = set()
    left = [limit]
    queue: deque[tuple[Any, int]] = deque()
    kept_by_modules: list[tuple[Iterable[Any], int]] = []  # read once the queue is done
    skip = (ModuleType, *SCALARS)
    # functions and classes defined by the namespace's own module (a notebook's cells: __main__)
    # are looked into: a tensor in a closure, a default or a class attribute; a library's are not
    home = name_of(roots, limit)
    field = TensorFields(torch)

    def add(tensor: torch.Tensor) -> None:
        if field.device(tensor).type != "cpu":
            return
        if field.layout(tensor) != torch.strided or field.is_nested(tensor):  # sparse and nested tensors: their buffers
            for part in tensor_buffers(torch, tensor):
                if part is not tensor:
                    add(part)
            return
        s = field.storage(tensor)
        if s.nbytes():
            found[s.data_ptr()] = s.nbytes()
            if storages is not None:
                storages[s.data_ptr()] = s

    def add_with_grad(tensor: torch.Tensor) -> None:
        add(tensor)
        grad = field.grad(tensor) if field.is_leaf(tensor) or field.retains_grad(tensor) else None
        if grad is not None:
            add(grad)

    def later(children: Iterable[Any], level: int) -> None:
        # never takes more than is left of the budget, the objects already waiting counted
        room = left[0] - len(queue)
        if room > 0:
            queue.extend(zip(islice(children, room), repeat(level)))

    def graph(fn: Any) -> None:
        stack = [fn]
        while stack and left[0] > len(queue):  # the names waiting are not spent on a graph
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            left[0] -= 1
            for value in saved_tensors(node):
                add_with_grad(value)  # an AccumulateGrad's leaf holds its gradient
            stack.extend(f for f, _ in node.next_functions)

    def look(obj: Any, level: int) -> None:
        kind = type(obj)  # type() never runs the object's code; isinstance may (a __class__ property)
        if issubclass(kind, skip) or id(obj) in seen:
            return
        seen.add(id(obj))
        try:
            if issubclass(kind, torch.Tensor):
                add_with_grad(obj)
                made_by = field.grad_fn(obj) if graphs else None
                if made_by is not None:
                    graph(made_by)
            elif issubclass(kind, torch.nn.Module):
                attrs = instance_dict(obj)
                if attrs is not None:
                    # past torch's own ~20 attributes, reading one is charged, from what no waiting name needs
                    extra = min(max(len(attrs) - MODULE_ATTRS, 0), max(left[0] - len(queue), 0))
                    left[0] -= extra
                    members, hooks, held = module_members(attrs, torch.Tensor, MODULE_ATTRS + extra)
                    later(members, 0)
                    later(hooks, depth)  # a hook of yours is looked into as a name's function is
                    if held:  # a list, dict or object of yours kept on it (a KV cache), read last
                        kept_by_modules.append((held, depth - 1))
            elif issubclass(kind, torch.optim.Optimizer):
                state = optimizer_state(obj, torch.optim.Optimizer)  # its own, or a wrapper's optimizer's
                if issubclass(type(state), dict):
                    later(dict.values(state), 2)  # per parameter, a dict; in it tensors, or LBFGS's lists
            elif level <= 0:
                return
            elif kind is FunctionType:
                if same_module(obj.__module__, home):
                    later(held_by_function(obj), level - 1)
            elif issubclass(kind, type):
                if same_module(TYPE_MODULE(obj), home):
                    later(CLASS_DICT(obj).values(), level - 1)  # type's own slots: a metaclass's code is not run
            elif issubclass(kind, dict):
                later(chain(dict.values(obj), subclass_attrs(kind, dict, obj)), level - 1)
            elif issubclass(kind, CONTAINERS):
                later(chain(builtin_iter(kind)(obj), subclass_attrs(kind, CONTAINERS, obj)), level - 1)
            elif is_ndarray(kind):  # a .numpy() view keeps its tensor as its base
                later((ndarray_base(obj),), level)
            elif package_of(kind) in MACHINERY:
                return
            else:
                attrs = instance_dict(obj)
                if attrs is not None:
                    later(dict.values(attrs), level - 1)
                slots = slots_of(kind)
                if slots:  # __slots__ (a dataclass(slots=True)): read through their own descriptors
                    later(slot_values(obj, slots), level - 1)
        except Exception:  # a lazy module not yet built, a __getattr__ that raises: not a tensor we can read
            return

    try:
        if issubclass(type(roots), dict):
            # IPython's _i<N> (each cell's text) are strs: passed over here, where they cost least
            later((v for k, v in dict.items(roots) if type(v) is not str and not dunder(k)), depth)
        else:
            later((roots,), depth)
        while left[0] > 0:
            while queue and left[0] > 0:
                obj, level = queue.popleft()
                left[0] -= 1
                look(obj, level)
            if not kept_by_modules:
                break
            # what modules keep besides their tensors (a list of ids, a config) only once every
            # module and tensor the names reach was read: it cannot spend the budget before them
            waiting, kept_by_modules[:] = list(kept_by_modules), []
            for children, level in waiting:
                later(children, level)
    finally:
        queue.clear()
        kept_by_modules.clear()
        # add refers to itself, look to it: cycles through their closures that would hold the
        # storages found (and so the user's memory) until the cyclic collector runs
        look = later = graph = add = add_with_grad = None  # type: ignore[assignment]
    return found
