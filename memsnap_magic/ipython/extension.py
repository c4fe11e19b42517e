"""What ``%load_ext memsnap_magic`` sets up in a shell, and ``%unload_ext`` takes down: the
magics, ``mark`` in the namespace, our background writes paused while a cell runs, a count
of cells run, the check that refuses a ``%%memsnap`` body's syntax error before it records, and
a ``Prediction`` shown as a cell's value in the words ``%memsnap predict`` prints.

Imports neither torch, numpy nor matplotlib: they load when a cell first records or draws.
"""

from __future__ import annotations

from typing import Any

from ..core.warn import BACKGROUND, blamed_on
from ..files.writer import WRITER, wait_for_writes
from ..recording.process_state import STATE
from ..recording.steps import mark
from ..results.stacks import know_cells
from .execute import SyntaxCheck
from .magic import MemsnapMagics

PREDICTION = ("memsnap_magic.results.prediction", "Prediction")  # shown in words (``_prediction_words``)


def load(ipython: Any) -> None:
    """``%load_ext memsnap_magic``: register the magics and offer ``mark`` in the namespace."""
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
    plain = _plain_text(ipython)
    if plain is not None:  # by name: nothing of the prediction's (numpy) loads until one is shown
        plain.for_type_by_name(*PREDICTION, _prediction_words)


def _plain_text(ipython: Any) -> Any:
    """The shell's plain-text formatter (what shows a cell's value), where it has one."""
    formatter = getattr(ipython, "display_formatter", None)
    return getattr(formatter, "formatters", {}).get("text/plain")


def _prediction_words(p: Any, printer: Any, cycle: bool) -> None:
    """``memsnap_magic.predict(...)`` as a cell's last line: its words, not its fields on one line
    (``repr(p)`` stays the dataclass's)."""
    from ..views.prediction import prediction_text

    printer.text(prediction_text(p))


def _before_cell(info: Any = None) -> None:
    """Every cell starts at once: our background writes pause while it runs (``Writer.hold``),
    so it does not share the interpreter with one, nor wait for one (a ``%%memsnap`` cell and
    the ``%memsnap`` commands wait themselves). Writes that failed so far are said now."""
    WRITER.hold()
    with blamed_on(BACKGROUND):  # a failure said here is no line's of the cell about to run
        WRITER.report(ours_first=False)


def _after_cell(result: Any = None) -> None:
    """The writes go on once the cell is done."""
    WRITER.release()


def _count_cell() -> None:
    """Count every cell run, a frontend's silent ones too (they fire no ``pre_run_cell``): the
    CPU route asks whether code ran between two recorded cells."""
    STATE.cells_begun += 1


def unload(ipython: Any) -> None:
    """``%unload_ext memsnap_magic``: stop any recording we left on; drop ``mark`` if ours."""
    STATE.stop_all()
    with blamed_on(BACKGROUND):
        wait_for_writes()
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
    plain = _plain_text(ipython)
    if plain is not None:
        plain.pop(".".join(PREDICTION), None)
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("memsnap", None)
