"""Stacks read the way people think of them — their notebook cells first, then the innermost
library code, without the magic's and IPython's own frames — and allocation sites named from them.

Intervals name their sites here (a summary keeps them), so this is results, not views: the
dashboard and the CLI print what it gives.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..core.clean import clean

CELL_NAME = 16  # characters of a kernel's cell file name shown (ipykernel's are 9-10 digits)
TEXT_LIMIT = 1024  # characters of a frame's filename or name read; longer ones are cut
FRAMES_LIMIT = 128  # frames of one stack read: the innermost and the outermost halves


# Frames: a recorded stack runs from the allocation out through the user's code, the magic,
# IPython and the kernel. People want their cells first, then the library code that allocated.
_INPUT = re.compile(r"^<ipython-input-(\d+)-")
# where the magic runs a body: its module now, and where files recorded before the package had folders say
_RUNNER = tuple(
    path.replace("/", sep) for path in ("memsnap_magic/ipython/execute.py", "memsnap_magic/execute.py") for sep in "/\\"
)
_SITE = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def _field(frame: dict[str, Any], key: str) -> str:
    """A frame's filename or name; "?" where a file gives something else (frames are data)."""
    value = frame.get(key)
    if type(value) is not str:
        return "?"
    return value if len(value) <= TEXT_LIMIT else value[: TEXT_LIMIT - 1] + "…"


def _line(frame: dict[str, Any]) -> int | str:
    line = frame.get("line")
    return line if type(line) is int and 0 < line < 1 << 31 else "?"  # 0: a module's entry, no line yet


# filename -> In[N] of the cells the running shell compiled: ipykernel names a cell's file after a
# hash of its code, so its number is only in the shell's compiler (set by ``%load_ext``)
_cell_numbers: dict[str, int] = {}


def cell_numbers() -> dict[str, int]:
    """The cells' numbers read from now on (a copy: what a worker process is given)."""
    return dict(_cell_numbers)


def know_cells(numbers: dict[str, int] | None) -> None:
    """Read notebook cells' numbers from ``numbers`` (an IPython compiler's filename map) from now on."""
    global _cell_numbers
    _cell_numbers = numbers if isinstance(numbers, dict) else {}


def _is_cell_frame(frame: dict[str, Any]) -> bool:
    name = _field(frame, "filename")
    return name.startswith("<ipython-input-") or "/ipykernel_" in name


def _runs_cells(frame: dict[str, Any]) -> bool:
    name = _field(frame, "filename")
    return name.endswith(_RUNNER) and any(
        name.endswith(path) and (len(name) == len(path) or name[-len(path) - 1] in "/\\") for path in _RUNNER
    )


Kinds = dict[int, tuple[bool, bool]]  # id(frame) -> (runs a %%memsnap body, a notebook cell's)


def _kinds(frames: list[dict[str, Any]], memo: Kinds | None) -> list[tuple[bool, bool]]:
    """Each frame's kind; ``memo`` keeps them across calls over one file's blocks, whose stacks
    share frame dicts (a file's long filenames are then read once, not once per block)."""
    if memo is None:
        return [(_runs_cells(f), _is_cell_frame(f)) for f in frames]
    kinds = []
    for f in frames:
        kind = memo.get(id(f))
        if kind is None:
            kind = memo[id(f)] = (_runs_cells(f), _is_cell_frame(f))
        kinds.append(kind)
    return kinds


def _where(frame: dict[str, Any]) -> str:
    name = _field(frame, "filename")
    cell = _INPUT.match(name)
    if cell:
        return f"cell In[{cell.group(1)}]"
    if _is_cell_frame(frame):
        number = _cell_numbers.get(name)
        if type(number) is int:
            return f"cell In[{number}]"
        # another process's cell: its file's name (a hash of its code) keeps cells apart
        stem = re.split(r"[/\\]", name)[-1].removesuffix(".py")
        return f"notebook cell {stem[:CELL_NAME]}" if stem else "notebook cell"
    return _SITE.sub("", name)


def _frames(frames: Any) -> list[dict[str, Any]]:
    """The dicts of a stack, at most ``FRAMES_LIMIT``: a file may repeat one frame a million
    times in a few bytes, and deep recursion repeats the middle of a stack, never its ends."""
    if type(frames) is not list:
        return []
    if len(frames) > FRAMES_LIMIT:
        frames = frames[: FRAMES_LIMIT // 2] + frames[-(FRAMES_LIMIT // 2) :]
    return [f for f in frames if type(f) is dict]


def frame_lines(frames: list[Any], limit: int = 4, memo: Kinds | None = None) -> list[str]:
    """A few readable frames: the notebook's cells first, then the innermost others.

    From the frame that runs a ``%%memsnap`` body outwards a stack says nothing about the user's
    code, so it is dropped (the ``%%memsnap`` line's own cell with it). A file's stack may hold
    anything: what is not a frame is left out, what is not a name reads "?". ``memo``: see ``_kinds``.
    """
    frames = _frames(frames)
    kinds = _kinds(frames, memo)
    outer = next((i for i, (runner, _) in enumerate(kinds) if runner), len(frames))
    cells = [f for f, (_, cell) in zip(frames[:outer], kinds) if cell]
    ordered = cells + [f for f, (_, cell) in zip(frames[:outer], kinds) if not cell] if len(cells) < limit else cells
    return [clean(f"{_field(f, 'name')} ({_where(f)}:{_line(f)})") for f in ordered[:limit]]


def plain_frames(frames: Any) -> list[dict[str, Any]]:
    """The frames ``frame_lines`` reads, as plain ``filename``/``line``/``name`` dicts of str and
    int ("?" and 0 where a file gave something else): what a summary file keeps of a stack, so a
    summary read back shows exactly the lines its snapshot did."""
    if not frames:  # most blocks of a CPU step: those live before it
        return []
    frames = _frames(frames)
    outer = next((i for i, f in enumerate(frames) if _runs_cells(f)), len(frames))
    plain = []
    for f in frames[:outer]:
        line = _line(f)
        name, filename = _field(f, "name"), _field(f, "filename")
        plain.append({"filename": filename, "line": line if type(line) is int else 0, "name": name})
    return plain


def site(block: dict[str, Any], memo: Kinds | None = None) -> str:
    """Where a block was allocated: its first readable frame, or why it has none."""
    frames = block.get("frames")
    lines = frame_lines(frames, limit=1, memo=memo) if frames else None
    if lines:
        return lines[0]
    return "(no stack: live before the snapshot's window)" if block.get("before") else "(no stack recorded)"


def site_bytes(blocks: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Bytes per allocation site (the first frame, notebook cells first)."""
    sites: dict[str, int] = defaultdict(int)
    named: dict[tuple[int, bool], str] = {}  # real files share one frame list among many blocks
    memo: Kinds = {}
    for b in blocks:
        key = (id(b.get("frames")), bool(b.get("before")))
        if key not in named:
            named[key] = site(b, memo)
        sites[named[key]] += b["size"]
    return dict(sites)
