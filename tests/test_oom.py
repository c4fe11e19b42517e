"""OOM reports from the trace's ``oom`` entry: what was asked, what was free, and what held the
memory at that moment — on a real CUDA file (tests/data/cuda_oom.pickle, from an H200) and on
traces of our own."""

from __future__ import annotations

from pathlib import Path

from snapshots import alloc, free, snapshot
from test_widget import interval

from memsnap_magic.intervals import interval_from_snapshot
from memsnap_magic.scan import read_run
from memsnap_magic.session_state import Session
from memsnap_magic.text import describe, oom_report
from memsnap_magic.widget import Dashboard

DATA = Path(__file__).parent / "data"


def test_a_real_cuda_oom_is_reported_from_its_file():
    (iv,) = read_run([DATA / "cuda_oom.pickle"])
    assert iv.oom["requested"] == 4_000_000_000_000_000 and iv.oom["device_free"] == 148_926_234_624
    assert iv.oom["allocated"] == iv.peak_allocated  # the failed request came after the last allocation
    assert sum(nbytes for _, nbytes, _ in iv.oom["sites"]) <= iv.oom["allocated"]
    report = oom_report(iv)
    assert report.startswith("out of memory: asked for 3638.0 TiB with 138.7 GiB free; 365.1 MiB allocated then")
    assert "<module> (cell In[10]:10) 64.0 MiB" in report
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
    assert "(parameter 1000 B, activation 2.9 KiB)" in oom_report(iv)


def test_no_oom_no_report_and_the_dashboard_says_it_in_the_step():
    s = Session()
    s.add(interval(1, 0, 10, 0))
    failed = interval(2, 0, 20, 0, error="OutOfMemoryError")
    failed.oom = {"requested": 1 << 40, "device_free": 1 << 20, "allocated": 20, "by_category": None, "sites": []}
    s.add(failed)
    assert s.intervals[0].oom is None and oom_report(s.intervals[0]) is None
    d = Dashboard(s)
    assert "out of memory: asked for 1.0 TiB with 1.0 MiB free" in d.error.value
    d.step.value = 0
    assert d.error.value == ""
