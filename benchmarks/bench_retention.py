"""The retention walk (who keeps a leaking step's memory) on a realistic notebook namespace.

The namespace: a small transformer LM (an embedding of 8,000 × 256, six encoder layers of width
256, a head; 75 parameter tensors, ~34 MiB) with AdamW after one step (225 state tensors), a
list ``history`` of 20 losses each kept with its autograd graph (the leak), a dict of 20
activations, a list of 20 detached losses, metric lists of 1,000 floats, IPython's ``In`` (200
cell texts) and ``Out`` (50 small tensors).

Rows, each measured in this run:
- ``retention_walk_found``: the walk after the leaking step, asked for the blocks the newest
  loss's graph keeps (found through ``history[19]``), in ms (target <= 20 ms, issue 41);
- ``retention_walk_whole``: the walk asked for blocks nothing holds, so it reads everything it
  can reach, against the CPU route's own walk of the same names (``live_storages`` with graphs,
  which it runs at a cell's edges): a ratio (reported only);
- ``retention_walk_10m``: the walk over that namespace plus a list of 10 million objects (1
  million in ``--quick``), asked for blocks nothing holds: what its bound (100 ms) holds it to,
  in ms (target <= 150 ms).
"""

from __future__ import annotations

import statistics
from typing import Any

from common import Context, Row, interleaved, ratio_row

NAME = "retention"


def namespace() -> tuple[dict[str, Any], dict[int, int]]:
    """The notebook's names, and the blocks the newest loss's graph keeps (its saved tensors
    that are not parameters nor the input, as a step's kept blocks)."""
    import torch

    from memsnap_magic.recording.backends.cpu.objects import saved_tensors as _saved

    torch.manual_seed(0)
    d, vocab = 256, 8000
    layers = [torch.nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True) for _ in range(6)]
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), *layers, torch.nn.Linear(d, vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, vocab, (8, 64))
    opt.zero_grad()
    model(x).mean().backward()
    opt.step()
    history = [model(x).pow(2).mean() for _ in range(20)]
    names: dict[str, Any] = {
        "__name__": "__main__",
        "model": model,
        "opt": opt,
        "x": x,
        "history": history,
        "acts": {f"layer{n}": torch.randn(8, 64, d) for n in range(20)},
        "losses": [loss.detach() for loss in history],
        "metrics": {"loss": [float(n) for n in range(1000)], "lr": [1e-3] * 1000},
        "In": ["x = 1"] * 200,
        "Out": {n: torch.randn(4) for n in range(50)},
    }
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()} | {x.untyped_storage().data_ptr()}
    wanted: dict[int, int] = {}
    seen: set[int] = set()
    stack = [history[-1].grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for t in _saved(node):
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                wanted[s.data_ptr()] = s.nbytes()
        stack.extend(f for f, _ in node.next_functions)
    return names, wanted


def ms_row(name: str, what: str, times: list[float], limit: float, **details: Any) -> Row:
    value = statistics.median(times) * 1e3
    return Row(name, what, "-", value, "ms", f"<= {limit:g} ms", value <= limit, {"times_s": times, **details})


def run(ctx: Context) -> list[Row]:
    from memsnap_magic.recording.backends.cpu.live_tensors import live_storages
    from memsnap_magic.recording.retention import find_holders

    names, wanted = namespace()
    nowhere = {1: 4096, 2: 8192}  # blocks no path reaches: the walk reads all it can
    found = find_holders(names, wanted, "cpu")
    whole = find_holders(names, nowhere, "cpu")
    sizes = {"kept_blocks": len(wanted), "objects_found": found["objects"], "objects_whole": whole["objects"]}
    times = interleaved({"found": lambda: find_holders(names, wanted, "cpu")}, ctx.repeats)
    rows = [
        ms_row(
            "retention_walk_found",
            "who keeps a leaking step's blocks (the newest of 20 losses kept with their graphs)",
            times["found"],
            20.0,
            found=found["rows"][0][0] if found["rows"] else None,
            **sizes,
        )
    ]
    times = interleaved(
        {
            "reference": lambda: live_storages(names, graphs=True),
            "measured": lambda: find_holders(names, nowhere, "cpu"),
        },
        ctx.repeats,
    )
    rows.append(
        ratio_row(
            "retention_walk_whole",
            "the walk reading all it reaches (blocks nothing holds)",
            "the CPU route's walk of the same names",
            times,
            None,
            **sizes,
        )
    )
    crowd = [object() for _ in range(ctx.pick(10_000_000, 1_000_000))]
    huge = {**names, "crowd": crowd}
    bounded = find_holders(huge, nowhere, "cpu")
    times = interleaved({"huge": lambda: find_holders(huge, nowhere, "cpu")}, max(3, ctx.repeats // 2))
    rows.append(
        ms_row(
            "retention_walk_10m",
            f"the walk over a namespace of {len(crowd):,} objects more",
            times["huge"],
            150.0,
            cut=bounded["cut"],
            objects=bounded["objects"],
        )
    )
    return rows
