"""The on-disk format's one home: verl's folder layout and the ``memsnap`` block in each file.

Snapshots go to ``<out>/step<N>/<tag>_rank<R>_pid<P>-<token>.pickle``: verl's layout, with a token
fixed for the life of the process after the pid, so two processes with the same pid (containers
with their own PID namespace) never write the same file, and a re-run step still replaces its own.
Each of our files also carries a ``memsnap`` dict (``Meta``) saying which step, rank and device it
holds; files without one (verl's, torchtitan's) are named by their path. A named run
(``run=after``) puts its step folders one level down, ``<out>/<run>/step<N>/``, so two runs'
files never mix; a folder of step folders is a run, named after the folder.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import SnapshotError
from .compact import Compact
from .pending import Pending
from .schema import MAX_INDEX

LAYOUT = "<out>/step<N>/<tag>_rank<R>_pid<P>-<token>.pickle"  # where snapshot_path puts a step, in words
SUFFIXES = (".pickle", ".pkl")
# a file name's start: never hidden, never ".."; letters and digits of any script (runs/mémoire)
TAG_PATTERN = r"\w[\w.-]{0,99}"
# a tag's or a run's bytes in UTF-8 (100 letters of some scripts take 300): with the rest of a
# dump's name, its summary's and their temporary names', within the 255 a file name may take
NAME_BYTES = 180
MAX_STEP = MAX_INDEX  # steps, ranks and pids beyond this are corruption
# scale=batch:8,seq:128: the sizes a step was recorded at, which ``predict`` fits against. A name
# is a keyword of ``predict(batch=64)``, so an identifier, and none of its other keywords
# ASCII digits only: \d would read step٣ (Arabic-Indic) as step 3
_STEP = re.compile(r"^step([0-9]{1,10})$")  # ten digits: up to the highest step, 2,147,483,647
_RANK = re.compile(r"(?:^|_)rank([0-9]{1,9})(?=[_.-]|$)")
_TAG = re.compile(rf"^({TAG_PATTERN})_rank[0-9]{{1,9}}(?=[_.-]|$)")


@functools.lru_cache(maxsize=1)
def process_token() -> str:
    """Six hex digits drawn once per process: with the pid, what makes our file names ours."""
    return secrets.token_hex(3)


def snapshot_path(out: str | os.PathLike[str], step: int, tag: str, rank: int, run: str | None = None) -> Path:
    """Where a step's snapshot goes: ``<out>/[<run>/]step<N>/<tag>_rank<R>_pid<P>-<token>.pickle``."""
    folder = Path(out) / run if run else Path(out)
    return folder / f"step{step}" / f"{tag}_rank{rank}_pid{os.getpid()}-{process_token()}.pickle"


def run_name(text: str) -> str | None:
    """``text`` made a valid run name (a folder's name: ``runs/before``, ``my run``), or None."""
    name = re.sub(r"[^\w.-]+", "_", text).lstrip(".-")[:100]
    return name if re.fullmatch(TAG_PATTERN, name) else None


@dataclass(frozen=True)
class PathInfo:
    """What a path in verl's layout says about its file; None where it says nothing."""

    step: int | None = None
    rank: int | None = None
    tag: str | None = None


def parse_path(path: str | os.PathLike[str]) -> PathInfo:
    path = Path(path)
    step, tag = step_folder(path.parent.name), _TAG.match(path.name)
    ranks = _RANK.findall(path.name)  # the last: a tag may itself say "rank0" ("rank0_rank3_...")
    return PathInfo(
        step=step,
        rank=int(ranks[-1]) if ranks else None,
        tag=tag.group(1) if tag else None,
    )


def step_folder(name: str) -> int | None:
    """The step a folder named ``step<N>`` holds, N a step a file can hold; else None."""
    found = _STEP.match(name)
    step = int(found.group(1)) if found else None
    return step if step is not None and step < MAX_STEP else None


def folder_run(path: str | os.PathLike[str]) -> str:
    """The run a file without a recorded one belongs to: the folder holding its step folder
    (``before/step3/x.pickle``: ``before``), else its own folder, else ``loaded``. That folder
    is named as it really is (``current -> exp_0101``: ``exp_0101``), as is a file that is a
    link, but a step folder that is a link is its linking run's (``run1/step2 -> /scratch/step2``)."""
    path = Path(path)
    where = os.path.realpath(path) if path.is_symlink() else os.path.abspath(path)
    folder = os.path.dirname(where)
    if step_folder(os.path.basename(folder)) is not None:
        folder = os.path.dirname(folder)
    return run_name(os.path.basename(os.path.realpath(folder))) or "loaded"


MARK_KEY = "user_metadata"  # PyTorch's per-entry string (its viewer does not show it); our readers do


def step_mark(step: int, run: str | None = None) -> str:
    """What each entry of a step's dump says it belongs to, so a file opened alone tells its step."""
    return f"memsnap step {step}" + (f" (run {run})" if run else "")


def stamp(snap: dict[str, Any], index: int, marks: list[tuple[int, str]]) -> None:
    """Give device ``index``'s trace entries their step's mark as their ``user_metadata`` where
    they have none (PyTorch 2.10+ sets its own through ``_set_memory_metadata``; older ones and
    the CPU route none). ``marks``: ``(start_us, mark)`` of each step the snapshot holds, in
    order (several where a ``clear=false`` history went on): an entry takes the mark of the last
    step begun by its time. One string object per step: the pickle stores each once."""
    trace = snap["device_traces"][index]
    if type(trace) in (Compact, Pending) and trace.marked:  # built marked: only what was added since
        if trace.marked >= len(trace):  # a trace still to build (``pending``) stays so
            return
        trace = trace[trace.marked :]
    if len(marks) == 1:  # one step: every entry is its
        mark = marks[0][1]
        for entry in trace:
            if not entry.get(MARK_KEY):
                entry[MARK_KEY] = mark
        return
    starts = [start for start, _ in marks]
    for entry in trace:
        if not entry.get(MARK_KEY):
            t = entry.get("time_us")
            at = bisect.bisect_right(starts, t) - 1 if type(t) is int else len(marks) - 1
            entry[MARK_KEY] = marks[max(at, 0)][1]


def find_snapshots(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, folders searched recursively for ``*.pickle``/``*.pkl``, in natural order.

    Inside folders, hidden names (``.name``, files and folders: half-written temporaries among
    them) are skipped, and linked step folders followed (see ``_inside``). A folder that cannot
    be read is an error, as a bad file is: nothing is left out unsaid. A file reached twice
    (given twice, or in two folders given) is read once by ``results.scan.read_intervals``."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not os.fspath(raw):  # Path("") is the working directory: an unset $DIR, not a wish
            raise SnapshotError("'': no such file or folder (an empty path)")
        if path.is_dir():
            inside = _inside(path)
            if not inside:
                raise SnapshotError(f"{path}: no *.pickle snapshots in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        elif os.path.lexists(path):  # a device, a pipe, a socket, a link that leads nowhere
            raise SnapshotError(f"{path}: not a regular file or folder (a device, pipe or socket is never read)")
        else:
            raise SnapshotError(f"{path}: no such file or folder")
    return found


def _inside(folder: Path) -> list[Path]:
    """The snapshots below ``folder``. A linked folder is followed only when it is a step
    folder (``step2 -> /elsewhere/step2``): other links (``latest -> step2``, a link to an
    unrelated tree) would name files twice or read what was never asked for. A folder that
    cannot be read is an error; one that vanished mid-scan (old steps rotated away) had nothing."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    stack = [str(folder)]
    while stack:
        here = stack.pop()
        try:
            st = os.stat(here)
            if (st.st_dev, st.st_ino) in seen:  # reached again through a link
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(here) as entries:
                listed = list(entries)
        except (FileNotFoundError, NotADirectoryError):
            if here == str(folder):
                raise SnapshotError(f"{folder}: no such file or folder") from None
            continue
        except OSError as e:
            raise SnapshotError(f"{e.filename or here}: cannot read this folder ({e.strerror or e})") from None
        for entry in listed:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False) or (
                    step_folder(entry.name) is not None and entry.is_symlink() and entry.is_dir()
                ):
                    stack.append(entry.path)
                elif os.path.splitext(entry.name)[1] in SUFFIXES and entry.is_file():
                    found.append(Path(entry.path))
            except OSError:  # vanished, or a link that leads nowhere: not a snapshot
                continue
    return sorted(found, key=_natural)


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isascii() and part.isdigit() else part for part in re.split(r"([0-9]+)", str(path))]
