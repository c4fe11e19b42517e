"""The one table of ``%%memsnap`` options: defaults, parsing and help text.

Options are ``key=value`` tokens (``%%memsnap step=5 out=runs``); IPython's argparse-based
``magic_arguments`` cannot parse that, so this module does. It raises ``OptionError`` (a
``ValueError``); the magic turns it into IPython's ``UsageError``, scripts see a ``ValueError``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

DEVICE_RE = re.compile(r"^(auto|cpu|cuda|xpu|npu)(:\d+)?$")
TAG_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
DEFAULT_OUT = "memsnap"


class OptionError(ValueError):
    """A ``%%memsnap`` option the user wrote is unknown or has a bad value."""


def _int(text: str, lowest: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("not an integer") from None
    if value < lowest:
        raise ValueError(f"must be >= {lowest}")
    return value


def _step(text: str) -> int:
    return _int(text, 0)


def _positive(text: str) -> int:
    return _int(text, 1)


def _steps(text: str) -> tuple[int, ...]:
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("empty list")
    return tuple(sorted({_step(p.strip()) for p in parts}))


def _choice(*allowed: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in allowed:
            raise ValueError("not one of the allowed values")
        return text

    return convert


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ValueError("not a boolean")


def _device(text: str) -> str:
    if not DEVICE_RE.match(text) or text.startswith("auto:") or text.startswith("cpu:"):
        raise ValueError("not a device name")
    return text


def _tag(text: str) -> str:
    if not TAG_RE.match(text):
        raise ValueError("only letters, digits, '_', '.', '-' (it becomes part of a file name)")
    return text


def _out(text: str) -> str:
    if not text:
        raise ValueError("empty path")
    return text


@dataclass(frozen=True)
class Option:
    convert: Callable[[str], Any]
    default: Any
    allowed: str
    help: str
    example: str


OPTIONS: dict[str, Option] = {
    "step": Option(_step, None, "an integer >= 0",
                   "Label of this interval; default: one more than the largest step so far. "
                   "Re-running a step replaces its interval and file.", "step=5"),
    "steps": Option(_steps, None, "comma-separated integers",
                    "Dump only these steps of a loop inside the cell; call mark(step) at each "
                    "step's start. Each file holds only its own step (so not with clear=false).",
                    "steps=1,5,10"),
    "out": Option(_out, DEFAULT_OUT, "a folder",
                  "Folder for snapshots: <out>/step<N>/<tag>_rank<R>_pid<P>.pickle "
                  "(verl's layout). Relative to the current directory.", "out=runs/memory"),
    "tag": Option(_tag, "torch_memory", "letters, digits, _ . -",
                  "File name prefix.", "tag=forward"),
    "device": Option(_device, "auto", "auto, cpu, cuda, cuda:K, xpu, xpu:K, npu, npu:K",
                     "What to record. auto: the current accelerator, else the CPU.", "device=cuda:1"),
    "rank": Option(lambda t: _int(t, 0), None, "an integer >= 0",
                   "Rank in file names; default: $RANK, else torch.distributed's rank, else 0.",
                   "rank=3"),
    "max_entries": Option(_positive, 100_000, "an integer >= 1",
                          "Trace ring size; older entries of a longer interval are dropped.",
                          "max_entries=500000"),
    "context": Option(_choice("all", "alloc", "state", "none"), "all", "all, alloc, state, none",
                      "Which events carry a stack (accelerators; the CPU route records none).",
                      "context=alloc"),
    "stacks": Option(_choice("python", "all"), "python", "python, all",
                     "python: Python frames only. all adds C++ frames (dumps ~100x slower).",
                     "stacks=python"),
    "clear": Option(_bool, True, "true, false",
                    "false keeps history and recording on after the cell, so the next snapshot "
                    "also holds this one's events: the cumulative behaviour.", "clear=false"),
}


def parse(line: str, defaults: dict[str, Any] | None = None,
          prog: str = "%%memsnap") -> dict[str, Any]:
    """Every option's value: the tokens in ``line`` over ``defaults`` over the table's defaults."""
    values = {key: opt.default for key, opt in OPTIONS.items()}
    values.update(defaults or {})
    values.update(parse_given(line, prog))
    if values["steps"] is not None and not values["clear"]:
        raise OptionError(f"{prog}: steps= starts every listed step from a fresh history, so it "
                          "cannot take clear=false; use step= cells with clear=false for the "
                          "cumulative behaviour")
    return values


def parse_given(line: str, prog: str = "%%memsnap") -> dict[str, Any]:
    """Only the options written in ``line``, converted and checked."""
    values: dict[str, Any] = {}
    keys = ", ".join(OPTIONS)
    try:
        tokens = shlex.split(line, posix=True)
    except ValueError as e:
        raise OptionError(f"{prog}: cannot split the options: {e}") from None
    seen: set[str] = set()
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep or not key:
            raise OptionError(f"{prog}: expected key=value, got {token!r} (keys: {keys})")
        if key not in OPTIONS:
            raise OptionError(f"{prog}: unknown option {key!r} (keys: {keys})")
        if key in seen:
            raise OptionError(f"{prog}: {key}= given twice")
        seen.add(key)
        try:
            values[key] = OPTIONS[key].convert(raw)
        except ValueError as e:
            raise OptionError(f"{prog}: bad value for {key}=: {raw!r} ({e}; allowed: "
                              f"{OPTIONS[key].allowed})") from None
    if "step" in seen and "steps" in seen:
        raise OptionError(f"{prog}: give step= or steps=, not both")
    return values


def help_text() -> str:
    """The option list appended to the magic's docstring (``%%memsnap?``)."""
    rows = []
    for key, opt in OPTIONS.items():
        default = "" if opt.default is None else f" [default: {opt.default}]"
        rows.append(f"  {key}=  ({opt.allowed}){default}\n      {opt.help}\n      e.g. {opt.example}")
    return "\n".join(rows)
