"""benchmarks/run.py --quick runs every benchmark and records a number for every row.

Only that the harness works is tested: nothing here depends on how fast this machine is.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from memsnap_magic import session, wait_for_writes
from memsnap_magic.files.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parent.parent
ROWS = (
    "summarize_vs_pickle_load",
    "summarize_real_vs_pickle_load",
    "digest_real_vs_pickle_load",
    "load_snapshot_vs_pickle_load",
    "load_snapshot_real_vs_pickle_load",
    "load_snapshot_peak_rss",
    "summarize_scale",
    "cell_overhead",
    "steps_gap_overhead",
    "cpu_cell_vs_bare",
    "cpu_cell_all_kept",
    "cpu_floor_python_tracer",
    "cpu_floor_read_every_event",
    "cpu_cell_scaling",
    "cpu_cell_rss_on_top",
    "cpu_tiny_all_vs_tree",
    "cpu_tiny_none_vs_tree",
    "cpu_tiny_none_vs_quiet_tree",
    "cpu_ring_all_vs_tree",
    "cpu_ring_none_vs_tree",
    "cpu_ring_none_vs_quiet_tree",
    "cpu_ring_ours_per_event_growth",
    "cpu_cell_rss_over_tracer",
    "first_cell",
    "dump_vs_pickle_dump",
    "session_memory",
    "snapshot_size_reset",
    "snapshot_size_cumulative",
    "dashboard_refresh",
    "dashboard_first_render",
    "cell_after_three_shows",
    "tiny_cell_fixed_cost",
    "tiny_cell_late_in_a_long_session",
    "dashboard_refresh_many_steps",
    "session_memory_steps",
    "warm_scan",
    "cold_scan_jobs",
    "background_write",
    "next_compute_cell",
    "long_steps_line",
    "predict_vs_load",
    "retention_walk_found",
    "retention_walk_whole",
    "retention_walk_10m",
)


def test_quick_run_reports_every_row(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--quick", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["quick"] is True and summary["crashed"] == []
    assert {"cpu_count", "python", "torch", "numpy", "date"} <= set(summary["machine"])
    for name in ROWS:
        row = summary["rows"][name]
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"]), (name, row)
        assert row["passed"] in (True, False, None)
    assert all(name in proc.stdout for name in ROWS)  # the table was printed
    per_benchmark = {p.stem for p in tmp_path.glob("*.json")} - {"summary"}
    rows_in_files = {
        r["name"] for p in tmp_path.glob("*.json") if p.stem != "summary" for r in json.loads(p.read_text())["rows"]
    }
    assert per_benchmark and rows_in_files == set(ROWS)


@pytest.mark.parametrize("context", ["all", "none"])
def test_the_entries_floor_builds_what_the_cells_ring_keeps(cpu, context: str) -> None:
    """``cpu_floor``'s ``entries`` reference, a bound on any writer that builds its trace in the
    cell, builds as many entries as the cell's ring keeps, in time order, allocations and frees
    alike: a bound on less work would flatter the cell."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_cpu_floor as floor
    from common import BARE, BARE_TRACER

    ring, loop = 2_000, floor.loop(3_000, 4)
    cpu.run_cell(f"%%memsnap context={context} max_entries={ring}\n" + loop).raise_error()
    wait_for_writes()
    trace = load_snapshot(session().intervals[-1].path)["device_traces"][0]
    ours = [e for e in trace if e["action"] in ("alloc", "free_completed")]
    cpu.user_ns["_RING"] = ring
    end = floor.ENTRIES_END if context == "all" else floor.FLAT_ENTRIES_END
    cpu.run_cell((BARE_TRACER if context == "all" else BARE) + loop + end).raise_error()
    built = cpu.user_ns.pop("_held")[-1]
    assert len(built) == len(ours) > ring // 3
    assert [e["action"] for e in built] == [e["action"] for e in ours]  # the loop's alternation, as the cell saw it
    times = [e["time_us"] for e in built]
    assert times == sorted(times)
    assert all(set(e) == {"action", "addr", "size", "stream", "time_us"} and e["size"] == 16 for e in built)


def test_a_partial_run_replaces_only_its_benchmarks_rows(tmp_path: Path) -> None:
    """``run.py --only`` into the results folder keeps the rows of the benchmarks it did not run
    (it used to overwrite the whole summary with its own few)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run

    def summary(commit: str, rows: dict[str, list[str]], quick: bool = False) -> dict:
        return {
            "quick": quick,
            "crashed": [],
            "runs": {b: {"git_commit": commit, "date": "d", "rows": names} for b, names in rows.items()},
            "rows": {name: {"value": commit} for names in rows.values() for name in names},
        }

    path = tmp_path / "summary.json"

    def merged(old: dict, new: dict, ran: set[str]) -> dict:
        path.write_text(json.dumps(old))
        return run._merged(path, new, ran)

    old = summary("a", {"scan": ["warm_scan", "cold_scan_jobs"], "load": ["load_rss"], "cell": ["cell_overhead"]})
    new = summary("b", {"scan": ["warm_scan"], "cell": ["cell_overhead"]})
    out = merged(old, new, {"scan", "cell"})
    # the rerun benchmarks' rows are now's, a row one no longer reports is gone, the rest stay
    assert out["rows"] == {"warm_scan": {"value": "b"}, "cell_overhead": {"value": "b"}, "load_rss": {"value": "a"}}
    assert {b: r["git_commit"] for b, r in out["runs"].items()} == {"scan": "b", "cell": "b", "load": "a"}
    # a quick run never mixes with a full one's figures, nor a summary that cannot be read
    quick = summary("b", {"scan": ["warm_scan"]}, quick=True)
    assert merged(old, quick, {"scan"})["rows"] == {"warm_scan": {"value": "b"}}
    path.write_text("{not json")
    assert run._merged(path, new, {"scan", "cell"}) == new
