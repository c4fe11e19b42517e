"""Dumps carry what memory_viz reads, and its timeline replay agrees with ``summarize``."""

from __future__ import annotations

import pytest
from memory_viz import replay

from memsnap_magic import load_snapshot, session, summarize

CELLS = [
    # plain allocations and frees
    "a = torch.empty(3 * 2**20, dtype=torch.uint8)\nt = torch.ones(1000)\ndel t",
    # frees of tensors that lived before the cell (seen by an earlier recording)
    "del a\nb = torch.empty(2**20, dtype=torch.uint8)",
    # a training step: parameters and Adam state live before, activations come and go
    "loss = model(x).sum()\nloss.backward()\nopt.step()\nopt.zero_grad(set_to_none=True)",
    # a tensor allocated while nothing recorded, freed in the cell (a silent free)
    "del quiet\nkeep.append(torch.empty(2**19, dtype=torch.uint8))",
]


@pytest.fixture
def dumps(shell):
    shell.run_cell(
        "import torch\nkeep = []\nmodel = torch.nn.Linear(256, 512)\n"
        "opt = torch.optim.Adam(model.parameters())\nx = torch.randn(64, 256)"
    )
    for n, cell in enumerate(CELLS, start=1):
        if n == 4:
            shell.run_cell("quiet = torch.empty(2**20, dtype=torch.uint8)")
        assert shell.run_cell(f"%%memsnap step={n}\n{cell}").success
    return [load_snapshot(iv.path) for iv in session().intervals]


def test_dumps_carry_the_fields_memory_viz_reads(dumps):
    for snap in dumps:
        assert snap["device_traces"][0], "every cell allocated something"
        for e in snap["device_traces"][0]:
            assert {"action", "addr", "size", "time_us"} <= set(e)
            assert type(e["addr"]) is int and type(e["size"]) is int and type(e["time_us"]) is int
        for seg in snap["segments"]:
            assert {"device", "address", "total_size", "blocks"} <= set(seg)
            for b in seg["blocks"]:
                assert {"size", "state", "requested_size"} <= set(b)


@pytest.mark.parametrize("n", range(len(CELLS)))
def test_memory_viz_replay_gives_the_same_baseline_peak_and_end(dumps, n):
    snap = dumps[n]
    s = summarize(snap)
    assert replay(snap, 0) == (s.baseline_allocated, s.peak_allocated, s.end_allocated)
    assert s.peak_allocated > s.baseline_allocated or n in (1, 3)  # 3: a silent free may come first
