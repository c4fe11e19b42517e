"""memsnap_magic: per-cell GPU/CPU memory snapshots in IPython and Jupyter.

``%load_ext memsnap_magic`` registers ``%%memsnap`` and ``%memsnap``. Importing this package
imports neither torch nor matplotlib; they load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Dashboard",
    "Interval",
    "Options",
    "Recorder",
    "Session",
    "SnapshotError",
    "Summary",
    "dashboard",
    "dump_snapshot",
    "load_ipython_extension",
    "load_snapshot",
    "mark",
    "session",
    "summarize",
    "unload_ipython_extension",
    "wait_for_writes",
]

_LAZY = {
    "Recorder": "recording.recorder",
    "mark": "recording.recorder",
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
}

if TYPE_CHECKING:
    from .core.errors import SnapshotError
    from .files.snapshot import dump_snapshot, load_snapshot
    from .files.writer import wait_for_writes
    from .recording.options import Options
    from .recording.process_state import session
    from .recording.recorder import Recorder, mark
    from .results.analysis import Summary, summarize
    from .results.intervals import Interval
    from .results.session import Session
    from .views.dashboard import Dashboard, dashboard


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext memsnap_magic``: register the magics and offer ``mark`` in the namespace."""
    from .ipython.execute import SyntaxCheck
    from .ipython.magic import MemsnapMagics
    from .recording.recorder import mark
    from .results.stacks import know_cells

    ipython.register_magics(MemsnapMagics)
    ipython.user_ns.setdefault("mark", mark)
    know_cells(getattr(getattr(ipython, "compile", None), "_filename_map", None))
    if _before_cell not in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.register("pre_run_cell", _before_cell)
    if _after_cell not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", _after_cell)
    if _count_cell not in ipython.events.callbacks["pre_execute"]:
        ipython.events.register("pre_execute", _count_cell)
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and not any(isinstance(t, SyntaxCheck) for t in cleanup):
        cleanup.append(SyntaxCheck(ipython))


def _before_cell(info: Any = None) -> None:
    """Every cell starts once our background writes are done: it never races one for a file,
    nor shares the interpreter with one."""
    from .core.warn import BACKGROUND, blamed_on
    from .files.writer import wait_for_writes

    with blamed_on(BACKGROUND):  # a failure said here is no line's of the cell about to run
        wait_for_writes()


def _after_cell(result: Any = None) -> None:
    """A recorded cell's file starts being written once the cell is done (``Writer.hold``)."""
    from .files.writer import WRITER

    WRITER.release()


def _count_cell() -> None:
    """Count every cell run, a frontend's silent ones too (they fire no ``pre_run_cell``): the
    CPU route asks whether code ran between two recorded cells."""
    from .recording.process_state import STATE

    STATE.cells_begun += 1


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext memsnap_magic``: stop any recording we left on; drop ``mark`` if ours."""
    from .ipython.execute import SyntaxCheck
    from .recording.process_state import STATE
    from .recording.recorder import mark

    STATE.stop_all()
    _before_cell()
    if _before_cell in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", _before_cell)
    if _after_cell in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", _after_cell)
    if _count_cell in ipython.events.callbacks["pre_execute"]:
        ipython.events.unregister("pre_execute", _count_cell)
    cleanup = getattr(ipython, "input_transformers_cleanup", [])
    cleanup[:] = [t for t in cleanup if not isinstance(t, SyntaxCheck)]
    if ipython.user_ns.get("mark") is mark:
        del ipython.user_ns["mark"]
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("memsnap", None)
