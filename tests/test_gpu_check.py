"""benchmarks/gpu_check.py in dry-run mode (CPU backend, tiny model), as the GPU run would go.

The script runs in a subprocess from the repository root, as it is meant to be run; its own
checks are also tested against a recording whose history is never cleared, so a broken reset
cannot pass them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
STEP_KEYS = {
    "step": int,
    "snapshot_peak_allocated": int,
    "reset_verified": bool,
    "clear_route": str,
    "trace_entries": int,
    "file_bytes": int,
    "file": str,
}


def run_script(out_dir: Path, *prefix: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    cmd = [sys.executable, *prefix, str(SCRIPT.relative_to(ROOT)), "--dry-run", "--out-dir", str(out_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc, time.perf_counter() - t0


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    proc, seconds = run_script(out)
    return proc, seconds, out


def test_dry_run_exits_zero_and_prints_a_summary(dry_run):
    proc, seconds, out = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "memsnap gpu_check: cpu (dry run)" in proc.stdout
    assert (out / "gpu.json").is_file()
    print(f"dry run took {seconds:.1f} s")


def test_json_has_the_documented_keys_and_types(dry_run):
    _, _, out = dry_run
    data = json.loads((out / "gpu.json").read_text())
    assert data["device"] == "cpu (dry run)"
    assert data["dry_run"] is True
    assert isinstance(data["torch"], str) and data["torch"]
    assert data["errors"] == []
    assert isinstance(data["overhead_ratio"], float) and data["overhead_ratio"] > 0
    assert isinstance(data["added_latency_ratio"], float) and data["added_latency_ratio"] > 0
    assert data["oom"] == {"skipped": True, "reason": "no CUDA device (dry run)"}
    assert data["auto_device"]["ok"] and data["auto_device"]["device"] == "cpu"
    quiet = data["cpu_quiet"]  # the CPU route's session without stacks: exact, and nothing on stderr
    assert quiet["ok"] and quiet["kept"] == quiet["expected"] and quiet["stderr"] == [], quiet
    assert quiet["quiet_activities"] == ["ProfilerActivity.MTIA"]
    assert data["views"]["show_mimetypes"] == [
        "application/vnd.jupyter.widget-view+json",
        "image/png",
        "text/html",
        "text/plain",
    ]
    assert data["demo"]["ok"] and data["demo"]["failed"] == [] and data["demo"]["devices"] == ["cpu"]
    # the demo's leak named by its holder, and batch 64 predicted from 2, 4, 8 (after its reset)
    assert data["demo"]["leak_kept_by"] == ["history"] and len(data["demo"]["leak_kept"]) == 4
    assert data["demo"]["fit_ok"] and data["demo"]["predicted"]["largest"] > 64
    categories = data["categories"]
    assert categories["ok"] and len(categories["steps"]) == 12, categories  # two models, two orders, 3 steps
    block = [f for f in categories["steps"] if f["model"] == "transformer"]
    assert len(block) == 6 and all(f["activation_at_least_bound"] for f in block)
    assert all(f["saved_by_forward"] >= f["activation_lower_bound"] > 0 for f in block)
    assert data["newer_options"]["ok"], data["newer_options"]  # the CPU refuses both, the cell unrun
    assert data["files"]["ok"] and len(data["files"]["files"]) == 3, data["files"]  # continuity, marks, summaries
    assert data["async_allocator"]["skipped"] is True
    retention = data["retention"]  # every planted leak named, every twin silent
    assert retention["ok"] and len(retention["scenarios"]) == 8, retention
    assert {(r["scenario"], r["healthy"], r["holder"], r["pattern"]) for r in retention["scenarios"]} == {
        ("losses", False, "history", "graph"),
        ("cache", False, "cache", "cache"),
        ("hook", False, "model[0].outputs", "hook"),
        ("optimizer", False, "schedulers", "optimizer"),
        *((name, True, None, None) for name in ("losses", "cache", "hook", "optimizer")),
    }
    # will it fit: the largest batch predicted under the cap runs under it, 10 % more does not (the
    # CPU enforces no cap: each batch's recorded peak against it); the CPU rounds nothing, no gap
    fit = data["prediction"]
    assert fit["ok"] and fit["largest"] > max(fit["sizes"]) and fit["bigger"] == -(-fit["largest"] * 11 // 10)
    assert fit["gap"] == 0 and fit["margin"] == fit["cap"] - fit["predicted_blocks"] >= 0
    assert fit["largest_ran"] == {"fits": True, "peak_allocated": fit["predicted_blocks"]}  # to the byte
    assert fit["bigger_ran"] == {"fits": False, "peak_allocated": fit["predicted_bigger"]}
    assert data["prediction_accuracy"]["skipped"] is True  # a process per workload and size: the GPU's
    assert data["checks"]["prediction_fits_ok"] is True and data["checks"]["prediction_accurate"] is None
    assert all(s["ok"] for s in data["sections"].values())
    steps = data["steps"]
    assert len(steps) >= 5
    assert len({s["step"] for s in steps}) == len(steps)
    for s in steps:
        for key, kind in STEP_KEYS.items():
            assert isinstance(s[key], kind), (s["step"], key, s[key])
        assert "allocator_max_memory_allocated" in s  # None on the CPU: it keeps no peak


def test_every_step_file_exists_and_holds_only_its_own_step(dry_run):
    _, _, out = dry_run
    steps = json.loads((out / "gpu.json").read_text())["steps"]
    for s in steps:
        assert s["reset_verified"] is True, s
        assert Path(s["file"]).is_file()
        assert Path(s["file"]).stat().st_size == s["file_bytes"]
        assert s["snapshot_peak_allocated"] == s["reference_peak_allocated"]
    # the positive control ran: each leaking step saw its own leak
    leaking = [s for s in steps if s["leaked_bytes"]]
    assert len(leaking) == 4
    assert all(s["reset_checks"]["own_leak_seen"] is True for s in leaking)
    assert {s["mode"] for s in steps} == {"cell", "marked"}


def test_fixture_is_small_and_loads(dry_run):
    from memsnap_magic import load_snapshot

    _, _, out = dry_run
    fixture = out / "fixtures" / "cpu_step.pickle"
    assert 0 < fixture.stat().st_size <= 2_000_000
    assert load_snapshot(fixture)["device_traces"][0]


NEVER_CLEARS = """
import runpy, sys
from memsnap_magic.recording.backends.cpu.backend import CpuBackend

begin, end = CpuBackend.begin, CpuBackend.end

def begin_keeping(self, *, fresh, namespace=None):
    kept = self._history
    begin(self, fresh=fresh, namespace=namespace)
    self._history = kept if kept.count else self._history

def end_keeping(self, *, keep):
    kept = self._history
    end(self, keep=keep)
    self._history = kept

CpuBackend.begin, CpuBackend.end = begin_keeping, end_keeping
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_history_that_is_never_cleared_fails_the_reset_check(tmp_path):
    # GIVEN a CPU backend patched to keep every earlier event (a clear that does nothing)
    proc, _ = run_script(tmp_path, "-c", NEVER_CLEARS)
    # THEN the script still runs every section, but no step after the first is verified
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "gpu.json").read_text())
    steps = data["steps"]
    assert steps[0]["reset_verified"] is True
    assert not any(s["reset_verified"] for s in steps[1:])
    assert data["checks"]["all_reset_verified"] is False
    after_leak = next(s for s in steps if s["step"] == 3)
    assert after_leak["reset_checks"]["stale_leak_allocs"] == 1
    assert after_leak["reset_checks"]["shared_with_previous"] > 0
    assert after_leak["reset_checks"]["entries_before_start"] > 0


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve string annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("gpu_check", None)


def entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}


def test_verify_reset_on_hand_made_traces(gpu_check):
    leak = gpu_check.Leak(step=1, addr=0x1000, size=64)
    previous = [entry("alloc", 0x1000, 64, 100), entry("alloc", 0x2000, 8, 110)]
    keys = {gpu_check.entry_key(e) for e in previous}
    clean = [entry("alloc", 0x3000, 8, 1000), entry("free_completed", 0x3000, 8, 1010)]
    # a clean step: inside its window, nothing shared, the live leak's address not reused
    ok = gpu_check.verify_reset(clean, (900, 2000), keys, [leak], None)
    assert ok["verified"] and ok["shared_with_previous"] == 0
    # a step still holding the previous one's entries fails three ways
    stale = gpu_check.verify_reset(previous + clean, (900, 2000), keys, [leak], None)
    assert not stale["verified"]
    assert stale["entries_before_start"] == 2 and stale["shared_with_previous"] == 2
    assert stale["stale_leak_allocs"] == 1
    # the leaking step must see its own leak (positive control)
    blind = gpu_check.verify_reset(clean, (900, 2000), set(), [], gpu_check.Leak(2, 0x9000, 64))
    assert blind["own_leak_seen"] is False and not blind["verified"]
    # an empty trace proves nothing
    assert not gpu_check.verify_reset([], (900, 2000), set(), [], None)["verified"]


def test_prediction_accuracy_is_judged_within_five_percent_and_the_branch_refused(gpu_check):
    import gpu_predict  # beside gpu_check, on the path it puts there

    mlp = {"workload": "mlp", "error": 0.01, "blocks_error": -0.02}
    branch = {"workload": "branch", "refused": "step 1 …"}
    assert gpu_predict.accurate([mlp, branch])
    assert not gpu_predict.accurate([{**mlp, "error": 0.06}, branch])
    assert not gpu_predict.accurate([{**mlp, "blocks_error": 0.051}, branch])  # the allocator's peak too
    assert not gpu_predict.accurate([mlp, {"workload": "branch", "error": 0.0}])  # a branch predicted
    assert not gpu_predict.accurate([])
