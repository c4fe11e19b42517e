"""The hops of a path from a name of the user's namespace to what it holds: how each was taken
(the kinds ``results.holders`` reads), how Python spells it, and the hops out of a module or a
function, read without running any of the user's code.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from types import FunctionType
from typing import Any

from ..core.clean import clean
from .backends.cpu import objects as ob

HOPS = 48  # hops of a path kept (a model nested a thousand deep is walked whole, named briefly)
ELIDED = "elided"  # the hop standing for those left out
_KEYS = (str, int, float, bool, type(None))  # dict keys named by their repr (no code of the user's runs)

# how a hop was taken: what the rules of ``results.holders`` read
NAME, ITEM, KEY, ATTR, MODULE_ATTR, HOOK, CLOSURE, CLASS_ATTR, GRAD, GRAPH, STATE, MEMBER = (
    "name",
    "item",
    "key",
    "attr",
    "module_attr",
    "hook",
    "closure",
    "class_attr",
    "grad",
    "graph",
    "state",
    "member",
)


def route(nodes: list[tuple[int, str, Any, str]], node: int) -> list[list[str]]:
    """A node's path from its name (``nodes``: parent, how, label, type name), hop by hop:
    ``[text, type name, how]``; a path through a model nested deeper than ``HOPS`` keeps its
    first and last hops, ``…`` between."""
    hops = []
    while node >= 0:
        parent, how, label, kind = nodes[node]
        hops.append([printable(_spelled(how, label)), printable(kind), how])
        node = parent
    hops.reverse()
    if len(hops) > HOPS:
        hops[HOPS // 2 : len(hops) - HOPS // 2 + 1] = [[".…", "", ELIDED]]
    return hops


CONTAINER_HOPS = frozenset((ITEM, KEY))  # a container of the user's: what keeps one item per step


def printable(text: str, limit: int = 1024) -> str:
    """Text a file may hold and a terminal print: what is not printable becomes ``?``."""
    text = clean(text, limit)
    return text if text.isprintable() else "".join(c if c.isprintable() else "?" for c in text)


def _spelled(how: str, label: Any) -> str:
    """A hop as Python spells it: ``history``, ``[5]``, ``['step5']``, ``.decoder``, ``[…]``."""
    if how == ITEM:
        return f"[{label}]" if type(label) is int else "{…}"
    if how == KEY:
        return f"[{_key(label)}]"
    if how in (ATTR, MODULE_ATTR, CLASS_ATTR, MEMBER):
        text = str(label)
        if text.startswith((".", "[")):  # spelled already (a default, a closure cell)
            return text
        if text.isdigit():  # a ModuleList's or Sequential's child: model.layers[0]
            return f"[{text}]"
        return f".{text}" if text.isidentifier() else f"[{_key(text)}]"
    return str(label)


def _key(key: Any) -> str:
    """A dict key's repr where that runs no code of the user's (built-in scalars), else ``…``."""
    if type(key) in _KEYS:
        text = repr(key)
        return text if len(text) <= 60 else text[:58] + "…" + text[0]
    return "…"


def module_children(attrs: dict[str, Any]) -> Iterable[tuple[str, Any, Any]]:
    """A module's parameters, buffers and submodules (``.name``), its hooks' functions, and what
    else it keeps as attributes (a tensor or list stored by a hook: ``module_attr``)."""
    for name, value in islice(dict.items(attrs), 4096):
        if type(name) is not str:
            continue
        role = ob.HELD_IN.get(name)
        if role is not None:
            if issubclass(type(value), dict):
                for key, member in dict.items(value):
                    if role:  # a hook dict: keyed by the handle's id
                        yield HOOK, f".{name}[{_key(key)}]", member
                    else:
                        yield MEMBER, key, member
        elif name not in ob.TORCH_MODULE_ATTRS:
            yield MODULE_ATTR, name, value


def function_children(fn: FunctionType) -> Iterable[tuple[str, Any, Any]]:
    """A function's closure cells and defaults, as Python spells them (C-level reads)."""
    for n, cell in enumerate(fn.__closure__ or ()):
        try:
            yield CLOSURE, f".__closure__[{n}].cell_contents", cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue
    for n, value in enumerate(fn.__defaults__ or ()):
        yield ATTR, f".__defaults__[{n}]", value
    kwdefaults = fn.__kwdefaults__
    if type(kwdefaults) is dict:
        for key, value in dict.items(kwdefaults):
            yield ATTR, f".__kwdefaults__[{_key(key)}]", value


def slot_items(obj: Any, slots: tuple[Any, ...]) -> Iterable[tuple[Any, Any]]:
    for d in slots:
        try:
            yield d, d.__get__(obj, type(obj))
        except AttributeError:  # a slot never set
            continue
