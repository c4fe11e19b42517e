"""Allocation sites as call chains: one line reached from a leaking call and from a healthy one
is two sites, in the headline, the step's table, ``memsnap summarize`` and ``memsnap diff``."""

from __future__ import annotations

import json

from memsnap_magic import session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.results.findings import leak_sites
from memsnap_magic.results.stacks import call_chain, site
from memsnap_magic.views.explain import blocks_table
from memsnap_magic.views.headline import headline

MODEL = """\
import torch
M = 2**20
def forward(x):
    return x * 2  # every call's output is made on this line
"""
TRAIN = """\
history, last = [], {}
def train_step():
    last["out"] = forward(torch.ones(M // 4))  # line 3: the healthy call, replaced each step
    history.append(forward(torch.ones(M // 2)))  # line 4: the leaking call
"""


def test_one_line_reached_from_a_leaking_and_a_healthy_call_is_two_sites(shell, tmp_path, capsys):
    for cell in (MODEL, TRAIN):
        assert shell.run_cell(cell, store_history=True).success
    for step in range(1, 6):
        assert shell.run_cell(f"%%memsnap step={step} device=cpu\ntrain_step()", store_history=True).success
    ivs = session().intervals
    # the CPU route's innermost frame names the line of the function that ran the operator
    leaking, healthy = "train_step (cell In[2]:4) → forward (In[1]:3)", "train_step (cell In[2]:3) → forward (In[1]:3)"
    # each step keeps 2 MiB from the leaking call, and replaces the 1 MiB the healthy one holds
    assert [row[:2] for row in ivs[2].kept_by_site] == [[leaking, 2 * 2**20], [healthy, 2**20]]
    (leak,) = leak_sites(ivs, [iv.step for iv in ivs])
    assert leak.site == leaking and leak.steps == (1, 2, 3, 4, 5)
    assert f"leak site: {leaking} kept +2.0 MiB per step over steps 1–5" in headline(ivs).splitlines()
    # the step's table: the two calls' blocks are two rows, though one line made them all
    rows = blocks_table(ivs[2]).split("<tr>")[2:]
    assert sum("forward (cell In[1]:3)" in row for row in rows) >= 2

    wait_for_writes()
    assert main(["summarize", "memsnap"]) == 0
    out = capsys.readouterr().out.split("leaks: allocation sites that kept memory in leaking steps\n")[1]
    assert out.splitlines()[0].endswith(leaking)
    assert main(["summarize", "memsnap", "--json"]) == 0
    assert {r["leak_sites"][0]["site"] for r in json.loads(capsys.readouterr().out)} == {leaking}
    step2, step4 = (next((tmp_path / "memsnap" / f"step{n}").glob("*.pickle")) for n in (2, 4))
    assert main(["diff", str(step2), str(step4)]) == 0
    # step 4's end holds two more of the leaking call's outputs than step 2's: the healthy call's are one
    assert f"+4.0 MiB  {leaking}" in capsys.readouterr().out


def test_a_chain_names_the_users_frames_outermost_first_and_library_frames_as_before():
    lib = {"filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "line": 134, "name": "forward"}
    fwd = {"filename": "<ipython-input-2-abc>", "line": 14, "name": "forward"}
    step = {"filename": "<ipython-input-2-abc>", "line": 37, "name": "train_step"}
    top = {"filename": "<ipython-input-5-def>", "line": 1, "name": "<module>"}
    assert call_chain([lib, fwd, lib, step, top]) == "train_step (cell In[2]:37) → forward (In[2]:14)"
    assert site({"frames": [lib, top]}) == "<module> (cell In[5]:1)"  # the cell's own line, as before
    assert site({"frames": [lib]}) == "forward (torch/nn/modules/linear.py:134)"  # no frame of the user's
    deep = [dict(step, line=n) for n in range(1, 11)]
    assert call_chain(deep).split(" → ")[3] == "…"  # ten calls: the outer and inner three
