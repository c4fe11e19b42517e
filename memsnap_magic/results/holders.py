"""Who keeps a leak alive, read from the paths the recorder found (``Interval.kept_by`` and its
``holders``): the container or object a leaking run's memory hangs from, how it holds it, and
what of it no path reached. Numbers and routes only; ``views.headline`` words them, ``advice``
matches them to what to do.

A path's **holder** is where it first enters a container of the user's: ``history[5].grad_fn →
… saved tensors`` is held by ``history`` (a list, each item's autograd graph), ``cache['step5']``
by ``cache``, ``model.decoder.saved[3]`` by ``model.decoder.saved``; a path through no container
is its own holder up to an autograd graph or an optimizer's state (``loss.grad_fn → …``:
``loss``; ``opt.state[…]['exp_avg']``: ``opt``). The holder of a leaking run is the one holding
the most over its steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

# how a hop was taken (``recording.hops`` names them, ``recording.retention`` writes them; strings, so files carry them)
ITEM, KEY, STATE, GRAPH, HOOK, MODULE_ATTR = "item", "key", "state", "graph", "hook", "module_attr"
_CONTAINER = (ITEM, KEY)

Route = Sequence[Sequence[str]]  # per hop: [text, type name, how]


@dataclass(frozen=True)
class Holder:
    """What keeps a leaking run's memory: ``name`` (a Python expression from a namespace name;
    None where no path reached it) of type ``kind``, holding ``per_step`` bytes a step."""

    name: str | None
    kind: str
    per_step: int
    steps: int  # leaking steps it held memory in
    via: str  # how its memory hangs from it: item, key (a container's), or "" (itself)
    graph: bool  # most of it is tensors an autograd graph saved for a backward
    state: bool  # it is an optimizer's state
    hooks: bool  # through a module's hook or an attribute of a module
    entries: int  # distinct items or keys holding it over the steps walked (one a step: it grows)
    unreached: int  # bytes a step kept that no path reached (median over the steps walked)
    cut: str | None  # why a walk stopped short (the bound it met), if one did
    optimizers: tuple[str, ...]  # other optimizers over the same parameters (old ones still held)


def split(route: Route) -> int:
    """Where a route's holder ends: before its first container item, else before an autograd
    graph or an optimizer's state, else the whole route."""
    hows = [hop[2] for hop in route]
    first = next((n for n, how in enumerate(hows) if how in _CONTAINER and n > 0), None)
    if first is None:
        first = next((n for n, how in enumerate(hows) if how in (GRAPH, STATE) and n > 0), len(route))
    return first


def holder(intervals: Sequence[Any], steps: Sequence[int]) -> Holder | None:
    """The holder of a leaking run: of ``intervals``, those of ``steps`` that were walked.
    None where none was (no walk: a file from elsewhere, a step under the floor)."""
    walked = [iv for iv in intervals if iv.step in steps and getattr(iv, "holders", None)]
    if not walked:
        return None
    held: dict[str, list[int]] = {}  # holder -> bytes per walked step
    graph: dict[str, int] = {}  # holder -> bytes through autograd graphs, all steps
    routes: dict[str, list[Route]] = {}
    for n, iv in enumerate(walked):
        for (_, nbytes, _), route in zip(iv.holders["rows"], iv.holders["routes"]):
            name = "".join(hop[0] for hop in route[: split(route)])
            held.setdefault(name, [0] * len(walked))[n] += nbytes
            graph[name] = graph.get(name, 0) + nbytes * any(hop[2] == GRAPH for hop in route)
            routes.setdefault(name, []).append(route)
    unreached = int(median(iv.holders["unreached"] for iv in walked))
    cut = next((iv.holders["cut"] for iv in walked if iv.holders["cut"]), None)
    optimizers = tuple(dict.fromkeys(p for iv in walked for p in iv.holders["optimizers"]))
    if not held:
        return Holder(None, "", 0, 0, "", False, False, False, 0, unreached, cut, optimizers)
    name = max(held, key=lambda k: (sum(held[k]), -len(k)))
    mine = routes[name]
    route = mine[-1]
    at = split(route)
    after = [hop[2] for hop in route[at:]]
    hows = {hop[2] for r in mine for hop in r}
    return Holder(
        name=name,
        kind=route[at - 1][1],
        per_step=int(median(held[name])),
        steps=sum(1 for b in held[name] if b),
        via=after[0] if after and after[0] in _CONTAINER else "",
        graph=2 * graph[name] >= sum(held[name]),
        state=STATE in hows,
        hooks=bool(hows & {HOOK, MODULE_ATTR}),
        entries=len({r[split(r)][0] for r in mine if split(r) < len(r) and r[split(r)][2] in _CONTAINER}),
        unreached=unreached,
        cut=cut,
        optimizers=optimizers,
    )


def held_by(block: dict[str, Any], iv: Any, earlier: Sequence[Any] = ()) -> str | None:
    """The path that held a block of the step's table: from the walk of the step that made it
    (this one, or an earlier one of ``earlier`` that ended holding a block of its address and
    size); None where no walk said."""
    addr, size = block.get("addr"), block.get("size")
    for step in (iv, *reversed(earlier)):
        found = getattr(step, "holders", None)
        if step is not iv and step.born.get(addr) != size:
            continue
        if found:
            for a, s, row in found["blocks"]:
                if a == addr and s == size:
                    path: str = found["rows"][row][0]
                    return path
        if step is not iv:
            return None
    return None


def container_of(path: str) -> str:
    """The holder a path names where only its text is kept (``schedulers[0].optimizer``:
    ``schedulers``): up to its first item, else all of it."""
    at = path.find("[", 1)
    return path[:at] if at > 0 else path
