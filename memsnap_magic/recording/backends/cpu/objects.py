"""How the walks read an object without running any of its code: a module's parameter,
buffer, module and hook dicts, an instance's plain ``__dict__`` and slots, a function's
closure and defaults, a graph node's saved tensors (never unpacked), numpy views of tensors.
``live_tensors`` (the CPU route's walk) and ``recording.retention`` (who keeps a leak) share them.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from itertools import chain, islice, repeat
from operator import is_
from types import FunctionType, GetSetDescriptorType, MemberDescriptorType
from typing import Any

# Packages whose objects hold no tensor of the user's: IPython's ``exit`` and ``quit`` lead to the
# shell and all it holds, hundreds of objects on every walk.
MACHINERY = frozenset(
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


def no_torch_function() -> Any:
    import torch

    off = getattr(torch._C, "DisableTorchFunctionSubclass", None)
    return off() if off is not None else contextlib.nullcontext()


CONTAINERS = (list, tuple, set, frozenset, deque)
# type's own slots, read without a metaclass's __getattribute__ or properties
CLASS_DICT = type.__dict__["__dict__"].__get__
TYPE_MODULE = type.__dict__["__module__"].__get__
MRO = type.__dict__["__mro__"].__get__
MODULE_ATTRS = 64  # attributes of a module read free of charge (torch's own take ~20)


class TensorFields:
    """A tensor's fields read through torch's own C getters: a subclass's property or
    ``__getattribute__`` of the same name is not run."""

    # torch.Tensor's own getters, set below: a subclass's property of the same name is not run
    device: Callable[[Any], Any]
    layout: Callable[[Any], Any]
    is_nested: Callable[[Any], bool]
    is_leaf: Callable[[Any], bool]
    retains_grad: Callable[[Any], bool]
    grad: Callable[[Any], Any]
    grad_fn: Callable[[Any], Any]

    def __init__(self, torch: Any) -> None:
        base = torch._C.TensorBase
        for name in ("device", "layout", "is_nested", "is_leaf", "retains_grad", "grad", "grad_fn"):
            setattr(self, name, base.__dict__[name].__get__)
        self.storage = base.untyped_storage


def name_of(roots: Any, limit: int) -> Any:
    """A namespace's ``__name__`` among its first ``limit`` names, found by comparing str keys
    only (a lookup would run the ``__eq__`` of a key whose hash collides with it)."""
    if not issubclass(type(roots), dict):
        return None
    names = islice(dict.items(roots), limit)
    return next((value for key, value in names if type(key) is str and key == "__name__"), None)


def subclass_attrs(kind: type, base: Any, obj: Any) -> Iterable[Any]:
    """The instance attributes of a subclass of a built-in container (``class Config(dict)``)."""
    if any(kind is b for b in (base if type(base) is tuple else (base,))):  # `is`: a metaclass's __eq__ is not run
        return ()
    attrs = instance_dict(obj)
    return dict.values(attrs) if attrs is not None else ()


def is_ndarray(kind: type) -> bool:
    numpy = sys.modules.get("numpy")
    ndarray = getattr(numpy, "ndarray", None)
    return ndarray is not None and issubclass(kind, ndarray)


def ndarray_base(array: Any) -> Any:
    """numpy's own ``base`` getter: a subclass's ``base`` property is not run."""
    return sys.modules["numpy"].ndarray.__dict__["base"].__get__(array)


def package_of(kind: type) -> Any:
    """The top package a class was defined in, or None."""
    name = TYPE_MODULE(kind)
    return str.partition(name, ".")[0] if issubclass(type(name), str) else None


def optimizer_state(obj: Any, optimizer: type, wrapped: int = 2) -> Any:
    """An optimizer's ``state`` read from its own ``__dict__``, never through a property of its
    class (a subclass's could run anything); a wrapper that keeps the real one as ``optimizer``
    (accelerate's, whose ``state`` is a property handing over the wrapped one's) is read through
    it. None where neither holds it."""
    attrs = instance_dict(obj)
    if attrs is None:
        return None
    if "state" in attrs:
        return attrs["state"]
    inner = attrs.get("optimizer")
    if wrapped and issubclass(type(inner), optimizer):
        return optimizer_state(inner, optimizer, wrapped - 1)
    return None


def instance_dict(obj: Any) -> dict[str, Any] | None:
    """An object's attributes where it keeps them in a plain ``__dict__`` (read without running a
    property or ``__getattr__`` of its), else None."""
    if not plain_dict(type(obj)):
        return None
    attrs = object.__getattribute__(obj, "__dict__")
    return attrs if type(attrs) is dict else None


def module_members(attrs: dict[str, Any], tensor: type, scan: int) -> tuple[Iterable[Any], ...]:
    """A module's parameters, buffers, submodules and tensors kept as plain attributes
    (``self.pe = pe``, ``self._mask``) among its first ``scan`` attributes, from its attribute
    dict (an overridden ``parameters()`` is not run); its hooks' functions
    (``register_forward_hook``); and what else its class keeps on it (a list of cached tensors,
    an object). torch's own bookkeeping (``training``, the hook dicts left empty) is passed
    over, so a model of thousands of modules spends the walk's budget on what can hold memory."""
    owned: list[Iterable[Any]] = []
    plain: list[Any] = []
    hooks: list[Iterable[Any]] = []
    held: list[Any] = []
    # one pass for torch's dicts and the tensors (module_dicts finds the dicts alone, for
    # labelling; calling it here too read each module twice: +9 µs a walk on a small MLP)
    for name, value in islice(dict.items(attrs), scan):
        if type(name) is not str:
            continue
        role = HELD_IN.get(name)  # str keys compared as str: a colliding key's __eq__ is not run
        if role is not None:
            if issubclass(type(value), dict) and value:
                (hooks if role else owned).append(dict.values(value))
        elif issubclass(type(value), tensor):
            plain.append(value)
        elif name not in TORCH_MODULE_ATTRS and not issubclass(type(value), SCALARS):
            held.append(value)
    return chain(*owned, plain), chain(*hooks), held


SCALARS = (str, bytes, int, float, bool, type(None))


def dunder(name: Any) -> bool:
    """``__builtins__``, ``__name__``: the interpreter's names, not the user's."""
    return issubclass(type(name), str) and str.startswith(name, "__") and str.endswith(name, "__")


MODULE_DICTS = ("_parameters", "_buffers", "_modules")
# a module's dicts the walk reads: torch's three (False), and those holding hook functions (True)
HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
HELD_IN = {**dict.fromkeys(MODULE_DICTS, False), **dict.fromkeys(HOOK_DICTS, True)}
# What ``torch.nn.Module.__init__`` sets on every module (torch 2.5-2.14): torch's, not the model's.
# Written out, not read from a module made here: a patched ``__init__`` would be the user's code.
TORCH_MODULE_ATTRS = frozenset(
    {
        *HELD_IN,
        "training",
        "_non_persistent_buffers_set",
        "_is_full_backward_hook",
        "_forward_hooks_with_kwargs",
        "_forward_hooks_always_called",
        "_forward_pre_hooks_with_kwargs",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
        "_compiled_call_impl",
    }
)


def module_dicts(attrs: dict[str, Any], scan: int = MODULE_ATTRS) -> dict[str, dict[Any, Any]]:
    """torch's own ``_parameters``, ``_buffers`` and ``_modules`` dicts of a module's attribute
    dict, among its first ``scan`` keys. Looked up directly where every key is a plain str (the
    usual case); else found by comparing str keys only, since a lookup would run the ``__eq__``
    of a key whose hash collides with one."""
    if len(attrs) <= scan and sum(map(is_, map(type, attrs), repeat(str))) == len(attrs):
        parts: dict[str, Any] = {name: dict.get(attrs, name) for name in MODULE_DICTS}
    else:
        parts = {name: value for name, value in islice(dict.items(attrs), scan) if type(name) is str}
    return {name: parts[name] for name in MODULE_DICTS if issubclass(type(parts.get(name)), dict)}


def same_module(name: Any, home: Any) -> bool:
    """Whether a ``__module__`` names ``home``, compared only as a str (an object's ``__eq__`` is not run)."""
    return type(name) is str and type(home) is str and name == home


def held_by_function(fn: FunctionType) -> Iterable[Any]:
    """What a function holds: its closure's cells, its defaults (C-level reads, no code of its)."""
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue
    yield from fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__
    if type(kwdefaults) is dict:
        yield from dict.values(kwdefaults)


def builtin_iter(kind: type) -> Any:
    """The iterator of the built-in container ``kind`` derives from, not an override's."""
    return next(base.__iter__ for base in CONTAINERS if issubclass(kind, base))


def tensor_buffers(torch: Any, t: Any) -> tuple[Any, ...]:
    """The tensors holding a sparse or nested tensor's memory; none where it cannot be read."""
    layout = t.layout
    try:
        if layout == torch.sparse_coo:
            return (t._indices(), t._values())
        if layout in (torch.sparse_csr, torch.sparse_bsr):
            return (t.crow_indices(), t.col_indices(), t.values())
        if layout in (torch.sparse_csc, torch.sparse_bsc):
            return (t.ccol_indices(), t.row_indices(), t.values())
        if t.is_nested:
            return (t.values(), t.offsets()) if layout == torch.jagged else (t.values(),)
    except Exception:  # a layout or subclass with its own rules
        pass
    return ()


class ByClass:
    """A cache keyed by class without hashing it (a metaclass's ``__hash__``/``__eq__`` would
    run): by ``id``, each entry holding a weak reference that proves it is that class still."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, Any]] = {}

    def get(self, kind: type, make: Any) -> Any:
        entry = self._entries.get(id(kind))
        if entry is not None and entry[0]() is kind:
            return entry[1]
        value = make(kind)
        with contextlib.suppress(TypeError):  # a class that takes no weak reference: asked again each time
            self._entries[id(kind)] = (weakref.ref(kind, self._forget(id(kind))), value)
        return value

    def _forget(self, key: int) -> Any:
        def forget(ref: Any) -> None:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]

        return forget


SLOTS, PLAIN_DICT = ByClass(), ByClass()


def slots_of(kind: type) -> tuple[Any, ...]:
    """The member descriptors of ``kind``'s ``__slots__`` (C-level: reading one runs no code)."""
    return SLOTS.get(
        kind,
        lambda kind: tuple(d for k in MRO(kind) for d in CLASS_DICT(k).values() if type(d) is MemberDescriptorType),
    )


def slot_values(obj: Any, slots: tuple[Any, ...]) -> Iterable[Any]:
    for d in slots:
        try:
            yield d.__get__(obj, type(obj))
        except AttributeError:  # a slot never set
            continue


def plain_dict(kind: type) -> bool:
    """Whether instances of ``kind`` keep their attributes in an ordinary ``__dict__`` slot, read
    without running a property or ``__getattr__`` of theirs."""
    return PLAIN_DICT.get(kind, find_plain_dict)


def find_plain_dict(kind: type) -> bool:
    found = next((CLASS_DICT(k)["__dict__"] for k in MRO(kind) if "__dict__" in CLASS_DICT(k)), None)
    return type(found) is GetSetDescriptorType and found.__name__ == "__dict__"


def saved_tensors(node: Any) -> list[Any]:
    """The tensors an autograd node holds for its backward (none once a backward freed them),
    and the leaf of an ``AccumulateGrad``. Read as stored, never unpacked: with saved-tensor
    hooks on, what is stored is what the pack hook returned (a tensor, or tensors in a tuple,
    are counted; a checkpoint's handle holds none)."""
    import torch

    saved = torch._C._autograd.SavedTensor
    found = []
    kind: Any = type(node)  # a class: hashable, which typeshed cannot tell of type[Any]
    for name in saved_names(kind):
        try:
            value = getattr(node, name)
        except Exception:  # freed by a backward already
            continue
        for raw in value if type(value) in (list, tuple) else (value,):
            # types compared, never isinstance: a pack hook's object may have a __class__ property
            # SavedTensor's data is not in torch's stubs
            stored: Any = raw if issubclass(type(raw), torch.Tensor) else raw.data if type(raw) is saved else None  # type: ignore[attr-defined]
            for item in stored if type(stored) in (list, tuple) else (stored,):
                if issubclass(type(item), torch.Tensor):
                    found.append(item)
    return found


@functools.cache
def saved_names(kind: type) -> tuple[str, ...]:
    """``_raw_saved_*`` (``_saved_*`` would unpack) and ``AccumulateGrad``'s ``variable``."""
    return (
        *(a for a in dir(kind) if a.startswith("_raw_saved_")),
        *(("variable",) if hasattr(kind, "variable") else ()),
    )
