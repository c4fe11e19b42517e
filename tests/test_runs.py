"""Runs: intervals belong to runs; a step is replaced only within its run; loaded files are runs
of their own; the dashboard and the CLI compare runs step by step, never merge them."""

from __future__ import annotations

import html
import json
import pickle
import re
from dataclasses import replace
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from test_widget import _png_point, _send, bars, interval

from memsnap_magic import Recorder, dump_snapshot, load_snapshot, session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.results.scan import read_run
from memsnap_magic.results.session import Session
from memsnap_magic.views.dashboard import Dashboard

MiB = 1 << 20
LEAK = "import torch\nkept.append(torch.ones({n} * 2**18))"  # keeps n MiB


def test_a_named_run_has_its_own_folder_steps_and_cumulative_figures(shell, tmp_path, capsys):
    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    for n in (1, 2):
        assert shell.run_cell(f"%%memsnap step={n}\n" + LEAK.format(n=n)).success
    for n in (1, 2):
        assert shell.run_cell(f"%%memsnap step={n} run=fixed\nimport torch\nx = torch.ones(2**18)").success
    runs = session().runs
    assert list(runs) == ["", "fixed"] and runs[""].label == "this session"
    assert [iv.step for iv in runs[""].intervals] == [1, 2] and [iv.step for iv in runs["fixed"].intervals] == [1, 2]
    # files: the session's own in verl's layout, the named run one level down
    wait_for_writes()
    assert {p.parent.name for p in (tmp_path / "memsnap").glob("step*/*.pickle")} == {"step1", "step2"}
    fixed = sorted((tmp_path / "memsnap" / "fixed").glob("step*/*.pickle"))
    assert [p.parent.name for p in fixed] == ["step1", "step2"]
    assert pickle.loads(fixed[0].read_bytes())["memsnap"]["run"] == "fixed"
    # the session's run kept 1 + 2 MiB; the fixed run's figures do not pile onto them
    own, other = runs[""].intervals, runs["fixed"].intervals
    assert [iv.kept for iv in own] == [1 * MiB, 2 * MiB]
    assert other[0].cumulative_trace_entries == other[0].trace_entries  # its own history starts at 0
    assert other[1].cumulative_peak_allocated == max(iv.peak_allocated for iv in other)
    out = capsys.readouterr().out
    assert "memsnap step 1 (run fixed) · cpu" in out and "replaced" not in out

    # re-recording a step replaces it within its run only, and the line says so (path still last)
    assert shell.run_cell("%%memsnap step=1 run=fixed\npass").success
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "replaced the earlier step 1" in line and line.rsplit(" → ", 1)[1].endswith(".pickle")
    assert [iv.step for iv in session().runs[""].intervals] == [1, 2]
    assert len(session().intervals) == 4 and session().runs["fixed"].intervals[0].trace_entries == 0
    # a new step without step= follows its own run: 3 in each
    assert shell.run_cell("%%memsnap run=fixed\npass").success
    assert [iv.step for iv in session().runs["fixed"].intervals] == [1, 2, 3]


def test_a_bad_run_name_is_a_usage_error(shell):
    with pytest.raises(UsageError, match=r"run=.*letters, digits.*folder name"):
        shell.run_cell("%%memsnap run=../x\npass", store_history=False).raise_error()
    assert session().intervals == []


def test_recorder_takes_a_run(tmp_path):
    with Recorder(device="cpu", out=tmp_path, run="after", step=7):
        pass
    (iv,) = session().runs["after"].intervals
    assert iv.step == 7 and iv.path.parent.parent.name == "after"


def test_a_recorder_in_the_notebook_takes_the_config_defaults_under_its_own_keywords(shell, tmp_path):
    """The await UsageError sends users to `async with Recorder(...)` in a plain cell: it wrote
    to memsnap/ in the session's own run whatever %memsnap config said."""
    shell.run_line_magic("memsnap", "config device=cpu out=cfgout run=cfgrun max_entries=7")
    res = shell.run_cell(
        "import torch\nfrom memsnap_magic import Recorder\nwith Recorder(step=2, wait=True):\n    x = torch.ones(10)"
    )
    assert res.success
    (iv,) = session().intervals
    assert iv.run == "cfgrun" and iv.path.parent == tmp_path / "cfgout" / "cfgrun" / "step2"
    assert load_snapshot(iv.path)["memsnap"]["max_entries"] == 7
    res = shell.run_cell("with Recorder(step=3, run='mine', out='elsewhere', wait=True):\n    y = torch.ones(10)")
    assert res.success and session().last.path.parent == tmp_path / "elsewhere" / "mine" / "step3"
    # a keyword wins over the defaults it would conflict with; an object given is named as such
    shell.run_line_magic("memsnap", "config steps=1,2")
    assert shell.run_cell("with Recorder(step=7, wait=True):\n    z = torch.ones(10)").success
    shell.run_line_magic("memsnap", "config steps= clear=false model=net")
    res = shell.run_cell("with Recorder(steps=[9], model=[1]):\n    mark(9)")
    assert "model=the object given: that is a list" in str(res.error_in_exec)
    shell.run_line_magic("memsnap", "config model=")
    assert shell.run_cell("from memsnap_magic import mark\nwith Recorder(steps=[9], wait=True):\n    mark(9)").success
    assert {7, 9} <= {iv.step for iv in session().intervals}


def test_load_makes_runs_named_by_folder_or_as(shell, tmp_path, capsys):
    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    shell.run_cell("%%memsnap step=1\n" + LEAK.format(n=1))
    shell.run_cell("%%memsnap step=1 run=after\npass")
    shell.run_line_magic("memsnap", "reset")
    capsys.readouterr()
    # the whole folder: the session's files (a folder of step folders: "memsnap") and "after"
    shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap'}")
    assert "into runs 'memsnap' (1), 'after' (1)" in capsys.readouterr().out  # as they were recorded
    assert sorted(session().runs) == ["after", "memsnap"]
    # as= names the run; loading the same files again replaces them within that run
    shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap' / 'step1'} as=before")
    shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap' / 'step1'} as=before")
    out = capsys.readouterr().out
    assert "into run 'before': step 1;" in out and "(replacing 1 step already in the session)" in out
    assert [iv.step for iv in session().runs["before"].intervals] == [1]
    # nothing joins the session's own run; its numbering goes on past the step the reset forgot,
    # so the loaded step 1's file is not overwritten
    shell.run_cell("%%memsnap\npass")
    assert [iv.step for iv in session().runs[""].intervals] == [2]
    with pytest.raises(UsageError, match=r"as='a b'.*letters, digits"):
        shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap'} 'as=a b'")
    # one name for a folder holding two runs would merge them: refused, the session as it was
    before = list(session().intervals)
    with pytest.raises(UsageError, match=r"2 runs \(after, memsnap\) cannot take one name"):
        shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap'} as=both")
    with pytest.raises(UsageError, match=r"as= given 2 times; name the run once"):  # the last one won before
        shell.run_line_magic("memsnap", f"load {tmp_path / 'memsnap' / 'step1'} as=a as=b")
    assert session().intervals == before


def test_cli_names_runs_and_compares_them(tmp_path, capsys):
    for run, n in (("before", 3), ("after", 1)):
        for step in (1, 2):
            with Recorder(device="cpu", out=tmp_path / "out", run=run, step=step, session=Session()):
                import torch

                keep = torch.ones(n * step * 2**18)  # noqa: F841
    assert main(["summarize", "--json", f"old={tmp_path / 'out' / 'before'}", str(tmp_path / "out" / "after")]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["run"], r["step"]) for r in records] == [("old", 1), ("old", 2), ("after", 1), ("after", 2)]
    assert main(["summarize", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()  # the leaks section follows
    assert table[0].split()[:2] == ["run", "step"] and {row.split()[0] for row in table[1:]} == {"before", "after"}
    assert main(["summarize", f"all={tmp_path / 'out'}"]) == 2
    assert "2 runs (after, before) cannot take one name" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "out"), "-o", str(tmp_path / "cmp.png")]) == 0
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"


def _two_runs() -> Session:
    """A leak of +32 MiB per step over steps 3-8 and a 128 MiB temporary in step 5 ("before"),
    and the same steps fixed ("after")."""
    s = Session()
    held = 0
    for step in range(1, 10):
        base = 100 * MiB + held
        leak = 32 * MiB if 3 <= step <= 8 else 0
        spike = 128 * MiB if step == 5 else 0
        s.add(replace(interval(step, base, base + 32 * MiB + leak + spike, base + leak), run="before"))
        held += leak
    for step in range(1, 10):
        s.add(replace(interval(step, 100 * MiB, 132 * MiB, 100 * MiB), run="after"))
    return s


def test_the_dashboard_compares_runs_step_by_step():
    s = _two_runs()
    d = Dashboard(s)
    assert d.run.layout.display == "" and d.run.value == "after"  # the newest step's run
    assert [label for label, _ in d.run.options] == ["before", "after"]
    peak_ax, kept_ax, _ = d.overview_fig.axes
    # one bar per run in each step's column: the rise over the start, per run
    assert bars(peak_ax, "before") == [
        [32 * MiB, 32 * MiB, 64 * MiB, 64 * MiB, 192 * MiB, 64 * MiB, 64 * MiB, 64 * MiB, 32 * MiB]
    ]
    assert bars(peak_ax, "after") == [[32 * MiB] * 9]
    kept = [c for c in kept_ax.collections if c.get_label() == "_kept"]
    assert [float(p.vertices[:, 1].max()) for p in kept[0].get_paths()] == [0, 0] + [32 * MiB] * 6 + [0]
    assert [float(p.vertices[:, 1].max()) for p in kept[1].get_paths()] == [0] * 9
    assert "in run <b>after</b> · 2 runs compared" in d.header.value
    header = shown_text(d.header.value)
    # each run's findings, the selected one's first, a line each: the other run's leak stays in view
    assert header.index("\nafter: no leak or spike") < header.index("\nbefore: leak: steps 3–8 each kept")
    assert "after vs before on steps 1–9: largest peak change at step 5" in header
    assert "kept in total +192.0 MiB → ±0 B" in header
    # the detail follows the run selector; the step number stays when the run changes
    d.step.value = 4
    d.run.value = "before"
    assert d.selected().run == "before" and d.selected().step == 5
    assert "leak: steps 3–8 each kept +32.0 MiB (+192.0 MiB held since step 2)" in shown_text(d.header.value)
    assert "spike: step 5 held +160.0 MiB only for a while (typical +32.0 MiB)" in shown_text(d.header.value)
    # the comparison reads earlier run -> later one whichever is selected: before -> after
    shown = shown_text(d.header.value)
    assert "after vs before on steps 1–9" in shown and "kept in total +192.0 MiB → ±0 B" in shown
    from memsnap_magic.views.explain import compare_runs

    same = s.runs["after"].intervals
    assert compare_runs("again", same, "after", same) == (
        "again vs after on steps 1–9: the same peaks; kept in total ±0 B → ±0 B"
    )
    # a click on the other run's bar in a column opens that run's step
    fig = d.overview_fig
    _send(d, "click", *_png_point(fig, fig.axes[0], 2 + 0.2, 10 * MiB))  # step 3, right half: "after"
    assert (d.selected().run, d.selected().step) == ("after", 3)
    _send(d, "mousemove", *_png_point(fig, fig.axes[0], 4 - 0.2, 10 * MiB))  # step 5, left half: "before"
    assert "run <b>before</b>" in d.readout.value and "step 5" in d.readout.value


def test_one_run_draws_no_comparison():
    s = Session()
    s.add(interval(1, 0, MiB, 0))
    d = Dashboard(s)
    assert d.run.layout.display == "none" and "runs compared" not in d.header.value


def test_loaded_steps_count_in_step_order_whatever_order_the_paths_came_in(tmp_path, capsys):
    for step in (1, 2, 10):
        with Recorder(device="cpu", out=tmp_path, step=step, session=Session(), wait=True):
            import torch

            keep = torch.ones(step * 2**18)  # noqa: F841
    folders = [str(tmp_path / f"step{n}") for n in (1, 10, 2)]  # as a shell glob orders step*
    assert main(["summarize", "--json", *folders]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in records] == [1, 2, 10]
    s = Session()
    for iv in read_run(folders):
        s.add(iv)
    assert [iv.step for iv in s.intervals] == [1, 2, 10]
    assert [iv.cumulative_trace_entries for iv in s.intervals] == list(
        accumulate(iv.trace_entries for iv in s.intervals)
    )


def test_steps_recorded_out_of_order_read_the_same_in_the_kernel_and_from_the_folder(shell, tmp_path, capsys):
    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    for n in (5, 2, 3):  # a later step first, as when one cell is rerun with another step=
        assert shell.run_cell(f"%%memsnap step={n}\n" + LEAK.format(n=n)).success
    wait_for_writes()
    capsys.readouterr()
    shell.run_line_magic("memsnap", "list")
    listed = capsys.readouterr().out
    assert [iv.step for iv in session().intervals] == [2, 3, 5]
    kernel = session().to_records()
    assert [r["cumulative_trace_entries"] for r in kernel] == list(accumulate(r["trace_entries"] for r in kernel))
    assert main(["summarize", "--json", str(tmp_path / "memsnap")]) == 0
    folder = json.loads(capsys.readouterr().out)
    figures = ("step", "baseline_allocated", "peak_allocated", "cumulative_peak_allocated", "cumulative_trace_entries")
    assert [[r[k] for k in figures] for r in folder] == [[r[k] for k in figures] for r in kernel]
    assert main(["summarize", str(tmp_path / "memsnap")]) == 0
    table = capsys.readouterr().out

    def rows(text):  # each table row without its file column (relative in one, as given in the other)
        return [line.rsplit("  ", 1)[0].rstrip() for line in text.splitlines() if line.strip()[:1].isdigit()]

    assert rows(listed) == rows(table) and len(rows(table)) == 3


def test_a_folders_runs_come_in_the_order_they_were_recorded_not_by_name(tmp_path):
    import torch

    for run in ("zeta", "alpha"):  # recorded first, named last
        with Recorder(device="cpu", out=tmp_path, run=run, step=1, session=Session(), wait=True):
            keep = torch.ones(2**10)  # noqa: F841
    foreign = load_snapshot(next((tmp_path / "zeta").rglob("*.pickle")))
    foreign.pop("memsnap")  # a file that does not say when it was taken comes after those that do
    dump_snapshot(foreign, tmp_path / "aaa" / "step1" / "torch_memory_rank0.pickle")
    assert [iv.run for iv in read_run([tmp_path])] == ["zeta", "alpha", "aaa"]


class _Reference:
    """The session's step, previous and cumulative figures as plain scans over every interval
    (what the indexes must agree with)."""

    def __init__(self) -> None:
        self.intervals: list = []
        self.runs: list = []  # in the order they began
        self.top: dict = {}  # run -> the highest step numbered, kept by a reset

    def add(self, iv):
        key = (iv.run, iv.step, iv.rank, iv.device, iv.tag)
        old = next((o for o in self.intervals if (o.run, o.step, o.rank, o.device, o.tag) == key), None)
        if old is not None:
            del self.intervals[next(n for n, o in enumerate(self.intervals) if o is old)]
        if iv.run not in self.runs:
            self.runs.append(iv.run)
        self.intervals.append(iv)  # after the others of its step and rank, replacing or not
        self.intervals.sort(key=lambda i: (self.runs.index(i.run), i.step, i.rank))  # stable: ties as added
        return old

    def next_step(self, run):  # past every step recorded, those forgotten by a reset too: no file overwritten
        self.top[run] = max([self.top.get(run, 0), *(i.step for i in self.intervals if i.run == run)])
        return self.top[run] + 1

    def previous(self, iv):
        earlier = [
            i for i in self.intervals if (i.run, i.rank, i.device) == (iv.run, iv.rank, iv.device) and i.step < iv.step
        ]
        return max(earlier, key=lambda i: i.step) if earlier else None

    def cumulative(self):
        last, out = {}, []
        for iv in self.intervals:
            prev = last.get((iv.run, iv.rank, iv.device))
            carried = prev[2] if prev is not None and not prev[3] else 0
            entries = (prev[0] if prev else 0) + max(iv.trace_entries - carried, 0)
            peak = max(iv.peak_allocated, prev[1] if prev else 0)
            last[(iv.run, iv.rank, iv.device)] = (entries, peak, iv.trace_entries, iv.clear)
            out.append((entries, peak))
        return out


moves = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["", "a"]),  # run
            st.integers(1, 6),  # step
            st.integers(0, 1),  # rank
            st.sampled_from(["", "t"]),  # tag
            st.sampled_from(["cpu", "cuda:0"]),  # device
            st.integers(0, 50),  # entries
            st.integers(1, 99),  # peak
            st.booleans(),  # clear
        ),
        st.just("reset"),
    ),
    max_size=40,
)


@given(moves)
@settings(max_examples=300, deadline=None)
def test_the_sessions_indexes_agree_with_scanning_every_interval(steps):
    s, ref = Session(), _Reference()
    for move in steps:
        if move == "reset":
            for r in ("", "a"):
                ref.next_step(r)  # what it had numbered so far stays
            s.reset()
            ref.intervals.clear()
            ref.runs.clear()
            continue
        run, step, rank, tag, device, entries, peak, clear = move
        iv = replace(
            interval(step, 0, peak, 0, entries=entries, clear=clear, rank=rank, device=device), run=run, tag=tag
        )
        assert _same(s.add(iv), ref.add(iv)) and s.current(iv) is s.last
        assert len(s.intervals) == len(ref.intervals) and all(map(_same, s.intervals, ref.intervals))
        assert [(i.cumulative_trace_entries, i.cumulative_peak_allocated) for i in s.intervals] == ref.cumulative()
        for r in ("", "a"):
            assert s.next_step(r) == ref.next_step(r)
        for probe in s.intervals:
            assert _same(s.previous(probe), ref.previous(probe))


def test_a_record_held_stays_as_it_was_when_an_earlier_step_moves_its_cumulative_figures():
    s = Session()
    s.add(interval(5, 0, 4 * MiB, 0, entries=10))
    held = s.last
    s.add(interval(2, 0, 8 * MiB, 0, entries=5))  # recorded later, listed first: step 5 accumulates over it
    assert (held.cumulative_peak_allocated, held.cumulative_trace_entries) == (4 * MiB, 10)
    now = s.current(held)
    assert now is s.intervals[1] and now is not held and now.origin == held.origin
    assert (now.cumulative_peak_allocated, now.cumulative_trace_entries) == (8 * MiB, 15)
    assert s.previous(now) is s.intervals[0]


def _same(held, added):
    """Whether the session's record is of the interval added (it holds it with its cumulative
    figures: a record of its own, of the same origin)."""
    return held is added is None or (held is not None and added is not None and held.origin == added.origin)


def test_a_never_cleared_history_does_not_run_into_another_run(shell, capsys):
    import warnings

    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    assert shell.run_cell("%%memsnap step=6 clear=false\n" + LEAK.format(n=1)).success
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert shell.run_cell("%%memsnap step=7 run=other\n" + LEAK.format(n=1)).success
    assert any("history of this session on cpu ended here" in str(w.message) for w in caught)
    other = session().runs["other"].intervals[0]
    assert other.trace_entries == 2 and other.kept == MiB  # its block and segment and other.baseline_allocated == MiB
    assert shell.run_cell("%%memsnap step=8\n" + LEAK.format(n=1)).success  # nothing left on to carry
    assert session().runs[""].intervals[-1].trace_entries == 2


def test_reset_stops_recording_and_numbering_goes_on_past_the_files_kept(shell, tmp_path, capsys):
    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    for _ in range(2):
        assert shell.run_cell("%%memsnap clear=false\n" + LEAK.format(n=1)).success
    wait_for_writes()
    before = {p: p.read_bytes() for p in (tmp_path / "memsnap").rglob("*.pickle")}
    capsys.readouterr()
    shell.run_line_magic("memsnap", "reset")
    said = capsys.readouterr().out
    assert "the next step is 3" in said and "stopped recording on cpu" in said
    assert shell.run_cell("%%memsnap\n" + LEAK.format(n=3)).success
    wait_for_writes()
    (iv,) = session().intervals
    assert iv.step == 3 and iv.trace_entries == 2 and iv.kept == 3 * MiB  # its own history only
    assert all(p.read_bytes() == data for p, data in before.items())  # steps 1 and 2 untouched


def test_a_never_cleared_chain_is_judged_step_by_step(shell, tmp_path, capsys):
    from memsnap_magic.results.findings import leaks
    from memsnap_magic.views.headline import headline

    shell.user_ns["kept"] = []
    shell.run_line_magic("memsnap", "config device=cpu")
    cells = [
        "%%memsnap step=1 clear=false\n" + LEAK.format(n=2) + "\ntmp = torch.ones(2**20)\ndel tmp",
        "kept.append(torch.ones(2**19))",  # a plain cell between: 2 MiB the chain sees too
        "%%memsnap step=2 clear=false\n" + LEAK.format(n=2),
        "%%memsnap step=3\n" + LEAK.format(n=2),
    ]
    for cell in cells:
        assert shell.run_cell(cell).success
    ivs = session().intervals
    assert [iv.kept for iv in ivs] == [2 * MiB, 6 * MiB, 8 * MiB]  # each from the chain's start, as its file
    (run,) = leaks(ivs, [1, 2, 3])
    assert run.steps == (1, 2, 3) and run.kept == (2 * MiB, 4 * MiB, 2 * MiB)  # each step's own
    assert "(+8.0 MiB held)" in headline(ivs)
    wait_for_writes()
    capsys.readouterr()
    assert main(["summarize", "--json", str(tmp_path / "memsnap")]) == 0
    records = json.loads(capsys.readouterr().out)
    line = records[2]["leak_sites"][0]["site"]
    assert all(line in [leak["site"] for leak in r["leak_sites"]] for r in records)
    assert [r["leak_sites"][0]["kept"] for r in records] == [2 * MiB] * 3  # each step's own, as the text says
    assert f"leak site: {line} kept +2.0 MiB per step over steps 1–3" in headline(ivs)  # not the chain's sums


def test_runs_and_folders_named_in_any_script_keep_their_names(shell, tmp_path, capsys):
    shell.run_line_magic("memsnap", "config device=cpu")
    assert shell.run_cell("%%memsnap step=1 run=mémoire tag=前向\nimport torch\nx = torch.ones(4)").success
    wait_for_writes()
    (path,) = (tmp_path / "memsnap" / "mémoire").rglob("*.pickle")
    assert path.name.startswith("前向_rank0_")
    folder = tmp_path / "données brutes"
    (folder / "step1").mkdir(parents=True)
    (folder / "step1" / path.name).write_bytes(path.read_bytes())
    shell.run_line_magic("memsnap", f"load '{folder}'")
    assert "into run 'mémoire'" in capsys.readouterr().out  # the run the file was recorded into
    data = load_snapshot(path)
    data.pop("memsnap")
    dump_snapshot(data, folder / "step2" / "torch_memory_rank0.pickle")
    shell.run_line_magic("memsnap", f"load '{folder / 'step2'}'")
    assert "into run 'données_brutes'" in capsys.readouterr().out  # named after its folder
    for bad in ("../x", ".hidden", "a b", "x\x1b[31m"):
        with pytest.raises(UsageError, match="run="):
            shell.run_cell(f"%%memsnap run={bad!r}\npass", store_history=False).raise_error()


def shown_text(markup: str) -> str:
    """The dashboard header's words as read: a line per finding (each its own block), no tags."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup.replace("<div", "\n<div")))
