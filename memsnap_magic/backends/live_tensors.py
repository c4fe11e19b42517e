"""The CPU tensors reachable from the user's namespace, walked within a budget.

The CPU route cannot see blocks allocated while it was not recording; these are found here
instead: module parameters and buffers, gradients, optimizer state, and tensors in containers
and object attributes a few levels deep (a few ms, unlike a full ``gc.get_objects()`` walk).
"""

from __future__ import annotations

from types import FunctionType, ModuleType
from typing import Any

_WALK_DEPTH = 4
_WALK_LIMIT = 50_000  # objects visited per walk, so a huge namespace cannot stall a cell


def live_storages(roots: Any, depth: int = _WALK_DEPTH) -> dict[int, int]:
    """``{data_ptr: nbytes}`` of CPU tensor storages reachable from ``roots`` within ``depth`` hops."""
    import torch

    found: dict[int, int] = {}
    seen: set[int] = set()
    budget = [_WALK_LIMIT]
    skip = (ModuleType, type, FunctionType, str, bytes, int, float, bool, type(None))

    def add(t: torch.Tensor) -> None:
        if t.device.type != "cpu" or t.layout != torch.strided:
            return
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        if s.nbytes():
            found[s.data_ptr()] = s.nbytes()

    def visit(obj: Any, level: int) -> None:
        if isinstance(obj, skip) or id(obj) in seen or budget[0] <= 0:
            return
        seen.add(id(obj))
        budget[0] -= 1
        if isinstance(obj, torch.Tensor):
            add(obj)
            if obj.is_leaf and obj.grad is not None:
                add(obj.grad)
            return
        if isinstance(obj, torch.nn.Module):
            for t in obj.parameters():
                visit(t, 0)
            for t in obj.buffers():
                visit(t, 0)
            return
        if isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                visit(state, 1)
            return
        if level <= 0:
            return
        if isinstance(obj, dict):
            for v in list(obj.values()):
                visit(v, level - 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for v in list(obj):
                visit(v, level - 1)
        else:
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                for v in list(attrs.values()):
                    visit(v, level - 1)

    if isinstance(roots, dict):
        for name, value in list(roots.items()):
            if not (isinstance(name, str) and name.startswith("_")):
                visit(value, depth)
    else:
        visit(roots, depth)
    return found
