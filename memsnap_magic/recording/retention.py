"""Who keeps a step's memory alive: a path from a name in the user's namespace to each block the
step made and kept, found after the recording, so a leak is said with what holds it.

The walk is the CPU route's namespace walk (``live_tensors``: breadth first from every name,
through containers, attributes, modules, hooks, closures, optimizer state and autograd graphs)
with two changes: every object reached remembers how (so a block found has a path, shortest
first), and tensors of any device count, matched to the step's blocks by storage address and
size. It runs none of the user's code (built-in containers read through their own types'
methods, attributes through a plain ``__dict__``, saved tensors never unpacked, no ``repr`` of a
key that is not a built-in scalar) and stops at ``LIMIT`` objects or ``SECONDS``, whichever
comes first, saying so. Containers are read newest first (a list's last items, a dict's last
keys: what a leaking step added), and the walk stops once every block is found through a
container of the user's (a name is bound anew each step; the list it was appended to keeps them).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Iterable
from itertools import islice
from types import FunctionType, ModuleType
from typing import TYPE_CHECKING, Any

from ..core.categories import OPTIMIZER_STATE
from ..files.meta import META_KEY
from ..results.findings import floor
from .backends.cpu import objects as ob
from .hops import (
    ATTR,
    CLASS_ATTR,
    CONTAINER_HOPS,
    GRAD,
    GRAPH,
    ITEM,
    KEY,
    NAME,
    STATE,
    function_children,
    module_children,
    printable,
    route,
    slot_items,
)

if TYPE_CHECKING:
    from .backends.base import Names

LIMIT = 200_000  # objects looked at, skipped ones included
SECONDS = 0.1  # and no longer than this (checked every 256 objects)
DEPTH = 6  # hops through containers and plain objects from a name (modules, tensors, optimizers: any)
ROWS = 16  # holders kept per step
BLOCKS = 32  # blocks kept with the row holding them (the step's table names them)
_TYPE_NAME = type.__dict__["__name__"].__get__
_SKIP = (ModuleType, *ob.SCALARS)


def walk_after(
    snap: dict[str, Any], d: dict[str, Any], made: list[tuple[int, int, str | None]], names: Names, device: str
) -> None:
    """After a step's snapshot (the recording done): where it kept more than the leak floor, find
    what holds the blocks it made and kept (``made``: address, size, model-state category or
    None), and write that into the file's ``memsnap`` block and the digest (its summary, and the
    interval made of it), so a file read later still says who held them. Model state is left out unless it
    is all the step kept; then its optimizer state is asked about (an optimizer made anew each
    step), never its gradients (made anew after ``zero_grad()``, or grown in place).
    Ordinary steps pay nothing: under the floor, no walk."""
    start = d["baseline_allocated"]
    if not made or d["end_allocated"] - start <= floor(start):
        return
    leakable = {addr: size for addr, size, role in made if role is None}
    if sum(leakable.values()) <= floor(start):
        leakable = {addr: size for addr, size, role in made if role in (None, OPTIMIZER_STATE)}
    if not leakable:
        return
    found = find_holders(names() if callable(names) else names, leakable, device)
    snap[META_KEY]["holders"] = found
    d["meta"] = dataclasses.replace(d["meta"], holders=found)


def find_holders(
    roots: dict[str, Any], blocks: dict[int, int], device: str, limit: int = LIMIT, seconds: float = SECONDS
) -> dict[str, Any]:
    """What holds ``blocks`` (address -> bytes) of ``device`` among what ``roots`` reaches:
    ``rows`` ``[[path, bytes, blocks], ...]`` largest first, each path's ``routes`` (per hop:
    ``[text, type name, how]``), the bytes found nowhere (``unreached``), the ``blocks`` by row,
    the other optimizers over the same parameters as one holding a block (``optimizers``), the
    objects looked at and why the walk stopped short (``cut``: None when it did not)."""
    import torch

    with ob.no_torch_function():
        return _Walk(torch, blocks, device, limit, seconds).run(roots)


class _Walk:
    def __init__(self, torch: Any, blocks: dict[int, int], device: str, limit: int, seconds: float) -> None:
        self.torch, self.wanted, self.limit = torch, dict(blocks), limit
        self.deadline = time.perf_counter() + seconds
        self.seconds = seconds
        kind, _, index = device.partition(":")
        self.device = (kind, int(index) if index.isdigit() else None)
        self.field = ob.TensorFields(torch)
        # node: (parent node or -1, how, label value, type name): paths are spelled only for what is found
        self.nodes: list[tuple[int, str, Any, str]] = []
        # whether a node's path passes an item of a container of the user's (a list, a dict):
        # what keeps memory step after step. A name (``loss``, ``opt``) is bound anew each step;
        # the list it was appended to (``history``, ``schedulers``) keeps every one. Such a path is
        # preferred. An optimizer's own state dicts are not the user's containers (``in_state``)
        self.contained: list[bool] = []
        self.in_state: list[bool] = []
        self.uncontained = 0  # blocks found only through paths that are not contained
        self.found: dict[int, int] = {}  # block address -> node
        # what waits to be looked at: (object, level, parent node, how, label); its node is made
        # only when it is looked at (a list of a million is queued cheaply, and mostly cut)
        self.queue: deque[tuple[Any, int, int, str, Any]] = deque()
        self.seen: dict[int, bool] = {}  # id -> whether it was reached through a container
        self.looked = 0
        self.cut: str | None = None
        self.optimizers: list[tuple[int, int, frozenset[int]]] = []  # node, its id, ids of its parameters
        self.home: Any = None

    def run(self, roots: dict[str, Any]) -> dict[str, Any]:
        self.home = ob.name_of(roots, self.limit)
        try:
            for n, (key, value) in enumerate(islice(dict.items(roots), self.limit)):
                if not n & 4095 and self._late():
                    break
                if type(key) is str and not ob.dunder(key) and not issubclass(type(value), ob.SCALARS):
                    self.queue.append((value, DEPTH, -1, NAME, key))
            while self.queue and not self._done():
                if self.looked >= self.limit:
                    self.cut = f"{self.limit:,} objects"
                    break
                if not self.looked & 255 and self._late():
                    break
                self.looked += 1
                self._look(*self.queue.popleft())
        finally:
            self.queue.clear()
        return self._result()

    def _late(self) -> bool:
        """Whether the walk's time is up (then ``cut`` says so)."""
        if time.perf_counter() > self.deadline:
            self.cut = f"{self.seconds * 1000:.0f} ms"
            return True
        return False

    def _done(self) -> bool:
        """Every block found, each through a container (no better path can come)."""
        return len(self.found) == len(self.wanted) and not self.uncontained

    def _node(self, parent: int, how: str, label: Any, obj: Any) -> int:
        self.nodes.append((parent, how, label, _TYPE_NAME(type(obj))))
        self.in_state.append(how == STATE or (parent >= 0 and self.in_state[parent]))
        self.contained.append(self._contained(parent, how))
        return len(self.nodes) - 1

    def _contained(self, parent: int, how: str) -> bool:
        if parent < 0:
            return how in CONTAINER_HOPS
        return self.contained[parent] or (how in CONTAINER_HOPS and not self.in_state[parent])

    def _visit(self, obj: Any, contained: bool) -> bool:
        """Whether to look at ``obj`` now: the first time, and once more where it is reached
        through a container after a path that was not."""
        before = self.seen.get(id(obj))
        if before is None or (contained and not before):
            self.seen[id(obj)] = contained
            return True
        return False

    def _later(self, children: Iterable[tuple[str, Any, Any]], level: int, parent: int) -> None:
        room = max(self.limit - self.looked - len(self.queue), 0)  # never queues more than the budget takes
        for n, (how, label, value) in enumerate(islice(children, room + 1)):
            if n == room:  # one more than the budget takes: left unread, and said
                self.cut = f"{self.limit:,} objects"
                return
            if not n & 4095 and n and self._late():  # a list of ten million: the time is checked within
                return
            if not issubclass(type(value), ob.SCALARS):
                self.queue.append((value, level, parent, how, label))

    def _tensor(self, t: Any, node: int) -> None:
        f = self.field
        device = f.device(t)
        if device.type != self.device[0] or (self.device[1] is not None and device.index != self.device[1]):
            return
        if f.layout(t) != self.torch.strided or f.is_nested(t):
            for part in ob.tensor_buffers(self.torch, t):
                if part is not t:
                    self._tensor(part, node)
            return
        s = f.storage(t)
        addr = s.data_ptr()
        if self.wanted.get(addr) == s.nbytes():
            held = self.found.get(addr)
            if held is None:
                self.found[addr] = node
                self.uncontained += not self.contained[node]
            elif self.contained[node] and not self.contained[held]:
                self.found[addr] = node
                self.uncontained -= 1

    def _look(self, obj: Any, level: int, parent: int, how: str, label: Any) -> None:
        kind = type(obj)
        if issubclass(kind, _SKIP) or not self._visit(obj, self._contained(parent, how)):
            return
        node = self._node(parent, how, label, obj)
        torch = self.torch
        try:
            if issubclass(kind, torch.Tensor):
                self._tensor(obj, node)
                f = self.field
                grad = f.grad(obj) if f.is_leaf(obj) or f.retains_grad(obj) else None
                if grad is not None:
                    self._tensor(grad, self._node(node, GRAD, ".grad", grad))
                made_by = f.grad_fn(obj)
                if made_by is not None:
                    self._graph(made_by, node)
            elif issubclass(kind, torch.nn.Module):
                attrs = ob.instance_dict(obj)
                if attrs is not None:  # a model nested deep is read whole, as the trunk of the namespace
                    self._later(module_children(attrs), DEPTH - 1, node)
            elif issubclass(kind, torch.optim.Optimizer):
                state = ob.optimizer_state(obj, torch.optim.Optimizer)  # its own, or a wrapper's optimizer's
                if issubclass(type(state), dict):
                    params = frozenset(id(p) for p in dict.keys(state))
                    self.optimizers.append((node, id(obj), params))
                    self._later(((STATE, ".state[…]", v) for v in dict.values(state)), 2, node)
            elif level <= 0:
                return
            elif kind is FunctionType:
                if ob.same_module(obj.__module__, self.home) or level == DEPTH:
                    self._later(function_children(obj), level - 1, node)
            elif issubclass(kind, type):
                if ob.same_module(ob.TYPE_MODULE(obj), self.home):
                    attrs = ob.CLASS_DICT(obj).items()  # a mappingproxy's own: a metaclass's code is not run
                    self._later(((CLASS_ATTR, k, v) for k, v in attrs if type(k) is str), level - 1, node)
            elif issubclass(kind, dict):  # newest entries first: what a step added is found soonest
                self._later(((KEY, k, v) for k, v in reversed(dict.items(obj))), level - 1, node)
            elif issubclass(kind, (list, deque)):  # newest items first, as a dict's
                base = list if issubclass(kind, list) else deque
                last = base.__len__(obj) - 1
                newest = base.__reversed__(obj)
                self._later(((ITEM, last - n, v) for n, v in enumerate(newest)), level - 1, node)
            elif issubclass(kind, ob.CONTAINERS):
                members = ob.builtin_iter(kind)(obj)
                ordered = issubclass(kind, tuple)
                self._later(((ITEM, n if ordered else None, v) for n, v in enumerate(members)), level - 1, node)
            elif ob.is_ndarray(kind):
                self._later(((ATTR, "base", ob.ndarray_base(obj)),), level, node)
            elif ob.package_of(kind) in ob.MACHINERY:
                return
            else:
                attrs = ob.instance_dict(obj)
                if attrs is not None:
                    self._later(((ATTR, k, v) for k, v in dict.items(attrs) if type(k) is str), level - 1, node)
                slots = ob.slots_of(kind)
                if slots:
                    self._later(((ATTR, d.__name__, v) for d, v in slot_items(obj, slots)), level - 1, node)
        except Exception:  # a lazy module not yet built, a __getattr__ that raises: nothing we can read
            return

    def _graph(self, fn: Any, node: int) -> None:
        """The tensors an autograd graph saved for its backward, read as stored (never unpacked),
        each found through one node standing for the whole graph."""
        saved = self._node(node, GRAPH, ".grad_fn → … saved tensors", fn)
        stack = [fn]
        while stack and self.looked < self.limit:
            if not self.looked & 255 and self._late():
                return
            f = stack.pop()
            if f is None or not self._visit(f, self.contained[saved]):
                continue
            self.looked += 1
            for value in ob.saved_tensors(f):
                self._tensor(value, saved)
            stack.extend(g for g, _ in f.next_functions)

    def _result(self) -> dict[str, Any]:
        paths: dict[int, int] = {}  # node -> row
        rows: list[list[Any]] = []
        routes: list[list[list[str]]] = []
        by_row: list[list[tuple[int, int]]] = []
        for addr, node in self.found.items():
            row = paths.get(node)
            if row is None:
                hops = route(self.nodes, node)
                text = printable("".join(hop[0] for hop in hops))
                row = next((n for n, r in enumerate(rows) if r[0] == text), None)
                if row is None:
                    row = len(rows)
                    rows.append([text, 0, 0])
                    routes.append(hops)
                    by_row.append([])
                paths[node] = row
            rows[row][1] += self.wanted[addr]
            rows[row][2] += 1
            by_row[row].append((addr, self.wanted[addr]))
        order = sorted(range(len(rows)), key=lambda n: -rows[n][1])[:ROWS]
        blocks = sorted(
            ([addr, size, rank] for rank, n in enumerate(order) for addr, size in by_row[n]), key=lambda b: -b[1]
        )[:BLOCKS]
        return {
            "rows": [rows[n] for n in order],
            "routes": [routes[n] for n in order],
            "blocks": blocks,
            "unreached": sum(size for addr, size in self.wanted.items() if addr not in self.found),
            "optimizers": self._other_optimizers([self._route_nodes(n) for n in paths]),
            "objects": self.looked,
            "cut": self.cut,
        }

    def _route_nodes(self, node: int) -> set[int]:
        chain = set()
        while node >= 0:
            chain.add(node)
            node = self.nodes[node][0]
        return chain

    def _other_optimizers(self, holding: list[set[int]]) -> list[str]:
        """Paths to the other optimizers over the same parameters as one on a holder's path: old
        optimizers something still holds (each once, by its first path)."""
        mine = [(ident, params) for node, ident, params in self.optimizers if any(node in r for r in holding)]
        others: dict[int, int] = {}
        for node, ident, params in self.optimizers:
            if params and all(ident != i for i, _ in mine) and any(not params.isdisjoint(p) for _, p in mine):
                others.setdefault(ident, node)
        return [printable("".join(hop[0] for hop in route(self.nodes, n))) for n in list(others.values())[:ROWS]]
