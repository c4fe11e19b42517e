"""What to do (issue 41 item 4): each known pattern of what holds a leak is one rule, with its
advice; where none matches, no advice. The holders are read from walks' rows as files keep them
(``Interval.holders``); the planted leaks recorded for real are ``test_retention.py``'s."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_findings import run_of

from memsnap_magic.results.advice import advice
from memsnap_magic.results.findings import leaks
from memsnap_magic.results.holders import holder
from memsnap_magic.views.headline import finding_lines

MiB = 1 << 20

# hops as the walk writes them: [text, type name, how]
HISTORY = [["history", "list", "name"], ["[{n}]", "Tensor", "item"], [".grad_fn → … saved tensors", "Node", "graph"]]
CACHE = [["cache", "dict", "name"], ["['step{n}']", "Tensor", "key"]]
CACHE_GRAPH = [*CACHE, [".grad_fn → … saved tensors", "Node", "graph"]]
HOOKED = [
    ["model", "Sequential", "name"],
    ["[0]", "Linear", "member"],
    [".outputs", "list", "module_attr"],
    ["[{n}]", "Tensor", "item"],
]
STATE = [
    ["schedulers", "list", "name"],
    ["[{n}]", "LambdaLR", "item"],
    [".optimizer", "Adam", "attr"],
    [".state[…]", "dict", "state"],
    ["['exp_avg']", "Tensor", "key"],
]
DETACHED = [["feats", "list", "name"], ["[{n}]", "Tensor", "item"]]


def walked(route: list[list[str]], optimizers: list[str] = (), steps: int = 4, kept: int = 4 * MiB) -> list[Any]:
    """A run of ``steps`` leaking steps, each walked: its kept bytes held along ``route``."""
    ivs = run_of([(kept, kept)] * steps)
    for n, iv in enumerate(ivs):
        hops = [[text.format(n=n), kind, how] for text, kind, how in route]
        ivs[n] = replace(
            iv,
            holders={
                "rows": [["".join(h[0] for h in hops), kept, 1]],
                "routes": [hops],
                "blocks": [],
                "unreached": 0,
                "objects": 40,
                "cut": None,
                "optimizers": list(optimizers),
            },
        )
    return ivs


def said(ivs: list[Any]) -> tuple[str | None, str | None]:
    runs = leaks(ivs, [iv.step for iv in ivs])
    found = advice(holder(ivs, runs[0].steps))
    return (found.pattern, found.text) if found else (None, None)


def test_a_tensor_with_its_graph_in_a_list_keep_item_or_detach():
    pattern, text = said(walked(HISTORY))
    assert pattern == "graph" and "`loss.item()`" in text and "`.detach()` in `history`" in text


def test_a_dict_gaining_an_entry_each_step_bound_it():
    pattern, text = said(walked(CACHE))
    assert pattern == "cache" and text.startswith("`cache` gains an entry each step")
    # its entries holding mostly their graphs: detach them, first
    assert said(walked(CACHE_GRAPH))[0] == "graph"


def test_a_dict_whose_one_entry_holds_it_is_no_cache_that_grows():
    ivs = walked([["cache", "dict", "name"], ["['last']", "Tensor", "key"]])
    assert said(ivs) == (None, None)


def test_outputs_kept_by_a_hook_or_module_attribute_detach_or_remove_the_hook():
    pattern, text = said(walked(HOOKED))
    assert pattern == "hook" and "(`model[0].outputs`)" in text and "remove the hook" in text


def test_optimizers_made_anew_while_old_ones_are_held_make_it_once():
    old = ["schedulers[0].optimizer", "schedulers[1].optimizer"]
    pattern, text = said(walked(STATE, optimizers=old))
    assert pattern == "optimizer" and "while `schedulers` still holds the old ones" in text
    # its state with no other optimizer held: nothing says an optimizer was made anew
    assert said(walked(STATE)) == (None, None)


def test_no_advice_when_no_pattern_matches():
    assert said(walked(DETACHED)) == (None, None)  # a list of detached tensors that grows
    lines = finding_lines(walked(DETACHED))
    assert "kept by `feats` (list): +4.0 MiB per step, each item" in lines
    assert not any(line.startswith("do:") for line in lines)


def test_no_walk_no_holder_no_advice():
    ivs = run_of([(4 * MiB, 4 * MiB)] * 4)  # files from elsewhere, never walked
    assert holder(ivs, [iv.step for iv in ivs]) is None
    assert not any(line.startswith(("kept by", "do:")) for line in finding_lines(ivs))


def test_the_largest_holder_is_named():
    ivs = walked(HISTORY)
    for iv in ivs:  # a second, smaller holder beside it
        iv.holders["rows"].append(["small[0]", MiB // 2, 1])
        iv.holders["routes"].append([["small", "list", "name"], ["[0]", "Tensor", "item"]])
    assert holder(ivs, [iv.step for iv in ivs]).name == "history"


def test_model_state_kept_step_after_step_leaks_an_optimizers_first_step_does_not():
    state = {"optimizer_state": 8 * MiB}
    first = run_of([(8 * MiB, 8 * MiB), (MiB // 4, 0), (MiB // 4, 0)])
    first[0] = replace(first[0], by_category=state)  # AdamW's first step makes its state, once
    assert leaks(first, [1, 2, 3]) == []
    anew = run_of([(8 * MiB, 8 * MiB)] * 3)
    for n, iv in enumerate(anew):  # each step keeps another optimizer's state beside the last
        anew[n] = replace(iv, by_category={"optimizer_state": 8 * MiB * (n + 1)})
    (run,) = leaks(anew, [1, 2, 3])
    assert run.steps == (1, 2, 3) and run.kept == (8 * MiB,) * 3


def test_gradients_made_in_one_cell_and_optimizer_state_in_the_next_are_no_leak():
    # cell 1: backward makes the gradients; cell 2: opt.step() makes AdamW's state; then both
    # are made anew in place: two categories grew once each, side by side
    ivs = run_of([(8 * MiB, 8 * MiB), (8 * MiB, 8 * MiB), (MiB // 4, 0), (MiB // 4, 0)])
    ivs[0] = replace(ivs[0], by_category={"gradient": 8 * MiB})
    ivs[1:] = [replace(iv, by_category={"gradient": 8 * MiB, "optimizer_state": 8 * MiB}) for iv in ivs[1:]]
    assert leaks(ivs, [1, 2, 3, 4]) == []


def test_a_notebook_that_steps_the_optimizer_in_its_own_cell_claims_no_leak(tmp_path):
    """Recorded for real on the CPU: backward in one step, AdamW's step in the next, then again
    (its first step makes its state once; the gradients are made anew in place)."""
    import torch

    from memsnap_magic import Recorder
    from memsnap_magic.results.session import Session

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 512)
    ns = {"model": model, "opt": opt, "x": x}
    session = Session()
    work = [
        lambda: model(x).pow(2).mean().backward(),
        opt.step,
        lambda: (opt.zero_grad(), model(x).pow(2).mean().backward()),
        opt.step,
    ]
    for step, body in enumerate(work, start=1):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace=ns, session=session):
            body()
    ivs = session.intervals
    assert ivs[0].kept > MiB and ivs[1].kept > MiB  # the gradients, then the optimizer's state
    assert leaks(ivs, [iv.step for iv in ivs]) == []
    assert finding_lines(ivs)[0].startswith("no leak")
