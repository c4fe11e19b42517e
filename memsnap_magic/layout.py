"""The on-disk format's one home: verl's folder layout and the ``memsnap`` block in each file.

Snapshots go to ``<out>/step<N>/<tag>_rank<R>_pid<P>.pickle``, verl's layout, so verl's folders
and ours read alike. Each of our files also carries a ``memsnap`` dict (``Meta``) saying which
step, rank and device it holds; files without one (verl's, torchtitan's) are named by their path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .snapshot import SnapshotError

SUFFIXES = (".pickle", ".pkl")
META_KEY = "memsnap"
_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"rank(\d+)")
_TAG = re.compile(r"^(.+)_rank\d+")


def snapshot_path(out: str | os.PathLike[str], step: int, tag: str, rank: int, pid: int | None = None) -> Path:
    """Where a step's snapshot goes: ``<out>/step<N>/<tag>_rank<R>_pid<P>.pickle``."""
    return Path(out) / f"step{step}" / f"{tag}_rank{rank}_pid{os.getpid() if pid is None else pid}.pickle"


@dataclass(frozen=True)
class PathInfo:
    """What a path in verl's layout says about its file; None where it says nothing."""

    step: int | None = None
    rank: int | None = None
    tag: str | None = None


def parse_path(path: str | os.PathLike[str]) -> PathInfo:
    path = Path(path)
    step, rank, tag = _STEP.match(path.parent.name), _RANK.search(path.name), _TAG.match(path.name)
    return PathInfo(
        step=int(step.group(1)) if step else None,
        rank=int(rank.group(1)) if rank else None,
        tag=tag.group(1) if tag else None,
    )


@dataclass(frozen=True)
class Meta:
    """The ``memsnap`` block of a snapshot: what the recorder knew when it wrote the file.

    Read from any file, so every field may be missing (None); ``from_snapshot`` keeps only
    values of the right type and range.
    """

    step: int | None = None
    rank: int | None = None
    device: str | None = None
    tag: str | None = None
    pid: int | None = None
    end_us: int | None = None  # when the snapshot was taken (µs since the epoch)
    error: str | None = None  # the exception type name if the cell raised
    clear: bool = True  # False: the history went on into the next snapshot (clear=false)
    allocator_peak_allocated: int | None = None
    context: str | None = None  # which events carry stacks; "none" where the recorder keeps none
    max_entries: int | None = None  # the trace ring's size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> Meta:
        raw = snap.get(META_KEY)
        if not isinstance(raw, dict):
            return cls()
        return cls(
            step=_count(raw.get("step")),
            rank=_count(raw.get("rank")),
            device=_text(raw.get("device")),
            tag=_text(raw.get("tag")),
            pid=_count(raw.get("pid")),
            end_us=_count(raw.get("end_us")),
            error=_text(raw.get("error")),
            clear=raw.get("clear") is not False,
            allocator_peak_allocated=_count(raw.get("allocator_peak_allocated")),
            context=_text(raw.get("context")),
            max_entries=_count(raw.get("max_entries")),
        )


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def find_snapshots(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, folders searched recursively for ``*.pickle``/``*.pkl``, in natural order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(
                (p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file() and not p.name.startswith(".")),
                key=_natural,
            )
            if not inside:
                raise SnapshotError(f"{path}: no *.pickle snapshots in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise SnapshotError(f"{path}: no such file or folder")
    return found


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]
