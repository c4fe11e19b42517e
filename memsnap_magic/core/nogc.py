"""``no_gc``: the cyclic garbage collector held off while many acyclic containers are built.

Unpickling a snapshot and reading a profiler session's events both make millions of small
dicts and lists without cycles; each collection meanwhile walks them all and frees nothing
(it was most of ``pickle.load``'s time, and 3x a 40k-event cell's reading). Imports nothing.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Collections off inside, back on after if they were on before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
