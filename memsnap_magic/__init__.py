"""memsnap_magic: per-cell GPU/CPU memory snapshots in IPython and Jupyter.

``%load_ext memsnap_magic`` registers ``%%memsnap`` and ``%memsnap``. Importing this package
imports neither torch nor matplotlib; they load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Dashboard",
    "Interval",
    "Options",
    "Prediction",
    "PredictionRefused",
    "Recorder",
    "Session",
    "SnapshotError",
    "Summary",
    "dashboard",
    "dump_snapshot",
    "load_ipython_extension",
    "load_snapshot",
    "mark",
    "predict",
    "session",
    "summarize",
    "unload_ipython_extension",
    "wait_for_writes",
]

_LAZY = {
    "Recorder": "recording.recorder",
    "mark": "recording.steps",
    "SnapshotError": "core.errors",
    "load_snapshot": "files.snapshot",
    "dump_snapshot": "files.snapshot",
    "summarize": "results.analysis",
    "Summary": "results.analysis",
    "session": "recording.process_state",
    "wait_for_writes": "files.writer",
    "Session": "results.session",
    "Interval": "results.intervals",
    "Options": "recording.options",
    "dashboard": "views.dashboard",
    "Dashboard": "views.dashboard",
    "predict": "views.prediction",  # no module is named predict: nothing shadows the function
    "Prediction": "results.prediction",
    "PredictionRefused": "results.prediction_words",
}

if TYPE_CHECKING:
    from .core.errors import SnapshotError
    from .files.snapshot import dump_snapshot, load_snapshot
    from .files.writer import wait_for_writes
    from .recording.options import Options
    from .recording.process_state import session
    from .recording.recorder import Recorder
    from .recording.steps import mark
    from .results.analysis import Summary, summarize
    from .results.intervals import Interval
    from .results.prediction import Prediction
    from .results.prediction_words import PredictionRefused
    from .results.session import Session
    from .views.dashboard import Dashboard, dashboard
    from .views.prediction import predict


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext memsnap_magic``: register the magics and offer ``mark`` in the namespace."""
    from .ipython.extension import load  # here: importing the package alone loads nothing more

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext memsnap_magic``: stop any recording we left on; drop ``mark`` if ours."""
    from .ipython.extension import unload

    unload(ipython)
