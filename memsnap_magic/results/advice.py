"""What to do about a leak, where what holds it matches a pattern we know: one rule per pattern,
the first that matches gives the headline's advice; none matches, no advice.

The patterns, in the order they are tried:
- **hook**: the memory hangs from a module's hook or an attribute of a module (a forward hook
  storing outputs on the module): store detached copies and clear them, or remove the hook;
- **optimizer**: it is optimizer state, and other optimizers over the same parameters are still
  held (an optimizer made anew each step while a scheduler or a list keeps the old ones): make
  the optimizer once;
- **cache**: a dict gains an entry each step, the entries' own tensors most of what it holds (a
  cache of activations): evict old entries or bound it;
- **graph**: most of it is tensors an autograd graph saved, held through a tensor kept in a
  container or a name (losses appended to a list): keep ``.item()`` or ``.detach()`` instead.

Gradients accumulated without ``zero_grad()`` grow in place and keep nothing new: no leak, so no
advice. A list of detached tensors growing, or anything else, matches none: no advice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .holders import KEY, Holder, container_of


@dataclass(frozen=True)
class Advice:
    pattern: str  # hook, optimizer, cache, graph
    text: str


def _hook(h: Holder) -> str | None:
    if not h.hooks:
        return None
    return (
        f"a module's hook or attribute keeps its outputs (`{h.name}`): store `.detach()`ed copies and "
        "clear them once read, or remove the hook (`handle.remove()`) when done"
    )


def _optimizer(h: Holder) -> str | None:
    if not (h.state and h.optimizers):
        return None
    holders = list(dict.fromkeys(container_of(p) for p in h.optimizers))
    old = ", ".join(f"`{p}`" for p in holders[:2]) + (" …" if len(holders) > 2 else "")
    return (
        f"an optimizer is made anew each step while {old} still hold{'s' * (len(holders) == 1)} the old "
        "ones and their state: make the optimizer (and its scheduler) once, before the loop"
    )


def _cache(h: Holder) -> str | None:
    if h.via != KEY or "dict" not in h.kind.lower() or h.graph or h.entries < max(h.steps, 2):
        return None
    return f"`{h.name}` gains an entry each step: evict old entries (or bound its size), or clear it between steps"


def _graph(h: Holder) -> str | None:
    if not h.graph:
        return None
    where = f"in `{h.name}`" if h.via else f"as `{h.name}`"
    return (
        f"keep `loss.item()` (a number) or `.detach()` {where}, not the tensor itself: each one keeps "
        "its step's autograd graph alive"
    )


RULES: tuple[tuple[str, Callable[[Holder], str | None]], ...] = (
    ("hook", _hook),
    ("optimizer", _optimizer),
    ("cache", _cache),
    ("graph", _graph),
)


def advice(h: Holder | None) -> Advice | None:
    """The advice of the first rule that matches what holds a leak; None when none does."""
    if h is None or h.name is None:
        return None
    for pattern, rule in RULES:
        text = rule(h)
        if text is not None:
            return Advice(pattern, text)
    return None
