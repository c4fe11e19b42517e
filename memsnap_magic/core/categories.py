"""The names of what a block is: the ``category`` PyTorch's memory_viz colours trace entries by.

``results.labels`` gives blocks these names, ``recording.roles`` sees which storages hold the
first three, and every figure and text lists them in ``ORDER``.
"""

from __future__ import annotations

from typing import Any

from .clean import clean

PARAMETER, GRADIENT, OPTIMIZER_STATE = "parameter", "gradient", "optimizer_state"
ACTIVATION, OTHER, UNKNOWN = "activation", "other", "unknown"
ORDER = (PARAMETER, GRADIENT, OPTIMIZER_STATE, ACTIVATION, OTHER, UNKNOWN)  # how they are listed
MODEL_STATE = ORDER[:3]  # what training keeps by design: never a leak

_NAMES: dict[str, str] = {}  # the few categories files hold, each cleaned once


def category_name(category: Any) -> str:
    """A file's category as a name to show: cleaned text, else ``unknown``."""
    if type(category) is not str or not category:
        return UNKNOWN
    name = _NAMES.get(category)
    if name is None:
        name = clean(category, 64)
        if len(_NAMES) < 64 and len(category) <= 64:  # a hostile file's million names are not kept
            _NAMES[category] = name
    return name
