"""Faults in the notebook flow: the user's cell and every snapshot we said we wrote survive."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

from memsnap_magic import load_snapshot, session
from memsnap_magic.state import STATE


def test_out_of_memory_error_is_dumped_and_reaches_the_user_unchanged(shell):
    import torch

    # torch.OutOfMemoryError is new in torch 2.5; torch.cuda's is the same class there and older
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    shell.run_cell("import torch")
    shell.user_ns["OOM"] = oom
    res = shell.run_cell(
        "%%memsnap step=3\nbuf = torch.empty(2**20, dtype=torch.uint8)\n"
        "raise OOM('CUDA out of memory. Tried to allocate 80.00 GiB')"
    )
    assert type(res.error_in_exec) is oom
    assert "Tried to allocate 80.00 GiB" in str(res.error_in_exec)
    (iv,) = session().intervals
    assert iv.error == "OutOfMemoryError" and iv.path.exists() and iv.peak_allocated == 1 << 20
    assert STATE.recording_devices() == []


def test_full_disk_warns_once_and_keeps_the_result(shell, monkeypatch):
    import memsnap_magic.snapshot as snapshot_module

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(snapshot_module.pickle, "dump", no_space)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap step=1\nvalue = 6 * 7\nvalue")
    assert res.success and res.result == 42
    ours = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(ours) == 1 and "No space left on device" in ours[0] and "step1" in ours[0]
    assert session().intervals[0].path is None
    assert not [p for p in Path("memsnap").rglob("*") if p.is_file()]  # no partial or temporary file
    assert STATE.recording_devices() == []


def test_a_process_killed_mid_dump_leaves_no_file_under_the_final_name(tmp_path):
    final = tmp_path / "step1" / "torch_memory_rank0_pid1.pickle"
    script = textwrap.dedent(f"""
        import sys
        from memsnap_magic.snapshot import dump_snapshot
        entry = {{"action": "alloc", "addr": 1, "size": 8, "stream": 0, "time_us": 0,
                  "frames": [{{"filename": "x" * 200, "line": 1, "name": "f"}}] * 4}}
        snap = {{"segments": [], "device_traces": [[dict(entry, addr=i) for i in range(1_500_000)]]}}
        print("ready", flush=True)
        dump_snapshot(snap, {str(final)!r})
        print("done", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while not list(final.parent.glob(".*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert list(final.parent.glob(".*.tmp")), "the dump never started writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not final.exists()


def test_two_kernels_writing_to_one_folder_keep_both_files(tmp_path):
    code = textwrap.dedent("""
        import os
        from IPython.core.interactiveshell import InteractiveShell
        sh = InteractiveShell.instance()
        sh.run_line_magic("load_ext", "memsnap_magic")
        r = sh.run_cell("%%memsnap step=1 device=cpu\\nimport torch\\nx = torch.ones(1000)")
        assert r.success
        print(os.getpid())
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    pids = sorted(int(p.communicate()[0].strip().splitlines()[-1]) for p in procs)
    files = sorted((tmp_path / "memsnap" / "step1").glob("*.pickle"))
    assert [f.name for f in files] == sorted(f"torch_memory_rank0_pid{pid}.pickle" for pid in pids)
    assert all(load_snapshot(f)["memsnap"]["pid"] in pids for f in files)


def test_snapshot_that_cannot_be_taken_never_fails_the_cell(shell, monkeypatch):
    from memsnap_magic.backends.cpu import CpuBackend

    def broken(self):
        raise RuntimeError("profiler went away")

    monkeypatch.setattr(CpuBackend, "snapshot", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap\nanswer = 42")
    assert res.success and shell.user_ns["answer"] == 42
    assert any("profiler went away" in str(w.message) for w in caught)
    assert STATE.recording_devices() == []


def test_a_running_torch_profiler_is_left_alone(shell):
    import torch
    from IPython.core.error import UsageError

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        res = shell.run_cell("%%memsnap device=cpu\nran = torch.ones(3).sum()")
        torch.ones(5).sum()
    assert isinstance(res.error_in_exec, UsageError) and "torch.profiler is already running" in str(res.error_in_exec)
    assert "ran" not in shell.user_ns
    assert any(e.name == "aten::sum" for e in prof.events())  # the user's profile is intact


def test_recording_that_fails_to_start_leaves_the_cell_running(shell, monkeypatch):
    from memsnap_magic.backends.cpu import CpuBackend

    def broken(self, **kwargs):
        raise RuntimeError("kineto is unhappy")

    monkeypatch.setattr(CpuBackend, "begin", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap device=cpu\nvalue = 6 * 7\nvalue")
    assert res.success and res.result == 42
    assert any("kineto is unhappy" in str(w.message) and "unrecorded" in str(w.message) for w in caught)
    assert session().intervals == []


def test_a_dashboard_that_fails_to_redraw_does_not_fail_the_cell(shell, monkeypatch):
    import memsnap_magic
    from memsnap_magic import widget

    dash = memsnap_magic.dashboard()

    def broken(*args, **kwargs):
        raise ValueError("no fonts today")

    monkeypatch.setattr(widget.plots, "overview_figure", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap device=cpu\nv = 1\nraise KeyError('mine')")
    assert isinstance(res.error_in_exec, KeyError)  # the user's own exception, not ours
    assert any("no fonts today" in str(w.message) for w in caught)
    assert len(session().intervals) == 1
    dash.close()
