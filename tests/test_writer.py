"""The background writer: the cell returns before its file is written, and so does the plain cell
after it (the writer pauses while a cell runs), yet none of our readers (%memsnap commands, the
loaders, the next %%memsnap cell, exit) ever finds it missing, and a failed write is said."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

import memsnap_magic.files.snapshot as snapshot_module
from memsnap_magic import session, wait_for_writes
from memsnap_magic.files import summaries
from memsnap_magic.files.snapshot import load_snapshot
from memsnap_magic.files.writer import WRITER
from memsnap_magic.recording.recorder import Recorder

SLOW = 0.4  # seconds each write takes here: long enough that a reader who does not wait misses it


@pytest.fixture
def slow_writes(monkeypatch):
    """Every snapshot write takes ``SLOW`` seconds more; the threads that wrote are recorded."""
    real, writers = snapshot_module.dump_snapshot, []

    def slow(snap, path):
        writers.append(threading.current_thread().name)
        time.sleep(SLOW)
        return real(snap, path)

    monkeypatch.setattr(snapshot_module, "dump_snapshot", slow)
    return writers


def test_the_cell_and_the_plain_cell_after_it_return_before_the_write_readers_wait(shell, slow_writes):
    shell.run_cell("import torch")
    started = time.perf_counter()
    assert shell.run_cell("%%memsnap step=1 device=cpu\nx = torch.ones(1000)").success
    assert time.perf_counter() - started < SLOW  # the write was not in the cell's time
    started = time.perf_counter()
    assert shell.run_cell("y = 1").success
    assert time.perf_counter() - started < SLOW  # nor in the next plain cell's
    res = shell.run_cell(
        "import glob\nfrom memsnap_magic import load_snapshot, wait_for_writes\nwait_for_writes()\n"
        "found = [load_snapshot(p) for p in glob.glob('memsnap/step1/*.pickle')]\nlen(found)"
    )
    assert res.success and res.result == 1  # waited for, the file is there, whole
    assert slow_writes == ["memsnap-writer"]


def test_a_plain_cell_has_the_interpreter_to_itself_while_a_write_is_pending(shell, monkeypatch):
    """The write pauses at its next pickle frame while a cell runs (``Writer.hold``), and goes
    on once the cell is done: no frame is written while the plain cell runs."""
    shell.run_cell("import torch")
    frames: list[str] = []
    real = snapshot_module._Pausing.write

    def write(self, data):
        frames.append(shell.user_ns.get("phase", "?"))
        return real(self, data)

    monkeypatch.setattr(snapshot_module._Pausing, "write", write)
    assert shell.run_cell("%%memsnap step=1 device=cpu\nkeep = [torch.empty(16) for _ in range(20000)]").success
    assert shell.run_cell(
        "phase = 'cell'\nimport time\nt = time.perf_counter()\n"
        "while time.perf_counter() - t < 0.3: pass\nphase = 'after'"
    ).success
    wait_for_writes()
    assert len(frames) > 1 and "cell" not in frames, frames


def test_wait_true_writes_within_the_block(tmp_path, slow_writes):
    import torch

    with Recorder(step=1, out=tmp_path, device="cpu", wait=True) as r:
        x = torch.ones(1000)
    (iv,) = r.intervals
    assert iv.path.is_file() and iv.file_bytes == iv.path.stat().st_size
    assert summaries.beside(iv.path).is_file() and slow_writes == ["MainThread"]
    del x


def test_a_background_writes_outcome_is_a_new_record_the_session_takes_when_waited_for(tmp_path, slow_writes):
    """The writer's thread changes no interval: its result (the file's size) is applied where
    the writer is waited for, as a new record in the old one's place; one held before stays."""
    import dataclasses

    import torch

    from memsnap_magic.results.session import Session

    s = Session()
    with Recorder(step=1, out=tmp_path, device="cpu", session=s) as r:
        x = torch.ones(1000)
    held = s.last
    wait_for_writes()
    now = s.last
    assert slow_writes == ["memsnap-writer"] and held.file_bytes is None and held.path == now.path
    assert now.file_bytes == now.path.stat().st_size and now.origin == held.origin
    assert s.current(held) is now and s.intervals == [now] and r.intervals == [now]
    with pytest.raises(dataclasses.FrozenInstanceError):
        now.path = None
    del x


def test_commands_wait_for_pending_writes(shell, slow_writes, capsys):
    shell.run_cell("import torch\nfrom memsnap_magic import Recorder")
    # a Recorder block and a %memsnap command in one cell: no cell boundary waits in between
    res = shell.run_cell(
        "with Recorder(step=4, out='r', device='cpu'):\n    y = torch.ones(100)\n%memsnap load r as=again"
    )
    assert res.success
    assert "again" in session().runs and session().runs["again"].intervals[0].step == 4


def test_writes_keep_their_order_and_a_rerun_step_ends_with_the_last(tmp_path, slow_writes):
    import torch

    for n in (1, 2, 3):
        with Recorder(step=7, out=tmp_path, device="cpu") as r:
            x = [torch.ones(10) for _ in range(n)]
    wait_for_writes()
    (path,) = tmp_path.rglob("*.pickle")
    allocs = [e for e in load_snapshot(path)["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == 3 and r.intervals[0].path == path
    (iv,) = summaries_read(path)
    assert iv.trace_entries == r.intervals[0].trace_entries
    del x


def summaries_read(path: Path):
    from memsnap_magic.results.scan import read_intervals

    return read_intervals([path])


def test_a_write_that_cannot_start_is_said_in_its_cell_and_the_interval_stays(shell, slow_writes):
    Path("blocked").write_text("a file where a folder should be")
    shell.run_cell("import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap out=blocked device=cpu\nv = torch.ones(4)")
        assert res.success  # our failure never fails the user's cell
    ours = [w for w in caught if "memsnap" in str(w.message)]
    messages = [str(w.message) for w in ours]
    assert len(messages) == 1 and "could not write blocked/step1/" in messages[0] and "memory only" in messages[0]
    assert ours[0].lineno == 1 and ours[0].filename.startswith("<ipython-input-")  # at the %%memsnap line
    (iv,) = session().intervals
    assert iv.path is None and iv.peak_allocated > 0


def test_a_write_that_fails_in_the_background_is_said_at_the_next_cell(shell, monkeypatch):
    """A disk that fills up mid-write: the failure comes after the cell, and is said at the
    start of the next one, from the background write (no line of the cell about to run)."""

    def full(snap, path):
        time.sleep(0.05)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshot_module, "dump_snapshot", full)
    shell.run_cell("import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert shell.run_cell("%%memsnap device=cpu\nv = torch.ones(4)").success
        assert not [w for w in caught if "memsnap" in str(w.message)]  # not yet: the write is pending
        deadline = time.monotonic() + 30  # the kernel idles between cells: the write runs, and fails
        while WRITER._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shell.run_cell("1 + 1").success
    ours = [w for w in caught if "memsnap" in str(w.message)]
    assert len(ours) == 1 and "No space left on device" in str(ours[0].message)
    assert (ours[0].filename, ours[0].lineno) == ("<memsnap background write>", 0)
    (iv,) = session().intervals
    assert iv.path is None


def test_interpreter_exit_waits_for_the_last_write(tmp_path):
    script = textwrap.dedent(
        """
        import time, torch
        import memsnap_magic.files.snapshot as s
        from memsnap_magic import Recorder
        real = s.dump_snapshot
        def slow(snap, path):
            time.sleep(1.0)
            return real(snap, path)
        s.dump_snapshot = slow
        with Recorder(step=1, out="out", device="cpu"):
            x = torch.ones(1000)
        print("block done", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert "block done" in out.stdout
    (path,) = (tmp_path / "out").rglob("*.pickle")
    assert load_snapshot(path)["memsnap"]["step"] == 1 and summaries.beside(path).is_file()


def test_a_forked_worker_waits_for_its_writes_as_it_ends(tmp_path):
    """multiprocessing ends a forked worker with os._exit, which runs no atexit handler."""
    script = textwrap.dedent(
        """
        import multiprocessing as mp, sys

        def worker(out):
            import time, torch
            import memsnap_magic.files.snapshot as s
            from memsnap_magic import Recorder
            real = s.dump_snapshot
            def slow(snap, path):
                time.sleep(1.0)
                return real(snap, path)
            s.dump_snapshot = slow
            for step in (1, 2):
                with Recorder(step=step, out=out, device="cpu"):
                    x = torch.ones(1000)

        if __name__ == "__main__":
            p = mp.get_context("fork").Process(target=worker, args=(sys.argv[1],))
            p.start(); p.join()
            sys.exit(p.exitcode)
        """
    )
    (tmp_path / "w.py").write_text(script)
    subprocess.run(
        [sys.executable, "w.py", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    paths = sorted((tmp_path / "out").rglob("*.pickle"))
    assert [load_snapshot(p)["memsnap"]["step"] for p in paths] == [1, 2]
    assert all(summaries.beside(p).is_file() for p in paths)


def test_a_deleted_current_directory_costs_only_the_relative_write(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = textwrap.dedent(
        f"""
        import os, torch
        from memsnap_magic import Recorder, session
        from memsnap_magic.views.report import interval_table
        os.rmdir({str(gone)!r})
        for step, out in ((1, {str(tmp_path / "abs")!r}), (2, "relative")):
            with Recorder(step=step, device="cpu", context="none", out=out, wait=True):
                x = torch.ones(3)
        print(interval_table(session().intervals))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=gone, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (path,) = (tmp_path / "abs").rglob("*.pickle")
    assert str(path) in out.stdout and "(not written)" in out.stdout
    assert "could not write relative/step2/" in out.stderr


def test_a_scripts_recorder_warns_from_its_with_line(tmp_path):
    script = textwrap.dedent(
        """
        import warnings
        from memsnap_magic import Recorder, mark
        warnings.simplefilter("always")
        with Recorder(steps=[1, 2], device="cpu", out="out"):  # line 5: no mark() in it
            pass
        """
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "<string>:5: RuntimeWarning: memsnap: steps=1,2: no listed step began" in out.stderr


def test_a_worker_forked_after_the_cpu_route_recorded_is_refused_not_hung(tmp_path):
    """PyTorch's profiler hangs when started again in a child forked from a process that ran
    it: the child's block says so and how to start workers instead."""
    script = textwrap.dedent(
        """
        import multiprocessing as mp, sys, torch
        from memsnap_magic import Recorder

        def worker(out):
            try:
                with Recorder(step=2, out=out, device="cpu"):
                    torch.ones(10)
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            return "recorded"

        if __name__ == "__main__":
            with Recorder(step=1, out=sys.argv[1], device="cpu", wait=True):
                torch.ones(10)
            with mp.get_context("fork").Pool(1) as pool:
                print(pool.map(worker, [sys.argv[1]])[0])
        """
    )
    (tmp_path / "w.py").write_text(script)
    out = subprocess.run(
        [sys.executable, "w.py", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.startswith("BackendError: device=cpu: this process was forked") and "'spawn'" in out.stdout


def test_a_scripts_failed_writes_are_said_at_their_blocks_lines(tmp_path):
    """They were said at exit from a line of ours (writer.py); each now names its `with` line."""
    (tmp_path / "notadir").touch()
    script = (
        "import torch\nfrom memsnap_magic import Recorder\n"
        "with Recorder(step=1, device='cpu', out='notadir'):\n    x = torch.ones(10)\n"
        "with Recorder(step=2, device='cpu', out='notadir'):\n    y = torch.ones(10)\n"
        "r = Recorder(step=3, device='cpu', out='notadir')\n"
        "with r:\n    z = torch.ones(10)\n"
        "with r:\n    z = torch.ones(10)\n"  # used again: its own line
    )
    (tmp_path / "s.py").write_text(script)
    proc = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if "RuntimeWarning: memsnap: could not write" in line]
    assert len(said) == 4
    assert "s.py:8: RuntimeWarning" in said[2] and "s.py:10: RuntimeWarning" in said[3]
    assert "s.py:3: RuntimeWarning" in said[0] and "step 1 is kept in memory only" in said[0]
    assert "s.py:5: RuntimeWarning" in said[1] and "step 2 is kept in memory only" in said[1]
