"""The CPU tensors reachable from the user's namespace, walked within a budget.

The CPU route cannot see blocks allocated while it was not recording; these are found here
instead: module parameters, buffers and tensor attributes, gradients, optimizer state, tensors in containers
(deques too), object attributes and slots a few levels deep, numpy views of tensors, the
buffers of sparse and nested tensors, the closures, defaults and class attributes of the
functions and classes the namespace's own module defined (a few ms, unlike a full
``gc.get_objects()`` walk).
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
from types import FunctionType, GetSetDescriptorType, MemberDescriptorType, ModuleType
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

    with _no_torch_function():
        return _walk(torch, roots, depth, limit, storages, graphs)


def _no_torch_function() -> Any:
    import torch

    off = getattr(torch._C, "DisableTorchFunctionSubclass", None)
    return off() if off is not None else contextlib.nullcontext()


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
    skip = (ModuleType, *_SCALARS)
    # functions and classes defined by the namespace's own module (a notebook's cells: __main__)
    # are looked into: a tensor in a closure, a default or a class attribute; a library's are not
    home = _name_of(roots, limit)
    field = _TensorFields(torch)

    def add(tensor: torch.Tensor) -> None:
        if field.device(tensor).type != "cpu":
            return
        if field.layout(tensor) != torch.strided or field.is_nested(tensor):  # sparse and nested tensors: their buffers
            for part in _buffers(torch, tensor):
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
            for value in _saved(node):
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
                    extra = min(max(len(attrs) - _MODULE_ATTRS, 0), max(left[0] - len(queue), 0))
                    left[0] -= extra
                    members, hooks, held = _module_members(attrs, torch.Tensor, _MODULE_ATTRS + extra)
                    later(members, 0)
                    later(hooks, depth)  # a hook of yours is looked into as a name's function is
                    if held:  # a list, dict or object of yours kept on it (a KV cache), read last
                        kept_by_modules.append((held, depth - 1))
            elif issubclass(kind, torch.optim.Optimizer):
                state = obj.state  # a wrapper's property (accelerate's) hands over its optimizer's
                if issubclass(type(state), dict):
                    later(dict.values(state), 2)  # per parameter, a dict; in it tensors, or LBFGS's lists
            elif level <= 0:
                return
            elif kind is FunctionType:
                if _is(obj.__module__, home):
                    later(_held_by_function(obj), level - 1)
            elif issubclass(kind, type):
                if _is(_TYPE_MODULE(obj), home):
                    later(_CLASS_DICT(obj).values(), level - 1)  # type's own slots: a metaclass's code is not run
            elif issubclass(kind, dict):
                later(chain(dict.values(obj), _subclass_attrs(kind, dict, obj)), level - 1)
            elif issubclass(kind, _CONTAINERS):
                later(chain(_builtin_iter(kind)(obj), _subclass_attrs(kind, _CONTAINERS, obj)), level - 1)
            elif _is_ndarray(kind):  # a .numpy() view keeps its tensor as its base
                later((_ndarray_base(obj),), level)
            elif _package(kind) in _MACHINERY:
                return
            else:
                attrs = instance_dict(obj)
                if attrs is not None:
                    later(dict.values(attrs), level - 1)
                slots = _slots(kind)
                if slots:  # __slots__ (a dataclass(slots=True)): read through their own descriptors
                    later(_slot_values(obj, slots), level - 1)
        except Exception:  # a lazy module not yet built, a __getattr__ that raises: not a tensor we can read
            return

    try:
        if issubclass(type(roots), dict):
            # IPython's _i<N> (each cell's text) are strs: passed over here, where they cost least
            later((v for k, v in dict.items(roots) if type(v) is not str and not _dunder(k)), depth)
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


_CONTAINERS = (list, tuple, set, frozenset, deque)
# type's own slots, read without a metaclass's __getattribute__ or properties
_CLASS_DICT = type.__dict__["__dict__"].__get__
_TYPE_MODULE = type.__dict__["__module__"].__get__
_MRO = type.__dict__["__mro__"].__get__
_MODULE_ATTRS = 64  # attributes of a module read free of charge (torch's own take ~20)


class _TensorFields:
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


def _name_of(roots: Any, limit: int) -> Any:
    """A namespace's ``__name__`` among its first ``limit`` names, found by comparing str keys
    only (a lookup would run the ``__eq__`` of a key whose hash collides with it)."""
    if not issubclass(type(roots), dict):
        return None
    names = islice(dict.items(roots), limit)
    return next((value for key, value in names if type(key) is str and key == "__name__"), None)


def _subclass_attrs(kind: type, base: Any, obj: Any) -> Iterable[Any]:
    """The instance attributes of a subclass of a built-in container (``class Config(dict)``)."""
    if any(kind is b for b in (base if type(base) is tuple else (base,))):  # `is`: a metaclass's __eq__ is not run
        return ()
    attrs = instance_dict(obj)
    return dict.values(attrs) if attrs is not None else ()


def _is_ndarray(kind: type) -> bool:
    numpy = sys.modules.get("numpy")
    ndarray = getattr(numpy, "ndarray", None)
    return ndarray is not None and issubclass(kind, ndarray)


def _ndarray_base(array: Any) -> Any:
    """numpy's own ``base`` getter: a subclass's ``base`` property is not run."""
    return sys.modules["numpy"].ndarray.__dict__["base"].__get__(array)


def _package(kind: type) -> Any:
    """The top package a class was defined in, or None."""
    name = _TYPE_MODULE(kind)
    return str.partition(name, ".")[0] if issubclass(type(name), str) else None


def instance_dict(obj: Any) -> dict[str, Any] | None:
    """An object's attributes where it keeps them in a plain ``__dict__`` (read without running a
    property or ``__getattr__`` of its), else None."""
    if not _plain_dict(type(obj)):
        return None
    attrs = object.__getattribute__(obj, "__dict__")
    return attrs if type(attrs) is dict else None


def _module_members(attrs: dict[str, Any], tensor: type, scan: int) -> tuple[Iterable[Any], ...]:
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
        role = _HELD_IN.get(name)  # str keys compared as str: a colliding key's __eq__ is not run
        if role is not None:
            if issubclass(type(value), dict) and value:
                (hooks if role else owned).append(dict.values(value))
        elif issubclass(type(value), tensor):
            plain.append(value)
        elif name not in _TORCH_MODULE_ATTRS and not issubclass(type(value), _SCALARS):
            held.append(value)
    return chain(*owned, plain), chain(*hooks), held


_SCALARS = (str, bytes, int, float, bool, type(None))


def _dunder(name: Any) -> bool:
    """``__builtins__``, ``__name__``: the interpreter's names, not the user's."""
    return issubclass(type(name), str) and str.startswith(name, "__") and str.endswith(name, "__")


_MODULE_DICTS = ("_parameters", "_buffers", "_modules")
# a module's dicts the walk reads: torch's three (False), and those holding hook functions (True)
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HELD_IN = {**dict.fromkeys(_MODULE_DICTS, False), **dict.fromkeys(_HOOK_DICTS, True)}
# What ``torch.nn.Module.__init__`` sets on every module (torch 2.5-2.14): torch's, not the model's.
# Written out, not read from a module made here: a patched ``__init__`` would be the user's code.
_TORCH_MODULE_ATTRS = frozenset(
    {
        *_HELD_IN,
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


def module_dicts(attrs: dict[str, Any], scan: int = _MODULE_ATTRS) -> dict[str, dict[Any, Any]]:
    """torch's own ``_parameters``, ``_buffers`` and ``_modules`` dicts of a module's attribute
    dict, among its first ``scan`` keys. Looked up directly where every key is a plain str (the
    usual case); else found by comparing str keys only, since a lookup would run the ``__eq__``
    of a key whose hash collides with one."""
    if len(attrs) <= scan and sum(map(is_, map(type, attrs), repeat(str))) == len(attrs):
        parts: dict[str, Any] = {name: dict.get(attrs, name) for name in _MODULE_DICTS}
    else:
        parts = {name: value for name, value in islice(dict.items(attrs), scan) if type(name) is str}
    return {name: parts[name] for name in _MODULE_DICTS if issubclass(type(parts.get(name)), dict)}


def _is(name: Any, home: Any) -> bool:
    """Whether a ``__module__`` names ``home``, compared only as a str (an object's ``__eq__`` is not run)."""
    return type(name) is str and type(home) is str and name == home


def _held_by_function(fn: FunctionType) -> Iterable[Any]:
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


def _builtin_iter(kind: type) -> Any:
    """The iterator of the built-in container ``kind`` derives from, not an override's."""
    return next(base.__iter__ for base in _CONTAINERS if issubclass(kind, base))


def _buffers(torch: Any, t: Any) -> tuple[Any, ...]:
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


class _ByClass:
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


_SLOTS, _PLAIN_DICT = _ByClass(), _ByClass()


def _slots(kind: type) -> tuple[Any, ...]:
    """The member descriptors of ``kind``'s ``__slots__`` (C-level: reading one runs no code)."""
    return _SLOTS.get(
        kind,
        lambda kind: tuple(d for k in _MRO(kind) for d in _CLASS_DICT(k).values() if type(d) is MemberDescriptorType),
    )


def _slot_values(obj: Any, slots: tuple[Any, ...]) -> Iterable[Any]:
    for d in slots:
        try:
            yield d.__get__(obj, type(obj))
        except AttributeError:  # a slot never set
            continue


def _plain_dict(kind: type) -> bool:
    """Whether instances of ``kind`` keep their attributes in an ordinary ``__dict__`` slot, read
    without running a property or ``__getattr__`` of theirs."""
    return _PLAIN_DICT.get(kind, _find_plain_dict)


def _find_plain_dict(kind: type) -> bool:
    found = next((_CLASS_DICT(k)["__dict__"] for k in _MRO(kind) if "__dict__" in _CLASS_DICT(k)), None)
    return type(found) is GetSetDescriptorType and found.__name__ == "__dict__"


def _saved(node: Any) -> list[Any]:
    """The tensors an autograd node holds for its backward (none once a backward freed them),
    and the leaf of an ``AccumulateGrad``. Read as stored, never unpacked: with saved-tensor
    hooks on, what is stored is what the pack hook returned (a tensor, or tensors in a tuple,
    are counted; a checkpoint's handle holds none)."""
    import torch

    saved = torch._C._autograd.SavedTensor
    found = []
    kind: Any = type(node)  # a class: hashable, which typeshed cannot tell of type[Any]
    for name in _saved_names(kind):
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
def _saved_names(kind: type) -> tuple[str, ...]:
    """``_raw_saved_*`` (``_saved_*`` would unpack) and ``AccumulateGrad``'s ``variable``."""
    return (
        *(a for a in dir(kind) if a.startswith("_raw_saved_")),
        *(("variable",) if hasattr(kind, "variable") else ()),
    )
