"""The CPU route: snapshots built from allocator events plus the walked live storages."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from memsnap_magic.recording.backends.cpu.history import build_snapshot
from memsnap_magic.recording.backends.cpu.live_tensors import live_storages
from memsnap_magic.results.analysis import summarize

MiB = 1 << 20


def test_events_become_a_memory_viz_shaped_snapshot():
    events = [(1_000_000, 0xA, 100), (2_000_000, 0xB, 50), (3_000_000, 0xA, -100)]
    snap = build_snapshot(events, {}, {}, end_us=4000, max_entries=1000)
    assert [(e["action"], e["addr"], e["size"], e["time_us"]) for e in snap["device_traces"][0]] == [
        ("segment_alloc", 0xA, 100, 1000),  # each CPU block is a segment of its own
        ("alloc", 0xA, 100, 1000),
        ("segment_alloc", 0xB, 50, 2000),
        ("alloc", 0xB, 50, 2000),
        ("free_requested", 0xA, 100, 3000),
        ("free_completed", 0xA, 100, 3000),
        ("segment_free", 0xA, 100, 3000),
    ]
    (seg,) = snap["segments"]
    assert seg["address"] == 0xB and seg["total_size"] == 50 and seg["device"] == 0
    assert seg["blocks"] == [
        {"address": 0xB, "size": 50, "requested_size": 50, "state": "active_allocated", "frames": []}
    ]
    s = summarize(snap)
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == (0, 150, 50)


A, B, C, D = 0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000  # far enough apart for MiB blocks


def test_baseline_from_live_storages_and_silent_frees():
    # A lived before and survives; B lived before and was freed without a report (gone at the
    # end); C lived before, was freed silently and its address reused by a new block.
    start = {A: 10 * MiB, B: 4 * MiB, C: 2 * MiB}
    end = {A: 10 * MiB, C: 1 * MiB, D: MiB}
    events = [(1000, D, MiB), (2000, C, MiB)]
    snap = build_snapshot(events, start, end, end_us=9, max_entries=1000)
    actions = [(e["action"], e["addr"]) for e in snap["device_traces"][0] if not e["action"].startswith("segment")]
    assert actions == [
        ("alloc", D),
        ("free_requested", C),
        ("free_completed", C),
        ("alloc", C),
        ("free_requested", B),
        ("free_completed", B),
    ]
    s = summarize(snap)
    assert s.baseline_allocated == 16 * MiB
    assert s.end_allocated == 12 * MiB
    assert s.peak_allocated == 17 * MiB  # B's free has no time: placed at the end, an upper bound


def test_a_silent_free_goes_before_the_first_reuse_of_any_of_its_bytes_or_when_it_died():
    from memsnap_magic.recording.backends.cpu.history import History

    # B is reused from its middle, C by an allocation spanning it and D's start; A died at 2500 ns
    start = {A: MiB, B: MiB, C: 64, C + 64: 64}
    events = [(1000, D, 8), (2000, B + 4096, 128), (3000, C - 8, 200), (4000, D + 64, 8)]
    history = History(1000, start)
    history.add_events(events)
    snap = history.snapshot({}, end_us=9, max_entries=1000, died={A: 2500, C: 3500})
    frees = [(e["addr"], e["time_us"]) for e in snap["device_traces"][0] if e["action"] == "free_completed"]
    # B before its reuse at 2000; A when it died; both C blocks before the spanning allocation
    # (which comes before C's death); the end is never needed
    assert frees == [(B, 2), (A, 2), (C, 3), (C + 64, 3)] and history.freed_unseen == 0
    s = summarize(snap)
    assert s.peak_allocated == s.baseline_allocated + 8 and s.end_allocated == 8 + 128 + 200 + 8
    # a ring that dropped the older events: a block that died before the window is no entry of it
    history = History(2, start)
    history.add_events(events)
    snap = history.snapshot({}, end_us=9, max_entries=2, died={A: 1500})
    trace = snap["device_traces"][0]
    assert A not in {e["addr"] for e in trace}


def test_reported_free_of_an_old_block_is_not_doubled():
    start = {0xA: 3 * MiB}
    snap = build_snapshot([(5, 0xA, -3 * MiB)], start, {}, end_us=9, max_entries=1000)
    assert [e["action"] for e in snap["device_traces"][0]] == ["free_requested", "free_completed", "segment_free"]
    s = summarize(snap)
    assert (s.baseline_allocated, s.end_allocated) == (3 * MiB, 0)


def test_max_entries_keeps_the_newest_and_stays_consistent():
    events = [(i, 0x100 + i, 10) for i in range(50)]
    snap = build_snapshot(events, {}, {}, end_us=99, max_entries=20)
    trace = snap["device_traces"][0]
    assert len(trace) == 20 and trace[-1]["addr"] == 0x100 + 49  # the newest 10 allocations, with segments
    s = summarize(snap)
    assert s.end_allocated == 500 and s.baseline_allocated == 400


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(1000),
        lambda: torch.ones(1000).to_sparse(),  # read through its parts: the walk calls itself
        lambda: [torch.ones(1000)],
    ],
    ids=["tensor", "sparse", "list"],
)
def test_the_walk_keeps_nothing_it_found_alive(make):
    """No reference cycle of the walk's own holds the storages it found until the collector
    runs: a tensor let go right after is freed right after."""
    import gc

    from torch.multiprocessing.reductions import StorageWeakRef

    held = make()
    tensors = [held] if isinstance(held, torch.Tensor) else held
    parts = [p for t in tensors for p in ((t._indices(), t._values()) if t.is_sparse else (t,))]
    refs = [StorageWeakRef(p.untyped_storage()) for p in parts]
    del tensors, parts
    gc.disable()
    try:
        found: dict = {}
        assert live_storages({"held": held}, storages=found)
        del found, held
        assert all(ref.expired() for ref in refs)
    finally:
        gc.enable()


def test_what_modules_keep_besides_tensors_cannot_spend_the_walk_before_their_parameters():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.ids = list(range(1000))  # 200 of these: four times the walk's budget
            self.cache = [torch.zeros(3)]

    model = torch.nn.Sequential(*[Block() for _ in range(200)])
    found = live_storages({"model": model})
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert params <= set(found)
    assert model[0].cache[0].untyped_storage().data_ptr() in found  # read once the parameters were


def test_the_walk_knows_torchs_own_module_attributes_without_making_a_module(monkeypatch):
    from memsnap_magic.recording.backends.cpu.objects import TORCH_MODULE_ATTRS as _TORCH_MODULE_ATTRS

    assert set(vars(torch.nn.Module())) <= _TORCH_MODULE_ATTRS  # a torch that adds one: add it
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    made = []
    init = torch.nn.Module.__init__
    monkeypatch.setattr(torch.nn.Module, "__init__", lambda self, *a, **k: made.append(1) or init(self, *a, **k))
    assert live_storages({"model": model}) and made == []  # no code of anyone's ran


def test_a_graph_walk_reads_what_a_pack_hook_stored_without_running_it():
    calls = []

    class Packed:
        @property
        def __class__(self):  # isinstance() would run it
            calls.append("__class__")
            return torch.Tensor

        def __init__(self, t):
            self.t = t

    w = torch.randn(1 << 10, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(Packed, lambda p: p.t):
        loss = w.exp().sum()
    found = live_storages({"loss": loss}, graphs=True)
    assert calls == [] and w.untyped_storage().data_ptr() in found


def test_live_storages_walks_modules_optimizers_containers_and_objects():
    model = torch.nn.Linear(4, 3)
    model(torch.ones(2, 4)).sum().backward()
    opt = torch.optim.Adam(model.parameters())
    opt.step()

    class Holder:
        def __init__(self):
            self.kept = [torch.zeros(5)]

    view_base = torch.zeros(100)
    ns = {
        "model": model,
        "opt": opt,
        "h": Holder(),
        "v": view_base[10:20],
        "_scratch": torch.zeros(7),  # a user's name all the same
        "__dunder__": torch.zeros(9),  # the interpreter's names are not walked
        "meta": torch.empty(3, device="meta"),
        "n": 3,
    }
    found = live_storages(ns)
    expected = {
        t.untyped_storage().data_ptr()
        for t in [
            model.weight,
            model.bias,
            model.weight.grad,
            model.bias.grad,
            *[v for st in opt.state.values() for v in st.values() if v.dim()],
            ns["h"].kept[0],
            view_base,
            ns["_scratch"],
        ]
    }
    assert expected <= set(found)
    assert found[view_base.untyped_storage().data_ptr()] == 400  # the whole storage, not the view
    assert ns["__dunder__"].untyped_storage().data_ptr() not in found


# --- reading the profiler's events by columns gives the snapshot reading them one by one gave ---

CELLS = {
    "tiny ops": "for _ in range(3000):\n    t = torch.empty(4)\n",
    "training step": "loss = model(x).sum()\nloss.backward()\nopt.step()\nopt.zero_grad(set_to_none=True)\n",
    "frees of old tensors": "del old\nkept.append(torch.empty(2**16))\n",
    "user scopes": "with torch.autograd.profiler.record_function('mine'):\n    a = torch.ones(100) * 2\n",
    "zero bytes": "e = [torch.empty(0) for _ in range(10)]\nf = torch.ones(7)\n",
    "a scope after many events": "for _ in range(300):\n    t = torch.empty(4)\n"
    "with torch.autograd.profiler.record_function('late'):\n    u = torch.ones(50) + 1\n",
    "calls in calls": "def inner(n):\n    return torch.ones(n) * 2\n"
    "def outer():\n    return [inner(n) for n in range(1, 40)]\nr = outer()\n",
}


def profiled(code: str, ns: dict, stacks: bool = False, cpu_activity: bool = False) -> list:
    """The event tree's roots of a profiler session around ``code``, as the CPU route opens it
    (``cpu_activity``: as it does where no quiet activity can stand in for the CPU's)."""
    from memsnap_magic.recording.backends.cpu.profiler import _Profiler

    profiler = _Profiler()
    profiler.warm_up()
    if cpu_activity:
        profiler._quiet = None
    profiler.start(stacks=stacks)
    exec(code, ns)
    return profiler.stop()


def training_namespace() -> dict:
    """What the CELLS run in: a small model, its optimizer and batch, an old tensor, a list."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    return {
        "torch": torch,
        "model": model,
        "opt": torch.optim.Adam(model.parameters()),
        "x": torch.randn(16, 64),
        "old": torch.empty(2**15),
        "kept": [],
    }


# events read per pass (one pass, or many for any cell); levels of the tree narrower than
# ``narrow`` nodes read node by node (the default; every level; none); watched addresses met in a
# chunk looked up one by one up to ``few`` of them, else by one pass over it (the default; always).
# Whether a session reports a start tensor's free depends on what the allocator's table recalls:
# test_build_snapshot_matches_the_walk_on_any_events takes both lookups through such frees
READINGS = {
    "one pass": (1 << 16, None, None),
    "chunks of 7": (7, None, None),
    "node by node": (1 << 16, 10**9, None),
    "by passes": (1 << 16, 0, None),
    "watched found by a pass": (7, None, 0),
}


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize(
    "tracer, instants, cpu_activity",
    [(False, True, False), (False, True, True), (True, True, True), (True, False, True)],
    ids=["no tracer", "no tracer, CPU activity", "tracer", "tracer, all fields"],
)
@pytest.mark.parametrize("cell", CELLS)
def test_the_history_gives_the_snapshot_the_walk_gave(cell, tracer, instants, cpu_activity, reading, monkeypatch):
    # instants=False: every node's fields are read, not only those of nodes without duration.
    # Without the tracer, the CPU activity's tree holds user scopes too (where the quiet one can't run)
    import cpu_reference

    from memsnap_magic.recording.backends.cpu import events as cpu_history
    from memsnap_magic.recording.backends.cpu import history as history_module
    from memsnap_magic.recording.backends.cpu.history import History

    chunk, narrow, few = READINGS[reading]
    monkeypatch.setattr(cpu_history, "_CHUNK", chunk)
    if narrow is not None:
        monkeypatch.setattr(cpu_history, "NARROW", narrow)
    if few is not None:
        monkeypatch.setattr(history_module, "_FEW_HITS", few)
    monkeypatch.setattr(cpu_history, "_INSTANTS", [instants])
    ns = training_namespace()
    live_start = live_storages(ns)
    chain = [CELLS[cell], "extra = torch.ones(33)\ndel x\n"]  # a clear=false chain: two sessions
    sessions = [profiled(code, ns, stacks=tracer, cpu_activity=cpu_activity) for code in chain]
    live_end = live_storages(ns)
    events = [e for roots in sessions for e in cpu_reference.walk_events(roots)]
    assert events
    for newest in (3, 50, 10**6):
        history = History(newest, live_start, frames=tracer)
        seen = []
        for roots in sessions:
            history.add(roots)
            seen += cpu_reference.walk_events(roots)
            assert list(history.window) == seen[-newest:]  # the ring: the newest events, whole
        if tracer:  # the frames are the tracer's own business (test_cpu_truth); the rest is the walk's
            history.stacks = None
        assert history.snapshot(live_end, 10**15, newest, segment_events=False) == cpu_reference.build_snapshot(
            events, live_start, live_end, 10**15, newest
        )


@pytest.mark.parametrize("tracer", [False, True], ids=["no tracer", "tracer"])
@pytest.mark.parametrize("cell, other", [("tiny ops", 16), ("zero bytes", 28), ("training step", None)])
def test_events_of_another_device_are_left_out(cell, other, tracer, monkeypatch):
    # where an accelerator may report allocations too, each event's device is read (its fields
    # put in time order with the rest) and only the CPU's are kept. Here the allocations of
    # ``other`` bytes are reported as another device's: the snapshot is the one without them
    from typing import NamedTuple

    import cpu_reference

    from memsnap_magic.recording.backends.cpu import history as cpu_history
    from memsnap_magic.recording.backends.cpu.history import History

    class Device(NamedTuple):  # hashable, as torch.device is
        type: str

    cpu, cuda = Device("cpu"), Device("cuda")
    monkeypatch.setattr(cpu_history, "other_devices_may_allocate", lambda: True)
    monkeypatch.setattr(cpu_history, "_DEVICE", lambda f: cuda if f.alloc_size in (other, -(other or 0)) else cpu)
    ns = training_namespace()
    live_start = live_storages(ns)
    roots = profiled(CELLS[cell], ns, stacks=tracer)
    live_end = live_storages(ns)
    events = [e for e in cpu_reference.walk_events(roots) if abs(e[2]) != other]
    assert other is None or len(events) < len(cpu_reference.walk_events(roots))
    history = History(10**6, live_start, frames=tracer)
    history.add(roots)
    history.stacks = None
    assert history.snapshot(live_end, 10**15, 10**6, segment_events=False) == cpu_reference.build_snapshot(
        events, live_start, live_end, 10**15, 10**6
    )


@pytest.mark.parametrize("tracer", [False, True])
def test_what_reading_a_tree_made_is_held_for_whoever_frees_the_session(tracer):
    # destroying PyTorch's Python objects costs ~0.2 µs each: the writer does it after the cell.
    # A tree of allocations alone is read a chunk at a time, each chunk's let go with it (memory
    # first: they would pile up); a tracer's tree holds them all at once while it is read anyway
    from torch._C._profiler import _ExtraFields_Allocation

    from memsnap_magic.recording.backends.cpu.history import History

    cell = CELLS["training step"] if tracer else "xs = [torch.ones(100) for _ in range(50)]\n"
    roots = profiled(cell, training_namespace(), stacks=tracer)
    held: list = []
    history = History(10**6, {}, frames=tracer)
    history.add(roots, held=held)
    objects = [x for part in held for x in part]
    assert history.count > 0
    if not tracer:
        assert objects == []
        return
    assert sum(type(x) is _ExtraFields_Allocation for x in objects) >= history.count
    nodes, level = [], roots  # every node read is kept alive, so the tree hands back the very same objects
    while level:
        nodes += level
        level = [kid for node in level for kid in node.children]
    assert {id(n) for n in nodes} <= {id(x) for x in objects}


FRAMED = {  # allocations of STACK_BYTES or more get frames: in wide levels, in deep ones
    "a loop": "for _ in range(300):\n    t = torch.empty(512)\n",
    "training step": CELLS["training step"],
    "calls in calls": "def inner(n):\n    return torch.ones(n) * 2\n"
    "def outer():\n    return [inner(n) for n in range(256, 2000, 40)]\nr = outer()\n",
}


@pytest.mark.parametrize("cell", FRAMED)
def test_reading_a_level_node_by_node_or_by_passes_gives_the_same_frames(cell, monkeypatch):
    from memsnap_magic.recording.backends.cpu import events as cpu_history
    from memsnap_magic.recording.backends.cpu.history import History

    ns = training_namespace()
    live_start = live_storages(ns)
    roots = profiled(FRAMED[cell], ns, stacks=True)
    live_end = live_storages(ns)
    snaps = []
    for narrow in (0, 10**9):
        monkeypatch.setattr(cpu_history, "NARROW", narrow)
        history = History(10**6, live_start, frames=True)
        history.add(roots)
        snaps.append(history.snapshot(live_end, 10**15, 10**6))
    framed = [e for e in snaps[0]["device_traces"][0] if e.get("frames")]
    assert framed, "the cell allocates blocks large enough to get frames"
    assert snaps[0] == snaps[1]


@given(
    st.lists(st.tuples(st.sampled_from([0x10, 0x20, 0x30, 0x40]), st.integers(-3, 5).filter(bool)), max_size=40),
    st.dictionaries(st.sampled_from([0x10, 0x20, 0x50]), st.integers(1, 9)),
    st.sets(st.sampled_from([0x10, 0x20, 0x50])),
    st.integers(1, 60),
)
@settings(max_examples=500, deadline=None)
def test_build_snapshot_matches_the_walk_on_any_events(moves, live_start, end_keys, newest):
    # the first event at each address live at the start: looked up one by one, or by one pass
    from unittest import mock

    import cpu_reference

    from memsnap_magic.recording.backends.cpu import history
    from memsnap_magic.recording.backends.cpu.history import build_snapshot

    events = [(1000 * i, ptr, size) for i, (ptr, size) in enumerate(moves)]
    live_end = {p: live_start.get(p, 1) for p in end_keys}
    expected = cpu_reference.build_snapshot(events, live_start, live_end, 99_000, newest)
    for few in (history._FEW_HITS, 0):
        with mock.patch.object(history, "_FEW_HITS", few):
            assert build_snapshot(events, live_start, live_end, 99_000, newest, False) == expected


def test_a_start_block_freed_unseen_goes_before_an_allocation_at_another_address_taking_its_bytes():
    # what a real session gave (CI, 2026-12-05): `old` freed unreported, and the allocator handed
    # part of its bytes to a larger block starting below it; `x` freed unreported, its bytes unused
    import cpu_reference

    old, x, big, small = 0x10_0000, 0x40_0000, 0x0F_8000, 0x80_0000
    live_start = {old: 0x2_0000, x: 4096, 0x90_0000: 512}
    events = [(1_000, big, 0x4_0000), (2_000, small, 132)]
    live_end = {big: 0x4_0000, small: 132, 0x90_0000: 512}
    for newest in (3, 50, 10**6):
        snap = build_snapshot(events, live_start, live_end, 99_000, newest, False)
        assert snap == cpu_reference.build_snapshot(events, live_start, live_end, 99_000, newest)
    trace = snap["device_traces"][0]
    assert [(e["action"], e["addr"]) for e in trace] == [
        ("free_requested", old),
        ("free_completed", old),
        ("alloc", big),
        ("alloc", small),
        ("free_requested", x),
        ("free_completed", x),
    ]


@given(
    st.lists(st.tuples(st.integers(0, 12), st.integers(1, 9), st.booleans()), max_size=30),
    st.dictionaries(st.integers(0, 12), st.integers(1, 9), max_size=4),
    st.sets(st.integers(0, 12)),
)
@settings(max_examples=400, deadline=None)
def test_start_blocks_freed_unseen_are_freed_where_their_bytes_are_first_taken(moves, start, end_slots):
    # addresses 4 bytes apart, blocks up to 9 long: an allocation may take a start block's bytes
    # at its address or at another; the whole interval is in the window (none of it dropped)
    import cpu_reference

    live_start: dict[int, int] = {}  # live side by side, as a walk finds them: none overlaps the one before
    below = 0  # where the last block kept ends
    for slot, size in sorted(start.items()):
        if 4 * slot >= below:
            live_start[4 * slot] = size
            below = 4 * slot + size
    live: dict[int, int] = {}
    events = []
    for i, (slot, size, free) in enumerate(moves):
        ptr = 4 * slot
        if free and ptr in live:
            events.append((1000 * i, ptr, -live.pop(ptr)))
        elif not free and ptr not in live:
            live[ptr] = size
            events.append((1000 * i, ptr, size))
    # the start blocks a walk still finds at the end (any of them), and what the events left live
    live_end = {**{4 * s: live_start[4 * s] for s in end_slots if 4 * s in live_start}, **live}
    expected = cpu_reference.build_snapshot(events, live_start, live_end, 99_000, 10**6)
    assert build_snapshot(events, live_start, live_end, 99_000, 10**6, False) == expected


@given(
    st.lists(st.tuples(st.sampled_from([0x10, 0x20, 0x30, 0x40]), st.integers(1, 5), st.booleans()), max_size=40),
    st.dictionaries(st.sampled_from([0x10, 0x20, 0x50]), st.integers(1, 9)),
    st.sets(st.sampled_from([0x10, 0x20, 0x50])),
    st.integers(1, 80),
)
@settings(max_examples=500, deadline=None)
def test_every_state_of_a_cpu_dump_is_one_the_viewer_can_draw(moves, live_start, end_keys, newest):
    # a free only of what is live, as the allocator reports; windows of any size; silent frees
    from memory_viz import replay_backwards

    from memsnap_magic.recording.backends.cpu.history import build_snapshot

    live: dict[int, int] = dict(live_start)
    touched: set[int] = set()  # a block live at the start may have been freed unseen: its address reused
    events = []
    for i, (ptr, size, free) in enumerate(moves):
        if free and ptr in live:
            events.append((1000 * i, ptr, -live.pop(ptr)))
        elif not free and (ptr not in live or (ptr in live_start and ptr not in touched)):
            live[ptr] = size
            events.append((1000 * i, ptr, size))
        touched.add(ptr)
    live_end = {p: live_start.get(p, 1) for p in end_keys}
    snap = build_snapshot(events, live_start, live_end, 99_000, newest)
    replay_backwards(snap, 0)


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.booleans()), max_size=40),
    st.lists(st.integers(1, 12), min_size=1, max_size=5),
    st.integers(1, 80),
    st.data(),
)
@settings(max_examples=400, deadline=None)
def test_a_replay_never_has_two_live_blocks_overlap(moves, start_sizes, newest, data):
    # blocks made before recording, freed unreported; their bytes handed out again at any offset
    from memory_viz import replay_backwards

    from memsnap_magic.recording.backends.cpu.history import History

    start, at = {}, 0
    for size in start_sizes:
        start[at] = size
        at += size + data.draw(st.integers(0, 4))
    live = dict(start)
    events, died = [], {}
    for i, (addr, size, free) in enumerate(moves):
        if free and live:
            ptr = data.draw(st.sampled_from(sorted(live)))
            if ptr in start and live[ptr] == start[ptr] and ptr not in {e[1] for e in events}:
                died[ptr] = 1000 * i + 500  # a start block: its free is no event, its death is seen
                del live[ptr]
            else:
                events.append((1000 * i, ptr, -live.pop(ptr)))
            continue
        overlapping = [p for p, n in live.items() if p < addr + size and addr < p + n]
        if all(p in start and p not in {e[1] for e in events} for p in overlapping):
            for p in overlapping:  # freed unseen and undated: only the reuse dates it
                del live[p]
            live[addr] = size
            events.append((1000 * i, addr, size))
    history = History(newest, start)
    history.add_events(events)
    snap = history.snapshot(dict(live), 99_000, newest, died=died)
    current: dict[int, int] = {}
    blocks = {b["address"]: b["size"] for seg in snap["segments"] for b in seg["blocks"]}
    for e in reversed(snap["device_traces"][0]):  # undo to the window's start, as the viewer does
        if e["action"] == "alloc":
            del blocks[e["addr"]]
        elif e["action"] == "free_completed":
            blocks[e["addr"]] = e["size"]
    current = blocks
    spans = sorted(current.items())  # the window's start: no two live blocks overlap there either
    assert all(p + n <= q for (p, n), (q, _) in zip(spans, spans[1:])), spans
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            assert all(not (p < e["addr"] + e["size"] and e["addr"] < p + n) for p, n in current.items())
            current[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            del current[e["addr"]]
    replay_backwards(snap, 0)


def test_the_warm_up_learns_that_allocations_are_instants(monkeypatch):
    # the tracer's reader reads fields only of nodes without duration, trusting this of PyTorch
    from memsnap_magic.recording.backends.cpu import events as cpu_history
    from memsnap_magic.recording.backends.cpu.profiler import _Profiler

    monkeypatch.setattr(cpu_history, "_INSTANTS", [None])
    _Profiler().warm_up()
    assert cpu_history._INSTANTS == [True]
    cpu_history.check_instants([])  # a session that saw no allocation proves nothing: fields for all
    assert cpu_history._INSTANTS == [False]


def test_the_walk_spends_nothing_on_the_notebooks_machinery(shell):
    # IPython's exit and quit hold the shell, and through it hundreds of objects: a walk that went
    # there would spend its budget before reaching the user's tensors, on every cell
    shell.run_cell("import torch\nw = torch.ones(1000)")
    ns = shell.user_ns
    assert {"exit", "quit", "get_ipython"} <= set(ns)
    found = live_storages(ns, limit=40)
    assert found == {ns["w"].untyped_storage().data_ptr(): 4000}


def test_a_session_results_are_freed_in_the_background_before_the_next_starts():
    # freeing what PyTorch reported costs ~1 µs per event: the writer does it, and no session
    # starts while it runs (PyTorch's profiler state is not ours to race)
    import threading

    from memsnap_magic.files.writer import WRITER, wait_for_writes
    from memsnap_magic.recording.backends.cpu.profiler import _Profiler

    profiler = _Profiler()
    profiler.warm_up()
    profiler.start()
    kept = [torch.ones(10) for _ in range(1000)]
    roots = profiler.stop()
    assert len(roots) == 1000 and profiler.spent  # read, not yet freed
    order: list[str] = []
    gate = threading.Event()

    def busy() -> None:  # a write still running when the cell's results are handed over
        gate.wait(10)
        order.append("write done")

    WRITER.submit(busy, "a slow write")
    profiler.events_read = 2000
    profiler.release()
    assert profiler.spent == []  # handed over: the cell holds none of it
    del roots
    opener = threading.Timer(0.2, lambda: (order.append("gate opened"), gate.set()))
    opener.start()
    profiler.start()  # waits for the release queued behind the slow write
    order.append("started")
    assert profiler._released is None
    one = torch.ones(10)
    profiler.stop()
    profiler.events_read = 1
    profiler.release()  # freed at once, not handed over
    assert profiler.spent == [] and profiler._released is None
    wait_for_writes()
    opener.join()
    assert order == ["gate opened", "write done", "started"]
    del kept, one


def test_a_cell_hands_its_profiler_results_to_the_writer(shell):
    from memsnap_magic.files.writer import wait_for_writes
    from memsnap_magic.recording.process_state import STATE

    shell.run_cell("import torch")
    for _ in range(2):
        res = shell.run_cell("%%memsnap device=cpu\nxs = [torch.ones(100) for _ in range(1000)]")
        assert res.success
        profiler = STATE.cpu_profiler
        assert profiler.spent == [] and profiler._released is not None
        wait_for_writes()
        assert profiler._released is None or profiler._released[1].is_set()
    assert len(STATE.session.intervals) == 2
    assert STATE.session.intervals[-1].end_allocated - STATE.session.intervals[-1].baseline_allocated == 0


def test_a_session_that_grew_the_process_by_a_gb_frees_its_buffers_before_it_is_read(monkeypatch):
    from memsnap_magic.recording.backends.cpu import profiler as cpu

    profiler = cpu._Profiler()
    profiler.warm_up()
    for heavy, kept in ((1 << 40, 2), (-1, 1)):  # never that heavy; always
        monkeypatch.setattr(cpu, "HEAVY_SESSION", heavy)
        profiler.start()
        x = torch.ones(100)
        roots = profiler.stop()
        assert len(profiler.spent) == kept and profiler.spent[-1] is roots  # the result, if kept, first
        profiler.events_read = 1
        profiler.release()
        del x, roots


def test_a_start_block_whose_bytes_were_taken_before_the_window_is_not_in_it():
    # bytes 1..3 held since before the interval, freed unreported; a block at 2 took some of them
    # before the ring's window and lives on: the old block was gone by then, so the window neither
    # starts with both nor frees the old one at its end
    from memsnap_magic.recording.backends.cpu.history import History

    events = [(0, 2, 1), (1000, 10, 1), (2000, 10, -1), (3000, 11, 1), (4000, 11, -1)]
    for newest in (5, 3, 2):  # 5: the whole interval; 3, 2: the block at 2 made before the window
        history = History(newest, {1: 2})
        history.add_events(events)
        snap = history.snapshot({}, 99_000, 100, died={})
        trace = snap["device_traces"][0]
        assert [s["address"] for s in snap["segments"]] == [2]
        assert history.freed_unseen == 0
        assert any(e["addr"] == 1 for e in trace) == (newest == 5)  # placed at the reuse, inside the window
        assert trace[-1]["addr"] != 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(-64, 64).filter(bool)), max_size=40),
    st.sets(st.integers(0, 9), max_size=6),
    st.lists(st.integers(0, 40), max_size=4),
    st.lists(st.integers(0, 40), max_size=3),
)
def test_the_end_state_tables_fold_any_chunks_and_sessions_alike(events, watched, cuts, sessions):
    """What the end state needs of the events (each address's last event; each watched address's
    first event and its index) is the same however they come: in one piece, in chunks of any size,
    over several sessions merged, as a plain loop over them says."""
    from memsnap_magic.recording.backends.cpu.history import _Tables

    ptrs, sizes = [0x7F00_0000_0000 + 64 * a for a, _ in events], [n for _, n in events]
    watch = {0x7F00_0000_0000 + 64 * a for a in watched}
    last, first = {}, {}
    for i, (p, n) in enumerate(zip(ptrs, sizes)):
        last[p] = n
        if p in watch and p not in first:
            first[p] = (n, i)

    def chunks(lo: int, hi: int, at: list[int]) -> list[tuple[int, int]]:
        edges = sorted({lo, hi, *(c for c in at if lo < c < hi)})
        return list(zip(edges, edges[1:]))

    tables = _Tables(set(watch))
    for lo, hi in chunks(0, len(events), sessions):  # a session each, folded on its own, then merged
        run = _Tables(tables.watch, tables.count)
        for a, b in chunks(lo, hi, cuts):
            run.fold(ptrs[a:b], sizes[a:b])
        tables.merge(run)
    assert tables.last == last and tables.count == len(events)
    assert {p: (tables.first[p], tables.first_index[p]) for p in tables.first} == first
    assert tables.watch == watch - set(first)


QUIET_CELL = (
    "xs = [torch.ones(n) for n in range(1, 60)]\n"
    "with torch.autograd.profiler.record_function('scope'):\n"
    "    ys = [x * 2 for x in xs[::3]]\n"
    "del xs[::2]\n"
    "loss = model(x).sum()\nloss.backward()\nopt.step()\n"
)


def scopes(roots: list) -> list[str]:
    """The names of the user scopes (``record_function``) in a session's tree."""
    from torch._C._profiler import _EventType

    found, level = [], roots
    while level:
        found += [n.name for n in level if n.tag == _EventType.TorchOp]
        level = [kid for n in level for kid in n.children]
    return found


def _no_stack_session(code: str, quiet: bool) -> tuple[list, int, int]:
    """The roots of a session without stacks around ``code``, with the quiet activities or the
    CPU's, and the clock (``time.time_ns``) before and after it."""
    import time

    from memsnap_magic.recording.backends.cpu.profiler import _Profiler

    profiler = _Profiler()
    profiler.warm_up()
    if not quiet:
        profiler._quiet = None
    ns = training_namespace()
    before = time.time_ns()
    profiler.start()
    exec(code, ns)
    roots = profiler.stop()
    return roots, before, time.time_ns()


def test_a_session_without_stacks_reports_what_the_cpu_activitys_session_does():
    # without stacks a session records with an activity this process has no device for, which
    # skips kineto's CPU trace: the same allocations and frees must come back, in the same order,
    # on the clock the CPU activity's session stamps them with (the namespace's walk compares them)
    import cpu_reference

    seen = {}
    for quiet in (True, False):
        roots, before, after = _no_stack_session(QUIET_CELL, quiet)
        assert ("scope" in scopes(roots)) is not quiet  # the quiet activity ran, then the CPU's
        events = cpu_reference.walk_events(roots)
        assert all(before <= t <= after for t, _, _ in events)
        ptrs = {p for _, p, s in events if s > 0}
        assert sum(s > 0 for _, p, s in events) > 60
        seen[quiet] = [s for _, _, s in events], sum(p in ptrs for _, p, s in events if s < 0)
    assert seen[True] == seen[False]


def test_the_quiet_activity_is_not_used_where_this_process_has_its_device(monkeypatch):
    # a user scope is recorded only with the CPU activity: which one ran shows in the tree
    import torch

    cell = "with torch.autograd.profiler.record_function('scope'):\n    y = torch.ones(10)\n"
    assert scopes(_no_stack_session(cell, quiet=True)[0]) == []
    monkeypatch.setattr(torch.mtia, "is_available", lambda: True)
    assert scopes(_no_stack_session(cell, quiet=True)[0]) == ["scope"]


def test_a_quiet_stop_keeps_its_warning_off_stderr_and_passes_on_the_rest(capfd):
    # what the session without the CPU activity prints at its stop is dropped; anything else said
    # on descriptor 2 meanwhile (another library, a thread) reaches the user, in its order
    import os

    from memsnap_magic.recording.backends.cpu.profiler import _Profiler

    said = [
        b"[W1206 00:01:49.305810822 collection.cpp:1021] Warning: Failed to recover relationship between all "
        b"profiler and kineto events: 3 vs. 0  reassociated. (function reassociate)\n",
        b"someone else's line\n",
        b"and its second\n",
    ]

    def stop() -> str:
        for line in said:
            os.write(2, line)
        return "result"

    profiler = _Profiler()
    assert profiler._without_chatter(stop, quiet=True) == "result"
    assert capfd.readouterr().err == "someone else's line\nand its second\n"
    assert profiler._without_chatter(stop) == "result"  # a session with the CPU activity: not caught
    assert capfd.readouterr().err == b"".join(said).decode()
