"""The ``memsnap`` command line and ``%memsnap load`` on files in verl's layout."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
from IPython.core.error import UsageError
from snapshots import alloc, free, snapshot

from memsnap_magic import session
from memsnap_magic.cli import main
from memsnap_magic.snapshot import dump_snapshot

MiB = 1 << 20


@pytest.fixture
def verl_folder(tmp_path):
    """outputs/profile/step<N>/torch_memory_rank<R>_pid<P>.pickle, as verl writes them (no metadata)."""
    root = tmp_path / "outputs" / "profile"
    for step in (1, 5, 10):
        for rank in (0, 1):
            frames = [{"filename": "/src/model.py", "line": 7, "name": "forward"}]
            trace = [dict(alloc(256, step * MiB)[0], frames=frames), *alloc(512, MiB), *free(512, MiB)]
            dump_snapshot(
                snapshot(trace, {0x100: step * MiB}),
                root / f"step{step}" / f"torch_memory_rank{rank}_pid4{rank}.pickle",
            )
    return root


def test_summarize_json_takes_step_and_rank_from_the_layout(verl_folder, capsys):
    assert main(["summarize", str(verl_folder), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["rank"]) for r in records] == [(1, 0), (1, 1), (5, 0), (5, 1), (10, 0), (10, 1)]
    r = records[4]
    assert (r["peak_allocated"], r["baseline_allocated"], r["peak_increase"], r["trace_entries"]) == (
        11 * MiB,
        0,
        11 * MiB,
        4,
    )
    assert r["device"] == "device:0" and r["path"].endswith("step10/torch_memory_rank0_pid40.pickle")
    assert all(isinstance(r[k], int) for k in ("baseline_allocated", "peak_allocated", "trace_entries"))


def test_tag_comes_from_the_metadata_else_the_file_name(tmp_path, capsys):
    named = tmp_path / "step3" / "optimizer_rank2_pid7.pickle"
    dump_snapshot(snapshot(alloc(1, 100), {1: 100}), named)
    tagged = tmp_path / "renamed.pickle"
    dump_snapshot(dict(snapshot(alloc(1, 100), {1: 100}), memsnap={"step": 4, "tag": "oom"}), tagged)
    assert main(["summarize", str(named), str(tagged), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["rank"], r["tag"]) for r in records] == [(3, 2, "optimizer"), (4, 0, "oom")]


def test_summarize_table_and_files_in_given_order(verl_folder, tmp_path, capsys):
    a = tmp_path / "a.pickle"
    a.write_bytes(pickle.dumps(snapshot(alloc(1, 100), {1: 100}), protocol=4))
    assert main(["summarize", str(a)]) == 0
    out = capsys.readouterr().out
    assert "step" in out and "100 B" in out and "a.pickle" in out


def test_plot_writes_a_png(verl_folder, tmp_path, monkeypatch):
    from memsnap_magic import plots

    drawn = []
    for name in ("overview_figure", "ranks_figure"):
        real = getattr(plots, name)
        monkeypatch.setattr(plots, name, lambda *a, _real=real, _name=name, **k: drawn.append(_name) or _real(*a, **k))
    out = tmp_path / "overview.png"
    assert main(["plot", str(verl_folder), "-o", str(out)]) == 0  # two ranks: the ranks view
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["plot", str(verl_folder / "step5" / "torch_memory_rank0_pid40.pickle"), "-o", str(out)]) == 0
    assert drawn == ["ranks_figure", "overview_figure"]


def test_diff_names_the_site_that_grew(verl_folder, capsys):
    a = verl_folder / "step1" / "torch_memory_rank0_pid40.pickle"
    b = verl_folder / "step10" / "torch_memory_rank0_pid40.pickle"
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "peak_allocated" in out and "(+9.0 MiB)" in out
    assert "+9.0 MiB  forward (/src/model.py:7)" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["summarize", "/no/such/path"], "no such file or folder"),
        (["frobnicate"], "invalid choice"),
        (["plot", "x.pickle"], "required"),
        (["summarize", "--jobs", "0", "x"], "--jobs/-j: '0': give a whole number of 1 or more"),
        (["diff", "--top", "-1", "a", "b"], "--top: '-1': give a whole number of 0 or more"),
        (["diff", "/", "/"], "diff /: a folder; diff compares two snapshot files"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words):
    proc = subprocess.run([sys.executable, "-m", "memsnap_magic", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr


def test_hostile_file_is_refused_with_exit_2(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Evil()}))
    proc = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "refused pickle global builtins.print" in proc.stderr
    assert "pwned" not in proc.stdout


def test_console_script_help():
    proc = subprocess.run([sys.executable, "-m", "memsnap_magic", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "memsnap diff" in proc.stdout and "summarize" in proc.stdout


def test_memsnap_load_brings_dumps_into_the_session(shell, verl_folder, capsys):
    shell.run_line_magic("memsnap", f"load {verl_folder}")
    # a folder of step folders is a run, named after the folder, apart from this session's own
    assert "loaded 6 snapshots into run 'profile': steps 1, 5, 10; ranks 0, 1" in capsys.readouterr().out
    assert list(session().runs) == ["profile"]
    assert sorted((iv.step, iv.rank) for iv in session().intervals) == [
        (1, 0),
        (1, 1),
        (5, 0),
        (5, 1),
        (10, 0),
        (10, 1),
    ]
    with pytest.raises(UsageError, match="no such file"):
        shell.run_line_magic("memsnap", "load /no/such/dir")
    with pytest.raises(UsageError, match="give one or more"):
        shell.run_line_magic("memsnap", "load")


def test_a_step_written_twice_reads_the_newer_file_and_says_so(tmp_path):
    from memsnap_magic.snapshot import dump_snapshot

    for pid, end_us, size in (("pid7-aaaaaa", 2_000, 2 * 1024), ("pid9-bbbbbb", 1_000, 1024)):  # pid9 is older
        snap = snapshot(alloc(0x1000, size, 10), {0x1000: size})
        snap["memsnap"] = {
            "step": 3,
            "rank": 0,
            "device": "cpu",
            "tag": "torch_memory",
            "error": None,
            "end_us": end_us,
        }
        dump_snapshot(snap, tmp_path / "step3" / f"torch_memory_rank0_{pid}.pickle")
    proc = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", "--json", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0
    (record,) = json.loads(proc.stdout)
    assert record["peak_allocated"] == 2 * 1024  # the newer file's
    assert proc.stderr.count("\n") == 1 and "step 3 rank 0 has a newer file; skipped" in proc.stderr
    assert "pid9-bbbbbb" in proc.stderr


def test_a_terminal_that_cannot_encode_gets_escapes_not_a_traceback():
    import os
    from pathlib import Path

    data = Path(__file__).parent / "data" / "cuda_step.pickle"
    out = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(data)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
    assert "\\xb10 B" in out.stdout  # the table's ±, escaped
