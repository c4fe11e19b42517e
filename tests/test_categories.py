"""Categories: parameters, gradients, optimizer state, activations and the rest, per step, with
known answers on the CPU, in the dump the way memory_viz reads it."""

from __future__ import annotations

import gc
import weakref
from collections import Counter
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_viz import colours, legend, replay

from memsnap_magic import Recorder, mark, session, wait_for_writes
from memsnap_magic.files.snapshot import load_snapshot
from memsnap_magic.results.labels import Roles, label, totals


def _mlp():
    # garbage an earlier test left in reference cycles would be freed by a collection inside a
    # recorded step: blocks live at its start, its peak there as "other" (our own cycle did that,
    # test_a_finished_recording_keeps_nothing_of_the_users_alive; others' may still)
    gc.collect()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, torch.randn(64, 256), torch.randint(0, 10, (64,))


@pytest.mark.parametrize("order", ["zero_grad first", "zero_grad last"])
def test_an_mlp_with_adamw_has_exact_parameter_gradient_and_optimizer_bytes(tmp_path, order):
    model, opt, x, y = _mlp()
    params = list(model.parameters())
    P = sum(p.numel() * p.element_size() for p in params)
    ns = {"model": model, "opt": opt, "x": x, "y": y}
    for step in (1, 2, 3):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace=ns):  # found in the namespace
            if order == "zero_grad first":
                opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if order == "zero_grad last":
                opt.zero_grad()
    state = 2 * P + 4 * len(params)  # exp_avg, exp_avg_sq, and AdamW's float32 `step` per parameter
    inputs = x.nbytes + y.nbytes
    for iv in session().intervals:
        peak, end = iv.by_category_at_peak, iv.by_category
        assert sum(peak.values()) == iv.peak_allocated and sum(end.values()) == iv.end_allocated
        said = (iv.step, peak, end)
        assert (peak.get("parameter"), peak.get("gradient"), peak.get("optimizer_state")) == (P, P, state), said
        assert peak["other"] == inputs and peak["activation"] > 0
        grads_at_end = P if order == "zero_grad first" else 0  # zero_grad(set_to_none) ended the step
        assert (end["parameter"], end.get("gradient", 0), end["optimizer_state"]) == (P, grads_at_end, state)
        assert end.get("activation", 0) == 0  # nothing of the step's own outlives it
        wait_for_writes()
        snap = load_snapshot(iv.path)
        # memory_viz colours trace events: blocks live all step long (the parameters) have none and
        # it draws them "unknown"; the end state's blocks carry their category for us
        made = {"gradient", "activation"} | ({"optimizer_state"} if iv.step == 1 else set())  # Adam's, once
        assert "unknown" in legend(snap) and made <= set(legend(snap))
        blocks = [b for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert sum(b["requested_size"] for b in blocks if b["category"] == "parameter") == P
        assert replay(snap, 0)[1] == iv.peak_allocated  # the marker entry changes no figure


def test_a_clear_false_history_labels_what_its_earlier_steps_made(tmp_path):
    # the snapshot closing a chain holds the gradients made in the step before it: the start of
    # this step saw them as gradients
    model, opt, x, y = _mlp()
    P = sum(p.numel() * p.element_size() for p in model.parameters())
    ns = {"model": model, "opt": opt, "x": x, "y": y}
    for step, clear in ((1, False), (2, False), (3, True)):
        with Recorder(device="cpu", out=tmp_path, step=step, namespace=ns, clear=clear, wait=True):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    for iv in session().intervals:
        assert iv.by_category_at_peak["gradient"] == P
        assert sum(iv.by_category_at_peak.values()) == iv.peak_allocated
    # the closing file holds all three steps: each step's gradients as gradients, not activations
    # (steps 1's only the first watch saw at an optimizer step)
    grads = Counter(
        e["user_metadata"]
        for e in load_snapshot(session().intervals[-1].path)["device_traces"][0]
        if e["action"] == "alloc" and e["category"] == "gradient"
    )
    n = len(list(model.parameters()))  # zero_grad() dropped them: each backward makes them anew
    assert grads == {"memsnap step 1": n, "memsnap step 2": n, "memsnap step 3": n}


def test_named_models_and_bad_names(shell):
    shell.run_cell("import torch\nnet = torch.nn.Linear(8, 8)\nother = torch.nn.Linear(64, 64)\nn = 3")
    assert shell.run_cell("%%memsnap device=cpu model=net\ny = net(torch.ones(2, 8))").success
    (iv,) = session().intervals
    assert iv.by_category["parameter"] == (64 + 8) * 4  # net's, not other's
    from IPython.core.error import UsageError

    for line, message in [
        ("model=nope", r"model=nope: no 'nope' in the namespace"),
        ("model=net.nope", r"model=net.nope: net has no 'nope'"),
        ("model=n", r"model=n: that is a int, not a torch\.nn\.Module$"),
        ("optimizer=net", r"optimizer=net: that is a Linear, not a torch\.optim\.Optimizer$"),
        ("optimizer=1x", r"optimizer=.*not a Python name"),
    ]:
        with pytest.raises(UsageError, match=message):
            shell.run_cell(f"%%memsnap device=cpu {line}\npass", store_history=False).raise_error()


def test_cells_without_models_carry_no_categories(tmp_path):
    with Recorder(device="cpu", out=tmp_path, step=1, namespace={}, wait=True):
        torch.ones(1000)
    (iv,) = session().intervals
    assert iv.by_category is None and iv.by_category_at_peak is None
    assert legend(load_snapshot(iv.path)) == []


def test_a_model_given_as_an_object_is_held_weakly(tmp_path):
    import gc
    import weakref

    model, opt, _, _ = _mlp()
    alive = weakref.ref(model), weakref.ref(opt)
    with Recorder(device="cpu", out=tmp_path, step=1, model=model, optimizer=opt, namespace={}):
        del model, opt
        gc.collect()
        freed = [ref() is None for ref in alive]
    assert freed == [True, True]  # inside the block, as without the recorder


def test_optimizer_hooks_come_off_whatever_happens(tmp_path):
    model, opt, x, y = _mlp()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    with (
        pytest.raises(RuntimeError, match="user's"),
        Recorder(device="cpu", out=tmp_path, step=1, model=model, optimizer=opt),
    ):
        loss.backward()
        opt.step()
        raise RuntimeError("the user's")
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    (iv,) = session().intervals  # the failed step is labelled all the same
    P = sum(p.nbytes for p in model.parameters())
    assert iv.error == "RuntimeError" and iv.by_category["gradient"] == P
    assert iv.by_category["parameter"] == P  # given as objects, they are found without a namespace


def test_the_watch_keeps_no_model_or_optimizer_alive(shell):
    """``del model, opt`` inside the cell frees them there, as without the magic."""
    shell.run_cell(
        "import torch, weakref, gc\nmodel = torch.nn.Linear(512, 512)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "model(torch.ones(1, 512)).sum().backward(); opt.step()\nsize = 3 * sum(p.nbytes for p in model.parameters())"
    )
    shell.run_cell("gc.collect()")  # other tests' garbage: freed in the cell, it would count there
    cell = "%%memsnap step=1 device=cpu\nw = weakref.ref(model.weight)\ndel model, opt\ngone = w() is None"
    assert shell.run_cell(cell).success
    assert shell.user_ns["gone"] is True
    (iv,) = session().intervals
    assert iv.kept == -shell.user_ns["size"] and not iv.by_category


@pytest.mark.parametrize("how", ["block", "named", "steps", "raises", "clear=false"])
def test_a_finished_recording_keeps_nothing_of_the_users_alive(tmp_path, how):
    """What a block's namespace (or its model= and optimizer=, as the integrations pass them)
    held is freed the moment the user lets go of it, as without us: no reference of ours to it,
    and no cycle of ours that waits for the collector (the device's state outlived the block
    holding its recorder, and with it the namespace, until the next recording)."""

    def train() -> list[weakref.ref]:
        model, opt, x, y = _mlp()
        ns = {"model": model, "opt": opt, "x": x, "y": y}

        def step() -> None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        if how == "block":
            with Recorder(device="cpu", out=tmp_path, step=1, namespace=ns):
                step()
        elif how == "named":
            with Recorder(device="cpu", out=tmp_path, step=1, model=model, optimizer=opt, namespace={}):
                step()
        elif how == "steps":
            with Recorder(device="cpu", out=tmp_path, steps=[2, 3], namespace=ns):
                for n in (1, 2, 3):
                    mark(n)
                    step()
        elif how == "raises":
            with pytest.raises(RuntimeError), Recorder(device="cpu", out=tmp_path, step=1, namespace=ns):
                step()
                raise RuntimeError("the user's")
        else:
            for n in (1, 2):
                with Recorder(device="cpu", out=tmp_path, step=n, namespace=ns, clear=n == 2):
                    step()
        return [weakref.ref(o) for o in (model, opt, x)]

    _mlp()  # a process's first optimizer imports torch modules: frames kept from that are not ours
    gc.collect()
    gc.disable()
    try:
        refs = train()
        wait_for_writes()
        alive = [r() is not None for r in refs]
    finally:
        gc.enable()
    assert alive == [False, False, False]
    (iv, *more) = session().intervals
    assert len(more) == (1 if how in ("steps", "clear=false") else 0) and iv.by_category["parameter"] > 0


def test_a_recording_given_up_with_its_thread_keeps_nothing_of_the_users_alive(tmp_path):
    """A block whose thread ended before it stopped is given up; its namespace goes with it."""
    import threading

    from memsnap_magic.recording.process_state import STATE

    refs: list[weakref.ref] = []

    def started_and_left() -> None:
        model, opt, x, _ = _mlp()
        refs.extend(weakref.ref(o) for o in (model, opt, x))
        Recorder(device="cpu", out=tmp_path, step=1, namespace={"model": model, "opt": opt, "x": x}).start()

    _mlp()  # as above: the process's first optimizer is made before counting
    gc.collect()
    gc.disable()
    try:
        thread = threading.Thread(target=started_and_left)
        thread.start()
        thread.join()
        with pytest.warns(RuntimeWarning, match="has ended"):
            assert STATE.give_up_orphaned() == ["cpu"]
        alive = [r() is not None for r in refs]
    finally:
        gc.enable()
    assert alive == [False, False, False]


def test_a_recording_that_failed_to_start_keeps_nothing_of_the_users_alive(tmp_path, monkeypatch):
    """A block whose device refused to begin raises, and leaves the device owning no recorder."""
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend
    from memsnap_magic.recording.process_state import STATE

    def refuses(self, **kwargs):
        raise RuntimeError("the device's")

    monkeypatch.setattr(CpuBackend, "begin", refuses)
    refs: list[weakref.ref] = []

    def train() -> None:
        model, opt, x, _ = _mlp()
        refs.extend(weakref.ref(o) for o in (model, opt, x))
        ns = {"model": model, "opt": opt, "x": x}
        with (
            pytest.raises(RuntimeError, match="the device's"),
            Recorder(device="cpu", out=tmp_path, step=1, namespace=ns),
        ):
            pass

    _mlp()  # as above: the process's first optimizer is made before counting
    gc.collect()
    gc.disable()
    try:
        train()
        alive = [r() is not None for r in refs]
    finally:
        gc.enable()
    assert alive == [False, False, False]
    assert STATE.devices["cpu"].backend.owner is None and STATE.devices["cpu"].chain is None


def test_a_model_and_optimizer_made_or_replaced_in_the_cell_are_labelled(shell):
    shell.run_cell(
        "import torch\ndef fresh():\n    m = torch.nn.Linear(256, 256)\n"
        "    return m, torch.optim.Adam(m.parameters())\n"
        "def train(m, o):\n    m(torch.ones(4, 256)).sum().backward(); o.step()\n"
        "model, opt = fresh(); train(model, opt)"
    )
    P = (256 * 256 + 256) * 4
    state = 2 * P + 2 * 4  # exp_avg, exp_avg_sq and a float32 step per parameter
    # replaced: the old model dies in the cell, the new one is labelled; made: the first cell of a notebook
    for step, cell in ((1, "model, opt = fresh(); train(model, opt)"), (2, "del model, opt\nnet, adam = fresh()")):
        assert shell.run_cell(f"%%memsnap step={step} device=cpu\n{cell}").success
    assert shell.run_cell("%%memsnap step=3 device=cpu\ntrain(net, adam)").success
    one, two, three = session().intervals
    assert one.by_category == {"parameter": P, "gradient": P, "optimizer_state": state}
    assert one.end_allocated == P + P + state  # the old model and its optimizer are not counted
    assert two.by_category == {"parameter": P}
    # an optimizer made in a cell steps through the global hook: zero_grad order does not matter
    assert three.by_category == {"parameter": P, "gradient": P, "optimizer_state": state}


def test_sparse_gradients_and_lbfgs_history(shell):
    """A sparse gradient has no storage to match (it must not fail the step); LBFGS keeps its
    history in lists of tensors, which are optimizer state."""
    shell.run_cell(
        "import torch\nemb = torch.nn.Embedding(1000, 64, sparse=True)\nsgd = torch.optim.SGD(emb.parameters(), lr=0.1)"
    )
    res = shell.run_cell("%%memsnap step=1 device=cpu\nemb(torch.tensor([1, 2, 3])).sum().backward(); sgd.step()")
    assert res.success, res.error_in_exec
    shell.run_cell(
        "del emb, sgd\nlin = torch.nn.Linear(64, 64)\nlbfgs = torch.optim.LBFGS(lin.parameters(), history_size=5)\n"
        "x = torch.randn(32, 64)\n"
        "def closure():\n    lbfgs.zero_grad(); loss = lin(x).pow(2).mean(); loss.backward(); return loss"
    )
    assert shell.run_cell("%%memsnap step=2 device=cpu\nfor _ in range(3):\n    lbfgs.step(closure)").success
    state = shell.run_cell(
        "{id(t.untyped_storage()): t.untyped_storage().nbytes() for v in lbfgs.state.values() "
        "for x in v.values() for t in (x if isinstance(x, list) else [x]) "
        "if isinstance(t, torch.Tensor)}"
    ).result
    _, two = session().intervals
    assert two.by_category["optimizer_state"] == sum(state.values()) > 5 * 64 * 65 * 4


def test_a_named_model_alone_is_labelled_not_another_optimizers_parameters(shell):
    shell.run_cell(
        "import torch\ngen, disc = torch.nn.Linear(64, 64), torch.nn.Linear(256, 256)\n"
        "opt_g, opt_d = torch.optim.SGD(gen.parameters()), torch.optim.SGD(disc.parameters())"
    )
    cell = "%%memsnap step=1 device=cpu model=gen\nfor m, o in ((gen, opt_g), (disc, opt_d)):\n"
    cell += "    m(torch.ones(2, m.in_features)).sum().backward(); o.step()"
    assert shell.run_cell(cell).success
    (iv,) = session().intervals
    G = (64 * 64 + 64) * 4
    assert iv.by_category["parameter"] == iv.by_category["gradient"] == G


# label() on traces of our own: one role seen while a block lived names that block only
def _alloc(addr, size, t):
    return {"action": "alloc", "addr": addr, "size": size, "time_us": t}


def _free(addr, size, t):
    return [
        {"action": "free_requested", "addr": addr, "size": size, "time_us": t},
        {"action": "free_completed", "addr": addr, "size": size, "time_us": t},
    ]


def test_a_reused_address_gets_the_role_of_the_block_alive_when_seen():
    trace = [
        _alloc(100, 8, 1),  # an activation ...
        *_free(100, 8, 2),
        _alloc(100, 8, 3),  # ... then a gradient at the same address and size, seen at t=4
        *_free(100, 8, 5),
        *_free(200, 16, 6),  # live before: a parameter the start saw
        *_free(300, 16, 7),  # live before, nobody saw it
    ]
    roles = Roles(start={200: (16, "parameter")}, timed=[(4, {100: (8, "gradient")})])
    end = [(400, {"size": 32, "requested_size": 32, "state": "active_allocated"})]
    label(trace, end, roles, end_us=9)
    assert [e["category"] for e in trace] == [
        "activation", "activation", "activation",
        "gradient", "gradient", "gradient",
        "parameter", "parameter", "other", "other",
        "unknown",
    ]  # fmt: skip
    assert trace[-1]["action"] == "snapshot"  # the marker, so memory_viz finds an "unknown"
    assert end[0][1]["category"] == "other"
    # a role of another size at the address is another storage
    trace = [_alloc(100, 8, 1)]
    label(trace, [], Roles(timed=[(2, {100: (16, "gradient")})]), end_us=3)
    assert trace[0]["category"] == "activation"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([8, 16, 32]), st.booleans()), min_size=1, max_size=40))
def test_every_entry_gets_one_category_and_sums_match_the_viewer(blocks):
    trace, t = [], 0
    for n, (size, freed) in enumerate(blocks):
        t += 1
        trace.append(_alloc(1000 + n, size, t))
        if freed:
            t += 1
            trace += _free(1000 + n, size, t)
    roles = Roles(timed=[(t, {1000: (blocks[0][0], "parameter")})])
    label(trace, [], roles, end_us=t + 1)
    assert all("category" in e for e in trace) and "unknown" in legend({"device_traces": [trace]})
    drawn = colours({"device_traces": [trace]}, 0)
    assert sum(drawn.values()) == sum(size for size, _ in blocks)
    assert totals([(e["category"], e["size"]) for e in trace if e["action"] == "alloc"]) == {
        k: v for k, v in drawn.items() if k != "unknown" or v
    }


def test_the_categories_view_stacks_each_steps_peak_and_the_table_says_what():
    from test_widget import bars, interval

    from memsnap_magic.results.session import Session
    from memsnap_magic.views.dashboard import Dashboard

    MiB = 1 << 20
    s = Session()
    labelled = interval(1, 4 * MiB, 10 * MiB, 4 * MiB)
    labelled = replace(labelled, by_category_at_peak={"parameter": 4 * MiB, "activation": 6 * MiB})
    for b, category in zip(labelled.top_blocks, ("activation", "parameter")):
        b["category"] = category
    s.add(labelled)
    s.add(interval(2, 4 * MiB, 8 * MiB, 4 * MiB))  # recorded without models: drawn whole, in grey
    d = Dashboard(s)
    d.view.value = "categories"
    peak_ax = d.overview_fig.axes[0]
    assert bars(peak_ax, "parameter") == [[4 * MiB, 0]] and bars(peak_ax, "activation") == [[6 * MiB, 0]]
    assert bars(peak_ax, "no categories") == [[0, 8 * MiB]]
    d.step.value = 0
    assert ">what</th>" in d.blocks.value and ">parameter<" in d.blocks.value


def _label_two_passes(trace, end, roles, end_us):
    """``label`` of a list as it was written before it read the trace once: every allocation's
    role first (a pass over the trace for the wanted addresses), then each entry in order. The
    spec the one-pass ``label`` is held to."""
    from collections import defaultdict

    from memsnap_magic.results.labels import _FREES, _role, _same_block, _seen_allocations

    wanted = set(roles.start) | set(roles.end) | {a for _, seen in roles.timed for a in seen}
    events = defaultdict(list)
    for i, e in enumerate(trace):
        if e.get("addr") in wanted and (e.get("action") == "alloc" or e.get("action") in _FREES):
            events[e["addr"]].append((i, e["action"], e.get("size"), e.get("time_us", -1)))
    allocs = _seen_allocations(events, roles)
    live, unknown, last = {}, False, len(trace) - 1
    for i, e in enumerate(trace):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = e["category"] = allocs.get(i, "activation")
        elif action in _FREES:
            category = live.get(addr)
            e["category"] = category or _role(roles.start, addr, e.get("size")) or "other"
            if action != "free_requested":
                live.pop(addr, None)
        elif action == "segment_alloc" and i < last and _same_block(e, trace[i + 1], "alloc"):
            e["category"] = allocs.get(i + 1, "activation")
        elif action == "segment_free" and i > 0 and _same_block(e, trace[i - 1], "free_completed"):
            e["category"] = trace[i - 1]["category"]
        else:
            e["category"] = "unknown"
            unknown = True
    for addr, block in end:
        size = block.get("requested_size") or block.get("size")
        block["category"] = _role(roles.end, addr, size) or live.get(addr) or _role(roles.start, addr, size) or "other"
    if not unknown:
        marker = {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": end_us}
        trace.append({**marker, "category": "unknown"})


# allocations and completed frees the most, as traces hold them; every other action too
ACTIONS = ("alloc",) * 4 + ("free_completed",) * 3 + ("free_requested", "free", "segment_alloc", "segment_free", "oom")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 3), st.integers(1, 3)), max_size=40),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["parameter", "gradient", "optimizer_state"])), max_size=4),
    st.lists(st.integers(0, 3), max_size=4),
    st.booleans(),
)
def test_labels_of_a_list_read_it_once_and_give_what_two_passes_gave(entries, picked, ends, grouped):
    """Any accelerator-like trace (segments around blocks or not, requested and completed frees,
    allocations twice at one address, a free of what was never allocated, roles seen on some of
    its blocks, at the start, at a step and at the end): one pass gives every entry, every end
    block and the marker what the two passes gave."""
    import copy

    base = 0x7F00_0000_0000
    trace = []
    for n, (action, slot, size) in enumerate(entries):
        entry = {"action": action, "addr": base + 512 * slot, "size": 64 * size, "stream": 0, "time_us": 10 * (n + 1)}
        if grouped and action in ("alloc", "free_completed"):  # its one-block segment beside it (the CPU route's)
            segment = dict(entry, action="segment_alloc" if action == "alloc" else "segment_free")
            trace += [segment, entry] if action == "alloc" else [entry, segment]
        else:
            trace.append(entry)
    # roles seen on some allocations while they lived (at their own time), and at the start and end
    allocs = [e for e in trace if e["action"] == "alloc"]
    hit = [(allocs[i], role) for i, role in picked if i < len(allocs)]
    seen = {e["addr"]: (e["size"], role) for e, role in hit}
    timed = sorted(((e["time_us"], {e["addr"]: (e["size"], role)}) for e, role in hit), key=lambda x: x[0])
    roles = Roles(start=dict(seen) if grouped else {}, timed=timed, end=dict(seen))
    end = [(base + 512 * slot, {"size": 64 * (slot + 1), "state": "active_allocated"}) for slot in ends]
    expected, expected_end = copy.deepcopy(trace), copy.deepcopy(end)
    _label_two_passes(expected, expected_end, roles, 10**6)
    label(trace, end, roles, 10**6)
    assert trace == expected
    assert end == expected_end
