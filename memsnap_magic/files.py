"""Existing dumps: find them, name their step and rank, read them into intervals.

Step, rank and tag come from our own metadata when a file has it, else from verl's layout
(``.../step<N>/<tag>_rank<R>_pid<P>.pickle``), else from the order the files were given.
Used by ``%memsnap load`` and the ``memsnap`` command line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from .session_state import Interval, interval_from_snapshot
from .snapshot import SnapshotError, load_snapshot

_SUFFIXES = (".pickle", ".pkl")
_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"rank(\d+)")
_TAG = re.compile(r"^(.+)_rank\d+")


def find_snapshots(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, folders searched recursively for ``*.pickle``/``*.pkl``, in order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted((p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file()
                             and not p.name.startswith(".")), key=_natural)
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


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def read_interval(path: Path, position: int) -> Interval:
    """One file as an interval; ``position`` (1-based) is the step when nothing names one."""
    snap = load_snapshot(path)
    meta = snap.get("memsnap") if isinstance(snap.get("memsnap"), dict) else {}
    step_dir = _STEP.match(path.parent.name)
    rank_name = _RANK.search(path.name)
    step = _int(meta.get("step"))
    step = step if step is not None else int(step_dir.group(1)) if step_dir else position
    rank = _int(meta.get("rank"))
    rank = rank if rank is not None else int(rank_name.group(1)) if rank_name else 0
    from .analysis import pick_device

    index = pick_device(snap)
    device = meta.get("device") if isinstance(meta.get("device"), str) else f"device:{index}"
    error = meta.get("error") if isinstance(meta.get("error"), str) else None
    tag = meta.get("tag")
    if not isinstance(tag, str):
        tag_name = _TAG.match(path.name)
        tag = tag_name.group(1) if tag_name else "torch_memory"
    try:
        return interval_from_snapshot(snap, index, step=step, rank=rank, device=device, path=path,
                                      error=error, tag=tag, clear=meta.get("clear") is not False,
                                      file_bytes=path.stat().st_size,
                                      allocator_peak_allocated=_int(meta.get("allocator_peak_allocated")))
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise SnapshotError(f"{path}: cannot be summarised: {type(e).__name__}: {e}") from None


def read_intervals(paths: Iterable[str | os.PathLike[str]], progress: bool = False) -> Iterator[Interval]:
    files = find_snapshots(paths)
    bar = None
    if progress and len(files) > 1:
        from tqdm import tqdm

        bar = tqdm(total=len(files), unit="file", desc="memsnap: reading", leave=False)
    try:
        for n, path in enumerate(files, start=1):
            yield read_interval(path, n)
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
