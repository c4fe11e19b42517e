"""Where a block finds the user's objects: the namespace it was given (a notebook's, a module's),
the locals of the function that made it while that function runs, and the models and
optimizers named or given. The CPU route walks these for the tensors live at a step's start and
end; the dump labels the models' and optimizers' tensors.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

from . import options as opts
from .roles import Watch, training_objects

if TYPE_CHECKING:
    from types import CodeType, FrameType

    from .backends import Backend
    from .backends.base import Names

Quietly = Callable[..., Any]  # Recorder._quietly: our failure becomes a warning, never the cell's


class Reach:
    """``namespace``: where names are looked up; ``code``: the function whose locals count too
    (found again on the stack at each look: a frame kept would keep its locals alive after it
    returns), or None; ``given``: ``model=``/``optimizer=`` objects, held weakly (each call
    gives the object, or None once it is freed)."""

    def __init__(
        self,
        namespace: dict[str, Any],
        code: CodeType | None,
        given: dict[str, Callable[[], Any]],
        options: opts.Options,
    ) -> None:
        self.namespace, self.code, self.given, self.options = namespace, code, given, options

    def names(self) -> dict[str, Any]:
        """The namespace, with the locals of the function that made this recorder while it runs
        (a script's ``main()``), read afresh each time."""
        code = self.code
        if code is None:
            return self.namespace
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        if frame is None:  # it has returned (a recorder made in a helper): its locals are gone
            return self.namespace
        local = frame.f_locals
        names = {**self.namespace, **local}
        if type(local) is dict:
            # Python 3.11-3.12 keep this copy in the frame until the next read, and with it every
            # local: a del after the block would free nothing. Emptied, it holds none (any read
            # fills it again first); 3.13's f_locals is a view of the frame and keeps nothing
            local.clear()
        return names

    def tensors(self) -> Names:
        """Where the CPU route finds the tensors live at the start and end: the namespace itself,
        else a function giving the names and the objects given as they are when called (a copy
        kept would keep every object in it alive)."""
        return self.namespace if self.code is None and not self.given else self._now

    def _now(self) -> dict[str, Any]:
        given = {f"<{key}=>": ref() for key, ref in self.given.items()}
        return {**self.names(), **{key: value for key, value in given.items() if value is not None}}

    def training_objects(self, quietly: Quietly) -> tuple[list[Any], list[Any]]:
        """The models and optimizers whose tensors the dump labels: named, given, else found."""
        o, found = self.options, {}
        for key in ("model", "optimizer"):
            name = getattr(o, key)
            if key in self.given:
                value = self.given[key]()
                found[key] = [value] if value is not None else []
            elif name is not None:
                found[key] = [self._named(key, name)]
        import torch

        kinds = {
            "model": (torch.nn.Module, "torch.nn.Module"),
            "optimizer": (torch.optim.Optimizer, "torch.optim.Optimizer"),
        }
        for key, values in found.items():
            kind, public = kinds[key]
            for value in values:  # none: a given object since freed
                if not issubclass(type(value), kind):  # by type(): a proxy's __class__ is not run
                    named = "the object given" if key in self.given else getattr(o, key)
                    raise opts.OptionError(f"{key}={named}: that is a {type(value).__name__}, not a {public}")
        if len(found) == 2:
            return found["model"], found["optimizer"]
        modules, optimizers = quietly(training_objects, self.names()) or ([], [])
        return found.get("model", modules), found.get("optimizer", optimizers)

    def _named(self, key: str, name: str) -> Any:
        """``model=net.encoder``: the object that dotted name reaches in the namespace."""
        head, *rest = name.split(".")
        names = self.names()
        if head not in names:
            raise opts.OptionError(f"{key}={name}: no {head!r} in the namespace")
        value = names[head]
        for n, attr in enumerate(rest, start=1):
            if not hasattr(value, attr):
                raise opts.OptionError(f"{key}={name}: {'.'.join([head, *rest[: n - 1]])} has no {attr!r}")
            value = getattr(value, attr)
        return value

    def new_watch(
        self, backend: Backend, quietly: Quietly, training: tuple[list[Any], list[Any]] | None = None
    ) -> Watch | None:
        """A watch over the models and optimizers ``training`` (found again when not given); none
        for a block given an empty namespace and no model= or optimizer=: it asked to label nothing."""
        named = {key for key in ("model", "optimizer") if key in self.given or getattr(self.options, key) is not None}
        if not named and self.code is None and not self.namespace:
            return None
        if training is None:
            training = self.training_objects(quietly)
        return Watch(
            backend.device,
            *training,
            named_model="model" in named,
            named_optimizer="optimizer" in named,
            rediscover=None if len(named) == 2 else lambda: training_objects(self.names()),
        )
