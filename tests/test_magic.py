"""The magic in an in-process IPython shell, on the real CPU backend (torch.profiler events)."""

import linecache
import os
import re
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest
from IPython.core.error import UsageError

import memsnap_magic
from memsnap_magic import load_snapshot, session, wait_for_writes
from memsnap_magic.files.layout import process_token
from memsnap_magic.recording.process_state import STATE

MiB = 1 << 20


def run(shell, code):
    res = shell.run_cell(code)
    return res


def allocs(path):
    wait_for_writes()  # files are written in the background; a cell would wait the same way
    snap = load_snapshot(path)
    return [(e["addr"], e["size"]) for e in snap["device_traces"][0] if e["action"] == "alloc"]


@pytest.fixture
def torch_ns(shell):
    assert run(shell, "import torch\nkeep = []").success
    return shell


def test_load_ext_imports_neither_torch_nor_matplotlib():
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "sh = InteractiveShell.instance()\nsh.run_line_magic('load_ext', 'memsnap_magic')\n"
        "assert 'memsnap' in sh.magics_manager.magics['cell']\n"
        "print(sorted(m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_known_sizes_give_known_figures(torch_ns, capsys):
    sh = torch_ns
    assert run(sh, "%%memsnap step=1\na = torch.empty(4*2**20, dtype=torch.uint8)").success
    assert run(
        sh,
        "%%memsnap step=2\nb = torch.empty(2*2**20, dtype=torch.uint8)\n"
        "t = torch.empty(8*2**20, dtype=torch.uint8)\ndel t",
    ).success
    assert run(sh, "%%memsnap step=3\ndel a\nkeep.append(torch.empty(2**20, dtype=torch.uint8))").success
    one, two, three = session().intervals
    assert (one.baseline_allocated, one.peak_allocated, one.end_allocated) == (0, 4 * MiB, 4 * MiB)
    assert (two.baseline_allocated, two.peak_allocated, two.end_allocated) == (4 * MiB, 14 * MiB, 6 * MiB)
    assert two.peak_increase == 10 * MiB and two.kept == 2 * MiB
    assert (three.baseline_allocated, three.peak_allocated, three.end_allocated) == (6 * MiB, 6 * MiB, 3 * MiB)
    assert [i.cumulative_peak_allocated for i in (one, two, three)] == [4 * MiB, 14 * MiB, 14 * MiB]
    assert three.cumulative_trace_entries == sum(i.trace_entries for i in (one, two, three))
    assert one.device == "cpu" and one.rank == 0 and one.error is None
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("memsnap step 2 "))
    head, _, path = line.partition(" → ")
    assert (
        head
        == f"memsnap step 2 · cpu · peak 14.0 MiB (+10.0 MiB over start) · kept +2.0 MiB · {two.trace_entries} entries"
    )
    assert path == f"memsnap/step2/torch_memory_rank0_pid{os.getpid()}-{process_token()}.pickle"  # last
    assert len(head) <= 100  # a notebook's line holds it; the path goes on the next one if need be


def test_each_file_holds_only_its_own_step(torch_ns):
    sh = torch_ns
    run(sh, "%%memsnap step=1\nx1 = torch.empty(3*2**20, dtype=torch.uint8)")
    run(sh, "y = torch.empty(5*2**20, dtype=torch.uint8)")  # between cells: not recorded
    run(sh, "%%memsnap step=2\nx2 = torch.empty(7*2**20, dtype=torch.uint8)")
    one, two = session().intervals
    assert one.path == Path.cwd() / "memsnap/step1" / f"torch_memory_rank0_pid{os.getpid()}-{process_token()}.pickle"
    assert [s for _, s in allocs(one.path)] == [3 * MiB]
    assert [s for _, s in allocs(two.path)] == [7 * MiB]
    # the baseline still sees what lived before: x1 and y (found in the namespace)
    assert two.baseline_allocated == 8 * MiB


def test_files_go_where_out_named_when_the_cell_began_whatever_the_cell_does_with_the_directory(
    torch_ns, tmp_path, monkeypatch, capsys
):
    sh = torch_ns
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "elsewhere").mkdir()
    run(sh, "%%memsnap step=1\nimport os\nos.chdir('elsewhere')\nx = torch.ones(2**18)")  # the cell moves
    run(sh, "%%memsnap step=2 out=~/runs\nx = torch.ones(2**18)")  # ~ is the home folder, not a folder named ~
    wait_for_writes()
    one, two = session().intervals
    assert one.path.is_file() and one.path.parent == tmp_path / "memsnap" / "step1"
    assert two.path.is_file() and two.path.parent == home / "runs" / "step2"
    assert not (tmp_path / "elsewhere" / "memsnap").exists() and not list(tmp_path.rglob("~"))
    # the table still names the files after a %cd: relative below the directory, absolute elsewhere
    sh.run_line_magic("cd", str(tmp_path / "elsewhere"))
    capsys.readouterr()
    sh.run_line_magic("memsnap", "list")
    table = capsys.readouterr().out
    assert str(one.path) in table and str(two.path) in table
    sh.run_line_magic("cd", str(tmp_path))
    sh.run_line_magic("memsnap", "list")
    assert f"memsnap/step1/{one.path.name}" in capsys.readouterr().out
    # a loaded folder given as ~ or relative is still found after a %cd
    sh.run_line_magic("memsnap", "load ~/runs as=mine")
    sh.run_line_magic("cd", str(tmp_path / "elsewhere"))
    assert [iv.path for iv in session().runs["mine"].intervals] == [two.path]


def test_a_full_ring_is_said_wherever_the_step_is_shown(torch_ns, capsys, tmp_path):
    from memsnap_magic.cli import main
    from memsnap_magic.views.dashboard import Dashboard

    sh = torch_ns
    run(sh, "%%memsnap step=1 max_entries=10\nxs = [torch.ones(2**10) for _ in range(20)]")
    run(sh, "%%memsnap step=2\nys = [torch.ones(2**10) for _ in range(3)]")
    wait_for_writes()
    one, two = session().intervals
    assert one.overflowed and not two.overflowed
    line = capsys.readouterr().out.splitlines()[0]
    assert "10 entries (ring full: oldest dropped)" in line
    for table in (
        (sh.run_line_magic("memsnap", "list"), capsys.readouterr().out)[1],
        (main(["summarize", str(tmp_path / "memsnap")]), capsys.readouterr().out)[1],
    ):
        rows = [r for r in table.splitlines() if r[:1].isdigit()]
        assert "10 ring full" in rows[0] and "ring full" not in rows[1]
    d = Dashboard(session())
    d.step.value = 0
    assert "ring was full (10 entries" in d.usage.value
    assert "start, peak and kept figures are those of the window kept" in d.usage.value
    d.step.value = 1
    assert "ring" not in d.usage.value and "resident memory" in d.usage.value


def test_clear_false_keeps_history_into_the_next_snapshot(torch_ns):
    sh = torch_ns
    run(sh, "%%memsnap step=1 clear=false\nx1 = torch.empty(3*2**20, dtype=torch.uint8)")
    run(sh, "y = torch.empty(5*2**20, dtype=torch.uint8)")  # recording stayed on
    run(sh, "%%memsnap step=2\nx2 = torch.empty(7*2**20, dtype=torch.uint8)")
    run(sh, "%%memsnap step=3\nx3 = torch.empty(2**20, dtype=torch.uint8)")
    one, two, three = session().intervals
    assert [s for _, s in allocs(two.path)] == [3 * MiB, 5 * MiB, 7 * MiB]
    assert [s for _, s in allocs(three.path)] == [MiB]  # step 2 cleared again
    assert two.trace_entries > one.trace_entries and not one.clear and two.clear
    assert two.cumulative_trace_entries == two.trace_entries
    assert STATE.recording_devices() == []


@pytest.mark.parametrize("between", ["%memsnap off", "%reload_ext memsnap_magic"])
def test_a_chain_stopped_between_cells_adds_the_next_cells_entries_in_full(torch_ns, between):
    sh = torch_ns
    run(sh, "%%memsnap step=1 clear=false\nx1 = torch.empty(3*2**20, dtype=torch.uint8)")
    run(sh, between)  # the history is dropped: step 2's file holds only its own entries
    run(sh, "%%memsnap step=2\nx2 = torch.empty(2**20, dtype=torch.uint8)")
    one, two = session().intervals
    assert [s for _, s in allocs(two.path)] == [MiB]
    assert two.cumulative_trace_entries == one.cumulative_trace_entries + two.trace_entries


@pytest.mark.parametrize(
    "loop, said",
    [
        ("x = 1", r"steps=1,2: no listed step began: call mark\(step\) at the start of each step"),
        ("for step in range(1, 4):\n    mark(step)", r"steps=1,5,9: steps 5, 9 never began \(no mark\(\) for them\)"),
    ],
)
def test_listed_steps_that_never_began_are_said(torch_ns, loop, said):
    steps = "1,2" if loop == "x = 1" else "1,5,9"
    with pytest.warns(RuntimeWarning, match=said) as caught:
        res = torch_ns.run_cell(f"%%memsnap steps={steps}\n{loop}")
    assert res.success
    # said from the cell's %%memsnap line, not from a line of ours
    (ours,) = [w for w in caught if "memsnap" in str(w.message)]
    assert ours.lineno == 1 and "memsnap_magic" not in ours.filename
    assert linecache.getline(ours.filename, 1).startswith(f"# %%memsnap steps={steps}")  # parses, as a cell does
    assert [iv.step for iv in session().intervals] == ([] if steps == "1,2" else [1])


def test_raising_cell_is_dumped_and_the_exception_reaches_the_user(torch_ns, capsys):
    sh = torch_ns
    code = "%%memsnap step=4\nz = torch.empty(2**20, dtype=torch.uint8)\ndef f():\n    raise ValueError('boom')\nf()"
    res = sh.run_cell(code, store_history=True)  # numbered, as a notebook's cells are
    assert isinstance(res.error_in_exec, ValueError) and str(res.error_in_exec) == "boom"
    assert not res.success
    (iv,) = session().intervals
    wait_for_writes()
    assert iv.error == "ValueError" and iv.path.exists() and iv.peak_allocated == MiB
    assert load_snapshot(iv.path)["memsnap"]["error"] == "ValueError"
    out = capsys.readouterr()
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)
    assert text.count("Traceback") == 1 and "run_cell_magic" not in text
    assert "----> 5 f()" in text and "ValueError: boom" in text
    # the number beside the cell (IPython 8.0-8.3 print "Input In [N]", later ones "Cell In[N], line L")
    assert re.search(rf"Cell In\[{res.execution_count}\], line 5|Input In \[{res.execution_count}\]", text)
    assert STATE.recording_devices() == []


def test_our_frames_stay_out_of_the_traceback_tb_and_exception_groups(torch_ns, capsys):
    sh = torch_ns
    res = sh.run_cell("%%memsnap step=1\ndef f():\n    raise ValueError('boom')\nf()", store_history=True)
    assert isinstance(res.error_in_exec, ValueError)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    ours = [f.filename for f in traceback.extract_tb(sys.last_traceback) if "memsnap_magic" in f.filename]
    assert ours == []  # %debug and sys.last_traceback see the user's frames and IPython's, none of ours
    sh.run_cell("%tb")
    again = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert again.strip() == shown[shown.index("-----") :].strip()  # %tb reads as the cell did
    if sys.version_info >= (3, 11):  # IPython prints exception groups with the standard library
        res = sh.run_cell('%%memsnap step=2\nraise ExceptionGroup("grp", [ValueError("a"), TypeError("b")])')
        assert type(res.error_in_exec).__name__ == "ExceptionGroup"
        out = capsys.readouterr()
        text = re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)  # IPython 8.0 renders groups itself, in colour
        assert "ExceptionGroup: grp (2 sub-exceptions)" in text and "memsnap_magic" not in text
    # the same exception raised again in a later cell renders as any other exception
    sh.user_ns["_e"] = ValueError("later")
    sh.run_cell("%%memsnap step=3\nraise _e")
    capsys.readouterr()
    sh.run_cell("raise _e")
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "----> 1 raise _e" in text and "----> 2 raise _e" in text  # the new cell's frame, then the old


def _frames(tb) -> list[str]:
    """The traceback's frames as (file kind, function): a cell's file named "cell"."""
    return [
        ("cell" if "ipython-input" in f.filename or "ipykernel" in f.filename else Path(f.filename).name, f.name)
        for f in traceback.extract_tb(tb)
    ]


@pytest.mark.parametrize("kind", ["syntax error in an imported module", "exception group"])
def test_errors_ipython_prints_itself_show_the_frames_a_plain_cell_shows(torch_ns, capsys, tmp_path, kind):
    """A SyntaxError raised while running and exception groups are printed by IPython from the
    whole traceback, not through _render_traceback_: the outer cell's run_cell_magic(...) line and
    IPython's run_cell_magic frame showed there, and stayed in sys.last_traceback for %debug."""
    sh = torch_ns
    if kind.startswith("syntax"):
        for name in ("bad_plain", "bad_recorded"):
            (tmp_path / f"{name}.py").write_text("x = 1\ndef broken(:\n    pass\n")
        sys.path.insert(0, str(tmp_path))
        try:
            plain, recorded = "import bad_plain", "%%memsnap step=1\nimport bad_recorded"
            results = [sh.run_cell(code, store_history=True) for code in (plain, "x = 0")][:1]
            shown_plain = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
            frames_plain = _frames(sys.last_traceback)
            results.append(sh.run_cell(recorded, store_history=True))
        finally:
            sys.path.remove(str(tmp_path))
        out = capsys.readouterr()
        shown = re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)
        assert all(isinstance(r.error_in_exec, SyntaxError) for r in results)
        cells = re.compile(r"Cell In\[|Input In \[")  # IPython 8.0-8.3 say "Input In [N]"
        assert "def broken(:" in shown and len(cells.findall(shown)) == len(cells.findall(shown_plain)) == 1
        frames = _frames(sys.last_traceback)
        assert [f for f in frames if f[0] != "bad_recorded.py"] == [f for f in frames_plain if f[0] != "bad_plain.py"]
    else:
        if sys.version_info < (3, 11):
            pytest.skip("exception groups are Python 3.11's")
        code = 'raise ExceptionGroup("grp", [ValueError("a"), TypeError("b")])'
        sh.run_cell(code, store_history=True)
        capsys.readouterr()
        frames_plain = _frames(sys.last_traceback)
        res = sh.run_cell("%%memsnap step=1\n" + code, store_history=True)
        assert type(res.error_in_exec).__name__ == "ExceptionGroup"
        out = capsys.readouterr()
        shown = re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)  # IPython 8.0 renders groups itself, in colour
        assert "ExceptionGroup: grp (2 sub-exceptions)" in shown
        frames = _frames(sys.last_traceback)
        assert frames == frames_plain
    assert "run_cell_magic" not in shown
    # an exception the user catches leaves IPython's showtraceback as it was
    sh.run_cell("%%memsnap step=2\ntry:\n    1/0\nexcept ZeroDivisionError:\n    pass")
    assert "showtraceback" not in vars(sh)


def test_an_exception_caught_around_the_magic_is_freed_with_its_frames(torch_ns, capsys):
    """Mending the traceback when IPython shows it must not keep an exception the user caught
    (a search for the largest batch that fits): its frames hold the failed attempt's tensors."""
    sh = torch_ns
    f = "def f():\n    big = torch.ones(2**20)\n    refs.append(weakref.ref(big))\n    raise RuntimeError('too big')"
    sh.run_cell("import gc, weakref\nrefs = []\n" + f)
    attempt = "get_ipython().run_cell_magic('memsnap', 'step=1', 'f()')"
    res = sh.run_cell(f"try:\n    {attempt}\nexcept RuntimeError:\n    pass\ngc.collect()")
    assert res.success and sh.user_ns["refs"][0]() is None
    res = sh.run_cell("1/0", store_history=True)  # shown as any error; nothing of ours left armed after it
    assert isinstance(res.error_in_exec, ZeroDivisionError) and "showtraceback" not in vars(sh)
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_functions_from_a_recorded_cell_show_their_variables_in_tracebacks(torch_ns, capsys):
    """The cell's source in the line cache parses as Python, as a plain cell's does: IPython's
    Verbose tracebacks read it for local values (and highlights), in that cell and in every later
    call into the functions it defined."""
    sh = torch_ns
    sh.run_cell("%xmode Verbose")
    sh.run_cell("%%memsnap step=1\ndef f(a):\n    b = 40 + 1\n    return b / a", store_history=True)
    sh.run_cell("def g(a):\n    c = 42 + 1\n    return c / a", store_history=True)
    capsys.readouterr()
    texts = []
    for call in ("f(0)", "g(0)"):
        sh.run_cell(call, store_history=True)
        texts.append(re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out))
    sh.run_cell("%xmode Context")
    recorded, plain = texts
    assert "c = 43" in plain and "b = 41" in recorded
    res = sh.run_cell("%%memsnap step=2\nq = 1\nq / 0", store_history=True)
    assert isinstance(res.error_in_exec, ZeroDivisionError)


def test_an_exception_from_a_recorded_cell_can_be_pickled_and_copied(torch_ns, capsys):
    """Our rendering hook held the shell: a kept exception could no longer be pickled (sent to a
    worker, saved) nor deep-copied. Copies render as any exception does."""
    import copy
    import pickle

    sh = torch_ns
    sh.run_cell("errs = []")
    res = sh.run_cell("%%memsnap step=1\ntry:\n    1/0\nexcept Exception as e:\n    errs.append(e)\n    raise")
    assert isinstance(res.error_in_exec, ZeroDivisionError)
    capsys.readouterr()
    (e,) = sh.user_ns["errs"]
    for other in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert type(other) is ZeroDivisionError and other.args == e.args
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(other._render_traceback_()))
        assert "ZeroDivisionError: division by zero" in text and "memsnap_magic" not in text
    # a copy raised again gets a traceback of its own, and shows it
    sh.user_ns["d"] = copy.deepcopy(e)
    sh.run_cell("def f():\n    raise d\nf()", store_history=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "in f" in text and "raise d" in text and "ZeroDivisionError: division by zero" in text
    # raised again in a later recorded cell, the first exception reads as that cell's
    sh.user_ns["again"] = e
    sh.run_cell("%%memsnap step=2\nraise again", store_history=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    first = text.index("----> 2 raise again")  # the body's frame first (the earlier cell's frames follow it)
    assert "run_cell_magic" not in text[:first]
    # a shallow copy shares the attribute: raised later, it shows its own traceback, not the first's
    sh.user_ns["c"] = copy.copy(e)
    sh.user_ns["c"].args = ("the copy",)
    sh.run_cell("raise c", store_history=True)
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "ZeroDivisionError: the copy" in text and "----> 1 raise c" in text and "1/0" not in text


def test_a_body_named_like_its_cell_still_shows_one_traceback(torch_ns, capsys, monkeypatch):
    # ipykernel names a cell's file by a hash of its text; a body ending in a newline has the
    # outer cell's text, and so its file name: the outer frame must not join the traceback
    sh = torch_ns
    monkeypatch.setattr(sh.compile, "get_code_name", lambda raw, code, number: f"/tmp/ipykernel_0/{abs(hash(raw))}.py")
    res = sh.run_cell("%%memsnap\nx = 1\n1/0\n", store_history=True)
    assert isinstance(res.error_in_exec, ZeroDivisionError)
    out = capsys.readouterr()
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.out + out.err)
    assert "----> 3 1/0" in text and text.count("---->") == 1  # the body's frame alone
    assert "run_cell_magic" not in text and "skipping hidden" not in text


def test_no_default_step_past_the_highest_a_file_can_hold(torch_ns):
    """The step after 2**31-1 (set by step= or by a file loaded into the run) was written into
    a file no reader accepts, and the folder stopped loading: it is refused, the cell unrun."""
    sh = torch_ns
    assert run(sh, "%%memsnap step=2147483647\nx = 1").success
    res = sh.run_cell("%%memsnap\nran = True")
    assert isinstance(res.error_in_exec, UsageError) and "ran" not in sh.user_ns
    assert "already holds step 2,147,483,647" in str(res.error_in_exec) and "give step=" in str(res.error_in_exec)
    assert run(sh, "%%memsnap run=other\nran = True").success  # another run counts from 1
    wait_for_writes()
    assert [iv.step for iv in session().intervals] == [2147483647, 1]
    assert sorted(p.parent.name for p in Path("memsnap").rglob("*.pickle")) == ["step1", "step2147483647"]
    from memsnap_magic.results.scan import read_intervals

    read = read_intervals([Path("memsnap")])  # and read back: the step its folder names
    assert sorted((iv.step, iv.run) for iv in read) == [(1, "other"), (2147483647, "memsnap")]


def test_keyboard_interrupt_is_dumped_and_reraised(torch_ns):
    res = run(torch_ns, "%%memsnap step=1\nw = torch.ones(10)\nraise KeyboardInterrupt")
    assert isinstance(res.error_in_exec, KeyboardInterrupt)
    assert session().intervals[0].error == "KeyboardInterrupt"


@pytest.mark.parametrize(
    "line", ["stpe=5", "step", "step=five", "--step 5", "device=cuda:7", "device=xpu", "step=1 steps=2"]
)
def test_bad_options_refuse_to_run_the_cell(shell, line):
    res = shell.run_cell(f"%%memsnap {line}\nran = True")
    assert isinstance(res.error_in_exec, UsageError)
    assert "ran" not in shell.user_ns
    with pytest.raises(UsageError):
        shell.run_cell_magic("memsnap", line, "ran = True")
    assert session().intervals == [] and not Path("memsnap").exists()


@pytest.mark.parametrize(
    "body, error",
    [
        ("x = 1\nx = (1\n", SyntaxError),
        ("if True:\nprint(1)\n", IndentationError),
        # they parse, and fail only when compiled
        ("x = 1\nreturn 5\n", SyntaxError),
        ("x = 1\nyield 5\n", SyntaxError),
        ("x = 1\nbreak\n", SyntaxError),
    ],
)
def test_syntax_error_reads_as_in_a_plain_cell_and_records_nothing(shell, capsys, body, error):
    def shown() -> str:  # what the user read, colours and the cell's number aside
        return re.sub(r"In ?\[\d+\]", "In[N]", re.sub(r"\x1b\[[0-9;]*m", "", "".join(capsys.readouterr())))

    res = shell.run_cell("%%memsnap\n" + body)
    assert type(res.error_before_exec) is error
    assert res.error_before_exec.lineno == 3  # the cell's own line numbers
    text = shown()
    assert "Traceback" not in text and "run_cell_magic" not in text
    shell.run_cell("#\n" + body)  # a plain cell, its lines numbered as with the magic line
    assert text == shown() and "In[N]" in text
    assert session().intervals == []
    with pytest.raises(error):  # called directly, the magic raises it too
        shell.run_cell_magic("memsnap", "", body)
    assert session().intervals == []


def test_a_body_nested_too_deep_to_parse_reads_as_in_a_plain_cell(shell, capsys):
    """The parser gives up on a 100,000-deep expression with MemoryError, which IPython reports as
    a cell that does not compile; through the magic it was a traceback from our frames."""
    body = "x = " + "-" * 100_000 + "1"
    res = shell.run_cell("%%memsnap\n" + body)
    assert type(res.error_before_exec) is MemoryError and res.error_in_exec is None
    text = "".join(capsys.readouterr())
    assert "memsnap_magic" not in text and "run_cell_magic" not in text
    assert type(shell.run_cell(body).error_before_exec) is MemoryError  # as a plain cell
    assert session().intervals == []


def test_a_future_import_after_other_statements_is_recorded_as_a_plain_cell_runs_it(shell):
    """IPython compiles a cell a statement at a time, so a late `from __future__` import is
    accepted; our one-module compile refused it, and the cell ran unrecorded without a word."""
    body = "x = 1\nfrom __future__ import annotations\ndef f(a: Undefined): pass\nseen = f.__annotations__"
    res = shell.run_cell("%%memsnap device=cpu\n" + body)
    assert res.success and shell.user_ns["seen"] == {"a": "Undefined"}
    assert len(session().intervals) == 1
    assert shell.run_cell(body).success and shell.user_ns["seen"] == {"a": "Undefined"}  # as plainly


def test_cell_behaves_as_without_the_magic(torch_ns):
    sh = torch_ns
    res = run(sh, "%%memsnap\nfrom math import tau\nn = 3\n%time m = n + 1\nm * 10")
    assert res.success and res.result == 40 and sh.user_ns["m"] == 4 and "tau" in sh.user_ns
    res = run(sh, "%%memsnap\nm * 10;")
    assert res.result is None  # a trailing semicolon still silences the value
    assert [i.step for i in session().intervals] == [1, 2]


def test_rerunning_a_step_replaces_interval_and_file(torch_ns):
    sh = torch_ns
    run(sh, "%%memsnap step=2\na = torch.empty(2**20, dtype=torch.uint8)")
    run(sh, "%%memsnap step=2\nb = torch.empty(3*2**20, dtype=torch.uint8)")
    (iv,) = session().intervals
    assert [s for _, s in allocs(iv.path)] == [3 * MiB]
    run(sh, "%%memsnap\npass")
    assert [i.step for i in session().intervals] == [2, 3]


def test_steps_with_mark_dump_only_the_listed_steps(torch_ns):
    sh = torch_ns
    res = run(
        sh,
        "%%memsnap steps=1,3\n"
        "for step in range(1, 5):\n"
        "    mark(step)\n"
        "    keep.append(torch.empty(step * 2**20, dtype=torch.uint8))\n",
    )
    assert res.success
    assert [i.step for i in session().intervals] == [1, 3]
    one, three = session().intervals
    assert [s for _, s in allocs(one.path)] == [MiB]
    assert [s for _, s in allocs(three.path)] == [3 * MiB]
    assert three.baseline_allocated == 3 * MiB  # steps 1 and 2 kept theirs
    assert sorted(p.name for p in Path("memsnap").iterdir()) == ["step1", "step3"]


def test_marked_steps_are_cleared_intervals_in_the_cumulative_count(torch_ns):
    # Each listed step starts a fresh history, so its file holds only its own entries and a
    # never-cleared recording would hold the running sum (a GPU run showed 1,957 -> 1,959 here).
    sh = torch_ns
    run(
        sh,
        "%%memsnap steps=1,2,3\n"
        "for step in range(1, 4):\n"
        "    mark(step)\n"
        "    keep.append(torch.empty(step * 2**20, dtype=torch.uint8))\n",
    )
    ivs = session().intervals
    assert [i.clear for i in ivs] == [True, True, True]
    wait_for_writes()
    assert [load_snapshot(i.path)["memsnap"]["clear"] for i in ivs] == [True, True, True]
    entries = [i.trace_entries for i in ivs]
    assert [i.cumulative_trace_entries for i in ivs] == [sum(entries[: n + 1]) for n in range(3)]


def test_steps_with_clear_false_is_a_usage_error(torch_ns):
    res = torch_ns.run_cell("%%memsnap steps=1,2 clear=false\nran = True")
    assert isinstance(res.error_in_exec, UsageError)
    assert "clear=false" in str(res.error_in_exec) and "steps=" in str(res.error_in_exec)
    assert "ran" not in torch_ns.user_ns


def test_summary_line_says_when_an_accelerator_saw_no_allocation():
    # On a GPU machine device=auto records CUDA; a cell whose tensors are on the CPU then gives
    # an empty snapshot, and the line says why rather than reporting a bare "0 entries".
    from dataclasses import replace

    from memsnap_magic.results.intervals import Interval
    from memsnap_magic.views.report import describe

    iv = Interval(
        step=1,
        rank=0,
        device="cuda:0",
        path=None,
        baseline_allocated=0,
        peak_allocated=0,
        end_allocated=0,
        trace_entries=0,
    )
    assert "0 entries: nothing was allocated on cuda:0 (CPU tensors? record them with device=cpu)" in describe(iv)
    assert "nothing was allocated" not in describe(replace(iv, device="cpu"))
    assert "nothing was allocated" not in describe(replace(iv, trace_entries=3))


def test_unwritable_output_warns_keeps_interval_and_stops(torch_ns):
    sh = torch_ns
    Path("blocked").write_text("a file where a folder should be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run(sh, "%%memsnap out=blocked wait=true\nv = torch.ones(4)\nv.sum().item()")
    assert res.success and res.result == 4.0
    messages = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(messages) == 1 and "could not write blocked/step1/" in messages[0]
    (iv,) = session().intervals
    assert iv.path is None and iv.peak_allocated > 0
    assert STATE.recording_devices() == []


def test_every_unwritable_snapshot_is_its_own_warning(torch_ns):
    # Python's default action shows a text once per place; ours come from one place in our code
    sh = torch_ns
    Path("blocked").write_text("a file where a folder should be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            run(sh, "%%memsnap out=blocked step=7\nv = torch.ones(4)")
            run(sh, "1")
    messages = [str(w.message) for w in caught if "could not write blocked/step7/" in str(w.message)]
    assert len(messages) == 2


def test_rank_from_environment_and_option(torch_ns, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    run(torch_ns, "%%memsnap step=1\npass")
    run(torch_ns, "%%memsnap step=1 rank=5\npass")
    assert [(i.rank, i.path.name.split("_pid")[0]) for i in session().intervals] == [
        (3, "torch_memory_rank3"),
        (5, "torch_memory_rank5"),
    ]


def test_line_magic_commands(shell, capsys):
    shell.run_line_magic("memsnap", "config tag=fwd max_entries=50")
    assert session().defaults == {"tag": "fwd", "max_entries": 50}
    shell.run_cell("%%memsnap\nq = 1")
    assert session().intervals[0].path.name.startswith("fwd_rank0")
    shell.run_line_magic("memsnap", "list")
    out = capsys.readouterr().out
    assert "step" in out and "cum. peak" in out and "fwd_rank0" in out
    with pytest.raises(UsageError, match="allowed: show, load, config, list, predict, reset, off"):
        shell.run_line_magic("memsnap", "bogus")
    with pytest.raises(UsageError, match="tag="):
        shell.run_line_magic("memsnap", "config tag=a/b")
    shell.run_cell("%%memsnap clear=false\nq = 2")
    shell.run_line_magic("memsnap", "off")
    assert "stopped recording on cpu" in capsys.readouterr().out
    shell.run_line_magic("memsnap", "reset")
    assert session().intervals == []


def test_help_documents_every_option(shell):
    doc = shell.find_cell_magic("memsnap").__doc__
    for key in memsnap_magic.recording.options.OPTIONS:
        assert f"{key}=" in doc
    assert "e.g. step=5" in doc


def test_reload_leaves_one_magic_and_no_recording(shell):
    shell.run_cell("%%memsnap clear=false\nq = 1")
    shell.run_line_magic("reload_ext", "memsnap_magic")
    from memsnap_magic.ipython.execute import SyntaxCheck

    assert sum(isinstance(t, SyntaxCheck) for t in shell.input_transformers_cleanup) == 1
    assert STATE.recording_devices() == []
    assert shell.run_cell("%%memsnap\nq = 2").success
    shell.run_line_magic("unload_ext", "memsnap_magic")
    assert "memsnap" not in shell.magics_manager.magics["cell"]
    assert "mark" not in shell.user_ns
    assert not any(isinstance(t, SyntaxCheck) for t in shell.input_transformers_cleanup)
    shell.run_line_magic("load_ext", "memsnap_magic")


def test_recorder_in_a_script(tmp_path):
    import torch

    from memsnap_magic import Recorder

    with Recorder(step=7, out=tmp_path, device="cpu") as rec:
        block = torch.empty(MiB, dtype=torch.uint8)
    (iv,) = rec.intervals
    assert iv.peak_increase == MiB and iv.path.parent == tmp_path / "step7"
    del block
    with pytest.raises(ValueError, match="context="):
        Recorder(context="everything")


def test_profiler_log_lines_stay_out_of_the_cell_output():
    # A tensor allocated before recording and freed inside the cell makes PyTorch's CPU
    # allocator print "Memory block of unknown size..." once per process; kineto prints USDT
    # lines at start/stop; a session without stacks warns at its stop that it has no CPU trace
    # (with context=none, and between the steps of steps=). None may reach the user.
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "sh = InteractiveShell.instance()\n"
        "sh.run_cell('import torch, memsnap_magic\\nold = torch.ones(1000)')\n"
        "sh.run_line_magic('load_ext', 'memsnap_magic')\n"
        "r = sh.run_cell('%%memsnap device=cpu\\ndel old\\nnew = torch.ones(10)')\n"
        "assert r.success\n"
        "r = sh.run_cell('%%memsnap device=cpu context=none\\nnone = torch.ones(10)')\n"
        "assert r.success\n"
        "r = sh.run_cell('%%memsnap device=cpu steps=3\\nfor i in range(1, 4):\\n"
        "    memsnap_magic.mark(i)\\n    y = torch.ones(10 * i)')\n"
        "assert r.success\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    noise = out.stdout + out.stderr
    assert "unknown size" not in noise and "USDT" not in noise and "Warning" not in noise, noise
    assert "memsnap step 1 · cpu" in out.stdout and "memsnap step 2 · cpu" in out.stdout
    assert "memsnap step 3 · cpu" in out.stdout


def test_show_displays_the_dashboard_with_fallbacks(torch_ns):
    sh = torch_ns
    run(sh, "%%memsnap\nu = torch.empty(2**20, dtype=torch.uint8)")
    sh.run_line_magic("memsnap", "show")
    live, still = (o["data"] for o in sh.display_pub.outputs[-2:])
    assert set(live) == {"application/vnd.jupyter.widget-view+json", "text/plain"}
    # beside the widget, a still copy for reopened or exported notebooks, kept current by its id
    assert set(still) == {"text/html", "image/png", "text/plain"}
    display_id = sh.display_pub.outputs[-1]["transient"]["display_id"]
    assert "as of step 1 (1 step)" in still["text/plain"] and "1.0 MiB" in still["text/plain"]
    assert "data:image/png;base64," + still["image/png"] in still["text/html"]
    # read without its kernel (nbconvert, a viewer): the picture says what it is, the table stays columns
    assert (
        "alt='memsnap overview" in still["text/html"] and "font-family:monospace;white-space:pre" in still["text/html"]
    )
    run(sh, "%%memsnap\nv = torch.empty(2**21, dtype=torch.uint8)")
    updated = sh.display_pub.outputs[-1]
    assert updated["update"] and updated["transient"]["display_id"] == display_id
    assert "as of step 2 (2 steps)" in updated["data"]["text/plain"]
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []  # figures are not left registered with pyplot


def test_show_with_an_unclosed_quote_is_one_line(torch_ns):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"%memsnap show: No closing quotation; give view=NAME"):
        torch_ns.run_line_magic("memsnap", 'show view="fit')


def test_the_newest_interval_is_reachable_without_the_namespace(torch_ns):
    from memsnap_magic.results.intervals import Interval

    sh = torch_ns
    run(sh, "%%memsnap step=2\na = torch.empty(2**20, dtype=torch.uint8)")
    run(sh, "%%memsnap step=3\nb = torch.empty(2**20, dtype=torch.uint8)")
    assert session().last.step == 3
    run(sh, "%%memsnap step=2\nc = torch.empty(3*2**20, dtype=torch.uint8)")  # re-run: replaced in place
    assert [i.step for i in session().intervals] == [2, 3]
    assert session().last.step == 2 and session().last.peak_increase == 3 * MiB
    assert not any(isinstance(v, Interval) for v in sh.user_ns.values())  # nothing written into it


def test_line_commands_help_and_errors_come_from_one_table(shell):
    from memsnap_magic.ipython.magic import COMMANDS

    doc = shell.find_line_magic("memsnap").__doc__
    for command in COMMANDS.values():
        assert f"%memsnap {command.usage}" in doc and command.help in doc
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("memsnap", "shwo")
    assert f"allowed: {', '.join(COMMANDS)}, help" in str(info.value)


@pytest.mark.parametrize("line", ["", "help"])
def test_memsnap_alone_or_help_lists_the_commands(shell, capsys, line):
    from memsnap_magic.ipython.magic import COMMANDS

    shell.run_line_magic("memsnap", line)
    out = capsys.readouterr().out
    assert all(f"%memsnap {c.usage}" in out for c in COMMANDS.values()) and "%%memsnap [key=value ...]" in out


@pytest.mark.parametrize("command", ["list", "reset", "off"])  # show: view= (test_fit_view)
def test_commands_without_arguments_refuse_words_after_them(shell, command):
    with pytest.raises(UsageError, match=f"%memsnap {command} takes nothing after it, not 'extra'"):
        shell.run_line_magic("memsnap", f"{command} extra")


def test_config_shows_the_defaults_as_options_take_them(shell, capsys):
    shell.run_line_magic("memsnap", "config steps=1,5 clear=true wait=false max_entries=5")
    shown = capsys.readouterr().out.strip().removeprefix("memsnap defaults: ")
    assert "steps=1,5" in shown and "wait=false" in shown and "clear=true" in shown
    shell.run_line_magic("memsnap", "config " + shown)  # what it shows, it takes back
    assert capsys.readouterr().out.strip().removeprefix("memsnap defaults: ") == shown


def test_out_through_a_link_and_up_goes_where_the_link_leads(torch_ns, tmp_path):
    from memsnap_magic.core.names import shown_path

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    run(torch_ns, "%%memsnap step=1 out=link/../runs\nx = torch.ones(4)")
    wait_for_writes()
    (written,) = (tmp_path / "real" / "runs").rglob("*.pickle")  # as the OS resolves link/..
    assert session().intervals[0].path.resolve() == written.resolve()
    assert shown_path(tmp_path / "..cache" / "f") == "..cache/f"  # a name starting with dots is below
    assert shown_path(tmp_path.parent / "f") == str(tmp_path.parent / "f")
    assert shown_path(session().intervals[0].path).startswith("link/../runs/step1/")


def test_a_steps_cell_after_reset_still_has_mark(torch_ns):
    torch_ns.run_line_magic("reset", "-f")
    res = torch_ns.run_cell(
        "%%memsnap steps=2\nimport torch\nfor step in (1, 2):\n    mark(step)\n    x = torch.ones(8)"
    )
    assert res.success and [iv.step for iv in session().intervals] == [2]


def test_replacing_a_step_written_elsewhere_says_its_file_stays(torch_ns, capsys):
    run(torch_ns, "%%memsnap step=1\nx = torch.ones(4)")
    run(torch_ns, "%%memsnap step=1\nx = torch.ones(4)")
    assert "replaced the earlier step 1 → " in capsys.readouterr().out  # the same file, rewritten
    run(torch_ns, "%%memsnap step=1 out=elsewhere\nx = torch.ones(4)")
    assert "replaced the earlier step 1 (its file stays: memsnap/step1/" in capsys.readouterr().out


def test_a_cells_value_let_go_from_the_output_cache_is_seen_gone(torch_ns):
    sh = torch_ns
    sh.run_line_magic("memsnap", "config device=cpu")
    assert sh.run_cell("%%memsnap step=1\ntorch.ones(2**18)", store_history=True).success  # Out[N]: 1 MiB
    # let go of every reference IPython keeps (Out, _N, and _ in its hidden namespace too)
    assert sh.run_cell("%reset -f out", store_history=True).success
    for names in (sh.user_ns, sh.user_ns_hidden):  # (IPython 8.0 keeps _N there as well)
        for name in [n for n in names if n in ("_", "__", "___") or re.fullmatch(r"_\d+", n)]:
            names.pop(name)
    assert sh.run_cell("%%memsnap step=2\ny = torch.ones(2**18)", store_history=True).success
    one, two = session().intervals
    assert one.kept == MiB and two.moved == -MiB and two.baseline_allocated == 0  # the value went with Out
