"""Snapshot files: safe loading, atomic writing.

Snapshots are plain dicts of builtins (PyTorch's ``_snapshot()`` schema), without reference
cycles, so the cyclic garbage collector is paused while one is unpickled: its passes over the
millions of new containers were most of ``pickle.load``'s time and could free nothing. Files may come from
other people's runs, so loading refuses every pickle global (nothing in a file can run code),
refuses what is not a regular file or is larger than a limit before reading it, and checks the
schema (``schema``) in time bounded by the file's size. Only ``SnapshotError`` leaves
``load_snapshot``, with a one-line message that quotes the file only in short excerpts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import stat
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import SnapshotError, excerpt
from ..core.nogc import no_gc
from .compact import complete
from .meta import Meta
from .schema import validate
from .writer import WRITER, wait_for_writes

__all__ = ["MAX_FILE_BYTES", "PROTOCOL", "SnapshotError", "dump_snapshot", "load_snapshot", "max_file_bytes"]

PROTOCOL = 4  # memory_viz's JavaScript unpickler reads protocols 2-4 only
MAX_FILE_BYTES = 4 << 30  # the default limit: verl dumps are often 100-500 MB; 4 GiB unpickle to ~20 GB
ENTRIES_PER_BYTE = 1  # what a file may stand for: trace entries, segments and blocks per byte


def max_file_bytes() -> int:
    """The largest file ``load_snapshot`` reads: ``$MEMSNAP_MAX_FILE_BYTES`` if set, else 4 GiB."""
    raw = os.environ.get("MEMSNAP_MAX_FILE_BYTES", "").strip()
    if not raw:
        return MAX_FILE_BYTES
    if raw.isascii() and raw.isdigit() and len(raw) <= 20:
        return int(raw)
    _ignored_limit(raw)
    return MAX_FILE_BYTES


@functools.cache
def _ignored_limit(raw: str) -> None:
    """Say once per value that a malformed limit was ignored (a typo must not pass unseen)."""
    warnings.warn(
        f"memsnap: ignoring MEMSNAP_MAX_FILE_BYTES={excerpt(raw, 40)}: a whole number of bytes is "
        f"allowed; using the default {MAX_FILE_BYTES:,}",
        RuntimeWarning,
        stacklevel=4,
    )


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refused pickle global {excerpt(module, 60)[1:-1]}.{excerpt(name, 60)[1:-1]} "
            "(snapshots hold builtins only)"
        )


def load_snapshot(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> dict[str, Any]:
    """Read a snapshot without executing anything from it; ``SnapshotError`` names what is wrong.

    ``max_bytes``: refuse larger files before reading them (default ``max_file_bytes()``).
    A file this process is still writing in the background is read once written.
    """
    wait_for_writes()
    if not os.fspath(path):  # Path("") is the working directory: an unset $FILE, not a wish
        raise SnapshotError("'': no such file (an empty path)")
    path = Path(path)
    limit = max_file_bytes() if max_bytes is None else max_bytes
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise SnapshotError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # a NUL byte in the path
        raise SnapshotError(f"{excerpt(str(path), 80)}: not a usable path ({_one_line(e)})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SnapshotError(f"{path}: a directory, not a snapshot file (read_intervals() reads a run's folder)")
        f = os.fdopen(fd, "rb", buffering=1 << 16)
    except BaseException:
        os.close(fd)
        raise
    with f:
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError(f"{path}: not a regular file (a device, pipe or socket is never read)")
        if st.st_size == 0:
            raise SnapshotError(f"{path}: empty file")
        if st.st_size > limit:
            raise SnapshotError(
                f"{path}: {st.st_size:,} bytes, over the {limit:,}-byte limit (raise it with "
                "$MEMSNAP_MAX_FILE_BYTES or load_snapshot(..., max_bytes=))"
            )
        return _on_deep_stack(lambda: _read(f, path, st.st_size), st.st_size)


def _read(f: BinaryIO, path: Path, size: int) -> dict[str, Any]:
    try:
        with _memory_cap(size), no_gc():  # a snapshot is a tree: the collector's passes find nothing to free
            snap: dict[str, Any] = _NoGlobals(f).load()  # checked by validate below
    except pickle.UnpicklingError as e:
        raise SnapshotError(f"{path}: not a safe snapshot pickle: {_one_line(e)}") from None
    except MemoryError:
        raise SnapshotError(
            f"{path}: unpickling it needed more memory than a file of {size:,} bytes stands for "
            "(a hostile or corrupt file)"
        ) from None
    except Exception as e:  # truncated, corrupt, deeply nested...
        raise SnapshotError(f"{path}: not a readable pickle ({type(e).__name__}: {_one_line(e)})") from None
    try:
        validate(snap, budget=max(size * ENTRIES_PER_BYTE, 1 << 16))
    except SnapshotError as e:
        raise SnapshotError(f"{path}: {e}") from None
    except Exception as e:  # a check that could not run is a file we cannot vouch for
        raise SnapshotError(f"{path}: cannot be checked ({type(e).__name__}: {_one_line(e)})") from None
    try:  # our own block too: a file every reader would refuse is refused here
        Meta.from_snapshot(snap)
    except SnapshotError as e:
        raise SnapshotError(f"{path}: {e}") from None
    return snap


MEMORY_PER_BYTE = 64  # bytes of memory one byte of file may become while unpickled (real files: ~5-10)
MEMORY_SLACK = 512 << 20
STACK_PER_BYTE, MIN_STACK, MAX_STACK = 256, 32 << 20, 1 << 30  # C stack for hashing what the file nests
_LIMITS = threading.Lock()


@contextlib.contextmanager
def _memory_cap(size: int) -> Iterator[None]:
    """Cap the process's data segment while a file of ``size`` bytes is unpickled (Linux): a few
    bytes of pickle can make the unpickler allocate gigabytes (a memo index of 2³⁰ sizes its memo
    table at 16 GB), which then fails as a MemoryError instead of exhausting the machine."""
    if sys.platform != "linux":
        yield
        return
    import resource

    with _LIMITS:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        used = _data_bytes()
        cap = used + size * MEMORY_PER_BYTE + MEMORY_SLACK if used is not None else None
        if cap is None or (soft != resource.RLIM_INFINITY and soft <= cap):
            cap = None
        elif hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
        try:
            yield
        finally:
            if cap is not None:
                resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _data_bytes() -> int | None:
    """The process's data segment now (``VmData``: what RLIMIT_DATA counts)."""
    return proc_bytes("/proc/self/status", b"VmData:")


def proc_bytes(path: str, key: bytes) -> int | None:
    """The ``key: N kB`` line of a Linux /proc file, in bytes; None where there is none."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _on_deep_stack(read: Callable[[], dict[str, Any]], size: int) -> dict[str, Any]:
    """``read()`` in a thread whose C stack fits what the file can nest: hashing a dict key that
    is a tuple nested 300,000 deep (a 300 KB file) recurses in C past a thread's usual 8 MB and
    kills the process. Files past ~4 MB get the largest stack, 1 GiB of address space (touched
    only as deep as the file nests): a file nesting deeper than ~20 million levels stays a risk."""
    result: list[dict[str, Any] | BaseException] = []

    def run() -> None:
        try:
            result.append(read())
        except BaseException as e:  # handed to the caller's thread
            result.append(e)

    stack = min(max(size * STACK_PER_BYTE, MIN_STACK), MAX_STACK)
    with _LIMITS:
        old = threading.stack_size()
        with contextlib.suppress(ValueError, RuntimeError):  # a platform that sets none: the usual stack
            threading.stack_size(stack)
        try:
            worker = threading.Thread(target=run, name="memsnap-load", daemon=True)
            worker.start()
        finally:
            threading.stack_size(old)
    worker.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _one_line(e: BaseException, limit: int = 200) -> str:
    try:
        text = " ".join(str(e).split())
    except Exception:
        text = type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dump_snapshot(snap: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``snap`` atomically (``write_atomically``), pickle protocol 4."""
    complete(snap)  # the CPU route's viewer-only entries, left out while the cell waited
    return write_atomically(path, lambda f: pickle.dump(snap, _Pausing(f), protocol=PROTOCOL))


class _Pausing:
    """A file whose every write is a checkpoint of the background writer: pickle writes a
    64 KiB frame at a time, so a cell starting meanwhile waits for one frame, not the file."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    def write(self, data: Any) -> int:
        WRITER.checkpoint()
        return self._f.write(data)


def write_atomically(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any]) -> Path:
    """Write a file through ``write(f)`` into a temporary file in the same folder, renamed into
    place with normal permissions: a crash mid-write leaves at most a hidden ``.tmp`` file,
    never a half file under ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp: str | None = None
    f: BinaryIO | None = None
    try:
        with interrupts_deferred():  # a Ctrl-C between making the temporary and owning it would leave it
            # mkstemp normalises its folder as text (link/.. would lose the link): the real folder, then
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=os.path.realpath(path.parent))
            f = os.fdopen(fd, "wb")
        with f:  # the write itself can be interrupted: the temporary goes below
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with interrupts_deferred():
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """In the main thread, a SIGINT (Ctrl-C) arriving inside is handled as the block ends, by
    the handler that was set (``KeyboardInterrupt`` by default): the block is never cut short.
    Elsewhere nothing changes (only the main thread runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    try:
        before = signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if caught and callable(before):
            before(*caught[0])
        elif caught and before == signal.SIG_DFL:
            raise KeyboardInterrupt


@functools.cache
def _umask() -> int:
    """The process's umask, read once (reading it means setting it, so not at import)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
