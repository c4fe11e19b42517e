"""Reading many snapshots with worker processes: bounded by the cores, and stopped at once by
Ctrl-C (the CLI and ``%memsnap load``), with nothing already read lost and nothing half-written."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from snapshots import alloc, free, snapshot

from memsnap_magic import session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.core import warn
from memsnap_magic.results import scan

ROOT = Path(__file__).resolve().parent.parent


def _step_files(folder: Path, count: int, pairs: int) -> list[Path]:
    """``count`` copies (separate files) of one snapshot of ``pairs`` allocations and frees, each
    in its own step folder; no summaries beside them."""
    trace = [e for n in range(pairs) for e in (*alloc(0x1000 + 512 * n, 512, n), *free(0x1000 + 512 * n, 512, n))]
    for e in trace:
        e["frames"] = [{"filename": "train.py", "line": 7, "name": "step"}]
    blob = pickle.dumps(snapshot(trace, {0x10: 4096}), protocol=4)
    paths = []
    for step in range(1, count + 1):
        path = folder / f"step{step}" / "torch_memory_rank0.pickle"
        path.parent.mkdir(parents=True)
        path.write_bytes(blob)
        paths.append(path)
    return paths


@pytest.fixture
def pools(monkeypatch):
    """The worker counts of the process pools started meanwhile (the real pools)."""
    started: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, max_workers=None, *args, **kwargs):
            started.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Counted)
    return started


def test_more_workers_than_cores_are_lowered_to_the_cores_and_said_once(tmp_path, monkeypatch, pools):
    paths = _step_files(tmp_path / "run", 6, 50)
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)  # these small files read in parallel too
    monkeypatch.setattr(scan, "default_jobs", lambda: 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = scan.read_intervals(paths[:3], jobs=60)
        second = scan.read_intervals(paths[3:], jobs=10**20)
    assert pools == [2, 2]
    said = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert said == ["memsnap: 60 reading processes asked for; 2 used, one per core this process may run on"]
    assert [iv.step for iv in first + second] == [1, 2, 3, 4, 5, 6]


def test_never_more_workers_than_files(tmp_path, monkeypatch, pools):
    paths = _step_files(tmp_path / "run", 2, 50)
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(scan, "default_jobs", lambda: 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scan.read_intervals(paths, jobs=8)
    assert pools == [2] and not [w for w in caught if "memsnap" in str(w.message)]


def test_the_cli_says_the_bound_on_one_line(tmp_path, monkeypatch, capsys, pools):
    _step_files(tmp_path / "run", 3, 50)
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(scan, "default_jobs", lambda: 2)
    monkeypatch.setattr(warn, "WARNED", set())  # a fresh command's process: said once there too
    assert main(["summarize", str(tmp_path / "run"), "--jobs", str(10**20)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"memsnap: {10**20} reading processes asked for; 2 used, one per core this process may run on"]


@pytest.mark.parametrize("value", ["2.5", "x", "-1", "", "1e3", "0x10"])
def test_bad_worker_counts_are_one_line_and_exit_2(tmp_path, capsys, value):
    assert_exit = pytest.raises(SystemExit)
    with assert_exit as exited:
        main(["summarize", str(tmp_path), "--jobs", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs/-j" in err[0] and "give a whole number of 1 or more" in err[0]


def _last_texts(stream: str) -> list[str]:
    """What stays on a terminal: each line as its last carriage return leaves it (a progress bar
    that cleared itself leaves nothing)."""
    return [t for t in (line.rsplit("\r", 1)[-1].strip() for line in stream.split("\n")) if t]


def test_ctrl_c_during_a_cold_scan_stops_at_once_and_keeps_what_was_read(tmp_path):
    files = _step_files(tmp_path / "run", 40, 60_000)
    cache = tmp_path / "cache"
    env = dict(os.environ, MEMSNAP_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(tmp_path / "run"), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's job
    )
    deadline = time.monotonic() + 60
    while not (cache.exists() and any(cache.rglob("*.json"))):  # a first file read: workers are busy
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: every process of the group gets it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert _last_texts(err) == ["memsnap: interrupted"]
    summaries = list(cache.rglob("*.json"))
    assert 0 < len(summaries) < len(files)  # what was queued was dropped, not read first
    for path in summaries:  # each one whole: written atomically
        json.loads(path.read_text())
    assert not list(cache.rglob("*.tmp*"))


_HALF_A_RESULT = """
import multiprocessing, os, struct, sys, time
from concurrent.futures import ProcessPoolExecutor
from memsnap_magic.results.scan import _stop_now

def half_a_result(marker):
    # what a worker stopped in the middle of sending its result leaves: a message's length and
    # the start of it, in the pool's result pipe
    results = multiprocessing.current_process()._args[1]
    os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    open(marker, "w").close()
    time.sleep(300)

if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(sys.argv[2]))
    pool.submit(half_a_result, sys.argv[1])
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    _stop_now(pool)
    print("stopped", flush=True)
"""


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_stopped_while_sending_its_result_does_not_hang_the_exit(tmp_path, method):
    """The pool's thread was left reading half a message (CI saw `memsnap summarize` print
    "interrupted" and never exit): after the stop, the process ends."""
    script = tmp_path / "stop.py"
    script.write_text(_HALF_A_RESULT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "sending"), method],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 60 s after the stop; printed {out!r}")
    assert (proc.returncode, out) == (0, "stopped\n"), err


def test_interrupting_memsnap_load_leaves_the_session_as_it_was(shell, tmp_path, monkeypatch):
    _step_files(tmp_path / "run", 3, 50)
    assert shell.run_cell("%%memsnap step=1 device=cpu\nx = 1").success
    wait_for_writes()  # its file's size, as the load's own wait would bring it in: the session as it was
    before = list(session().intervals)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(scan, "digest_file", interrupted)  # as if Ctrl-C came while a file was read
    res = shell.run_cell(f"%memsnap load {tmp_path / 'run'}")
    assert not res.success
    assert "interrupted; nothing was loaded, the session is as it was" in str(res.error_in_exec)
    assert session().intervals == before
