"""Who keeps the memory (issue 41 items 3 and 6): planted leaks on the CPU, each named by its
holder and pattern, each healthy twin claiming nothing; the paths in files read later; the walk's
bounds and that it runs none of the user's code.

What each leaking step keeps is known without our walk (``benchmarks/leak_scenarios.py``: by
construction, from the optimizer's own state, or from ``saved_tensors_hooks``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from memsnap_magic import Recorder, session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.core.errors import SnapshotError
from memsnap_magic.files import summaries
from memsnap_magic.files.meta import Meta
from memsnap_magic.files.snapshot import load_snapshot
from memsnap_magic.recording.retention import LIMIT, find_holders
from memsnap_magic.results.scan import read_intervals
from memsnap_magic.results.session import Session
from memsnap_magic.views.explain import blocks_table
from memsnap_magic.views.headline import finding_lines

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import leak_scenarios as scenarios
from surfaces import said_everywhere

MiB = 1 << 20
# the path of what step 3 kept, as the walk spells it from the namespace's names (the warm-up step
# unrecorded added the first item)
PATHS = {
    "losses": ["history[3].grad_fn → … saved tensors", "history[3]"],
    "cache": ["cache['step3']"],
    "hook": ["model[0].outputs[3]"],
    "optimizer": [
        "schedulers[3].optimizer.state[…]['exp_avg']",
        "schedulers[3].optimizer.state[…]['exp_avg_sq']",
        "schedulers[3].optimizer.state[…]['step']",
    ],
}


@pytest.mark.parametrize("name", scenarios.SCENARIOS)
def test_a_planted_leak_is_named_by_its_holder_and_pattern(name, tmp_path):
    outcome = scenarios.run(name, healthy=False, device="cpu", out=tmp_path)
    said = scenarios.judged(outcome)
    holder, pattern = scenarios.EXPECTED[name]
    assert all(t > MiB for t in outcome.truth)  # each step keeps past the leak floor
    assert said["kept"] == outcome.truth  # the figures, exact to the byte
    assert said["held_by_paths"] == outcome.truth  # every kept byte reached by a path, none else
    assert said["leaking_steps"] == [1, 2, 3, 4]
    assert (said["holder"], said["pattern"]) == (holder, pattern)
    assert said["ok"]
    step3 = outcome.intervals[2]
    assert sorted(path for path, _, _ in step3.kept_by) == sorted(PATHS[name])
    assert step3.holders["unreached"] == 0 and step3.holders["cut"] is None
    lines = said["lines"]
    assert lines[0].startswith("leak: steps 1–4 each kept")
    assert lines[1].startswith(f"kept by `{holder}` (")
    assert sum(line.startswith("do: ") for line in lines) == 1


def test_the_holders_words(tmp_path):
    words = {}
    for name in scenarios.SCENARIOS:
        lines = scenarios.judged(scenarios.run(name, healthy=False, device="cpu", out=tmp_path))["lines"]
        words[name] = [line for line in lines if line.startswith(("kept by", "do:"))]
    assert words["losses"] == [
        "kept by `history` (list): +3.0 MiB per step, each item's autograd graph",
        "do: keep `loss.item()` (a number) or `.detach()` in `history`, not the tensor itself: "
        "each one keeps its step's autograd graph alive",
    ]
    assert words["cache"] == [
        "kept by `cache` (dict): +2.0 MiB per step, each entry",
        "do: `cache` gains an entry each step: evict old entries (or bound its size), or clear it between steps",
    ]
    assert words["hook"][0] == "kept by `model[0].outputs` (list): +2.0 MiB per step, each item"
    assert words["hook"][1].startswith("do: a module's hook or attribute keeps its outputs (`model[0].outputs`)")
    assert words["optimizer"][0] == "kept by `schedulers` (list): +8.0 MiB per step, each item's optimizer state"
    assert words["optimizer"][1].startswith(
        "do: an optimizer is made anew each step while `schedulers` still holds the old ones"
    )


@pytest.mark.parametrize("name", scenarios.SCENARIOS)
def test_its_healthy_twin_claims_nothing_and_is_not_walked(name, tmp_path):
    outcome = scenarios.run(name, healthy=True, device="cpu", out=tmp_path)
    said = scenarios.judged(outcome)
    assert said["ok"] and said["lines"][0].startswith("no leak or spike")
    assert (said["holder"], said["pattern"], said["leaking_steps"]) == (None, None, [])
    # ordinary steps pay nothing: under the leak floor there is no walk, and nothing in the file
    assert all(iv.holders is None and iv.kept_by == [] for iv in outcome.intervals)
    wait_for_writes()
    assert all(load_snapshot(iv.path)["memsnap"]["holders"] is None for iv in outcome.intervals)


def test_files_read_later_still_say_who_held_the_blocks(tmp_path, capsys):
    outcome = scenarios.run("losses", healthy=False, device="cpu", out=tmp_path)
    said = finding_lines(outcome.intervals)
    wait_for_writes()
    folder = tmp_path / "losses" / "leaky"
    warm = read_intervals([folder])  # from the summaries beside the dumps
    for path in folder.rglob("*" + summaries.SUFFIX):
        path.unlink()
    cold = read_intervals([folder])  # from the dumps themselves
    for ivs in (warm, cold):
        assert [iv.kept_by for iv in ivs] == [iv.kept_by for iv in outcome.intervals]
        assert finding_lines(ivs) == said
    assert main(["summarize", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "kept by `history` (list): +3.0 MiB per step, each item's autograd graph" in out
    assert main(["summarize", "--json", str(folder)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["findings"] for r in records] == [said] * 4
    assert records[2]["kept_by"] == [list(row) for row in outcome.intervals[2].kept_by]
    # the step's table names what held each block it kept
    table = blocks_table(cold[2], cold[:2])
    assert "held by</th>" in table and "<code>history[3].grad_fn → … saved tensors</code>" in table


@pytest.mark.parametrize("healthy", [False, True], ids=["leaky", "healthy"])
@pytest.mark.parametrize("name", scenarios.SCENARIOS)
def test_every_front_end_says_the_same(name, healthy, tmp_path, capsys):
    outcome = scenarios.run(name, healthy=healthy, device="cpu", out=tmp_path)
    said = finding_lines(outcome.intervals)
    session = Session()
    session.add_all(outcome.intervals)
    shown = said_everywhere(session, tmp_path / name, capsys)
    assert shown == dict.fromkeys(shown, said)
    assert said[0].startswith("no leak or spike" if healthy else "leak: steps 1–4")


def test_the_magic_names_the_list_in_the_notebook(cpu, capsys):
    cpu.run_cell(
        "model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))\n"
        "x = torch.randn(512, 512)\nhistory = []\n"
    )
    for step in range(1, 4):
        res = cpu.run_cell(f"%%memsnap step={step}\nhistory.append(model(x).pow(2).mean())\n")
        assert res.success
    capsys.readouterr()
    cpu.run_line_magic("memsnap", "list")
    out = capsys.readouterr().out
    assert "kept by `history` (list): +3.0 MiB per step, each item's autograd graph" in out
    assert "do: keep `loss.item()`" in out


def test_a_cpu_step_that_leaves_recording_on_is_not_walked(cpu):
    # clear=false leaves the CPU profiler and its tracer on: a walk then would be recorded into the
    # next step, so its holders are looked for once a step ends the recording
    cpu.run_cell("keep = []")
    assert cpu.run_cell("%%memsnap step=1 clear=false\nkeep.append(torch.ones(2 * 2**20 // 4))\n").success
    assert cpu.run_cell("%%memsnap step=2\nkeep.append(torch.ones(2 * 2**20 // 4))\n").success
    wait_for_writes()
    first, second = session().intervals
    assert first.kept == 2 * MiB and first.holders is None and not first.kept_by
    assert second.kept_by and all(path.startswith("keep[") for path, _, _ in second.kept_by)


def test_memory_no_name_reaches_is_said_as_such(tmp_path):
    hidden: list[torch.Tensor] = []
    for step in range(1, 4):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace={"__name__": "__main__"}):
            hidden.append(torch.ones(2 * MiB // 4))
    ivs = session().intervals
    assert all(iv.holders["unreached"] == 2 * MiB and iv.kept_by == [] for iv in ivs)
    lines = finding_lines(ivs)
    assert "kept: +2.0 MiB a step not reachable from the notebook's names" in lines
    assert not any(line.startswith(("kept by", "do:")) for line in lines)  # no holder, no advice


def test_gradients_grown_without_zero_grad_are_no_leak(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024)
    x = torch.randn(64, 1024)
    model(x).sum().backward()  # the gradients exist before the first step recorded
    for step in range(1, 4):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace={"model": model}):
            model(x).sum().backward()  # accumulates in place: nothing new is kept
    ivs = session().intervals
    assert all(iv.kept == 0 and iv.holders is None for iv in ivs)
    assert finding_lines(ivs)[0].startswith("no leak or spike")


def tensor_and_blocks() -> tuple[torch.Tensor, dict[int, int]]:
    t = torch.ones(1024)
    s = t.untyped_storage()
    return t, {s.data_ptr(): s.nbytes()}


def test_the_walk_runs_none_of_the_users_code():
    ran: list[str] = []

    class Loud:
        def __getattr__(self, name):
            ran.append(f"getattr {name}")
            raise AttributeError(name)

        @property
        def tensor(self):
            ran.append("property")
            return None

    class Items(dict):
        def items(self):
            ran.append("items")
            return super().items()

        def values(self):
            ran.append("values")
            return super().values()

    class Seq(list):
        def __iter__(self):
            ran.append("iter")
            return super().__iter__()

        def __reversed__(self):
            ran.append("reversed")
            return super().__reversed__()

    class Key:
        def __repr__(self):
            ran.append("repr")
            return "key"

        def __hash__(self):
            return 1

    t, blocks = tensor_and_blocks()
    loud = Loud()
    loud.__dict__["kept"] = Items({Key(): Seq([t])})
    found = find_holders({"__name__": "__main__", "loud": loud}, blocks, "cpu")
    assert ran == []
    assert found["rows"] == [["loud.kept[…][0]", t.nbytes, 1]]


def test_the_walk_is_bounded_and_says_so():
    t, blocks = tensor_and_blocks()
    crowd = [object() for _ in range(50_000)]
    names = {"__name__": "__main__", "crowd": crowd, "z": [[t]]}
    # bounded by what it looks at (the time given is ample), or by its time
    found = find_holders(names, blocks, "cpu", limit=10_000, seconds=600)
    assert found["cut"] == "10,000 objects" and found["objects"] <= 10_000
    assert found["unreached"] == t.nbytes  # what it did not reach is said, not guessed
    assert find_holders(names, blocks, "cpu", seconds=0)["cut"] == "0 ms"
    found = find_holders(names, blocks, "cpu", limit=LIMIT, seconds=600)  # within the default bound: found
    assert found["rows"] == [["z[0][0]", t.nbytes, 1]] and found["cut"] is None


def test_a_path_through_a_model_nested_deep_is_named_briefly():
    t, blocks = tensor_and_blocks()
    model = inner = torch.nn.Module()
    for _ in range(200):
        inner.child = torch.nn.Module()
        inner = inner.child
    inner.kept = [t]
    found = find_holders({"model": model}, blocks, "cpu")
    (route,) = found["routes"]
    assert len(route) == 48 and found["rows"][0][0].startswith("model.child.child") and ".…" in found["rows"][0][0]
    assert found["rows"][0][0].endswith(".child.kept[0]")
    Meta.from_snapshot({"memsnap": {"holders": found}})  # a file may hold it


def test_a_file_whose_holders_are_malformed_is_refused():
    t, blocks = tensor_and_blocks()
    good = find_holders({"kept": [t]}, blocks, "cpu")
    assert Meta.from_snapshot({"memsnap": {"holders": good}}).holders == good
    for bad in (
        {**good, "rows": [["x", -1, 1]]},
        {**good, "rows": [["\x1b[2J", 1, 1]]},
        {**good, "blocks": [[1, 1, 5]]},  # a block of a row that is not there
        {**good, "extra": 1},
        {**good, "routes": []},
    ):
        with pytest.raises(SnapshotError, match="holders"):
            Meta.from_snapshot({"memsnap": {"holders": bad}})


def test_paths_through_closures_class_attributes_and_defaults():
    kept = [torch.ones(256 * (n + 1)) for n in range(3)]

    def make():
        cell = kept[0]

        def fn(x=kept[1]):
            return cell, x

        return fn

    fn = make()
    fn.__module__ = "__main__"  # the namespace's own functions and classes are looked into
    Kind = type("Kind", (), {"__module__": "__main__", "table": {"w": kept[2]}})
    blocks = {t.untyped_storage().data_ptr(): t.nbytes for t in kept}
    found = find_holders({"__name__": "__main__", "fn": fn, "Kind": Kind}, blocks, "cpu")
    assert sorted(path for path, _, _ in found["rows"]) == [
        "Kind.table['w']",
        "fn.__closure__[0].cell_contents",
        "fn.__defaults__[0]",
    ]
