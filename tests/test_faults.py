"""Faults in the notebook flow: the user's cell and every snapshot we said we wrote survive."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from memsnap_magic import load_snapshot, session, wait_for_writes
from memsnap_magic.files.snapshot import dump_snapshot
from memsnap_magic.recording.process_state import STATE


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
    wait_for_writes()
    assert iv.error == "OutOfMemoryError" and iv.path.exists() and iv.peak_allocated == 1 << 20
    assert STATE.recording_devices() == []


def test_full_disk_warns_once_and_keeps_the_result(shell, monkeypatch):
    import memsnap_magic.files.snapshot as snapshot_module

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(snapshot_module.pickle, "dump", no_space)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap step=1\nvalue = 6 * 7\nvalue")
        wait_for_writes()  # the write runs in the background; its failure is said when waited for
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
        from memsnap_magic.files.snapshot import dump_snapshot
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
    assert sorted(f.name.split("-")[0] for f in files) == [f"torch_memory_rank0_pid{pid}" for pid in pids]
    assert all(load_snapshot(f)["memsnap"]["pid"] in pids for f in files)


def test_snapshot_that_cannot_be_taken_never_fails_the_cell(shell, monkeypatch):
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend

    def broken(self, *mark):
        raise RuntimeError("profiler went away")

    monkeypatch.setattr(CpuBackend, "snapshot", broken)
    monkeypatch.setattr(CpuBackend, "snapshot_marked", broken)  # what the recorder calls
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
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend

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
    from memsnap_magic.views import dashboard as widget

    dash = memsnap_magic.dashboard()

    def broken(*args, **kwargs):
        raise ValueError("no fonts today")

    monkeypatch.setattr(widget.charts, "overview_figure", broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap device=cpu\nv = 1\nraise KeyError('mine')")
    assert isinstance(res.error_in_exec, KeyError)  # the user's own exception, not ours
    assert any("no fonts today" in str(w.message) for w in caught)
    assert len(session().intervals) == 1
    dash.close()


# --- recording left on, nested, stopped or interrupted inside the cell -------------------------


def profiler_on() -> bool:
    from torch._C._autograd import _profiler_enabled

    return _profiler_enabled()


def ours(caught) -> list[str]:
    return [str(w.message) for w in caught if "memsnap" in str(w.message)]


INSIDE = {
    "%memsnap off": "get_ipython().run_line_magic('memsnap', 'off')",
    "%reload_ext": "get_ipython().run_line_magic('reload_ext', 'memsnap_magic')",
    "nested %%memsnap": "get_ipython().run_cell_magic('memsnap', 'device=cpu', 'inner = torch.ones(50)')",
    "Recorder": "from memsnap_magic import Recorder\nwith Recorder(device='cpu', out='elsewhere'):\n"
    "    inner = torch.ones(50)",
}


@pytest.mark.parametrize("inside", INSIDE, ids=list(INSIDE))
def test_nothing_is_left_recording_whatever_runs_inside_the_cell(shell, inside):
    shell.run_cell("import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell(f"%%memsnap step=1 device=cpu\nx = torch.ones(100)\n{INSIDE[inside]}\nvalue = 7\nvalue")
    assert res.success and res.result == 7
    assert len(ours(caught)) <= 1  # the one line that says what happened, if anything did
    assert STATE.recording_devices() == [] and not profiler_on()
    res = shell.run_cell("%%memsnap step=2 device=cpu\ny = torch.empty(2**20, dtype=torch.uint8)")
    assert res.success and STATE.recording_devices() == [] and not profiler_on()
    two = next(iv for iv in session().intervals if iv.step == 2)
    assert two.peak_increase == 1 << 20 and not Path("elsewhere").exists()


def test_off_stops_a_clear_false_recording_for_real(shell):
    shell.run_cell("import torch")
    shell.run_cell("%%memsnap step=1 device=cpu clear=false\nx = torch.ones(10)")
    assert profiler_on()
    shell.run_line_magic("memsnap", "off")
    assert not profiler_on() and STATE.recording_devices() == []


def test_a_second_interrupt_while_dumping_keeps_the_cells_outcome(shell, monkeypatch):
    import memsnap_magic.files.snapshot as snapshot_module
    import memsnap_magic.recording.recorder as recorder_module

    real = snapshot_module.dump_snapshot
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the user's second Ctrl-C, while we write
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot_module, "dump_snapshot", interrupted)
    shell.run_cell("import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # wait=true: the write is in the cell's time, where a Ctrl-C can reach it
        res = shell.run_cell("%%memsnap step=1 device=cpu wait=true\nx = torch.ones(1000)\n6 * 7")
    assert res.success and res.result == 42
    assert any("interrupted while taking or writing the snapshot of step 1" in m for m in ours(caught))
    assert not list(Path(".").rglob("*.pickle*")) and not profiler_on()
    assert shell.run_cell("%%memsnap step=2 device=cpu\ny = torch.empty(2**20, dtype=torch.uint8)").success
    (two,) = [iv for iv in session().intervals if iv.step == 2]
    wait_for_writes()
    sizes = [e["size"] for e in load_snapshot(two.path)["device_traces"][0] if e["action"] == "alloc"]
    assert sizes == [1 << 20]  # nothing of the interrupted step's events
    assert recorder_module.STATE.recording_devices() == []


def test_an_interrupt_handing_the_snapshot_to_a_busy_writer_leaves_no_path(shell, monkeypatch):
    """The hand-over blocks while the write before is pending: a Ctrl-C there writes no file,
    and the interval, already in the session, says so (``path=None``)."""
    from memsnap_magic.files.writer import WRITER

    def busy(job, what, where=None):
        raise KeyboardInterrupt  # the user's Ctrl-C while the queue is full

    shell.run_cell("import torch")
    monkeypatch.setattr(WRITER, "submit", busy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell("%%memsnap step=1 device=cpu\nx = torch.ones(1000)\n6 * 7")
    assert res.success and res.result == 42
    assert any("interrupted while taking or writing the snapshot of step 1" in m for m in ours(caught))
    (one,) = session().intervals
    assert one.path is None


def test_await_in_a_cell_says_how_to_record_it(shell):
    from IPython.core.error import UsageError

    shell.run_cell("import asyncio, torch")
    res = shell.run_cell("%%memsnap\nawait asyncio.sleep(0)\nran = True")
    assert isinstance(res.error_in_exec, UsageError) and "async with memsnap_magic.Recorder" in str(res.error_in_exec)
    assert "ran" not in shell.user_ns and session().intervals == [] and not profiler_on()
    res = shell.run_cell(
        "from memsnap_magic import Recorder\n"
        "async with Recorder(step=4, device='cpu'):\n"
        "    await asyncio.sleep(0)\n"
        "    t = torch.empty(2**20, dtype=torch.uint8)\n"
    )
    assert res.success
    (iv,) = session().intervals
    assert iv.step == 4 and iv.peak_increase == 1 << 20


def test_config_defaults_can_be_unset_and_conflicts_are_usage_errors(shell):
    from IPython.core.error import UsageError

    shell.run_line_magic("memsnap", "config steps=1,2 tag=fwd")
    with pytest.raises(UsageError, match="not both"):
        shell.run_cell_magic("memsnap", "step=5", "ran = 1")
    with pytest.raises(UsageError, match="not both"):
        shell.run_line_magic("memsnap", "config step=3")
    assert session().defaults == {"steps": (1, 2), "tag": "fwd"}  # a refused config changes nothing
    shell.run_line_magic("memsnap", "config steps=")
    assert session().defaults == {"tag": "fwd"}
    assert shell.run_cell("%%memsnap step=5\nran = 1").success
    assert session().last.step == 5 and session().last.tag == "fwd"


def test_an_exception_that_refuses_attributes_reaches_the_user_as_it_is(shell, capsys):
    res = shell.run_cell(
        "class Sticky(Exception):\n"
        "    def __setattr__(self, name, value):\n"
        "        raise RuntimeError('no attributes here')\n"
        "def boom():\n"
        "    raise Sticky('mine')\n"
    )
    res = shell.run_cell("%%memsnap device=cpu\nboom()")
    assert type(res.error_in_exec).__name__ == "Sticky" and str(res.error_in_exec) == "mine"
    assert session().intervals[0].error == "Sticky"
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "Sticky: mine" in text and "run_cell_magic" not in text and "skipping hidden" not in text


def test_an_interrupt_while_recording_starts_shows_none_of_our_frames(shell, monkeypatch, capsys):
    from memsnap_magic.recording.recorder import Recorder

    def interrupted(self, *args):
        raise KeyboardInterrupt  # as a Ctrl-C while the first cell imports torch

    monkeypatch.setattr(Recorder, "_start", interrupted)
    res = shell.run_cell("%%memsnap device=cpu\nran = 1")
    assert isinstance(res.error_in_exec, KeyboardInterrupt) and "ran" not in shell.user_ns
    out = capsys.readouterr()
    assert "KeyboardInterrupt" in out.out + out.err and "memsnap_magic" not in out.out + out.err
    assert STATE.recording_devices() == []


@pytest.mark.parametrize(
    "define, written",
    [
        ("class Ошибка(Exception): pass\nE = Ошибка", "Ошибка"),
        ("E = type('no such name', (KeyError,), {})", "KeyError"),
        ("E = type('x' * 300, (Exception,), {})", "Exception"),
    ],
    ids=["non-ASCII", "spaces", "too long"],
)
def test_any_exception_name_makes_a_file_that_loads(shell, define, written):
    from memsnap_magic.results.scan import read_intervals

    shell.run_cell(define)
    res = shell.run_cell("%%memsnap device=cpu\nraise E('mine')")
    assert type(res.error_in_exec) is shell.user_ns["E"]
    (iv,) = session().intervals
    assert iv.error == written
    wait_for_writes()
    (again,) = read_intervals([iv.path])
    assert again.error == written


def test_tags_that_would_hide_files_are_refused(shell):
    from IPython.core.error import UsageError

    for tag in (".hidden", "..", "-dash"):
        with pytest.raises(UsageError, match="tag="):
            shell.run_cell_magic("memsnap", f"tag={tag}", "pass")


def test_names_too_long_for_a_file_are_refused_before_the_cell_runs(shell):
    """100 letters of a script that takes 3 bytes each passed the check, then the write failed
    (`File name too long`) and the step was kept in memory only."""
    from IPython.core.error import UsageError

    for line, words in (
        ("tag=" + "漢" * 61, "183 bytes as UTF-8; at most 180 fit in a file name"),
        ("run=" + "漢" * 80, "240 bytes as UTF-8; at most 180 fit in a folder name"),
        ("tag=" + "a" * 101, "101 characters; at most 100"),
    ):
        with pytest.raises(UsageError, match=words):
            shell.run_cell_magic("memsnap", f"device=cpu {line}", "ran = True")
    assert "ran" not in shell.user_ns
    shell.run_cell_magic("memsnap", f"device=cpu wait=true tag={'漢' * 60} run={'漢' * 60}", "x = 1")
    (iv,) = session().intervals
    assert iv.path is not None and iv.path.exists() and Path(str(iv.path) + ".summary.json").exists()


def test_two_processes_with_one_pid_keep_both_files(tmp_path):
    # as two kernels in their own PID namespaces would: both are pid 1
    code = textwrap.dedent("""
        import os
        os.getpid = lambda: 1
        from memsnap_magic import Recorder
        with Recorder(step=1, device="cpu", out="shared"):
            import torch
            x = torch.ones(1000)
    """)
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True)
    files = sorted((tmp_path / "shared" / "step1").glob("*.pickle"))
    assert len(files) == 2 and all(f.name.startswith("torch_memory_rank0_pid1-") for f in files)


def test_the_namespace_walk_stops_at_its_limit():
    import torch

    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages

    pulled = []

    class Counting(list):
        def __iter__(self):
            for item in super().__iter__():
                pulled.append(1)
                yield item

    kept = torch.ones(10)
    ns = {"big": Counting(range(10**6)), "t": kept}
    found = live_storages(ns, limit=1000)
    assert len(pulled) <= 1000
    assert kept.untyped_storage().data_ptr() not in found or len(pulled) < 1000
    assert live_storages({"t": kept}, limit=1000) == {kept.untyped_storage().data_ptr(): 40}


def test_a_models_tensors_and_modules_are_charged_to_the_walk_not_their_other_attributes():
    import torch

    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages

    # the list, its 40 layers and their 80 tensors: 121, whatever else the layers hold (each
    # Linear keeps in_features, out_features and torch's own bookkeeping too)
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(40)))
    assert len(live_storages({"model": model}, limit=125)) == 80


def test_the_walk_reads_every_name_before_what_the_objects_hold(monkeypatch):
    import torch

    from memsnap_magic.recording.backends.cpu import live_tensors
    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages

    x = torch.ones(1000, dtype=torch.float64)

    class Vocab:
        words = {str(i): i for i in range(60_000)}  # noqa: RUF012

    def lookup(word, table={str(i): i for i in range(60_000)}):  # noqa: B006
        return table[word]

    # a big container (a plain one, a class attribute, a default) named before x spends the
    # budget only after every name was looked at
    for big in ({str(i): i for i in range(60_000)}, Vocab, lookup):
        ns = {"__name__": __name__, "big": big, "x": x}
        assert live_storages(ns) == {x.untyped_storage().data_ptr(): 8000}

    # a model nested two thousand deep is read whole (no recursion), and a tree of modules
    # without a tensor costs what the budget allows, not its 111,111 modules
    deep = torch.nn.Linear(2, 2)
    for _ in range(2000):
        deep = torch.nn.Sequential(deep)
    assert len(live_storages({"deep": deep})) == 2

    def tree(d):
        return torch.nn.Identity() if d == 0 else torch.nn.ModuleList([tree(d - 1) for _ in range(10)])

    read = []
    members = live_tensors.module_members
    monkeypatch.setattr(live_tensors, "module_members", lambda *a: read.append(1) or members(*a))
    live_storages({"m": tree(5)}, limit=100)
    assert 0 < len(read) <= 100


def test_the_walks_read_an_optimizers_state_without_running_a_property_of_its_class():
    import torch

    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages
    from memsnap_magic.recording.retention import find_holders

    ran = []

    class Watched(torch.optim.SGD):
        @property
        def state(self):
            ran.append("state")
            return self.__dict__["state"]

        @state.setter
        def state(self, value):
            self.__dict__["state"] = value

    class Wrapper(torch.optim.Optimizer):  # as accelerate's: the real one kept, its state a property
        def __init__(self, optimizer):
            self.optimizer = optimizer

        @property
        def state(self):
            ran.append("wrapper")
            return self.optimizer.state

    w = torch.nn.Parameter(torch.ones(4))
    inner = Watched([w], lr=0.1, momentum=0.9)
    w.grad = torch.ones(4)
    inner.step()
    ran.clear()
    buf = inner.__dict__["state"][w]["momentum_buffer"]
    ptr = buf.untyped_storage().data_ptr()
    for opt in (inner, Wrapper(inner)):
        assert ptr in live_storages({"opt": opt})
        found = find_holders({"opt": opt}, {ptr: buf.untyped_storage().nbytes()}, "cpu")
        assert found["rows"] and found["rows"][0][0].startswith("opt")
    assert ran == []


def test_the_walk_finds_what_unusual_holders_keep_and_runs_none_of_their_code():
    import numpy as np
    import torch

    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages

    def ptr(t):
        return t.untyped_storage().data_ptr()

    ran = []
    x = torch.ones(10)
    # a module of many attributes charges reading them to what no waiting name needs
    wide = torch.nn.Module()
    for i in range(300):
        setattr(wide, f"a{i}", i)
    assert ptr(x) in live_storages({"wide": wide, "x": x}, limit=100)

    # LBFGS keeps its history in lists, in each parameter's state
    w = torch.nn.Parameter(torch.randn(8))
    lbfgs = torch.optim.LBFGS([w], history_size=3, max_iter=4)
    lbfgs.step(lambda: (lbfgs.zero_grad(), (w**2).sum().backward(), (w**2).sum())[-1])
    history = {ptr(t) for v in lbfgs.state[w].values() if isinstance(v, list) for t in v if t is not None}
    assert history and history <= live_storages({"opt": lbfgs}).keys()

    # a retained gradient; a numpy subclass viewing a tensor; a dict subclass's own attributes
    y = torch.ones(4, requires_grad=True) * 2
    y.retain_grad()
    y.sum().backward()
    a = torch.ones(2, 3)

    class Config(dict):
        pass

    cfg = Config()
    cfg.t = torch.ones(5)
    found = live_storages({"y": y, "view": a.numpy().view(np.matrix), "cfg": cfg})
    assert {ptr(y.grad), ptr(a), ptr(cfg.t)} <= found.keys()

    # a tensor subclass's own properties, a key that collides with "__name__"
    class Watched(torch.Tensor):
        @property
        def device(self):
            ran.append("device")
            return torch.device("cpu")

    class Key(str):
        armed = False

        def __hash__(self):
            return hash("__name__")

        def __eq__(self, other):
            if self.armed:
                ran.append("eq")
                raise RuntimeError("no")
            return str.__eq__(self, other)

    key = Key("k")
    ns = {key: 1, "__name__": "__main__", "w": torch.ones(3).as_subclass(Watched)}
    key.armed = True  # now a lookup of "__name__" would run it
    assert len(live_storages(ns)) == 1 and ran == []

    class Names(dict):
        def values(self):
            ran.append("values")
            return super().values()

    from memsnap_magic.recording.roles import training_objects

    model = torch.nn.Linear(2, 2)
    assert training_objects(Names(model=model)) == ([model], []) and ran == []


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    for n in range(30):
        dump_snapshot(
            {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 8}]]},
            tmp_path / f"step{n}" / "x_rank0.pickle",
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


@pytest.mark.parametrize("context", ["all", "none"])  # none: the session without the CPU activity
def test_a_torch_profiler_inside_the_cell_is_reported_and_left_working(shell, capfd, context):
    from memsnap_magic.recording.backends.cpu.limits import TAKEN_OVER

    shell.run_cell("import torch")
    res = shell.run_cell(
        f"%%memsnap step=1 device=cpu context={context}\na = torch.ones(1000)\n"
        "with torch.profiler.profile() as prof:\n    b = torch.ones(2000).sum()\nc = torch.ones(3000)"
    )
    assert res.success and session().last.incomplete == TAKEN_OVER
    out, err = capfd.readouterr()
    assert f"incomplete: {TAKEN_OVER}" in out and "disableProfiler" not in err
    assert any(e.name == "aten::sum" for e in shell.user_ns["prof"].events())  # theirs is intact
    # one left running past the cell is theirs: not stopped by us, and the next cell says so
    res = shell.run_cell(
        f"%%memsnap step=2 device=cpu context={context}\n"
        "prof2 = torch.profiler.profile()\nprof2.start()\nd = torch.ones(10).sum()"
    )
    assert res.success and session().last.incomplete == TAKEN_OVER and profiler_on()
    shell.run_cell("prof2.stop()")
    assert any(e.name == "aten::sum" for e in shell.user_ns["prof2"].events()) and not profiler_on()
    assert shell.run_cell(f"%%memsnap step=3 device=cpu context={context}\ne = torch.ones(100)").success
    assert session().last.incomplete is None and session().last.trace_entries > 0


def test_a_huge_cpu_interval_says_once_what_the_profiler_holds(shell, monkeypatch):
    from memsnap_magic.recording.backends.cpu import limits as cpu

    monkeypatch.setattr(cpu, "HUGE", 500)
    monkeypatch.setattr(cpu, "STACKS_HINT", 500)
    STATE.warned -= {"cpu-huge", "cpu-stacks"}
    shell.run_cell("import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in (1, 2):
            assert shell.run_cell(
                f"%%memsnap step={step} device=cpu\nfor _ in range(400):\n    t = torch.empty(4)"
            ).success
    said = [m for m in ours(caught) if "CPU allocation events" in m]
    assert len(said) == 2  # each said once, at the first step
    assert "steps=1,5,10" in said[1] and "2 KB of each" in said[1]
    assert "context=none records without it" in said[0]
    STATE.warned -= {"cpu-huge", "cpu-stacks"}


def test_an_interrupt_in_mark_leaves_no_optimizer_hook_behind(tmp_path, monkeypatch):
    """The watch of a listed step is hooked before its start is taken: a Ctrl-C there must not
    leave PyTorch's global step hook on for the rest of the process."""
    import torch
    from torch.optim import optimizer as optimizers

    from memsnap_magic import Recorder, mark
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = len(optimizers._global_optimizer_pre_hooks)

    def interrupted(self, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(CpuBackend, "begin", interrupted)
    with pytest.raises(KeyboardInterrupt), Recorder(steps=[1, 2], device="cpu", out=tmp_path, namespace={}):
        for step in (1, 2):
            mark(step)
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    assert len(optimizers._global_optimizer_pre_hooks) == before


def test_a_script_ending_with_a_never_cleared_history_on_exits_cleanly(tmp_path):
    """PyTorch's profiler, still on while the interpreter tears down, crashed the process."""
    script = (
        "import torch\nfrom memsnap_magic import Recorder\n"
        "with Recorder(step=1, clear=False, out='out', device='cpu'):\n    x = torch.ones(1000)\nprint('done')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]
    assert len(list((tmp_path / "out").rglob("*.pickle"))) == 1


def test_two_threads_starting_blocks_at_once_record_one_and_say_so(tmp_path):
    import threading

    import torch

    from memsnap_magic import Recorder

    gate = threading.Barrier(2)

    def block(rank: int) -> None:
        gate.wait()  # both start at once
        with Recorder(step=2, out=tmp_path, device="cpu", rank=rank, namespace={}):
            torch.ones(2**18)
            time.sleep(0.3)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=block, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    (iv,) = session().intervals  # one recording, in the session the other thread also sees
    assert iv.trace_entries > 0
    assert any("already recorded by a block in another thread" in m for m in ours(caught))


def test_a_steps_loop_after_a_never_cleared_cell_says_the_history_ended(shell):
    shell.run_cell("import torch")
    assert shell.run_cell("%%memsnap step=1 device=cpu clear=false\na = torch.ones(1000)").success
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell(
            "%%memsnap steps=2,3 device=cpu\nfor s in (2, 3):\n    mark(s)\n    b = torch.ones(100 * s)"
        )
    assert res.success
    assert any("ended here: a steps= loop records each listed step from a fresh history" in m for m in ours(caught))
    assert [iv.step for iv in session().intervals] == [1, 2, 3]


def test_stop_from_another_thread_leaves_the_cpu_recording_to_its_own_thread(tmp_path):
    """The CPU profiler's session lives in the thread that started it: stopped from another one,
    it wrote an empty step, memsnap forgot it was on, and the process crashed at exit."""
    script = textwrap.dedent(
        """
        import threading, warnings, torch
        from memsnap_magic import Recorder, session
        from memsnap_magic.recording.process_state import STATE
        warnings.simplefilter("always")
        r = Recorder(step=1, device="cpu", out="out", wait=True)
        r.start()
        x = torch.ones(500)
        t = threading.Thread(target=r.stop); t.start(); t.join()
        print("on", STATE.recording_devices(), len(session().intervals))
        r.stop()
        print("off", STATE.recording_devices(), session().last.trace_entries)
        r = Recorder(step=2, device="cpu", out="out")
        r.start()
        threading.Thread(target=r.stop).start()  # left on: the exit stops it in this thread
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "on ['cpu'] 0" in proc.stdout and "off [] 2" in proc.stdout
    assert proc.stderr.count("was started in another thread, and the CPU route stops only there") == 2


def test_mark_from_another_thread_is_refused_once_with_a_warning(cpu):
    import threading

    import torch

    from memsnap_magic import Recorder, mark

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(steps=[1, 2], device="cpu", wait=True, namespace={}):
            for step in (1, 2):
                t = threading.Thread(target=mark, args=(step,))
                t.start()
                t.join()
                torch.ones(1000 * step)
    said = ours(caught)
    assert sum("ran in another thread than the one recording" in m for m in said) == 1
    assert any("no listed step began" in m for m in said)
    assert session().intervals == [] and STATE.recording_devices() == []


@pytest.mark.parametrize("step", [2.7, True, "one", None, "tensor(True)"])
def test_mark_takes_integers_only_in_or_out_of_a_block(cpu, step):
    import numpy as np
    import torch

    if step == "tensor(True)":
        step = torch.tensor(True)

    from memsnap_magic import Recorder, mark

    with pytest.raises(TypeError, match=r"mark\(step\): step must be an integer"):
        mark(step)
    with Recorder(steps=[1], device="cpu", wait=True, namespace={}):
        mark(np.int64(1))  # numpy's integers are integers
        with pytest.raises(TypeError, match=r"mark\(step\): step must be an integer"):
            mark(step)
    assert [iv.step for iv in session().intervals] == [1]


def test_one_recorder_entered_again_inside_itself_leaves_the_outer_block_recording(cpu):
    import torch

    from memsnap_magic import Recorder

    r = Recorder(step=5, device="cpu", wait=True, namespace={})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with r:
            a = torch.ones(1000)
            with r:
                b = torch.ones(2000)
            c = torch.ones(1_000_000)
            del a, b, c
    assert any("already recorded by an enclosing block (step 5)" in m for m in ours(caught))
    (iv,) = session().intervals
    assert iv.peak_allocated - iv.baseline_allocated == 4_012_000  # c was recorded: the outer block went on
    assert STATE.recording_devices() == []


def test_a_recorder_used_again_says_again_that_no_listed_step_began(cpu):
    import torch

    from memsnap_magic import Recorder, mark

    r = Recorder(steps=[1, 2], device="cpu", wait=True, namespace={})
    with r:
        for step in (1, 2):
            mark(step)
            torch.ones(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with r:
            torch.ones(5)
    assert any("no listed step began" in m for m in ours(caught))


@pytest.mark.parametrize(
    "line", ["step=2 model=nope", "step=2 optimizer=nope", "step=2 run=other model=nope", "steps=2,3 model=nope"]
)
def test_a_cell_refused_for_its_options_leaves_a_never_cleared_history_running(shell, line):
    shell.run_cell("import torch")
    assert shell.run_cell("%%memsnap step=1 device=cpu clear=false\na = torch.ones(100)").success
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell(f"%%memsnap device=cpu {line}\nprint('ran')")
    assert not res.success and "no 'nope' in the namespace" in str(res.error_in_exec)
    assert not any("ended here" in m for m in ours(caught))
    assert STATE.recording_devices() == ["cpu"] and STATE.devices["cpu"].chain == ""
    assert shell.run_cell("%%memsnap step=2 device=cpu\nb = torch.ones(200)").success
    assert [iv.step for iv in session().intervals] == [1, 2]
    assert session().last.trace_entries >= 2  # step 1's history went on into step 2's file


def test_a_proxy_claiming_to_be_a_module_is_refused_by_its_type(shell):
    shell.run_cell(
        "import torch\nclass Proxy:\n    @property\n    def __class__(self):\n"
        "        return torch.nn.Module\nfake = Proxy()"
    )
    res = shell.run_cell("%%memsnap device=cpu model=fake\nx = 1")
    assert not res.success and "model=fake: that is a Proxy, not a torch.nn.Module" in str(res.error_in_exec)


@pytest.mark.parametrize("context", ["all", "none"])  # none: the session without the CPU activity
def test_a_torch_profiler_run_before_us_adds_no_lines_to_later_cells(tmp_path, context):
    """Kineto started by the user's profiler ignores our quiet log level: each recorded block
    printed two `USDT: … profiler_start/stop` lines."""
    script = textwrap.dedent(
        f"""
        import torch
        with torch.profiler.profile():
            torch.ones(10).sum()
        print("---", flush=True)
        from memsnap_magic import Recorder
        for step in (1, 2):
            with Recorder(step=step, device="cpu", out="out", wait=True, context="{context}"):
                x = torch.ones(10)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before = "USDT:" in proc.stderr  # the user's own profiler's lines, if this torch prints them
    assert proc.stderr.count("USDT:") == (2 if before else 0), proc.stderr
    assert "Failed to recover" not in proc.stderr  # the warning of a session without the CPU activity
    assert len(list((tmp_path / "out").rglob("*.pickle"))) == 2


def test_start_run_twice_is_ended_by_one_stop(cpu):
    """A cell running `r.start()` run again: the second start warns; one stop ends the recording
    (a count of re-entries on start() left it on for good, every later cell unrecorded)."""
    import torch

    from memsnap_magic import Recorder

    r = Recorder(step=1, device="cpu", wait=True, namespace={})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r.start()
        r.start()
        torch.ones(1000)
        r.stop()
    assert any("already recorded by an enclosing block (step 1)" in m for m in ours(caught))
    assert [iv.step for iv in session().intervals] == [1] and STATE.recording_devices() == []
    assert cpu.run_cell("%%memsnap step=2\nx = torch.ones(10)").success
    assert [iv.step for iv in session().intervals] == [1, 2]


def test_one_recorder_entered_by_two_threads_is_ended_by_the_block_that_owns_it(cpu):
    import threading

    import torch

    from memsnap_magic import Recorder

    r = Recorder(step=1, device="cpu", wait=True, namespace={})
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with r:  # enters while the main thread's block records: runs unrecorded
            inside.set()
            release.wait(10)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with r:
            t = threading.Thread(target=other)
            t.start()
            inside.wait(10)
            release.set()
            t.join()  # its exit must not end this block's recording
            kept = torch.ones(2**18)
    assert any("already recorded by a block in another thread" in m for m in ours(caught))
    (iv,) = session().intervals
    assert iv.end_allocated - iv.baseline_allocated == 2**20 and STATE.recording_devices() == []
    del kept


@pytest.mark.parametrize("ending", ["r.stop()", "pass"])  # stopped from another thread, or left to the exit
def test_a_recording_whose_thread_has_ended_is_given_up_cleanly(tmp_path, ending):
    """The profiler session dies with its thread: neither readable nor stoppable from another.
    Before, an empty step was written as 'taken over' and the process crashed at exit."""
    script = textwrap.dedent(
        f"""
        import sys, threading, torch
        from memsnap_magic import Recorder, session
        from memsnap_magic.recording.process_state import STATE
        r = Recorder(step=1, device="cpu", out="out", wait=True)
        t = threading.Thread(target=r.start); t.start(); t.join()
        # stopped as the thread ended: PyTorch's tracer no longer hooks this thread's calls
        print("after its thread", sys.getprofile(), STATE.cpu_profiler.running)
        {ending}
        if {ending!r} != "pass":
            print("written", len(session().intervals), STATE.recording_devices(), STATE.active, sys.getprofile())
            with Recorder(step=2, device="cpu", out="out", wait=True):
                x = torch.ones(10)
            print("steps", [iv.step for iv in session().intervals])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "after its thread None False" in proc.stdout, proc.stdout
    assert "the thread that started step 1 on cpu has ended" in proc.stderr
    assert "profile hook" not in proc.stderr, proc.stderr  # PyTorch may still warn of the lost session itself
    if ending != "pass":
        assert "written 0 [] [] None" in proc.stdout and "steps [2]" in proc.stdout, proc.stdout + proc.stderr


def test_a_recording_whose_thread_ended_does_not_block_the_next(tmp_path):
    script = textwrap.dedent(
        """
        import threading, torch
        from memsnap_magic import Recorder, session
        r = Recorder(step=1, device="cpu", out="out", wait=True)
        t = threading.Thread(target=r.start); t.start(); t.join()
        with Recorder(step=2, device="cpu", out="out", wait=True):  # r never stopped
            x = torch.ones(1000)
        print("steps", [iv.step for iv in session().intervals], session().intervals[-1].kept)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "steps [2] 4000" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "the thread that started step 1 on cpu has ended" in proc.stderr
    assert "already recorded" not in proc.stderr


def test_a_never_cleared_history_whose_thread_ended_is_given_up(tmp_path):
    script = textwrap.dedent(
        """
        import threading, torch
        from memsnap_magic import Recorder, session
        G = {}
        def worker():
            with Recorder(step=1, device="cpu", clear=False, wait=True, namespace=G):
                G["a"] = torch.ones(2**18)  # 1 MiB, kept
        t = threading.Thread(target=worker); t.start(); t.join()
        with Recorder(step=2, device="cpu", wait=True, namespace=G):
            x = torch.ones(2**19)  # 2 MiB
        iv = session().intervals[-1]
        print("step", iv.step, iv.baseline_allocated, iv.end_allocated)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"step 2 {2**20} {3 * 2**20}" in proc.stdout, proc.stdout + proc.stderr[-2000:]  # its own events
    assert "was recorded by a thread that has ended" in proc.stderr


def test_a_process_without_stderr_records(tmp_path):
    script = textwrap.dedent(
        """
        import sys, torch
        with torch.profiler.profile():  # kineto started first: our sessions would catch its lines
            torch.ones(10).sum()
        sys.stderr = None  # as under pythonw, or with descriptor 2 closed
        from memsnap_magic import Recorder, session
        with Recorder(step=1, device="cpu", out="out", wait=True):
            x = torch.ones(10)
        print("steps", [iv.step for iv in session().intervals])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "steps [1]" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_a_block_stopped_by_off_never_ends_or_dumps_the_next_ones_recording(cpu):
    import torch

    from memsnap_magic import Recorder

    r1 = Recorder(step=1, device="cpu", wait=True, namespace={})
    r2 = Recorder(step=2, device="cpu", wait=True, namespace={})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r1.start()
        cpu.run_line_magic("memsnap", "off")
        r2.start()
        a = torch.ones(1000)
        r1.stop()  # it took r2's recording and wrote it as step 1
        b = torch.ones(10)
        r2.stop()
    assert any("recording of step 1 on cpu was stopped inside the block" in m for m in ours(caught))
    (two,) = session().intervals
    assert two.step == 2 and two.trace_entries >= 4 and STATE.recording_devices() == []
    del a, b


def test_off_from_another_thread_leaves_a_threads_cpu_recording_to_it(cpu):
    import threading

    import torch

    from memsnap_magic import Recorder

    inside, release = threading.Event(), threading.Event()

    def block() -> None:
        with Recorder(step=1, device="cpu", wait=True, namespace={}):
            x = torch.ones(1000)
            inside.set()
            release.wait(10)
            del x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = threading.Thread(target=block)
        t.start()
        inside.wait(10)
        stopped = STATE.stop_all()  # what %memsnap off, reset and unload do
        release.set()
        t.join()
    assert stopped == [] and any("recorded by another thread, which alone can stop it" in m for m in ours(caught))
    (one,) = session().intervals
    assert one.step == 1 and one.trace_entries >= 2 and STATE.recording_devices() == []


def test_a_generator_holding_a_block_of_the_recorder_does_not_keep_it_recording(cpu):
    import torch

    from memsnap_magic import Recorder

    r = Recorder(step=1, device="cpu", wait=True, namespace={})

    def gen():
        with r:  # entered while the outer block records: runs unrecorded
            yield 1

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with r:
            g = gen()
            next(g)
            torch.ones(10)
        assert STATE.recording_devices() == [] and len(session().intervals) == 1  # the outer exit stopped it
        g.close()  # the generator's own exit ends nothing
    assert len(session().intervals) == 1 and STATE.recording_devices() == []


def test_warnings_of_a_recording_block_point_at_its_line_not_a_nested_ones(tmp_path):
    script = textwrap.dedent(
        """
        import warnings
        from memsnap_magic import Recorder, mark
        warnings.simplefilter("always")
        r = Recorder(steps=[1, 2], device="cpu", out="out", wait=True)
        def helper():
            with r:  # line 7: runs unrecorded
                pass
        with r:  # line 9: records
            mark(1)
            helper()
        """
    )
    (tmp_path / "s.py").write_text(script)
    proc = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (never,) = [line for line in proc.stderr.splitlines() if "never began" in line]
    assert "s.py:9: RuntimeWarning" in never
    (inner,) = [line for line in proc.stderr.splitlines() if "already recorded by an enclosing block" in line]
    assert "s.py:7: RuntimeWarning" in inner


def test_marks_of_a_sibling_asyncio_task_leave_anothers_steps_alone(cpu):
    """Two loops gathered on one recorder: the second one's mark() ended the first's steps
    (its files came out as steps 1, 1, 2, 3, 2, 3). Tasks made inside the block still mark."""
    import asyncio

    import torch

    from memsnap_magic import Recorder, mark

    r = Recorder(steps=[1, 2, 3], device="cpu", wait=True, namespace={})

    async def loop(steps: list[int]) -> None:
        async with r:
            for s in steps:
                mark(s)
                torch.ones(100 * s)
                await asyncio.sleep(0.01)

    async def both() -> None:
        await asyncio.gather(loop([1, 2, 3]), loop([2, 3]))

    async def children() -> None:
        async with Recorder(steps=[1, 2], device="cpu", wait=True, run="child", namespace={}):
            for s in (1, 2):

                async def step(s: int = s) -> None:
                    mark(s)
                    torch.ones(10)

                await asyncio.create_task(step())

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        asyncio.run(both())
        asyncio.run(children())
    assert [iv.step for iv in r.intervals] == [1, 2, 3]  # each step once, ended by its own loop
    assert [(iv.run, iv.step) for iv in session().intervals] == [("", 1), ("", 2), ("", 3), ("child", 1), ("child", 2)]
    assert len({iv.path for iv in session().intervals}) == 5
