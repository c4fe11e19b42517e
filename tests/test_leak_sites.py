"""Leaks by allocation site: what each step allocated and still held at its end, per site, and
the sites that keep memory step after step — in the headline, ``memsnap summarize`` and ``diff``."""

from __future__ import annotations

import json
from dataclasses import replace

import torch
from test_widget import interval

from memsnap_magic import Recorder, session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.results.findings import leak_sites, leaks
from memsnap_magic.views.headline import headline

MiB = 1 << 20
held: list[torch.Tensor] = []


def leaky_step(n: int) -> None:
    scratch = torch.ones(2 * MiB // 4)  # 2 MiB, freed again
    held.append(torch.ones(n * MiB // 4))  # kept: n MiB
    del scratch


def test_a_site_that_keeps_memory_step_after_step_is_named_with_its_rate(tmp_path, capsys):
    held.clear()
    for step in range(1, 8):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace={}):
            if 3 <= step <= 5:
                leaky_step(4)  # +4 MiB per step over steps 3-5
            else:
                torch.ones(MiB // 4)  # transient
    ivs = session().intervals
    kept = {iv.step: iv.kept_by_site for iv in ivs}
    assert [k[:2] for k in kept[4]] == [[kept[4][0][0], 4 * MiB]] and kept[4][0][2] == 1
    # the chain of the calls that made it, outermost first: this test, then the helper's line
    caller, callee = kept[4][0][0].split(" → ")
    assert caller.startswith("test_a_site_that_keeps_memory") and callee.startswith("leaky_step (test_leak_sites.py:")
    assert kept[1] == [] and kept[7] == []  # transient steps keep nothing
    (leak,) = leak_sites(ivs, [iv.step for iv in ivs])
    assert (leak.steps, leak.kept, leak.total) == ((3, 4, 5), (4 * MiB,) * 3, 12 * MiB)
    assert f"leak site: {leak.site} kept +4.0 MiB per step over steps 3–5" in headline(ivs)

    assert main(["summarize", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "leaks: allocation sites that kept memory in leaking steps" in out
    assert "+4.0 MiB per step  steps 3–5" in out and leak.site in out
    assert main(["summarize", "--json", str(tmp_path)]) == 0
    records = json.loads(capsys.readouterr().out)
    said = {"site": leak.site, "steps": [3, 4, 5], "kept_per_step": [4 * MiB] * 3, "kept_in_all": 12 * MiB}
    said |= {"kept": 4 * MiB, "since_step": None}  # what it kept in the record's own step
    assert [r["leak_sites"] for r in records] == [[], []] + [[said]] * 3 + [[], []]
    assert records[3]["kept_by_site"][0][:2] == [leak.site, 4 * MiB]

    step3, step4 = (sorted((tmp_path / f"step{n}").glob("*.pickle"))[0] for n in (3, 4))
    assert main(["diff", str(step3), str(step4)]) == 0
    out = capsys.readouterr().out
    kept_part = out.split("bytes kept (allocated in the snapshot's window, alive at its end)")[1]
    assert "(none)" in kept_part  # both steps kept 4 MiB at that site: no change


def test_the_leaks_section_says_which_run_each_leak_is_in(tmp_path, capsys):
    for run, rate in (("before", 4), ("after", 2)):
        held.clear()  # between the runs, unrecorded: the walk's references see it
        for step in range(1, 5):
            with Recorder(device="cpu", out=tmp_path / run, step=step, namespace={"held": held}):
                if step >= 2:
                    leaky_step(rate)
    assert main(["summarize", str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    lines = capsys.readouterr().out.split("leaks: allocation sites that kept memory in leaking steps\n")[1].splitlines()
    assert len(lines) == 2 and "+4.0 MiB per step" in lines[0] and "+2.0 MiB per step" in lines[1]
    assert lines[0].endswith("(run before)") and lines[1].endswith("(run after)")
    assert main(["summarize", str(tmp_path / "after")]) == 0  # one run: nothing to tell apart
    single = capsys.readouterr().out.split("leaks: allocation sites that kept memory in leaking steps\n")[1]
    assert "+2.0 MiB per step" in single and "(run " not in single


def test_a_buffer_replaced_each_step_is_not_a_leak():
    """A site that allocates in every step what the next frees keeps bytes each step, but no step
    leaks overall: nothing is flagged."""
    ivs = []
    for step in range(1, 6):
        iv = interval(step, 10 * MiB, 20 * MiB, 10 * MiB)  # end == start: nothing kept overall
        iv = replace(iv, kept_by_site=[["ring_buffer (cell In[2]:4)", 8 * MiB, 1]])
        ivs.append(iv)
    assert leak_sites(ivs, [iv.step for iv in ivs]) == []
    assert "leak site" not in headline(ivs)


def test_two_runs_of_one_site_are_two_leaks_largest_first():
    ivs = []
    for step in range(1, 8):
        leaking = step in (2, 3, 6)
        iv = interval(step, 10 * MiB, 20 * MiB, 10 * MiB + (3 * MiB if leaking else 0))
        iv = replace(iv, kept_by_site=[["grow (cell In[1]:2)", 3 * MiB, 1]] if leaking else [])
        ivs.append(iv)
    found = leak_sites(ivs, [iv.step for iv in ivs])
    assert [(f.steps, f.total) for f in found] == [((2, 3), 6 * MiB), ((6,), 3 * MiB)]
    assert "leak site: grow (cell In[1]:2) kept +3.0 MiB per step over steps 2–3 (also step 6)" in headline(ivs)
    ivs[6] = replace(  # step 7 leaks too, elsewhere
        ivs[6], kept_by_site=[["other (cell In[1]:9)", 3 * MiB, 1]], end_allocated=ivs[6].end_allocated + 3 * MiB
    )
    assert "over steps 2–3 (also step 6; 1 more site)" in headline(ivs)


def test_gradients_made_anew_each_step_are_no_leak_site(tmp_path):
    # the usual loop: zero_grad() first, so each step frees the last step's gradients and makes
    # its own, which it holds at its end; only the list that grows is a leak
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 1024)
    history: list[torch.Tensor] = []

    def train_step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        history.append(torch.randn(1024, 512))  # 2 MiB kept per step

    train_step()  # an unrecorded warm-up
    names = {"model": model, "opt": opt, "x": x, "history": history}
    for step in range(1, 5):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace=names):
            train_step()
    ivs = session().intervals
    assert [iv.kept for iv in ivs] == [2 * MiB] * 4
    # the gradients, made and held by every step, are model state: no site that keeps
    assert [b for _, b, _ in ivs[2].kept_by_site] == [2 * MiB]
    (leak,) = leak_sites(ivs, [iv.step for iv in ivs])
    assert leak.steps == (1, 2, 3, 4) and leak.kept == (2 * MiB,) * 4
    assert leak.site.split(" → ")[-1].startswith("train_step (")


def test_model_state_is_never_a_leak_nor_a_leaking_site(tmp_path):
    """AdamW's first step keeps its state and the gradients: no leak. A step whose backward runs
    from another function makes the gradients at another site: no leaking site either."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 1024)
    history: list[torch.Tensor] = []

    def plain_step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    def leaky_step() -> None:
        opt.zero_grad()
        model(x).sum().backward()  # the gradients' site moves here
        opt.step()
        history.append(torch.randn(1024, 512))  # 2 MiB kept per step

    names = {"model": model, "opt": opt, "x": x, "history": history}
    for step, train in ((1, plain_step), (2, plain_step), (3, leaky_step), (4, leaky_step)):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace=names):
            train()
    ivs = session().intervals
    steps = [iv.step for iv in ivs]
    assert ivs[0].kept > 12 * MiB  # the gradients and AdamW's state, kept by design
    (leak,) = leaks(ivs, steps)
    assert (leak.steps, leak.kept) == ((3, 4), (2 * MiB, 2 * MiB))
    (site,) = leak_sites(ivs, steps)
    assert site.steps == (3, 4) and site.site.split(" → ")[-1].startswith("leaky_step (")
    assert "history.append" not in site.site
    assert headline(ivs).startswith("leak: steps 3–4 each kept +2.0 MiB")


def test_steps_recorded_out_of_order_are_judged_against_the_step_that_ran_before(tmp_path, capsys):
    """Steps 1, 5, 3, 4 in that order, 3-5 each keeping 2 MiB at one site: each end is compared
    with the end of the step that ran just before it, not the step shown before it."""
    held.clear()
    for step in (1, 5, 3, 4):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace={}):
            if step > 1:
                leaky_step(2)
    ivs = sorted(session().intervals, key=lambda iv: iv.step)
    (leak,) = leak_sites(ivs, [iv.step for iv in ivs])
    assert (leak.steps, leak.kept) == ((3, 4, 5), (2 * MiB,) * 3)
    assert f"leak site: {leak.site} kept +2.0 MiB per step over steps 3–5" in headline(ivs)
    assert main(["summarize", str(tmp_path)]) == 0
    assert "+2.0 MiB per step  steps 3–5" in capsys.readouterr().out


def test_a_site_grown_over_steps_not_shown_says_since_when(tmp_path, capsys):
    """Steps 1-9 recorded, each keeping 2 MiB at one site, and only steps 1 and 9 shown: step
    9's site grew since step 1's end, not in step 9 alone."""
    held.clear()
    for step in range(1, 10):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace={}):
            leaky_step(2)
    shown = [iv for iv in session().intervals if iv.step in (1, 9)]
    ninth, first = leak_sites(shown, [1, 9])  # largest first
    assert (ninth.steps, ninth.since, ninth.kept) == ((9,), 1, (16 * MiB,))
    assert (first.steps, first.since) == ((1,), None)
    assert f"leak site: {ninth.site} kept +16.0 MiB in step 9 since step 1" in headline(shown)
    (every,) = leak_sites(session().intervals, list(range(1, 10)))
    assert every.steps == tuple(range(1, 10)) and every.since is None  # each grew in its own step
    wait_for_writes()
    files = [str(next((tmp_path / f"step{n}").glob("*.pickle"))) for n in (1, 9)]
    # steps numbered apart but run back to back: each grew in its own step, one run
    numbered = [replace(iv, step=10 * iv.step) for iv in session().intervals]
    (spaced,) = leak_sites(numbered, [iv.step for iv in numbered])
    assert spaced.steps == tuple(range(10, 100, 10)) and spaced.since is None
    assert main(["summarize", *files]) == 0
    assert "step 9 since step 1" in capsys.readouterr().out
    # memory that changed between two steps elsewhere than at the site says nothing of it
    names: dict = {"unrelated": []}
    for step in (10, 20, 30, 40):
        with Recorder(device="cpu", out=tmp_path / "spaced", step=step, namespace=names):
            leaky_step(2)
        names["unrelated"].append(torch.ones(1024))  # outside any step: the next start moves
    spaced_out = session().intervals[-4:]
    assert all(iv.moved for iv in spaced_out[1:])
    (one_run,) = leak_sites(spaced_out, [10, 20, 30, 40])
    assert one_run.steps == (10, 20, 30, 40) and one_run.since is None
