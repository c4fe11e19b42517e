"""Stacks read the way people think of them — their notebook cells first, then the innermost
library code, without the magic's and IPython's own frames — and allocation sites named from them.

Intervals name their sites here (a summary keeps them), so this is results, not views: the
dashboard and the CLI print what it gives.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
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


# What runs a user's code rather than being it: Python's own library, the shells and kernels
# around a notebook cell, test runners, and this package. Only trailing (outermost) frames of
# these are cut from a stack: the user's frames and any library code they called stay.
_SHELLS = frozenset(("IPython", "ipykernel", "tornado", "zmq", "traitlets", "jupyter_client", "ipyparallel"))
_SHELLS |= {"_pytest", "pluggy", "debugpy"}
_OUR_ROOT = os.path.dirname(os.path.abspath(__file__))
_STDLIB = tuple(
    {os.path.normpath(p) + os.sep for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))}
)


@functools.lru_cache(maxsize=8192)
def _runs_users_code(filename: str) -> bool:
    """Whether a frame in ``filename`` runs the user's code (a shell, a kernel, the stdlib, us)."""
    if filename.startswith(("<frozen ", _OUR_ROOT)):
        return True
    parts = re.split(r"[/\\]", filename)
    if not _SHELLS.isdisjoint(parts):  # installed anywhere (pip --target, a checkout)
        return True
    # the standard library, not what is installed below it (a venv's site-packages)
    return (
        bool(_STDLIB) and filename.startswith(_STDLIB) and "site-packages" not in parts and "dist-packages" not in parts
    )


def user_frames(frames: list[Any], whole_if_none: bool = True, memo: Kinds | None = None) -> list[Any]:
    """A stack (innermost first) up to the user's outermost frame: a ``%%memsnap`` body's own
    frames (the magic runs it: all beneath is the magic, IPython and what drives it), else up to
    the cell, the script's module, a thread's target, the shells, kernels, event loops and runners
    beneath cut. A stack with no frame of the user's is kept whole (``whole_if_none``; else nothing
    is left of it). Idempotent; the list itself when nothing is cut. ``memo``: see ``_kinds``."""
    end = next((i for i, f in enumerate(frames) if type(f) is dict and _kind(f, memo)[0]), len(frames))
    while end > 0:
        f = frames[end - 1]
        name = f.get("filename") if type(f) is dict else None
        if type(name) is not str or not _runs_users_code(name):
            break
        end -= 1
    if end == len(frames) or (end == 0 and whole_if_none):
        return frames
    return frames[:end]


def keep_user_frames(snap: dict[str, Any]) -> None:
    """``user_frames`` for every stack of a snapshot, in place: its trace entries' and its end
    state's blocks'. PyTorch shares frame dicts but gives each entry a list of its own: stacks
    of the same frames are cut once and then share one list, which the pickle writes once (the
    dump gets faster and the file smaller than before the cut)."""
    holders = [e for t in snap.get("device_traces") or () for e in t if type(e) is dict]
    holders += [b for seg in snap.get("segments") or () for b in seg.get("blocks") or () if type(b) is dict]
    originals = [h.get("frames") for h in holders]  # held while ids are keys: none is freed meanwhile
    shared: dict[tuple[int, ...], list[Any]] = {}
    memo: Kinds = {}
    for h, frames in zip(holders, originals):
        if type(frames) is not list or not frames:
            continue
        key = tuple(map(id, frames))
        cut = shared.get(key)
        if cut is None:
            cut = shared[key] = list(user_frames(frames, memo=memo))
        h["frames"] = cut
    del originals


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


# the same, as files recorded elsewhere give them (their ``memsnap`` block's ``cells``)
_file_cells: dict[str, int] = {}


def cell_numbers() -> dict[str, int]:
    """The cells' numbers read from now on (a copy: what a worker process is given)."""
    return {**_file_cells, **_cell_numbers}


def learn_cells(cells: dict[str, int] | None) -> None:
    """Name the cells of a file recorded in another kernel as that kernel numbered them: a file
    read anywhere (``memsnap diff``, a worker) then says ``cell In[2]``, not its hash."""
    if cells:
        _file_cells.update(cells)


def cells_in(stacks: Iterable[Any]) -> dict[str, int]:
    """The numbers this kernel gave the cells these stacks pass through (each list read once)."""
    seen: set[int] = set()
    found: dict[str, int] = {}
    for frames in stacks:
        if type(frames) is not list or id(frames) in seen:
            continue
        seen.add(id(frames))
        for f in frames:
            name = f.get("filename") if type(f) is dict else None
            if type(name) is str:
                number = _cell_numbers.get(name)
                if type(number) is int:
                    found[name] = number
    return found


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
    return [_kind(f, memo) for f in frames]


def _kind(frame: dict[str, Any], memo: Kinds | None) -> tuple[bool, bool]:
    if memo is None:
        return _runs_cells(frame), _is_cell_frame(frame)
    kind = memo.get(id(frame))
    if kind is None:
        kind = memo[id(frame)] = (_runs_cells(frame), _is_cell_frame(frame))
    return kind


def _where(frame: dict[str, Any]) -> str:
    name = _field(frame, "filename")
    cell = _INPUT.match(name)
    if cell:
        return f"cell In[{cell.group(1)}]"
    if _is_cell_frame(frame):
        number = _cell_numbers.get(name)
        if number is None:
            number = _file_cells.get(name)
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
    frames = user_frames(_frames(frames), memo=memo)
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
    frames = user_frames(_frames(frames))
    outer = next((i for i, f in enumerate(frames) if _runs_cells(f)), len(frames))
    plain = []
    for f in frames[:outer]:
        line = _line(f)
        name, filename = _field(f, "name"), _field(f, "filename")
        plain.append({"filename": filename, "line": line if type(line) is int else 0, "name": name})
    return plain


CHAIN = 6  # user frames a site names; a longer chain keeps its outer and inner halves
ARROW = " → "


def _users(frame: dict[str, Any]) -> bool:
    """Whether a frame is the user's code: a notebook cell, or a file outside the installed
    packages, the standard library, the shells and this package."""
    if _is_cell_frame(frame):
        return True
    name = _field(frame, "filename")
    return name != "?" and not _library(name)


@functools.lru_cache(maxsize=8192)
def _library(filename: str) -> bool:
    """Whether a file is installed code (a package, the standard library) or runs the user's.
    PyTorch's CPU profiler names files relative to the ``sys.path`` entry holding them
    (``torch/nn/modules/linear.py``, a test's ``helpers.py``): such a name is looked for along
    ``sys.path``; one found nowhere (a file read on another machine) is a package's where it has
    a folder in it, the user's where it is a bare file name."""
    if filename.startswith("<"):  # <string>, <stdin>: the user's; <frozen ...>: Python's
        return filename.startswith("<frozen ")
    if os.path.isabs(filename):
        return _SITE.match(filename) is not None or _runs_users_code(filename)
    for entry in sys.path:
        try:
            path = os.path.join(entry or os.getcwd(), filename)
        except (OSError, TypeError):  # the working directory deleted; an entry that is no path
            continue
        if os.path.isfile(path):
            path = os.path.abspath(path)
            return _SITE.match(path) is not None or _runs_users_code(path)
    return "/" in filename or "\\" in filename


def call_chain(frames: Any, memo: Kinds | None = None) -> str | None:
    """The chain of the user's frames that made an allocation, outermost first:
    ``train_step (cell In[2]:37) → forward (In[2]:14)``; None where the stack has no frame of the
    user's. One line reached from two calls is two chains: a leaking call and a healthy one apart.
    The outermost frame is left out where it is a module's top level and a function of the user's
    is beneath it: each ``%%memsnap`` cell is a cell of its own, so a step's cell would otherwise
    make every step's site a different one."""
    frames = user_frames(_frames(frames), memo=memo)
    kinds = _kinds(frames, memo)
    outer = next((i for i, (runner, _) in enumerate(kinds) if runner), len(frames))
    mine = [f for f in frames[:outer] if _users(f)][::-1]  # outermost first
    if len(mine) > 1 and _field(mine[0], "name") == "<module>":
        mine = mine[1:]
    if not mine:
        return None
    if len(mine) > CHAIN:
        mine = [*mine[: CHAIN // 2], None, *mine[-(CHAIN // 2) :]]
    parts = []
    for n, f in enumerate(mine):
        if f is None:
            parts.append("…")
            continue
        where = _where(f)
        if n and where.startswith("cell "):  # the first names it a cell; the rest say only where
            where = where[len("cell ") :]
        parts.append(f"{_field(f, 'name')} ({where}:{_line(f)})")
    return clean(ARROW.join(parts))


def brief(site: str) -> str:
    """A site as a line of words names it: a chain of more than three calls as its outermost
    call and its two innermost (``train → … → forward → keep``); the site itself stays the key."""
    parts = site.split(ARROW)
    return site if len(parts) <= 3 else ARROW.join([parts[0], "…", *parts[-2:]])


def site(block: dict[str, Any], memo: Kinds | None = None) -> str:
    """Where a block was allocated: the chain of the user's frames that made it (``call_chain``),
    else its first readable frame (a library's), else why it has none."""
    frames = block.get("frames")
    chain = call_chain(frames, memo) if frames else None
    if chain:
        return chain
    lines = frame_lines(frames, limit=1, memo=memo) if frames else None
    if lines:
        return lines[0]
    return "(no stack: live before the snapshot's window)" if block.get("before") else "(no stack recorded)"


def site_bytes(blocks: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Bytes per allocation site (``site``: the user's call chain)."""
    sites: dict[str, int] = defaultdict(int)
    named: dict[tuple[int, bool], str] = {}  # real files share one frame list among many blocks
    memo: Kinds = {}
    for b in blocks:
        key = (id(b.get("frames")), bool(b.get("before")))
        if key not in named:
            named[key] = site(b, memo)
        sites[named[key]] += b["size"]
    return dict(sites)
