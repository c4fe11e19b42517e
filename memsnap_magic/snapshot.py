"""Snapshot files: safe loading, atomic writing, schema checks.

Snapshots are plain dicts of builtins (PyTorch's ``_snapshot()`` schema). Files may come from
other people's runs, so loading refuses every pickle global: nothing in a file can run code.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import pickle
import tempfile
from itertools import repeat
from pathlib import Path
from typing import Any

PROTOCOL = 4  # memory_viz's JavaScript unpickler reads protocols 2-4 only
_MAX_BYTES = 1 << 62  # sizes beyond any real machine are corruption, not memory


class SnapshotError(ValueError):
    """A snapshot file is unsafe, unreadable or not in PyTorch's snapshot schema."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused pickle global {module}.{name} (snapshots hold builtins only)")


def load_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a snapshot without executing anything from it; ``SnapshotError`` names what is wrong."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SnapshotError(f"{path}: cannot read: {e.strerror or e}") from None
    if not data:
        raise SnapshotError(f"{path}: empty file")
    try:
        snap = _NoGlobals(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise SnapshotError(f"{path}: not a safe snapshot pickle: {e}") from None
    except (
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        OverflowError,
        MemoryError,
        RecursionError,
        UnicodeDecodeError,
    ) as e:
        raise SnapshotError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from None
    try:
        validate(snap)
    except SnapshotError as e:
        raise SnapshotError(f"{path}: {e}") from None
    return snap


def _is_int(value: Any) -> bool:
    return type(value) is int


def validate(snap: Any) -> None:
    """Check the fields analysis relies on; unknown extra fields and actions are tolerated."""
    if not isinstance(snap, dict):
        raise SnapshotError(f"top level is {type(snap).__name__}, expected dict")
    for key in ("segments", "device_traces"):
        if key not in snap:
            raise SnapshotError(f"missing key {key!r}")
        if not isinstance(snap[key], list):
            raise SnapshotError(f"{key!r} is {type(snap[key]).__name__}, expected list")
    for d, trace in enumerate(snap["device_traces"]):
        if not isinstance(trace, list):
            raise SnapshotError(f"device_traces[{d}] is {type(trace).__name__}, expected list")
        bad = _first_bad_entry(trace)
        if bad is not None:
            raise SnapshotError(
                f"device_traces[{d}][{bad}] is not a trace entry with str action, "
                f"int addr and int size >= 0: {_short(trace[bad])}"
            )
    for s, seg in enumerate(snap["segments"]):
        if not (
            isinstance(seg, dict)
            and _is_int(seg.get("device"))
            and _is_int(seg.get("address"))
            and isinstance(seg.get("blocks"), list)
        ):
            raise SnapshotError(f"segments[{s}] lacks int device, int address or a blocks list")
        for b, block in enumerate(seg["blocks"]):
            if not (
                isinstance(block, dict)
                and _is_int(block.get("size"))
                and 0 <= block["size"] < _MAX_BYTES
                and type(block.get("state")) is str
                and _is_int(block.get("requested_size", 0))
            ):
                raise SnapshotError(f"segments[{s}].blocks[{b}] lacks int size >= 0 or str state: {_short(block)}")


def _entry_ok(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and type(e.get("action")) is str
        and _is_int(e.get("addr", 0))
        and _is_int(e.get("size"))
        and 0 <= e["size"] < _MAX_BYTES
    )


def _first_bad_entry(trace: list[Any]) -> int | None:
    """Index of the first malformed entry, or None. Checks whole columns at C speed first,
    since snapshots reach millions of entries; walks entry by entry only to name a bad one."""
    n = len(trace)
    if all(map(isinstance, trace, repeat(dict, n))):
        kinds = (
            set(map(type, map(dict.get, trace, repeat("action", n)))),
            set(map(type, map(dict.get, trace, repeat("addr", n), repeat(0, n)))),
            set(map(type, sizes := list(map(dict.get, trace, repeat("size", n))))),
        )
        if (
            kinds[0] <= {str}
            and kinds[1] <= {int}
            and kinds[2] <= {int}
            and (not sizes or (min(sizes) >= 0 and max(sizes) < _MAX_BYTES))
        ):
            return None
    return next(i for i, e in enumerate(trace) if not _entry_ok(e))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def dump_snapshot(snap: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``snap`` atomically: a temporary file in the same folder, renamed into place.

    A crash mid-write leaves at most a hidden ``.tmp`` file, never a half file under ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f, protocol=PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


@functools.cache
def _umask() -> int:
    """The process's umask, read once (reading it means setting it, so not at import)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
