"""OOM reports from the trace's ``oom`` entry: what was asked, what was free, and what held the
memory at that moment — on a real CUDA file (tests/data/cuda_oom.pickle, from an H200), on
traces of our own, and on the CPU route, whose allocator raises a ``RuntimeError`` instead."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from snapshots import alloc, free, snapshot
from test_widget import interval

from memsnap_magic import session
from memsnap_magic.files.snapshot import load_snapshot
from memsnap_magic.results.intervals import interval_from_snapshot
from memsnap_magic.results.scan import read_run
from memsnap_magic.results.session import Session
from memsnap_magic.views.dashboard import Dashboard
from memsnap_magic.views.explain import oom_report
from memsnap_magic.views.report import describe

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parent.parent


def test_a_real_cuda_oom_is_reported_from_its_file():
    # the report the GPU run made from this file as it was written (benchmarks/results/gpu.json)
    on_gpu = json.loads((ROOT / "benchmarks" / "results" / "gpu.json").read_text())["oom"]["report"]
    (iv,) = read_run([DATA / "cuda_oom.pickle"])
    assert iv.oom["requested"] == 4_000_000_000_000_000  # torch.empty(10**15) of float32, as the script asked
    assert iv.oom["device_free"] == on_gpu["device_free"] > 100 << 30  # an H200 with little of it used
    assert iv.oom["allocated"] == iv.peak_allocated == on_gpu["allocated"]  # the request came last
    assert sum(nbytes for _, nbytes, _ in iv.oom["sites"]) <= iv.oom["allocated"]
    assert iv.oom["site"] == on_gpu["site"] and iv.oom["site"].endswith(":3)")  # the failed request's own line
    report = oom_report(iv)
    free = f"{on_gpu['device_free'] / (1 << 30):.1f} GiB"
    # the file knows the device's total too (read as the step began): "free of 139.8 GiB"
    assert re.match(
        rf"out of memory: asked for 3638\.0 TiB at {re.escape(on_gpu['site'])} with {free} free of 1\d\d\.\d GiB; "
        r"365\.1 MiB allocated then",
        report,
    ), report
    leak_site = next(site for site, nbytes, _ in on_gpu["sites"] if nbytes == 64 << 20)  # a leaking step's line
    assert f"{leak_site} 64.0 MiB" in report
    assert "out of memory asking for 3638.0 TiB" in describe(iv)


def test_what_was_alive_at_the_failure_not_at_the_end():
    trace = [
        *alloc(0x100, 1000),
        *alloc(0x200, 3000),
        {"action": "oom", "addr": 0, "size": 10**9, "device_free": 500, "stream": 0},
        *free(0x200, 3000),  # freed as the exception unwound
    ]
    for e, category in zip(trace, ["parameter", "activation", "unknown", "activation", "activation"]):
        e["category"] = category
    iv = interval_from_snapshot(snapshot(trace, {0x100: 1000}))
    assert iv.end_allocated == 1000 and iv.oom["allocated"] == 4000
    assert iv.oom["by_category"] == {"parameter": 1000, "activation": 3000}
    assert "(parameter 1.0 KiB, activation 2.9 KiB)" in oom_report(iv)


def test_no_oom_no_report_and_the_dashboard_says_it_in_the_step():
    s = Session()
    s.add(interval(1, 0, 10, 0))
    failed = interval(2, 0, 20, 0, error="OutOfMemoryError")
    failed = replace(
        failed,
        oom={
            "requested": 1 << 40,
            "site": None,
            "device_free": 1 << 20,
            "allocated": 20,
            "by_category": None,
            "sites": [],
        },
    )
    s.add(failed)
    assert s.intervals[0].oom is None and oom_report(s.intervals[0]) is None
    d = Dashboard(s)
    assert "out of memory: asked for 1.0 TiB with 1.0 MiB free" in d.error.value
    d.step.value = 0
    assert d.error.value == ""


PiB = 1 << 50
MiB = 1 << 20


@pytest.fixture
def cpu(cpu):
    cpu.run_line_magic("memsnap", "config device=cpu wait=true")
    return cpu


def test_a_cpu_cell_that_runs_out_of_memory_gets_the_report(cpu, capsys):
    cpu.run_cell("def grow(n):\n    return torch.empty(n, dtype=torch.uint8)")
    res = cpu.run_cell("%%memsnap step=1\nheld = torch.ones(2 * 2**20)\nbig = grow(2**50)\n")
    # the cell fails as it would without the magic: PyTorch's own error, unchanged
    assert type(res.error_in_exec) is RuntimeError and "DefaultCPUAllocator" in str(res.error_in_exec)
    (iv,) = session().intervals
    assert iv.error == "RuntimeError"
    assert iv.oom["requested"] == PiB
    assert iv.oom["site"] == "grow (cell In[1]:2)"  # the line whose call asked, innermost
    assert iv.oom["allocated"] == iv.baseline_allocated + 8 * MiB
    assert iv.oom["sites"][0][:2] == ["<module> (cell In[1]:2)", 8 * MiB]  # (the test shell numbers every cell 1)
    assert iv.oom["device_free"] is None or iv.oom["device_free"] > 0
    assert "out of memory asking for 1024.0 TiB" in capsys.readouterr().out
    assert oom_report(iv).startswith("out of memory: asked for 1024.0 TiB at grow (cell In[1]:2)")
    # the file says the same, read back from the snapshot and from its summary
    (entry,) = [e for e in load_snapshot(iv.path)["device_traces"][0] if e["action"] == "oom"]
    assert entry["size"] == PiB and entry["user_metadata"] == "memsnap step 1"
    assert entry["frames"][0]["name"] == "grow"
    assert Path(str(iv.path) + ".summary.json").is_file()
    (from_summary,) = read_run([iv.path])
    assert interval_from_snapshot(load_snapshot(iv.path)).oom == from_summary.oom == iv.oom


def test_a_wrapped_allocator_failure_is_found_and_other_errors_are_not_oom(tmp_path):
    import torch

    from memsnap_magic import Recorder

    recorded = {"device": "cpu", "out": tmp_path, "namespace": {}, "wait": True}
    with pytest.raises(ValueError, match="the batch did not fit"), Recorder(step=1, **recorded):
        try:
            torch.empty(PiB, dtype=torch.uint8)
        except RuntimeError as e:
            raise ValueError("the batch did not fit") from e
    with pytest.raises(RuntimeError, match="inconsistent tensor size"), Recorder(step=2, **recorded):
        torch.ones(3) @ torch.ones(4)
    first, second = session().intervals
    assert first.oom["requested"] == PiB and first.error == "ValueError"
    assert second.oom is None and second.error == "RuntimeError"


def test_an_allocator_failure_the_cell_caught_leaves_no_report_on_the_cpu(cpu):
    """The CPU allocator raises and tells nobody else (accelerators record their own ``oom``
    entry): a failure the cell's own code handles is not seen (README, OOM reports)."""
    cpu.run_cell("%%memsnap step=1\ntry:\n    torch.empty(2**50, dtype=torch.uint8)\nexcept RuntimeError:\n    pass")
    (iv,) = session().intervals
    assert iv.error is None and iv.oom is None


def test_a_failure_handled_and_hidden_with_from_none_is_not_an_oom(tmp_path):
    import torch

    from memsnap_magic import Recorder

    with pytest.raises(KeyError), Recorder(step=1, device="cpu", out=tmp_path, namespace={}, wait=True):
        try:
            torch.empty(PiB, dtype=torch.uint8)
        except RuntimeError:
            raise KeyError("a smaller batch, then something else went wrong") from None
    (iv,) = session().intervals
    assert iv.oom is None and iv.error == "KeyError"
