"""Dumps carry what memory_viz reads, and its timeline replay agrees with ``summarize``."""

from __future__ import annotations

import pytest
from memory_viz import replay

from memsnap_magic import load_snapshot, session, summarize, wait_for_writes

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
    wait_for_writes()
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


@pytest.mark.parametrize("n", range(len(CELLS)))
def test_the_viewers_backward_replay_finds_every_block_in_a_segment(dumps, n):
    from memory_viz import replay_backwards

    trace = dumps[n]["device_traces"][0]
    assert any(e["action"] == "segment_free" for e in trace) or n == 0
    assert replay_backwards(dumps[n], 0) > 0  # every state the viewer can show, checked


@pytest.mark.parametrize("name", ["cuda_step.pickle", "cuda_oom.pickle"])
def test_the_backward_replay_takes_real_cuda_files(name):
    from pathlib import Path

    from memory_viz import replay_backwards

    snap = load_snapshot(Path(__file__).parent / "data" / name)
    assert replay_backwards(snap, 0) > 0


def test_the_backward_replay_fails_where_the_viewer_does():
    # so it cannot simply agree with our writer: the two ways the viewer throws
    from memory_viz import ViewerError, replay_backwards

    from memsnap_magic.recording.backends.cpu.history import build_snapshot

    events = [(1000, 0xA0, 64), (2000, 0xB0, 32), (3000, 0xA0, -64)]
    without = build_snapshot(events, {}, {}, end_us=9, max_entries=100, segment_events=False)
    with pytest.raises(ViewerError, match="lies in no segment"):  # today's CPU dumps, before segments
        replay_backwards(without, 0)
    assert replay_backwards(build_snapshot(events, {}, {}, end_us=9, max_entries=100), 0) > 0
    orphan = build_snapshot(events, {}, {}, end_us=9, max_entries=100)
    orphan["device_traces"][0].insert(0, {"action": "segment_alloc", "addr": 0xF00, "size": 8, "stream": 0})
    with pytest.raises(ViewerError, match="a segment that is not there"):
        replay_backwards(orphan, 0)
