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
from memsnap_magic.files.snapshot import dump_snapshot

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


def test_plot_writes_a_png(verl_folder, tmp_path, monkeypatch, capsys):
    from memsnap_magic.views import charts as plots

    drawn = []
    for name in ("overview_figure", "ranks_figure"):
        real = getattr(plots, name)
        monkeypatch.setattr(plots, name, lambda *a, _real=real, _name=name, **k: drawn.append(_name) or _real(*a, **k))
    out = tmp_path / "overview.png"
    assert main(["plot", str(verl_folder), "-o", str(out)]) == 0  # two ranks: the ranks view
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.endswith("(6 snapshots: 3 steps × 2 ranks)\n")  # not "6 steps"
    assert main(["plot", str(verl_folder / "step5" / "torch_memory_rank0_pid40.pickle"), "-o", str(out)]) == 0
    assert capsys.readouterr().out.endswith("(1 step)\n")
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
        (["summarize", ""], "'': no such file or folder"),  # an unset $DIR: not the working directory
        # a file name a glob passed on, which argparse took for an option: quoted cleaned, on one line
        (["summarize", "x.pickle", "--\x1b[31mx\ny.pickle"], "unrecognized arguments: --?[31mx y.pickle"),
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
    with pytest.raises(UsageError, match="no such file"):
        shell.run_line_magic("memsnap", "load /no/such/step*")  # a pattern nothing matches stays as written
    with pytest.raises(UsageError, match="give one or more"):
        shell.run_line_magic("memsnap", "load")
    capsys.readouterr()
    shell.run_line_magic("memsnap", f"load {verl_folder}/step1* as=first")  # as a shell would expand it
    assert "loaded 4 snapshots into run 'first': steps 1, 10; ranks 0, 1" in capsys.readouterr().out


def _step_written_twice(folder):
    """Step 3 of rank 0 as two files, as a restarted kernel leaves it: pid9's is the older one."""
    for pid, end_us, size in (("pid7-aaaaaa", 2_000, 2 * 1024), ("pid9-bbbbbb", 1_000, 1024)):
        snap = snapshot(alloc(0x1000, size, 10), {0x1000: size})
        snap["memsnap"] = {
            "step": 3,
            "rank": 0,
            "device": "cpu",
            "tag": "torch_memory",
            "error": None,
            "end_us": end_us,
        }
        dump_snapshot(snap, folder / "step3" / f"torch_memory_rank0_{pid}.pickle")


def test_a_step_written_twice_reads_the_newer_file_and_says_so(tmp_path):
    _step_written_twice(tmp_path)
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


def _bare(path, size):
    """A dump with no memsnap block and no step folder: its step is its place among the files."""
    dump_snapshot(snapshot(alloc(0x1000, size), {0x1000: size}), path)
    return str(path)


def test_files_given_one_by_one_are_numbered_on_across_them(tmp_path, capsys):
    a, b = _bare(tmp_path / "a.pickle", 1024), _bare(tmp_path / "b.pickle", 2048)
    assert main(["summarize", a, b, "--json"]) == 0
    assert [(r["step"], r["peak_allocated"]) for r in json.loads(capsys.readouterr().out)] == [(1, 1024), (2, 2048)]


def test_two_folders_of_one_run_name_are_refused_not_merged(tmp_path, capsys, shell):
    for exp in ("exp1", "exp2"):
        _bare(tmp_path / exp / "profile" / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    one, two = (str(tmp_path / exp / "profile") for exp in ("exp1", "exp2"))
    assert main(["summarize", one, two]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "both hold step 1 rank 0 of the run 'profile'" in err and "NAME=FOLDER" in err
    assert main(["summarize", f"a={one}", f"b={two}", "--json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == ["a", "b"]
    with pytest.raises(UsageError, match="both hold step 1"):
        shell.run_line_magic("memsnap", f"load {one} {two}")
    assert session().intervals == []


def test_folders_are_searched_through_links_hidden_ones_skipped_each_once(tmp_path, capsys):
    run = tmp_path / "run"
    _bare(run / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    _bare(tmp_path / "elsewhere" / "step2" / "torch_memory_rank0_pid1.pickle", 2048)
    (run / "step2").symlink_to(tmp_path / "elsewhere" / "step2")
    (run / "step1" / "back").symlink_to(run)  # a loop: each folder is read once
    _bare(run / ".trash" / "step3" / "torch_memory_rank0_pid1.pickle", 4096)
    _bare(run / "step\u0669" / "torch_memory_rank0_pid1.pickle", 8192)  # step٩: not an ASCII step 9
    assert main(["summarize", str(run), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["peak_allocated"] for r in records] == [1024, 2048, 8192]
    assert [r["step"] for r in records[:2]] == [1, 2] and records[2]["step"] != 9


def test_an_unreadable_folder_is_one_line_in_the_cli_and_a_usage_error_in_load(tmp_path, shell):
    import os

    if os.geteuid() == 0 and subprocess.run(["setpriv", "--help"], capture_output=True).returncode != 0:
        pytest.skip("root without setpriv: permissions are not enforced")
    locked = tmp_path / "runs"
    _bare(locked / "locked" / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    (locked / "locked").chmod(0)
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "from IPython.core.error import UsageError\nsh = InteractiveShell.instance()\n"
        "sh.run_line_magic('load_ext', 'memsnap_magic')\n"
        "try:\n    sh.run_line_magic('memsnap', 'load ' + sys.argv[1])\n"
        "except UsageError as e:\n    print('UsageError:', e)\n"
        "from memsnap_magic.cli import main\nsys.exit(main(['summarize', sys.argv[1]]))"
    )
    drop = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    prefix = ["setpriv", *drop] if os.geteuid() == 0 else []
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-c", code, str(locked)], capture_output=True, text=True, timeout=120
        )
    finally:
        (locked / "locked").chmod(0o755)
    assert "UsageError: %memsnap load: " in proc.stdout and "Permission denied" in proc.stdout
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot read this folder" in proc.stderr


def test_json_is_valid_unicode_for_any_file_name_and_a_closed_stdout_is_no_error(tmp_path):
    import os

    odd = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"step1", b"t\xff_rank0.pickle"))
    _bare(odd, 1024)
    proc = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", "--json", str(tmp_path)], capture_output=True
    )
    assert proc.returncode == 0
    text = proc.stdout.decode("utf-8")  # strict: no lone surrogate, escaped or not
    assert "\\udc" not in text and "\\ud" not in text
    (record,) = json.loads(text)
    assert record["path"].endswith("t\\xff_rank0.pickle")
    closed = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        capture_output=False,
        stderr=subprocess.PIPE,
        close_fds=True,
        preexec_fn=lambda: os.close(1),
    )
    assert closed.returncode == 0 and b"Traceback" not in closed.stderr


def test_links_that_are_not_step_folders_are_not_followed_and_spellings_are_one_folder(tmp_path, capsys, monkeypatch):
    profile = tmp_path / "outputs" / "profile"
    _bare(profile / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    _bare(profile / "step2" / "torch_memory_rank0_pid1.pickle", 2048)
    (profile / "latest").symlink_to(profile / "step2")  # the same file again, under no step name
    (profile / "tree").symlink_to("/proc")  # an unrelated tree: never walked
    monkeypatch.chdir(tmp_path)
    for spelled in (["outputs/profile"], ["outputs/profile", str(profile)], ["outputs", f"{profile}/step2/"]):
        assert main(["summarize", *spelled, "--json"]) == 0, spelled
        records = json.loads(capsys.readouterr().out)
        assert [(r["step"], r["peak_allocated"]) for r in records] == [(1, 1024), (2, 2048)], spelled


def test_memsnap_load_names_the_older_file_of_a_step_written_twice(shell, tmp_path, capsys):
    _step_written_twice(tmp_path)
    shell.run_line_magic("memsnap", f"load {tmp_path} as=x")
    out = capsys.readouterr().out
    assert "loaded 1 snapshot into run 'x'" in out and "replacing" not in out  # the session held nothing
    assert "step 3 rank 0 has a newer file; skipped" in out and "pid9-bbbbbb" in out
    shell.run_line_magic("memsnap", f"load {tmp_path} as=x")
    assert "(replacing 1 step already in the session)" in capsys.readouterr().out


def test_a_linked_step_folder_is_in_the_run_of_the_folder_it_is_linked_from(tmp_path, capsys):
    _bare(tmp_path / "run1" / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    _bare(tmp_path / "scratch" / "step2" / "torch_memory_rank0_pid1.pickle", 2048)
    (tmp_path / "run1" / "step2").symlink_to(tmp_path / "scratch" / "step2")
    for given in (str(tmp_path / "run1"), f"r={tmp_path / 'run1'}"):
        assert main(["summarize", given, "--json"]) == 0, capsys.readouterr().err
        records = json.loads(capsys.readouterr().out)
        assert [(r["run"], r["step"]) for r in records] == [
            (given.partition("=")[0] if "=" in given else "run1", s) for s in (1, 2)
        ]
        entries = [r["trace_entries"] for r in records]  # one run: step 2 accumulates over step 1
        assert records[1]["cumulative_trace_entries"] == sum(entries) > max(entries)


def test_a_file_reached_by_a_link_and_by_its_own_name_is_read_by_its_own_name(tmp_path, capsys):
    v2 = tmp_path / "v2"
    _bare(v2 / "step1" / "mem_rank0.pickle", 1024)
    _bare(v2 / "step2" / "mem_rank0.pickle", 2048)
    (v2 / "latest_rank0.pickle").symlink_to("step2/mem_rank0.pickle")  # sorts before step1/, step2/
    assert main(["summarize", str(v2), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["tag"], r["peak_allocated"]) for r in records] == [(1, "mem", 1024), (2, "mem", 2048)]


def test_one_run_name_given_to_two_folders_holding_one_step_is_refused_not_merged(tmp_path, capsys):
    for exp in ("exp1", "exp2"):
        _bare(tmp_path / exp / "profile" / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    _bare(tmp_path / "exp2" / "profile" / "step2" / "torch_memory_rank0_pid1.pickle", 2048)
    one, two = (tmp_path / exp / "profile" for exp in ("exp1", "exp2"))
    for argv in ([f"p={one}", f"p={two}"], [str(one), "x=" + str(two / "step2"), str(two)]):
        assert main(["summarize", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "both hold step 1 rank 0 of the run" in err and "NAME=FOLDER" in err
    # one name over folders of different steps is one run, as asked
    assert main(["summarize", f"p={one / 'step1'}", f"p={two / 'step2'}", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["run"], r["step"]) for r in records] == [("p", 1), ("p", 2)]


def test_memsnap_load_redraws_a_shown_dashboard_once_and_names_steps_as_ranges(shell, tmp_path, capsys, monkeypatch):
    import memsnap_magic

    for step in range(1, 41):
        _bare(tmp_path / "run" / f"step{step}" / "torch_memory_rank0_pid1.pickle", 1024 * step)
    d = memsnap_magic.dashboard()
    drawn, draw = [], d._draw_overview
    monkeypatch.setattr(d, "_draw_overview", lambda: (drawn.append(len(session().intervals)), draw()))
    shell.run_line_magic("memsnap", f"load {tmp_path / 'run'}")
    assert drawn == [40] and len(d.step.options) == 40
    assert "loaded 40 snapshots into run 'run': steps 1–40; rank 0" in capsys.readouterr().out


def test_runs_of_several_ranks_are_compared_one_bar_per_run_and_step(verl_folder, tmp_path, monkeypatch, capsys):
    from memsnap_magic.views import charts as plots

    compared = []
    real = plots.runs_figure
    monkeypatch.setattr(plots, "runs_figure", lambda runs, **k: compared.append(runs) or real(runs, **k))
    for step, rank, size in ((1, 0, 1024), (1, 1, 4096), (3, 0, 8192), (3, 1, 2048)):  # the peaks: rank 1, then 0
        _bare(tmp_path / "a" / f"step{step}" / f"torch_memory_rank{rank}_pid1.pickle", size)
    out = tmp_path / "two.png"
    assert main(["plot", f"a={tmp_path / 'a'}", f"b={verl_folder}", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    ((a, first), (b, second)) = compared[0]
    assert (a, b) == ("a", "b")
    assert [(iv.step, iv.rank, iv.peak_allocated) for iv in first] == [(1, 1, 4096), (3, 0, 8192)]
    assert [iv.step for iv in second] == [1, 5, 10]  # one bar per step, whichever rank
    assert "each step of a run from its rank with the highest peak" in capsys.readouterr().out
    for rank in (0, 1):  # runs of one rank each (not the same one): nothing to pick, nothing said
        _bare(tmp_path / f"r{rank}" / "step1" / f"torch_memory_rank{rank}_pid1.pickle", 1024)
    assert main(["plot", f"c={tmp_path / 'r0'}", f"d={tmp_path / 'r1'}", "-o", str(out)]) == 0
    assert capsys.readouterr().out.endswith("(2 snapshots: 1 step × 2 ranks × 2 runs)\n")


def test_a_step_in_two_files_that_do_not_say_when_is_not_called_newer(tmp_path, capsys):
    one = _bare(tmp_path / "a" / "run" / "step1" / "torch_memory_rank0_pid1.pickle", 1024)
    two = _bare(tmp_path / "b" / "run" / "step1" / "torch_memory_rank0_pid1.pickle", 2048)
    assert main(["summarize", one, two, "--json"]) == 0
    out = capsys.readouterr()
    assert [r["peak_allocated"] for r in json.loads(out.out)] == [2048]
    assert "newer" not in out.err and f"step 1 rank 0 is in two files; skipped {one}, read before the other" in out.err


def test_a_linked_run_folder_is_named_as_it_really_is(tmp_path, capsys):
    for exp, size in (("exp_0101", 1024), ("exp_0102", 2048)):
        _bare(tmp_path / "store" / exp / "step1" / "torch_memory_rank0_pid1.pickle", size)
    for side, exp in (("a", "exp_0101"), ("b", "exp_0102")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "current").symlink_to(tmp_path / "store" / exp)
    (tmp_path / "mylink.pickle").symlink_to(
        tmp_path / "store" / "exp_0101" / "step1" / "torch_memory_rank0_pid1.pickle"
    )
    assert main(["summarize", str(tmp_path / "a" / "current"), str(tmp_path / "b" / "current"), "--json"]) == 0
    assert [(r["run"], r["peak_allocated"]) for r in json.loads(capsys.readouterr().out)] == [
        ("exp_0101", 1024),
        ("exp_0102", 2048),
    ]
    assert main(["summarize", str(tmp_path / "mylink.pickle"), "--json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == ["exp_0101"]


def test_a_folder_given_with_a_folder_inside_it_is_one_place_in_any_order(tmp_path, capsys):
    for step in (1, 2):
        _bare(tmp_path / "run" / f"step{step}" / "torch_memory_rank0_pid1.pickle", 1024 * step)
    _bare(tmp_path / "other" / "step1" / "torch_memory_rank0_pid1.pickle", 4096)
    run, inner, other = (str(tmp_path / p) for p in ("run", "run/step1", "other"))
    for argv in (
        [run, inner, f"x={other}"],
        [run, f"x={other}", inner],
        [f"p={run}", f"p={inner}"],
        [f"p={run}", f"p={run}"],
    ):
        assert main(["summarize", *argv, "--json"]) == 0, (argv, capsys.readouterr().err)
        out = capsys.readouterr()
        assert out.err == "", argv  # the same file twice is read once, not "in two files"
        records = json.loads(out.out)
        assert [(r["step"], r["peak_allocated"]) for r in records if r["run"] != "x"] == [(1, 1024), (2, 2048)], argv


def test_a_file_reached_twice_is_named_by_its_step_folder_even_when_both_are_links(tmp_path, capsys):
    v = tmp_path / "v"
    for step in (1, 2):
        blob = _bare(tmp_path / "store" / f"blob{step}.pickle", 1024 * step)
        (v / f"step{step}").mkdir(parents=True)
        (v / f"step{step}" / "mem_rank0.pickle").symlink_to(blob)  # a content store's links
    (v / "latest_rank0.pickle").symlink_to(v / "step2" / "mem_rank0.pickle")
    assert main(["summarize", str(v), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["step"], r["tag"], r["peak_allocated"]) for r in records] == [(1, "mem", 1024), (2, "mem", 2048)]
