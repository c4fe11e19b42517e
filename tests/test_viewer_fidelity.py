"""CPU dumps as PyTorch's memory viewer reads them (``tests/memory_viz.py``, a port of the parts of
MemoryViz.js concerned): a block freed in the step shows the stack that allocated it (the viewer
takes it from the free), segments are coloured by their block's category, and the viewer's
legend keeps its ``unknown``."""

from __future__ import annotations

import pickle

from memory_viz import legend, replay_backwards, restored_stacks, segment_colours

from memsnap_magic import load_snapshot, session, wait_for_writes

FREES = ("free_requested", "free_completed", "segment_free")
STEP = (
    "import torch\n"
    "model = torch.nn.Linear(256, 256)\n"
    "opt = torch.optim.AdamW(model.parameters())\n"
    "def train_step():\n"
    "    tmp = torch.empty(16 << 20, dtype=torch.uint8)  # a 16 MiB temporary, freed in the step\n"
    "    loss = model(torch.randn(64, 256)).sum() + tmp[:1].float().sum()\n"
    "    del tmp\n"
    "    loss.backward(); opt.step(); opt.zero_grad()\n"
)


def _recorded(shell, step: int = 2) -> dict:
    shell.run_cell(STEP)
    assert shell.run_cell("%%memsnap step=1 device=cpu\ntrain_step()").success  # AdamW's state made
    assert shell.run_cell(f"%%memsnap step={step} device=cpu\ntrain_step()").success
    wait_for_writes()
    return load_snapshot(session().intervals[-1].path)


def test_a_block_freed_in_the_step_shows_the_stack_that_allocated_it(shell):
    snap = _recorded(shell)
    shown = dict(restored_stacks(snap, 0))
    opened, paired = {}, 0
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            opened[e["addr"]] = e
        elif e["action"] == "free_completed" and e["addr"] in opened:
            alloc = opened.pop(e["addr"])
            if alloc.get("frames"):  # 1 KiB or more: the CPU route's stacks
                assert e.get("frames") is alloc["frames"]  # the same list: the file does not grow
                paired += 1
    assert paired >= 3
    temporary = next(e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["size"] == 16 << 20)
    assert shown[temporary["addr"]] == temporary["frames"]
    assert any(f["name"] == "train_step" for f in shown[temporary["addr"]])
    replay_backwards(snap, 0)


def test_frees_carrying_frames_add_references_not_copies_to_the_file(shell):
    snap = _recorded(shell)

    def rebuilt(keep_free_frames: bool) -> dict:
        return {
            **snap,
            "device_traces": [
                [
                    {k: v for k, v in e.items() if keep_free_frames or k != "frames" or e["action"] not in FREES}
                    for e in t
                ]
                for t in snap["device_traces"]
            ],
        }

    grown = len(pickle.dumps(rebuilt(True), protocol=4)) - len(pickle.dumps(rebuilt(False), protocol=4))
    trace = [e for t in snap["device_traces"] for e in t]
    frees = [e for e in trace if e["action"] in FREES and e.get("frames")]
    # stacks no allocation in the file holds: blocks carried in from before the step, freed in it
    held = {id(e["frames"]) for e in trace if e["action"] not in FREES and e.get("frames")}
    held |= {id(b["frames"]) for seg in snap["segments"] for b in seg["blocks"] if b.get("frames")}
    new = {id(e["frames"]): e["frames"] for e in frees if id(e["frames"]) not in held}
    assert 0 < grown <= 12 * len(frees) + sum(len(pickle.dumps(f, protocol=4)) for f in new.values())


def test_segments_are_drawn_in_their_blocks_categories_and_the_legend_keeps_unknown(shell):
    snap = _recorded(shell)
    colours = segment_colours(snap, 0)  # the step's own segment events: gradients and activations
    assert {"gradient", "activation"} <= set(colours), colours
    assert colours.get("unknown", 0) == 0  # every CPU segment is one block of a known category
    assert "unknown" in legend(snap)  # the viewer throws without one
    for e in snap["device_traces"][0]:
        if e["action"] in ("segment_alloc", "segment_free"):
            assert e["category"] != "unknown"


def test_a_block_given_an_empty_namespace_labels_nothing_unless_told_what(tmp_path):
    import torch

    from memsnap_magic import Recorder

    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())

    def step() -> None:
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
        opt.zero_grad()

    step()
    with Recorder(step=1, device="cpu", out=tmp_path, namespace={}):  # "label nothing"
        step()
    with Recorder(step=2, device="cpu", out=tmp_path, namespace={}, model=model, optimizer=opt):
        step()
    unlabelled, labelled = session().intervals
    assert unlabelled.by_category is None and unlabelled.by_category_at_peak is None
    wait_for_writes()
    assert not any("category" in e for e in load_snapshot(unlabelled.path)["device_traces"][0])
    assert labelled.by_category["parameter"] == sum(p.nbytes for p in model.parameters())
