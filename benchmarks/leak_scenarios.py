"""Planted leaks whose answer is known, and their healthy twins: what ``tests/test_retention.py``
runs on the CPU and ``gpu_check.py``'s ``retention`` section on the accelerator.

Each scenario is a small training loop (an MLP, a warm-up step unrecorded, then ``STEPS``
recorded steps under ``Recorder`` with the loop's names as its namespace) with one bug planted:

- ``losses``: a validation loss computed with its graph, appended to ``history`` (twin: ``.item()``);
- ``cache``: the first layer's activations kept in ``cache[f"step{n}"]`` (twin: one detached entry, replaced);
- ``hook``: a forward hook appending the first layer's outputs to ``model[0].outputs`` (twin:
  keeps the last one, detached);
- ``optimizer``: an Adam and a scheduler made anew each step, the schedulers kept in
  ``schedulers`` (twin: both made once, before the loop).

What each leaking step keeps is known without our walk: by construction (an activation's
``nbytes``), from the optimizer's own state tensors, or, for a graph, from what
``torch.autograd.graph.saved_tensors_hooks`` sees one identical forward save.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCENARIOS = ("losses", "cache", "hook", "optimizer")
STEPS = 4
# what the headline must name: the holder, its pattern (``results.advice``)
EXPECTED = {
    "losses": ("history", "graph"),
    "cache": ("cache", "cache"),
    "hook": ("model[0].outputs", "hook"),
    "optimizer": ("schedulers", "optimizer"),
}


@dataclass
class Outcome:
    """A scenario's recorded steps and what each should have kept."""

    name: str
    healthy: bool
    intervals: list[Any]
    truth: list[int]  # bytes each recorded step keeps, known without the walk (0: none)
    extra: dict[str, Any] = field(default_factory=dict)


def run(name: str, healthy: bool, device: str, out: Path, width: int = 512, batch: int = 512) -> Outcome:
    """Record ``STEPS`` steps of scenario ``name`` (or its healthy twin) on ``device``."""
    import torch

    from memsnap_magic import Recorder
    from memsnap_magic.results.session import Session

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 2 * width), torch.nn.ReLU(), torch.nn.Linear(2 * width, width)
    ).to(device)
    x = torch.randn(batch, width, device=device)
    x_val = torch.randn(batch, width, device=device)
    ns: dict[str, Any] = {"__name__": "__main__", "model": model, "x": x, "x_val": x_val}
    # what one validation forward's graph saves, seen outside the recording and before any hook
    # (the pack hook's tensors hold their own nodes in cycles, freed by the next collection)
    graph_bytes = saved_bytes(model, x_val)
    gc.collect()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ns["opt"] = opt
    history: list[Any] = []
    cache: dict[str, Any] = {}
    schedulers: list[Any] = []
    ns.update(history=history, cache=cache, schedulers=schedulers)
    model[0].outputs = []
    keep_last = lambda module, args, output: setattr(module, "outputs", [output.detach()])  # noqa: E731
    keep_all = lambda module, args, output: module.outputs.append(output)  # noqa: E731
    if name == "hook":
        ns["handle"] = model[0].register_forward_hook(keep_last if healthy else keep_all)
    if name == "optimizer":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        ns["opt"], ns["scheduler"] = opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def step(n: int) -> int:
        """One training step with the bug (or the twin's fix); what it keeps, known independently."""
        nonlocal opt
        kept = 0
        if name == "optimizer" and not healthy:
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            ns["opt"] = opt
            schedulers.append(torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0))
        opt.zero_grad()
        h = model[0](x)
        loss = model[2](model[1](h)).pow(2).mean()
        loss.backward()
        opt.step()
        if name == "optimizer":
            (schedulers[-1] if not healthy else ns["scheduler"]).step()
            if not healthy:  # Adam's state, read from the optimizer itself, on this device
                kept = sum(
                    t.nbytes
                    for s in opt.state.values()
                    for t in s.values()
                    if torch.is_tensor(t) and t.device.type == torch.device(device).type
                )
        elif name == "losses":
            val = model(x_val).pow(2).mean()
            history.append(val.item() if healthy else val)
            kept = 0 if healthy else val.untyped_storage().nbytes() + graph_bytes
        elif name == "cache":
            if healthy:
                cache["last"] = h.detach()
            else:
                cache[f"step{n}"] = h
                kept = h.untyped_storage().nbytes()
        elif name == "hook" and not healthy:
            kept = h.untyped_storage().nbytes()  # what model[0]'s hook appended: its output, h
        if device != "cpu":
            torch.cuda.synchronize()
        return kept

    step(0)  # warm-up, unrecorded: gradients and state exist before the first recorded step
    session = Session()
    truth = []
    for n in range(1, STEPS + 1):
        folder = out / name / ("healthy" if healthy else "leaky")
        with Recorder(device=device, out=folder, step=n, namespace=ns, session=session):
            truth.append(step(n))
    if name == "hook":
        ns["handle"].remove()
    return Outcome(name, healthy, list(session.intervals), truth)


def saved_bytes(model: Any, x: Any) -> int:
    """Bytes of the distinct storages the validation forward saves for its backward, leaving out
    the parameters and the input: what a validation loss kept with its graph holds."""
    import torch

    before = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in before:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).pow(2).mean()
    del loss
    return sum(seen.values())


def judged(outcome: Outcome) -> dict[str, Any]:
    """What the findings say of a scenario, against its known answer: the holder and pattern
    named, the leaking steps and their kept bytes, and whether each matches."""
    from memsnap_magic.results.advice import advice
    from memsnap_magic.results.findings import leaks
    from memsnap_magic.results.holders import holder
    from memsnap_magic.views.headline import finding_lines

    ivs = outcome.intervals
    steps = [iv.step for iv in ivs]
    runs = leaks(ivs, steps)
    found = holder(ivs, max(runs, key=lambda r: r.total).steps) if runs else None
    said = advice(found)
    lines = finding_lines(ivs)
    kept = [iv.kept for iv in ivs]
    held = [sum(b for _, b, _ in iv.kept_by) for iv in ivs]
    expected_holder, expected_pattern = EXPECTED[outcome.name]
    if outcome.healthy:
        ok = not runs and found is None and said is None and lines[0].startswith("no leak or spike")
    else:
        ok = (
            [s for r in runs for s in r.steps] == steps
            and kept == outcome.truth
            and found is not None
            and found.name == expected_holder
            and said is not None
            and said.pattern == expected_pattern
            and held == outcome.truth  # the walk reached every kept byte, and no other
            and not found.unreached
        )
    return {
        "scenario": outcome.name,
        "healthy": outcome.healthy,
        "lines": lines,
        "holder": found.name if found else None,
        "pattern": said.pattern if said else None,
        "leaking_steps": [s for r in runs for s in r.steps],
        "kept": kept,
        "truth": outcome.truth,
        "held_by_paths": held,
        "unreached": [(iv.holders or {}).get("unreached") for iv in ivs],
        "walk_objects": [(iv.holders or {}).get("objects") for iv in ivs],
        "walk_cut": [(iv.holders or {}).get("cut") for iv in ivs],
        "ok": ok,
    }
