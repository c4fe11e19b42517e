"""The CPU tensors reachable from the user's namespace, walked within a budget.

The CPU route cannot see blocks allocated while it was not recording; these are found here
instead: module parameters and buffers, gradients, optimizer state, and tensors in containers
and object attributes a few levels deep (a few ms, unlike a full ``gc.get_objects()`` walk).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain, islice
from types import FunctionType, ModuleType
from typing import Any

_WALK_DEPTH = 4
_WALK_LIMIT = 50_000  # objects looked at per walk, skipped ones included: a huge namespace costs ~50 ms
# Packages whose objects hold no tensor of the user's: IPython's ``exit`` and ``quit`` lead to the
# shell and all it holds, hundreds of objects on every walk.
_MACHINERY = frozenset(
    {
        "IPython",
        "ipykernel",
        "jupyter_client",
        "traitlets",
        "zmq",
        "tornado",
        "ipywidgets",
        "matplotlib",
        "memsnap_magic",
    }
)


def live_storages(roots: Any, depth: int = _WALK_DEPTH, limit: int = _WALK_LIMIT) -> dict[int, int]:
    """``{data_ptr: nbytes}`` of CPU tensor storages reachable from ``roots`` within ``depth`` hops.

    Every object looked at is charged to ``limit`` (an int in a list of ten million costs one),
    and no container is copied past what is left of it, so the walk's cost is bounded whatever
    the namespace holds; tensors past the limit go unseen.
    """
    import torch

    found: dict[int, int] = {}
    seen: set[int] = set()
    left = [limit]
    skip = (ModuleType, type, FunctionType, str, bytes, int, float, bool, type(None))

    def add(t: torch.Tensor) -> None:
        if t.device.type != "cpu" or t.layout != torch.strided:
            return
        s = t.untyped_storage()
        if s.nbytes():
            found[s.data_ptr()] = s.nbytes()

    def visit_all(children: Iterable[Any], level: int) -> None:
        for child in list(islice(children, max(left[0], 0))):  # never copies more than is left
            visit(child, level)
            if left[0] <= 0:
                return

    def visit(obj: Any, level: int) -> None:
        left[0] -= 1
        kind = type(obj)  # type() never runs the object's code; isinstance may (a __class__ property)
        if issubclass(kind, skip) or id(obj) in seen:
            return
        seen.add(id(obj))
        try:
            if issubclass(kind, torch.Tensor):
                add(obj)
                if obj.is_leaf and obj.grad is not None:
                    add(obj.grad)
            elif issubclass(kind, torch.nn.Module):
                visit_all(chain(obj.parameters(), obj.buffers()), 0)
            elif issubclass(kind, torch.optim.Optimizer):
                visit_all(obj.state.values(), 1)
            elif level <= 0:
                return
            elif issubclass(kind, dict):
                visit_all(obj.values(), level - 1)
            elif issubclass(kind, (list, tuple, set, frozenset)):
                visit_all(obj, level - 1)
            elif kind.__module__.partition(".")[0] in _MACHINERY:
                return
            else:
                attrs = obj.__dict__ if hasattr(obj, "__dict__") else None
                if type(attrs) is dict:
                    visit_all(attrs.values(), level - 1)
        except Exception:  # a lazy module not yet built, a __getattr__ that raises: not a tensor we can read
            return

    if isinstance(roots, dict):
        names = (v for k, v in roots.items() if not (isinstance(k, str) and k.startswith("_")))
        visit_all(names, depth)
    else:
        visit(roots, depth)
    return found
