"""IPython glue: ``%%memsnap`` (record one cell) and ``%memsnap`` (configure, list, stop).

Thin on purpose: options come from ``options``, the work from ``recorder``, the cell runs through
``execute`` exactly as IPython would run it.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from . import options
from .execute import CellCode

_LINE_COMMANDS = ("show", "load", "config", "list", "reset", "off")


def _print_report(iv: Any, previous: Any) -> None:
    from .session_state import describe

    print(describe(iv, previous))


@magics_class
class MemsnapMagics(Magics):
    @line_cell_magic
    def memsnap(self, line: str = "", cell: str | None = None) -> Any:
        """Record the GPU (or CPU) memory history of one cell; dump it; clear it.

        Cell magic::

            %%memsnap [step=N] [steps=1,5,10] [out=DIR] [tag=NAME] [device=auto|cpu|cuda|cuda:K|xpu|npu]
                      [rank=R] [max_entries=N] [context=all|alloc|state|none] [stacks=python|all]
                      [clear=true|false]
            loss = model(batch).loss; loss.backward(); opt.step()

        Recording starts with a fresh history, the cell runs exactly as without the magic (same
        namespace, same exceptions and traceback), then the snapshot is written to
        ``<out>/step<N>/<tag>_rank<R>_pid<P>.pickle`` (open it at pytorch.org/memory_viz), the
        history is cleared and recording stops. The snapshot is written even when the cell
        raises or is interrupted. A one-line summary follows: peak, increase over the start,
        what the step kept, the change against the previous step, the file.

        With ``steps=1,5,10``, call ``mark(step)`` at the start of every step of a loop inside
        the cell: only the listed steps are recorded, each into its own file.

        Line magic::

            %memsnap show                   dashboard: per-step vs cumulative peaks, step detail
            %memsnap load PATH ...          bring existing dumps (files or folders, verl's layout) in
            %memsnap config key=value ...   session defaults for the options below
            %memsnap list                   table of the recorded intervals
            %memsnap reset                  forget the intervals (files stay)
            %memsnap off                    stop any recording left on by clear=false

        Options:
        """
        if cell is None:
            return self._line(line)
        __tracebackhide__ = True  # noqa: F841
        from .recorder import Recorder
        from .session_state import session

        opts = self._parse(line, session().defaults, "%%memsnap")
        if opts["steps"] is None and opts["step"] is None:
            opts["step"] = session().next_step()
        code = CellCode(self.shell, f"%%memsnap {line}".rstrip(), cell)
        recorder = Recorder(**opts, namespace=self.shell.user_ns, report=_print_report)
        if not self._start(recorder):
            return code.run()
        error: BaseException | None = None
        try:
            return code.run()
        except BaseException as e:
            error = e
            raise
        finally:
            recorder.stop(error)

    @staticmethod
    def _parse(line: str, defaults: dict[str, Any], prog: str) -> dict[str, Any]:
        try:
            return options.parse(line, defaults, prog=prog)
        except options.OptionError as e:
            raise UsageError(str(e)) from None

    @staticmethod
    def _load(rest: str, s: Any) -> None:
        import shlex

        from .files import read_intervals
        from .snapshot import SnapshotError

        try:
            paths = shlex.split(rest)
            if not paths:
                raise UsageError("%memsnap load: give one or more snapshot files or folders")
            loaded = [s.add(iv) for iv in read_intervals(paths)]
        except (SnapshotError, ValueError) as e:
            raise UsageError(f"%memsnap load: {e}") from None
        steps = sorted({iv.step for iv in loaded})
        ranks = sorted({iv.rank for iv in loaded})
        print(f"memsnap: loaded {len(loaded)} snapshot(s): steps {', '.join(map(str, steps))}; "
              f"ranks {', '.join(map(str, ranks))}")

    @staticmethod
    def _start(recorder: Any) -> bool:
        """Start recording: False (with one warning) when it fails unexpectedly, so the cell
        still runs as it would without us; a device that cannot record is a UsageError."""
        from .backends import BackendError

        try:
            recorder.start()
        except BackendError as e:
            raise UsageError(f"%%memsnap: {e}") from None
        except Exception as e:
            import warnings

            warnings.warn(f"memsnap: could not start recording ({type(e).__name__}: {e}); "
                          "the cell runs unrecorded", RuntimeWarning, stacklevel=2)
            return False
        return True

    def _line(self, line: str) -> None:
        from .backends import stop_all
        from .session_state import session

        command, _, rest = line.strip().partition(" ")
        s = session()
        if command == "show":
            from IPython.display import display

            from .widget import dashboard

            display(dashboard(s))
        elif command == "load":
            self._load(rest, s)
        elif command == "config":
            if rest.strip():
                try:
                    given = options.parse_given(rest, prog="%memsnap config")
                except options.OptionError as e:
                    raise UsageError(str(e)) from None
                s.defaults.update(given)
            shown = {k: s.defaults.get(k, o.default) for k, o in options.OPTIONS.items()}
            print("memsnap defaults: " + " ".join(f"{k}={v}" for k, v in shown.items() if v is not None))
        elif command == "list":
            print(s.table())
        elif command == "reset":
            s.reset()
            print("memsnap: intervals forgotten (files on disk are kept)")
        elif command == "off":
            stopped = stop_all()
            print("memsnap: stopped recording on " + ", ".join(stopped) if stopped
                  else "memsnap: nothing was recording")
        else:
            raise UsageError(f"%memsnap: unknown command {command!r} (allowed: "
                             f"{', '.join(_LINE_COMMANDS)}); %%memsnap records a cell")


MemsnapMagics.memsnap.__doc__ = (MemsnapMagics.memsnap.__doc__ or "") + "\n" + options.help_text()
