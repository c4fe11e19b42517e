"""The one table of ``%%memsnap`` options: defaults, conversion, help text, usage line.

``Options`` is that table: each field's default, how its value is read, what is allowed and its
help. The magic reads ``key=value`` tokens (``%%memsnap step=5 out=runs``; IPython's argparse-based
``magic_arguments`` cannot parse that); ``Recorder(step=5, out=path)`` hands Python values, each
checked directly. Both raise ``OptionError`` (a ``ValueError``); the magic turns it into IPython's
``UsageError``. A new option is one field here, plus the code that uses it.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..core import defaults
from ..core.errors import excerpt
from ..files.layout import LAYOUT
from .option_values import Boolean, Choice, Choices, Device, Folder, Integer, Name, Scale, Steps, Tag, Value


class OptionError(ValueError):
    """A ``%%memsnap`` option the user wrote is unknown or has a bad value."""


def _option(default: Any, kind: Value, help: str, example: str) -> Any:
    return field(default=default, metadata={"kind": kind, "help": help, "example": example})


@dataclass(frozen=True)
class Options:
    """Every ``%%memsnap`` option, typed; the defaults below are the only ones."""

    step: int | None = _option(
        None,
        Integer(0),
        "Label of this interval; default: one more than the largest step of its run so far. "
        "Re-running a step replaces its interval and file (within its run).",
        "step=5",
    )
    steps: tuple[int, ...] | None = _option(
        None,
        Steps(),
        "Dump only these steps of a loop inside the cell; call mark(step) "
        "at each step's start. Each file holds only its own step (so not with "
        "clear=false).",
        "steps=1,5,10",
    )
    out: str = _option(
        "memsnap",
        Folder(),
        f"Folder for snapshots: {LAYOUT} (verl's layout). Relative to the current directory "
        "when the cell starts (a cell that changes directory still writes there); ~ is your home.",
        "out=runs/memory",
    )
    tag: str = _option(defaults.TAG, Tag(), "File name prefix.", "tag=forward")
    run: str | None = _option(
        None,
        Tag("a folder name"),
        "Record into a named run (a before/after comparison): its files go to <out>/<run>/step<N>/, "
        "its steps replace only its own, and the dashboard compares runs step by step.",
        "run=fixed",
    )
    scale: Mapping[str, int] | None = _option(
        None,
        Scale(),
        "The sizes this step runs at (batch, sequence length): kept in its file, so memsnap_magic.predict "
        "can fit the step recorded at three or more sizes of one and say its peak at another.",
        "scale=batch:8",
    )
    device: str = _option(
        "auto", Device(), "What to record. auto: the current accelerator, else the CPU.", "device=cuda:1"
    )
    rank: int | None = _option(
        None,
        Integer(0, "R"),
        "Rank in file names; default: $RANK, else torch.distributed's rank, else the ipyparallel engine id, else 0.",
        "rank=3",
    )
    max_entries: int = _option(
        100_000, Integer(1), "Trace ring size; older entries of a longer interval are dropped.", "max_entries=500000"
    )
    context: str = _option(
        defaults.CONTEXT,
        Choice("all", "alloc", "state", "none"),
        "Which events carry a stack. On CPU: all/alloc run the Python tracer (allocations of 1 KiB "
        "or more get stacks), none/state do not (cheaper on loops of tiny tensors).",
        "context=alloc",
    )
    stacks: str = _option(
        "python",
        Choice("python", "all"),
        "python: Python frames only. all adds C++ frames (dumps ~100x slower).",
        "stacks=python",
    )
    model: str | None = _option(
        None,
        Name(),
        "The model whose parameters and gradients the dump labels (memory_viz colours them); "
        "default: every nn.Module bound to a name in the namespace.",
        "model=net",
    )
    optimizer: str | None = _option(
        None,
        Name(),
        "The optimizer whose state the dump labels; default: every Optimizer bound to a name.",
        "optimizer=opt",
    )
    compile_context: bool = _option(
        False,
        Boolean(),
        "Accelerators, where this torch has it (2.6+): trace entries also say which torch.compile "
        "graph allocated them.",
        "compile_context=true",
    )
    skip_actions: tuple[str, ...] | None = _option(
        None,
        Choices("segment_map", "segment_unmap", "snapshot", "oom"),
        "Accelerators, where this torch has it: leave these actions out of the trace (expandable "
        "segments map and unmap often); allocations and frees always stay, the figures need them.",
        "skip_actions=segment_map,segment_unmap",
    )
    wait: bool = _option(
        False,
        Boolean(),
        "true: the snapshot file is written before the cell (or Recorder block) returns. Default: "
        "written in the background between cells; the next %%memsnap cell, %memsnap commands, "
        "the loaders and exit wait for it (your own code that opens it: wait_for_writes() first).",
        "wait=true",
    )
    clear: bool = _option(
        True,
        Boolean(),
        "false keeps history and recording on after the cell, so the next snapshot "
        "also holds this one's events: the cumulative behaviour.",
        "clear=false",
    )


@dataclass(frozen=True)
class Option:
    """One row of the table, as help text and errors read it."""

    kind: Value
    default: Any
    help: str
    example: str

    @property
    def allowed(self) -> str:
        return self.kind.allowed


OPTIONS: dict[str, Option] = {
    f.name: Option(f.metadata["kind"], f.default, f.metadata["help"], f.metadata["example"]) for f in fields(Options)
}
DEFAULTS = Options()


def parse(line: str, defaults: Mapping[str, Any] | None = None, prog: str = "%%memsnap") -> Options:
    """The options of a ``%%memsnap`` line: its tokens over ``defaults`` over the table's defaults."""
    given = parse_given(line, prog)
    return _checked(replace(DEFAULTS, **{**(defaults or {}), **given}), prog)


def from_keywords(prog: str = "Recorder", defaults: Mapping[str, Any] | None = None, **values: Any) -> Options:
    """Options from Python values (``Recorder(step=3, out=path)``) over ``defaults`` (the
    session's, from ``%memsnap config``) over the table's; None means the default."""
    given: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key not in OPTIONS:
            raise OptionError(f"{prog}: unknown option {key!r} (keys: {', '.join(OPTIONS)})")
        given[key] = _convert(key, value, OPTIONS[key].kind.coerce, prog)
    merged = {**(defaults or {}), **given}
    # a keyword wins over the defaults it would conflict with (code written for any notebook)
    if given.get("step") is not None:
        merged.pop("steps", None)
    if given.get("steps") is not None:
        merged.pop("step", None)
        if "clear" not in given:
            merged.pop("clear", None)
    return _checked(replace(DEFAULTS, **merged), prog)


def parse_config(line: str, current: Mapping[str, Any], prog: str = "%memsnap config") -> dict[str, Any]:
    """The session defaults after ``%memsnap config line``: ``key=value`` sets, ``key=`` unsets.
    The result must make a valid line on its own (no step= with steps=, say)."""
    given = parse_given(line, prog, unset=True)
    merged = {k: v for k, v in {**current, **given}.items() if v is not None}
    _checked(replace(DEFAULTS, **merged), prog)
    return merged


def parse_given(line: str, prog: str = "%%memsnap", unset: bool = False) -> dict[str, Any]:
    """Only the options written in ``line``, converted and checked; with ``unset``, ``key=``
    gives None (the table's default)."""
    values: dict[str, Any] = {}
    keys = ", ".join(OPTIONS)
    try:
        tokens = split_line(line)
    except ValueError as e:
        raise OptionError(f"{prog}: cannot split the options: {e}") from None
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep or not key:
            raise OptionError(f"{prog}: expected key=value, got {token!r} (keys: {keys})")
        if key not in OPTIONS:
            raise OptionError(f"{prog}: unknown option {key!r} (keys: {keys})")
        if key in values:
            raise OptionError(f"{prog}: {key}= given twice")
        values[key] = None if unset and not raw else _convert(key, raw, OPTIONS[key].kind.parse, prog)
    if values.get("step") is not None and values.get("steps") is not None:
        raise OptionError(f"{prog}: give step= or steps=, not both")
    return values


_SHLEX_SPACE = re.compile("[ \t\r\n]+")  # shlex's whitespace: not every str.isspace() character


def split_line(line: str) -> list[str]:
    """``shlex.split(line)``, in linear time where the line has no quotes or escapes: shlex
    builds each token a character at a time (4 s for a steps= list of 100,000 steps)."""
    if "'" in line or '"' in line or "\\" in line:
        return shlex.split(line, posix=True)
    return [t for t in _SHLEX_SPACE.split(line) if t]


def _convert(key: str, raw: Any, convert: Any, prog: str) -> Any:
    try:
        return convert(raw)
    except ValueError as e:
        shown = excerpt(raw) if isinstance(raw, str) else f"{type(raw).__name__} {excerpt(raw)}"
        raise OptionError(f"{prog}: bad value for {key}=: {shown} ({e}; allowed: {OPTIONS[key].allowed})") from None


def _checked(options: Options, prog: str) -> Options:
    """Rules between options, over the merged values (a session default counts too)."""
    if options.step is not None and options.steps is not None:
        raise OptionError(
            f"{prog}: give step= or steps=, not both (one may be a %memsnap config default; unset it with key=)"
        )
    if options.steps is not None and not options.clear:
        raise OptionError(
            f"{prog}: steps= starts every listed step from a fresh history, so it "
            "cannot take clear=false (one may be a %memsnap config default; unset it with clear=); "
            "use step= cells with clear=false for the cumulative behaviour"
        )
    return options


def as_text(value: Any) -> str:
    """An option's value as it is written in an option (true, 1,5,10), to show it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def help_text(indent: int = 0, width: int = 92) -> str:
    """The option list of the magic's and ``Recorder``'s docstrings (``%%memsnap?``), indented
    by ``indent`` to sit in a docstring."""
    pad, rows = " " * indent, []
    for key, opt in OPTIONS.items():
        default = "" if opt.default is None else f" [default: {as_text(opt.default)}]"
        rows.append(f"{pad}  {key}=  ({opt.allowed}){default}")
        rows += textwrap.wrap(opt.help, width, initial_indent=pad + "      ", subsequent_indent=pad + "      ")
        rows.append(f"{pad}      e.g. {opt.example}")
    return "\n".join(rows)


def usage(prog: str = "%%memsnap", width: int = 96) -> str:
    """``%%memsnap [step=N] [steps=1,5,10] ...``, wrapped, for the magic's docstring."""
    words = [f"[{key}={opt.kind.metavar}]" for key, opt in OPTIONS.items()]
    lines, line = [], prog
    for word in words:
        if len(line) + 1 + len(word) > width:
            lines.append(line)
            line = " " * len(prog)
        line += " " + word
    return "\n".join([*lines, line])
