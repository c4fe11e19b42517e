"""Files and folders → intervals: each file's summary where it has one, else the file itself,
read by worker processes when there is enough of it to be worth their start.

The readers of the CLI, ``%memsnap load`` and ``read_run`` all come here. A summary (beside the
file, or cached, see ``summaries``) stands in for its snapshot while it is the same file; the
snapshots without one are read in this process or spread over ``jobs`` processes (each holds one
snapshot at a time, so memory stays bounded), and their summaries cached. Results and errors are
the same either way: the first bad file in order raises.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from ..core.errors import SnapshotError
from ..core.warn import warn_once
from ..files.layout import find_snapshots, step_folder
from ..files.writer import wait_for_writes
from .intervals import Interval, digest_file, interval_from_digest
from .stacks import cell_numbers, know_cells


def read_interval(path: Path, position: int) -> Interval:
    """One file as an interval; ``position`` (1-based) is the step when nothing names one."""
    return read_intervals([path], position=position)[0]


PARALLEL_BYTES = 32 << 20  # snapshots to read, in all, before worker processes pay for their start


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_intervals(
    paths: Iterable[str | os.PathLike[str]],
    progress: bool = False,
    jobs: int = 1,
    position: int = 1,
    already: set[tuple[int, int]] | None = None,
) -> list[Interval]:
    """Files and folders (searched recursively) as intervals, with a progress bar if asked; the
    n-th file's step is ``position + n`` when nothing names one. ``already``: the files (device,
    inode) an earlier call read, left out here; those read here join it.

    A file's summary (beside it or cached, see ``summaries``) stands in for it while it is the
    same file; the others are read, by ``jobs`` worker processes where they add up to
    ``PARALLEL_BYTES`` or more (the CLI and ``%memsnap load`` use ``default_jobs()``), and
    their summaries cached. Workers import the main module again, as ``multiprocessing``
    does: a script that asks for them guards its code with ``if __name__ == "__main__":``.
    The first bad file in order raises, whichever process read it. Files this process is
    still writing are waited for first."""
    from ..files import summaries  # here: numpy loads with the first read, not with %load_ext

    wait_for_writes()
    files = find_snapshots(paths)
    stats = [_stat(p) for p in files]
    read = already if already is not None else set()
    first: dict[tuple[int, int], int] = {}  # each file once: where a step folder names it, by its own name
    for n, st in enumerate(stats):
        if (st.st_dev, st.st_ino) in read:
            continue
        seen = first.setdefault((st.st_dev, st.st_ino), n)
        if seen != n and _naming(files[n]) < _naming(files[seen]):
            first[st.st_dev, st.st_ino] = n  # not a link beside the steps, as verl's latest_rank0.pickle
    read.update(first)
    if len(first) < len(files):
        kept = sorted(first.values())
        files, stats = [files[n] for n in kept], [stats[n] for n in kept]
    digests = [summaries.read(p, st) for p, st in zip(files, stats)]
    todo = [n for n, d in enumerate(digests) if d is None]
    small = sum(stats[n].st_size for n in todo) < PARALLEL_BYTES
    jobs = 1 if small else _bounded(jobs, len(todo))
    bar = None
    if progress and len(todo) > 1 and not (small and len(todo) < 50):  # a bar only where reading takes a while
        from tqdm import tqdm  # text, also in a notebook: a widget bar would leave a saved notebook a missing model

        bar = tqdm(total=len(todo), unit="file", desc="memsnap: reading", leave=False)
    bad: dict[int, SnapshotError] = {}
    try:
        for n, found in _digests([files[n] for n in todo], jobs, bar):  # as each is read: Ctrl-C keeps these
            n = todo[n]
            if isinstance(found, SnapshotError):
                bad[n] = found
                continue
            digests[n] = found
            summaries.store(files[n], stats[n], found)
    finally:
        if bar is not None:
            bar.close()
    if bad:
        raise bad[min(bad)]
    read_all = cast("list[dict[str, Any]]", digests)  # each None was read above, or raised
    return [
        interval_from_digest(d, p, position=position + n, file_bytes=st.st_size)
        for n, (p, st, d) in enumerate(zip(files, stats, read_all))
    ]


def _bounded(jobs: int, files: int) -> int:
    """Worker processes for ``files`` files: at most one per core this process may run on (more
    only cost memory, ~40 MB each, and time: 60 on 2 cores read 4x slower), said once when that
    lowers the request, and no more than there are files."""
    cores = default_jobs()
    if jobs > cores and files > cores:
        warn_once(
            "jobs above the cores",
            f"memsnap: {jobs} reading processes asked for; {cores} used, one per core this process may run on",
        )
    return max(1, min(jobs, cores, files))


def _naming(path: Path) -> tuple[bool, bool]:
    """How well a path names a file reached twice (lower is better): in a step folder first,
    then by its own name rather than through a link."""
    return step_folder(path.parent.name) is None, path.is_symlink()


def _stat(path: Path) -> os.stat_result:
    """Taken before the file is read: one replaced meanwhile leaves a summary that matches neither."""
    try:
        return path.stat()
    except OSError as e:
        raise SnapshotError(f"{path}: cannot read: {e.strerror or e}") from None


def _digests(files: list[Path], jobs: int, bar: Any) -> Iterator[tuple[int, dict[str, Any] | SnapshotError]]:
    """(index, digest or the file's SnapshotError) of each file as it is read: here, in order
    (the first bad file raises), or by ``jobs`` processes that each hold one snapshot at a time."""
    if jobs <= 1:
        for n, path in enumerate(files):
            yield n, digest_file(path)
            if bar is not None:
                bar.update()
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    done: set[int] = set()
    context = multiprocessing.get_context(method)
    start = (cell_numbers(), dict(os.environ))
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_start, initargs=start)
    try:
        futures = {pool.submit(_digest_or_error, path): n for n, path in enumerate(files)}
        try:
            for future in as_completed(futures):
                found, words = future.result()
                for message in words:  # said here, once a process, as reading here says them
                    warn_once(f"worker: {message}", message)
                if bar is not None:
                    bar.update()
                done.add(futures[future])
                yield futures[future], found
        except BrokenProcessPool:
            lost = [str(files[n]) for f, n in futures.items() if n not in done]
            raise SnapshotError(
                f"a process reading {lost[0]}{' or another' if len(lost) > 1 else ''} died (out of memory?); "
                "jobs=1 reads one file at a time"
            ) from None
    except BaseException:  # Ctrl-C, or the first bad file: what is queued is dropped, not read first
        _stop_now(pool)
        raise
    pool.shutdown()


def _stop_now(pool: Any) -> None:
    """Drop the queued files and end the workers at once: leaving the pool normally waits for
    every file already handed to it. A worker stopped mid-file leaves no summary (this process
    writes them, atomically).

    A worker stopped while it sent its result leaves half a message in the pipe, which the
    pool's own thread then waits for forever, and the interpreter's exit waits for that thread:
    once the workers are gone this process closes its end of the pipe, so the thread reads the
    end instead. The executor has no public way to any of this."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()
    for process in workers:
        process.join(timeout=1)
    if manager is None or results is None:
        return
    manager.join(timeout=1)
    if manager.is_alive():
        writer = getattr(results, "_writer", None)
        if writer is not None:
            writer.close()
        manager.join(timeout=5)


def _worker_start(cells: dict[str, int], environ: dict[str, str]) -> None:
    """A worker reads as this process does: its environment now (a forkserver's children have the
    server's, from when it started: a limit set since in a notebook would not hold there), and
    the notebook cells' numbers a kernel knows."""
    os.environ.clear()
    os.environ.update(environ)
    know_cells(cells)
    # Ctrl-C reaches every process of the terminal's group: the parent stops the workers; each
    # of them printing its own traceback would bury its one line
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _digest_or_error(path: Path) -> tuple[dict[str, Any] | SnapshotError, list[str]]:
    """A worker's job: the file's digest, or its error returned, so the parent raises the first;
    and the warnings reading it gave, for the parent to say."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: dict[str, Any] | SnapshotError = digest_file(path)
        except SnapshotError as e:
            result = e
    return result, [str(w.message) for w in caught]


def in_step_order(intervals: Iterable[Interval], by_time: bool = False) -> list[Interval]:
    """Run by run, each in step and rank order (a step and rank written twice: the older file
    first, from its ``memsnap`` block's time). Runs come in the order each first appears, or
    with ``by_time`` in the order they were recorded (runs whose files say when first, then
    the rest as they appear): a folder's runs as the session that recorded them had them, not
    by their folders' names."""
    intervals = list(intervals)
    first: dict[str, tuple[Any, ...]] = {}
    for n, iv in enumerate(intervals):
        first.setdefault(iv.run, (n,))
    if by_time:
        began: dict[str, int] = {}
        for iv in intervals:
            if iv.end_us is not None:
                began[iv.run] = min(began.get(iv.run, iv.end_us), iv.end_us)
        first = {run: (run not in began, began.get(run, 0), *n) for run, n in first.items()}
    # one step and rank twice (a kernel restarted and wrote it again): the newer comes last, and wins
    return sorted(intervals, key=lambda iv: (first[iv.run], iv.step, iv.rank, iv.end_us or 0))


def _folders_apart(paths: Sequence[str | os.PathLike[str]], loaded: list[Interval]) -> None:
    """Two folders given that hold the same step of the same run (``exp1/profile`` and
    ``exp2/profile``: both the run "profile") would merge, one file hiding the other: refused.
    Files given one by one may repeat a step (a kernel restarted): the newer stands, as said."""
    _apart([(paths, loaded)])


def batches_apart(batches: Sequence[tuple[Sequence[str | os.PathLike[str]], list[Interval]]]) -> None:
    """Paths read apart that end in one run (``memsnap a=exp1/profile a=exp2/profile``, or two
    unnamed folders with a named one between) must not hold one step twice either: refused as
    ``_folders_apart`` refuses it within one read, not merged with one file hiding the other."""
    if len(batches) > 1:
        _apart(batches)


def _apart(batches: Sequence[tuple[Sequence[str | os.PathLike[str]], list[Interval]]]) -> None:
    """No step of a run in two places given. A place is the outermost folder given that holds a
    file, whichever batch gave it: one folder spelled twice, or given inside another, is one."""
    given = {Path(p): os.path.realpath(p) for paths, _ in batches for p in paths if os.path.isdir(p)}
    if len(given) < 2:
        return
    reals = set(given.values())

    def outermost(real: str) -> str:
        best, here = real, real
        while (up := os.path.dirname(here)) != here:
            best, here = (up if up in reals else best), up
        return best

    place = {folder: outermost(real) for folder, real in given.items()}
    seen: dict[tuple[Any, ...], tuple[str, Path]] = {}
    for _, loaded in batches:
        for iv in loaded:
            folder = next((f for f in iv.path.parents if f in place), None) if iv.path is not None else None
            if folder is None:
                continue
            other = seen.setdefault((iv.run, iv.step, iv.rank, iv.device), (place[folder], folder))
            if other[0] != place[folder]:
                raise _held_twice(other[1], folder, iv)


def _held_twice(one: Path, other: Path, iv: Interval) -> SnapshotError:
    return SnapshotError(
        f"{one} and {other} both hold step {iv.step} rank {iv.rank} of the run {iv.run!r}: "
        "give each its own run name (memsnap: NAME=FOLDER; %memsnap load: one folder at a time, as=NAME)"
    )


def read_run(
    paths: Sequence[str | os.PathLike[str]],
    name: str | None = None,
    progress: bool = False,
    jobs: int = 1,
    already: set[tuple[int, int]] | None = None,
) -> list[Interval]:
    """Every file under ``paths`` as intervals, each in its own run (see ``interval_from_digest``),
    or all in the run ``name``: then they must hold one run, so naming never merges two.
    ``already``: as ``read_intervals``' (files an earlier read of the same command took).

    In step order, whatever order the paths came in (``step*`` globs to step1, step10, step2):
    the cumulative figures are what a never-cleared recording would have shown step by step."""
    loaded = in_step_order(read_intervals(paths, progress=progress, jobs=jobs, already=already), by_time=True)
    _folders_apart(paths, loaded)
    if name is not None:
        runs = sorted({iv.run for iv in loaded})
        if len(runs) > 1:
            raise SnapshotError(
                f"{', '.join(map(str, paths))}: {len(runs)} runs ({', '.join(runs)}) cannot take one name; "
                "name one run's folder at a time, or leave the name out to load each as its own run"
            )
        loaded = [replace(iv, run=name) for iv in loaded]
    return loaded
