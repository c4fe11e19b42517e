"""IPython glue: ``%%memsnap`` (record one cell) and ``%memsnap`` (configure, list, load, stop).

Thin on purpose: options come from ``recording.options``, the work from ``recording.recorder``, the
cell runs through ``execute`` exactly as IPython would run it, words come from ``views.report``. A new ``%memsnap``
subcommand is one method and one row of ``COMMANDS``; help and errors follow from the table.
"""

from __future__ import annotations

import glob
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import display

from ..core.clean import one_line
from ..core.errors import SnapshotError
from ..core.warn import BACKGROUND, blamed_on, warn
from ..files.layout import LAYOUT
from ..files.writer import WRITER, wait_for_writes
from ..recording import options
from ..recording.backends import BackendError
from ..recording.option_values import Steps, Tag
from ..recording.process_state import STATE
from ..recording.recorder import Recorder
from ..recording.steps import mark
from ..results.intervals import holds
from ..results.scan import default_jobs, read_run
from ..views.headline import findings_text
from ..views.report import describe, interval_table, loaded_line
from .execute import CellCode, drop_own_frame


def _print_report(iv: Any, previous: Any) -> None:
    session = STATE.session
    first, later = None, iv  # the first step of the clear=false history this snapshot holds
    while previous is not None and holds(later, previous):
        first, later, previous = previous, previous, session.previous(previous)
    replaced = session.last_replaced if session.last is iv else None
    print(describe(iv, replaced, chain_from=first.step if first is not None else None))


def _expanded_line(shell: Any, line: str) -> str:
    """The line as IPython would have expanded it (``$name``, ``{expr}``), only where it holds
    ``$`` or ``{``: IPython's own expansion, which the magic turns off, costs ~1 ms per 1,000
    characters of any line (12 s for a steps= list of 10,000 steps). It reads the same names:
    the user's namespace and the locals of the frame IPython's run_*_magic was called from."""
    if "$" not in line and "{" not in line:
        return line
    frame: Any = sys._getframe()
    depth = 0  # frames from this one up to IPython's run_*_magic
    while frame is not None and frame.f_code.co_name not in ("run_cell_magic", "run_line_magic"):
        frame, depth = frame.f_back, depth + 1
    if frame is None:  # called by other means: the namespace alone
        return str(shell.var_expand(line, depth=10_000))
    # IPython reads the frame two above run_cell_magic, one above run_line_magic
    above = 2 if frame.f_code.co_name == "run_cell_magic" else 1
    del frame
    return str(shell.var_expand(line, depth=depth + above))


def _parse(parse: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return parse(*args, **kwargs)
    except options.OptionError as e:
        raise UsageError(str(e)) from None


@magics_class
class MemsnapMagics(Magics):
    @line_cell_magic
    @no_var_expand
    def memsnap(self, line: str = "", cell: str | None = None) -> Any:
        """Record the GPU (or CPU) memory history of one cell; dump it; clear it.

        Cell magic::

            {usage}
            loss = model(batch).loss; loss.backward(); opt.step()

        Recording starts with a fresh history, the cell runs exactly as without the magic (same
        namespace, same exceptions and traceback), then the snapshot is written to
        ``{layout}`` (open it at pytorch.org/memory_viz), the
        history is cleared and recording stops. The snapshot is written even when the cell
        raises or is interrupted, in the background between cells (our readers wait for it;
        wait=true writes before the cell returns), with a small summary beside it that makes reading the
        folder again fast. A one-line summary follows: peak, increase over the start,
        what the step kept, entries, the file (and what moved the start since the last step,
        when something did; comparisons between steps are in ``%memsnap list`` and the dashboard).

        With ``steps=1,5,10``, call ``mark(step)`` at the start of every step of a loop inside
        the cell: only the listed steps are recorded, each into its own file.

        Line magic::

            {commands}

        Options:
        """
        line = _expanded_line(self.shell, line)
        if cell is None:
            return self._line(line)
        __tracebackhide__ = True
        shell: Any = self.shell  # the shell that registered us
        opts = _parse(options.parse, line, STATE.session.defaults, "%%memsnap")
        code = CellCode(shell, f"%%memsnap {line}".rstrip(), cell)
        if opts.steps is not None:  # offered again after a %reset emptied the namespace
            shell.user_ns.setdefault("mark", mark)
        recorder = Recorder(options=opts, namespace=shell.user_ns, report=_print_report)
        recorder.where = (code.filename, 1)  # our warnings point at the %%memsnap line
        with blamed_on(BACKGROUND):  # the step before is on disk first: files in order, memory bounded
            wait_for_writes()
        WRITER.hold()  # its file is written once the cell is done (released after it, or by a wait)
        try:
            started = self._start(recorder)
        except KeyboardInterrupt as e:  # pressed while we started (importing torch): the cell never ran
            BaseException.with_traceback(e, None)  # and nothing of ours is left recording
            raise
        if not started:
            return code.run()
        error: BaseException | None = None
        try:
            value = code.run()
            if value is not None:  # IPython keeps it in Out after us: the start of what follows
                recorder.reach_also(value)
            return value
        except BaseException as e:
            error = e
            drop_own_frame(e)
            raise
        finally:
            recorder.stop(error)

    @staticmethod
    def _start(recorder: Any) -> bool:
        """Start recording: False (with one warning) when it fails unexpectedly, so the cell
        still runs as it would without us; a device that cannot record is a UsageError."""
        try:
            recorder.start()
        except (BackendError, options.OptionError) as e:
            raise UsageError(f"%%memsnap: {e}") from None
        except Exception as e:
            warn(
                f"memsnap: could not start recording ({type(e).__name__}: {e}); the cell runs unrecorded",
                where=recorder.where,
            )
            return False
        return True

    def _line(self, line: str) -> None:
        wait_for_writes()  # what the commands read (files, the session's paths) is on disk first
        name, _, rest = line.strip().partition(" ")
        if name in ("", "help"):
            print(_commands_help())
            return
        command = COMMANDS.get(name)
        if command is None:
            raise UsageError(
                f"%memsnap: unknown command {name!r} (allowed: {', '.join(COMMANDS)}, help); %%memsnap records a cell"
            )
        if rest.strip() and " " not in command.usage:
            raise UsageError(f"%memsnap {name} takes nothing after it, not {rest.strip()!r}")
        command.run(self, rest)

    def _show(self, rest: str) -> None:
        from ..views.dashboard import dashboard  # here: widgets and matplotlib load when first shown

        view = None
        try:
            words = shlex.split(rest)
        except ValueError as e:  # an unclosed quote
            raise UsageError(f"%memsnap show: {e}; give view=NAME") from None
        for word in words:
            key, sep, value = word.partition("=")
            if key != "view" or not sep or view is not None:
                why = "view= given twice" if key == "view" and view is not None else f"not {word!r}"
                raise UsageError(f"%memsnap show: {why}; give view=NAME (interval, cumulative, both, categories, fit)")
            view = value
        try:
            shown = dashboard(STATE.session, view)
        except ValueError as e:
            raise UsageError(f"%memsnap show: {str(e).removeprefix('dashboard: ')}") from None
        display(shown)

    def _load(self, rest: str) -> None:
        try:
            words = shlex.split(rest)
            run = None
            named = [w for w in words if w.startswith("as=")]
            if len(named) > 1:  # as option lines refuse a key given twice
                raise UsageError(f"%memsnap load: as= given {len(named)} times; name the run once")
            if named:
                try:
                    run = Tag("a folder name").parse(named[-1][3:])
                except ValueError as e:
                    raise UsageError(f"%memsnap load: as={named[-1][3:]!r}: a run's name has {e}") from None
            paths = [p for w in words if not w.startswith("as=") for p in _expanded(os.path.expanduser(w))]
            if not paths:
                raise UsageError("%memsnap load: give one or more snapshot files or folders (and as=NAME for the run)")
            # every file first: a bad one leaves the session as it was; a bar while cold files are read
            loaded = read_run(paths, run, progress=True, jobs=default_jobs())
        except KeyboardInterrupt:  # one line, as for a bad file: the cell fails, a run-all stops
            raise UsageError("%memsnap load: interrupted; nothing was loaded, the session is as it was") from None
        except (SnapshotError, ValueError) as e:
            raise UsageError(f"%memsnap load: {one_line(str(e))}") from None
        except OSError as e:  # a folder on the way that cannot be entered, a name too long
            raise UsageError(f"%memsnap load: {one_line(f'{e.filename or rest}: {e.strerror or e}')}") from None
        # still the same files after a %cd
        loaded = [
            replace(iv, path=Path.cwd() / iv.path) if iv.path and not iv.path.is_absolute() else iv for iv in loaded
        ]
        these = {iv.origin for iv in loaded}
        olds = [old for old in STATE.session.add_all(loaded) if old is not None]
        skipped = [old for old in olds if old.origin in these]  # a step written twice in the files
        print(loaded_line(loaded, len(olds) - len(skipped), skipped))

    def _predict(self, rest: str) -> None:
        # here: numpy loads with the first prediction, not at %load_ext
        from ..views.prediction import predict, prediction_text

        try:
            asked, chosen = _question(rest)
            p = predict(at=asked, **chosen)
        except (SnapshotError, ValueError) as e:  # PredictionRefused too: its one line
            raise UsageError(f"%memsnap predict: {one_line(str(e).removeprefix('predict: '))}") from None
        print(prediction_text(p))

    def _config(self, rest: str) -> None:
        defaults = STATE.session.defaults
        if rest.strip():
            new = _parse(options.parse_config, rest, defaults)
            defaults.clear()
            defaults.update(new)
        shown = {key: defaults.get(key, opt.default) for key, opt in options.OPTIONS.items()}
        print("memsnap defaults: " + " ".join(f"{k}={options.as_text(v)}" for k, v in shown.items() if v is not None))

    def _list(self, rest: str) -> None:
        intervals = STATE.session.intervals
        print(interval_table(intervals))
        if intervals:  # the dashboard's findings, in the same words
            print("\n" + findings_text(intervals))

    def _reset(self, rest: str) -> None:
        stopped = STATE.stop_all()  # a clear=false history left on would carry forgotten steps on
        STATE.session.reset()
        step = STATE.session.next_step()
        print(
            f"memsnap: intervals forgotten (files on disk are kept; the next step is {step})"
            + (f"; stopped recording on {', '.join(stopped)}" if stopped else "")
        )

    def _off(self, rest: str) -> None:
        stopped = STATE.stop_all()
        print("memsnap: stopped recording on " + ", ".join(stopped) if stopped else "memsnap: nothing was recording")


@dataclass(frozen=True)
class Command:
    run: Callable[[MemsnapMagics, str], None]
    usage: str
    help: str


COMMANDS: dict[str, Command] = {
    "show": Command(
        MemsnapMagics._show, "show [view=NAME]", "dashboard: per-step vs cumulative peaks, step detail (view=fit)"
    ),
    "load": Command(
        MemsnapMagics._load, "load PATH ... [as=NAME]", "add dumps (files, folders; verl's layout) as a run to compare"
    ),
    "config": Command(
        MemsnapMagics._config, "config key=value ...", "session defaults for the options below (key= unsets one)"
    ),
    "list": Command(MemsnapMagics._list, "list", "table of the recorded intervals"),
    "predict": Command(
        MemsnapMagics._predict,
        "predict NAME=SIZE ...",
        "will it fit? the peak at another size, from runs recorded with scale= (capacity=, run=, steps=)",
    ),
    "reset": Command(
        MemsnapMagics._reset, "reset", "forget the intervals and stop recording (files stay; steps go on counting)"
    ),
    "off": Command(MemsnapMagics._off, "off", "stop any recording left on by clear=false"),
}


def _commands_help(cell: bool = True) -> str:
    """The line commands, one per line (``%memsnap`` alone or ``%memsnap help`` prints them)."""
    lines = [f"%memsnap {c.usage:<24}{c.help}" for c in COMMANDS.values()]
    if cell:
        lines.append(f"{'%%memsnap [key=value ...]':<33}record a cell (%%memsnap? lists the options)")
    return "\n".join(lines)


def _docstring() -> str:
    indent = " " * 12
    commands = _commands_help(cell=False).replace("\n", "\n" + indent)
    usage = options.usage().replace("\n", "\n" + indent)
    doc = MemsnapMagics.memsnap.__doc__ or ""
    for key, text in (("{usage}", usage), ("{commands}", commands), ("{layout}", LAYOUT)):
        doc = doc.replace(key, text)
    return doc + "\n" + options.help_text(indent=8)


MemsnapMagics.memsnap.__doc__ = _docstring()


_PREDICT = "%memsnap predict NAME=SIZE [capacity=80GiB|auto] [run=A,B,...] [steps=1,5]"


def _question(rest: str) -> tuple[dict[str, float], dict[str, Any]]:
    """``%memsnap predict``'s words: the size asked for (``batch=64``) and predict's keywords."""
    from ..results.prediction import parse_size

    asked: dict[str, float] = {}
    chosen: dict[str, Any] = {}
    for token in shlex.split(rest):
        key, _, value = token.partition("=")
        if key in ("capacity", "run", "steps"):
            if key in chosen or not value:
                raise UsageError(f"%memsnap predict: {key}= {'given twice' if key in chosen else 'empty'}; {_PREDICT}")
            if key == "steps":
                try:
                    chosen[key] = Steps().parse(value)
                except ValueError as e:
                    raise UsageError(f"%memsnap predict: steps={value!r}: {e} (comma-separated integers)") from None
            else:
                chosen[key] = value.split(",") if key == "run" else value
        elif asked:
            raise UsageError(f"%memsnap predict: one size at a time, not {next(iter(asked))}= and {token!r}")
        else:
            asked = parse_size(token)
    if not asked:
        raise UsageError(f"%memsnap predict: give the size to predict at: {_PREDICT}")
    return asked, chosen


def _expanded(word: str) -> list[str]:
    """A path as a shell would pass it: ``memsnap/step*`` is every step folder (a name that
    exists as written, or a pattern nothing matches, stays as it is)."""
    if any(c in word for c in "*?[") and not os.path.lexists(word):
        found = glob.glob(word)
        if found:
            return sorted(found)
    return [word]
