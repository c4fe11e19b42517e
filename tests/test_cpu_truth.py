"""The CPU route's figures against what the cells did: continuity between cells, exact ``steps=``,
Python stacks on allocations. Real torch, real profiler, an in-process IPython shell.

Each test that is not about stacks runs twice: with them (PyTorch's session with the CPU activity
and its Python tracer) and with ``context=none``, whose session has no CPU activity where PyTorch
allows it (``profiler._quiet_activities``): each asserts the same figures either way."""

from __future__ import annotations

import gc
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsnap_magic import load_snapshot, session, wait_for_writes
from memsnap_magic.recording.backends.cpu.frames import STACK_BYTES
from memsnap_magic.recording.process_state import STATE
from memsnap_magic.results.stacks import frame_lines
from memsnap_magic.views.explain import blocks_table

MiB = 1 << 20


@pytest.fixture(params=["all", "none"], ids=["context=all", "context=none"])
def cpu(cpu, request):
    """The shell recording on the CPU (conftest's), with stacks and then without."""
    if request.param != "all":
        cpu.run_line_magic("memsnap", f"config context={request.param}")
    return cpu


# tests about stacks, and those that give context= themselves, run once (with the default)
ONCE = pytest.mark.parametrize("cpu", ["all"], indirect=True, ids=["context=all"])


def run(shell, cell: str) -> None:
    res = shell.run_cell(cell)
    assert res.success, res.error_in_exec


def test_memory_held_by_a_graph_stays_counted_until_released(cpu):
    # the classic leak: an autograd graph kept alive by a list, which no namespace walk can see
    run(
        cpu,
        "%%memsnap step=1\nhist = []\nx = torch.randn(1024, 1024, requires_grad=True)\nhist.append((x*2).exp().sum())",
    )
    run(cpu, "%%memsnap step=2\ny = torch.ones(256, 1024)")
    run(cpu, "%%memsnap step=3\nhist.clear()")
    one, two, three = session().intervals
    assert 8 * MiB <= one.kept < 8 * MiB + 1024  # x, exp's saved result, the loss and a scalar
    assert two.baseline_allocated == one.end_allocated and two.kept == 1 * MiB
    assert three.baseline_allocated == two.end_allocated
    assert three.peak_increase == 0 and three.kept < -4 * MiB
    assert three.end_allocated == 5 * MiB  # the graph went; x and y stay named
    assert (two.moved, three.moved) == (0, 0)


def test_memory_changed_between_recorded_cells_is_said(cpu):
    run(cpu, f"%%memsnap step=1\na = torch.ones({MiB})")
    run(cpu, f"b = torch.ones({MiB})")  # a plain cell: nothing follows it
    out = cpu.run_cell("%%memsnap step=2\nc = torch.ones(16)")
    assert out.success
    two = session().intervals[1]
    assert two.moved == 4 * MiB and two.moved_since == 1
    assert two.baseline_allocated == session().intervals[0].end_allocated + 4 * MiB


def test_tensors_in_closures_defaults_and_class_attributes_of_the_notebook_are_counted(cpu):
    # made in plain cells, so only a walk finds them: a cache in a class attribute, a closure
    # (a hook's captured tensor), a default; a function of another module is not looked into
    run(
        cpu,
        "class Cache:\n    store = []\n"
        "def make():\n    held = torch.ones(2**18)\n    return lambda: held\n"
        "def scaled(x, w=torch.ones(2**18)):\n    return x * w\n"
        "def elsewhere(w=torch.ones(2**20)):\n    return w\n"
        "elsewhere.__module__ = 'some_library'",
    )
    run(cpu, "%%memsnap step=1\nk = 1")
    run(cpu, "Cache.store.append(torch.ones(2**18)); f = make()")
    run(cpu, "%%memsnap step=2\nk = 2")
    run(cpu, "%%memsnap step=3\nCache.store.clear(); del f")
    one, two, three = session().intervals
    assert one.baseline_allocated == 1 * MiB  # the default of scaled, not that of elsewhere
    assert two.moved == 2 * MiB and two.baseline_allocated == 3 * MiB
    assert three.kept == -2 * MiB and three.end_allocated == 1 * MiB


def test_a_tensor_captured_by_a_module_hook_is_counted(cpu):
    # the hook is held only by the module (register_forward_hook): no name of the namespace holds it
    run(
        cpu,
        "lin = torch.nn.Linear(2, 2)\n"
        "def make(n):\n    buf = torch.ones(n)\n    return lambda m, i, o: buf\n"
        "h = lin.register_forward_hook(make(2**18))\n"
        "p = lin.register_forward_pre_hook(make(2**19))\n"
        "def deeper():\n    held = {'x': torch.ones(2**17)}\n    return lambda m, i, o: held\n"
        "d = lin.register_forward_hook(deeper())",  # what a name's function holds, as deep
    )
    run(cpu, "%%memsnap step=1\nh.remove()")
    run(cpu, "%%memsnap step=2\np.remove(); d.remove()")
    one, two = session().intervals
    params = 4 * (2 * 2 + 2)
    assert one.baseline_allocated == 3 * MiB + MiB // 2 + params and one.kept == -MiB
    assert two.baseline_allocated == 2 * MiB + MiB // 2 + params and two.kept == -2 * MiB - MiB // 2


def test_a_modules_plain_tensor_attributes_are_counted_and_its_own_methods_never_run(cpu):
    run(
        cpu,
        "calls = []\n"
        "class PE(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = torch.nn.Linear(256, 256, bias=False)\n"  # 256 KiB, a submodule's parameter
        "        self.pe = torch.ones(2**18)\n"  # 1 MiB, a plain attribute: no parameter, no buffer
        "    def parameters(self, recurse=True):\n"
        "        calls.append('parameters'); return super().parameters(recurse)\n"
        "    def named_modules(self, *a, **k):\n"
        "        calls.append('named_modules'); return super().named_modules(*a, **k)\n"
        "m = PE()",
    )
    run(cpu, "%%memsnap step=1\nk = 1")
    assert session().intervals[0].baseline_allocated == 1 * MiB + 256 * 1024
    run(cpu, "m.pe = torch.ones(2**19); seen = list(calls)")  # replaced in a plain cell
    run(cpu, "%%memsnap step=2\nk = 2")
    assert session().intervals[1].moved == 1 * MiB
    assert cpu.user_ns["calls"] == cpu.user_ns["seen"] == []


def test_private_names_and_what_a_module_keeps_are_counted(cpu):
    # a name starting with _, a module's _private tensor, and a list a module keeps (a KV cache)
    run(cpu, f"_scratch = torch.empty({MiB}, dtype=torch.uint8)")
    run(
        cpu,
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        f"        self._mask = torch.empty({2 * MiB}, dtype=torch.uint8)\n"
        f"        self.cache = [torch.empty({4 * MiB}, dtype=torch.uint8)]\n"
        "        self.meta = {'k': {'v': torch.empty(" + str(MiB) + ", dtype=torch.uint8)}}\n"
        "net = Net()",
    )
    run(cpu, "%%memsnap step=1\npass")
    run(cpu, "%%memsnap step=2\ndel _scratch\nnet._mask = None\nnet.cache.clear()\nnet.meta.clear()")
    one, two = session().intervals
    assert one.baseline_allocated == 8 * MiB
    assert two.baseline_allocated == one.end_allocated and not two.moved
    assert two.kept == -8 * MiB and two.peak_allocated == two.baseline_allocated


@pytest.mark.parametrize("recorded_before", [False, True])
def test_a_graph_made_while_nothing_recorded_is_in_the_start(cpu, recorded_before):
    # the loss is computed in a plain cell (before any recorded one, or between two) and its
    # backward recorded: exp() saved its 1 MiB result, which the backward frees
    run(cpu, f"w = torch.ones({MiB // 4}, requires_grad=True)")  # 1 MiB leaf
    if recorded_before:
        run(cpu, "%%memsnap step=1\nx = torch.empty(4096, dtype=torch.uint8)")
    run(cpu, "loss = w.exp().sum()")
    run(cpu, "%%memsnap step=2\nloss.backward()")
    two = session().intervals[-1]
    named = 2 * MiB + 4 + (4096 if recorded_before else 0)  # w, the saved result, the loss (and x)
    assert two.baseline_allocated == named and two.kept == 0  # the saved result went, w.grad came
    if recorded_before:
        assert two.moved == MiB + 4


def test_graphs_changed_by_plain_cells_are_followed(cpu):
    n = MiB // 4  # 1 MiB of float32
    # a plain cell grows a graph on a tensor the last step ended with (no new storage in sight)
    run(cpu, "x = torch.randn(64, 1024); w = torch.randn(1024, 1024, requires_grad=True)")
    run(cpu, "%%memsnap step=1\nacc = torch.zeros(1024)")
    run(cpu, "acc += torch.relu(x @ w).mean(0)")  # saves relu's 256 KiB output
    run(cpu, "%%memsnap step=2\nacc.sum().backward()")  # frees it, makes w.grad (4 MiB)
    _, two = session().intervals
    assert two.moved == 256 * 1024 and two.kept == 4 * MiB - 256 * 1024
    # a backward run in a plain cell on a graph a recorded one made: the leaf's new gradient,
    # reachable only through the graph, is in the next start
    run(cpu, f"%%memsnap step=3\nloss = torch.ones({n}, requires_grad=True).exp().sum()")
    run(cpu, "loss.backward()")
    run(cpu, "%%memsnap step=4\ndel loss")  # frees the leaf, its gradient and the loss
    three, four = session().intervals[2:]
    assert four.baseline_allocated == three.end_allocated  # -1 MiB saved, +1 MiB gradient
    assert four.kept == -(2 * MiB + 4) and not four.moved


def test_a_silent_execution_counts_as_code_run_between_cells(cpu):
    # a frontend's silent execute request (a variable inspector's) fires no pre_run_cell
    k = MiB // 4
    run(cpu, f"w = torch.randn({k}, requires_grad=True)")
    run(cpu, "%%memsnap step=1\nh = w * 1.0")
    assert cpu.run_cell(f"h.mul_(torch.randn({k}))", silent=True).success  # its graph saves 1 MiB
    run(cpu, "%%memsnap step=2\nh.sum().backward()")  # frees it, makes w.grad
    two = session().intervals[-1]
    assert two.moved == MiB and abs(two.kept) < 1024


def test_a_graphs_leaf_gradient_is_counted_and_followed(cpu):
    n = MiB // 4
    run(cpu, f"loss = torch.ones({n}, requires_grad=True).exp().sum()\nloss.backward()")  # leaf + grad + 4 B
    run(cpu, "%%memsnap step=1\ndel loss")
    (one,) = session().intervals
    assert one.baseline_allocated == 2 * MiB + 4 and one.kept == -(2 * MiB + 4)
    run(cpu, f"%%memsnap step=2\nloss = torch.ones({n}, requires_grad=True).exp().sum()\nloss.backward()")
    run(cpu, "loss = None")  # a plain cell frees all of it
    run(cpu, "%%memsnap step=3\npass")
    two, three = session().intervals[1:]
    assert three.baseline_allocated == two.end_allocated - (2 * MiB + 4) and three.moved == -(2 * MiB + 4)


def test_what_a_steps_loop_made_after_its_last_listed_step_is_followed(cpu):
    run(
        cpu,
        f"%%memsnap steps=1\nmark(1)\na = torch.empty({MiB}, dtype=torch.uint8)\n"
        f"mark(2)\nb = torch.empty({MiB}, dtype=torch.uint8)",  # step 2 is not recorded
    )
    run(cpu, "del b")  # a plain cell frees what the unrecorded step made
    run(cpu, "%%memsnap step=3\npass")
    one, three = session().intervals
    assert three.baseline_allocated == one.end_allocated == MiB and not three.moved


def test_back_to_back_cells_do_not_look_into_graphs_at_their_start(cpu, monkeypatch):
    from memsnap_magic.recording.backends.cpu import backend as cpu_route

    walks = []  # the start's walks (the end's own graph walk, for carried blocks, is another matter)
    real = cpu_route.CpuBackend._walk_start
    monkeypatch.setattr(
        cpu_route.CpuBackend,
        "_walk_start",
        lambda self, names, graphs: walks.append(graphs) or real(self, names, graphs),
    )
    run(cpu, "import numpy as np\nm = torch.nn.Linear(64, 64); loss = m(torch.ones(2, 64)).sum(); loss.backward()")
    run(cpu, "a = torch.from_numpy(np.ones(4096))")  # memory PyTorch did not allocate: never carried
    run(cpu, "%%memsnap step=1\nk = 1")
    assert True in walks  # something new since nothing was recorded: its graphs are looked into
    walks.clear()
    run(cpu, "%%memsnap step=2\nk = 2")
    assert True not in walks  # nothing new: the walk is the cheap one


def test_a_block_at_an_address_a_watched_one_had_stays_counted(cpu):
    # the allocator hands a freed block's address to the next block of its size: the new one,
    # which no walk reaches, must not be taken for the old
    for n in range(4):
        run(cpu, f"%%memsnap step={3 * n + 1}\na = torch.empty(2**14)")  # 64 KiB, watched at the end
        # at a's address, mostly; a dunder name is the interpreter's: not walked
        run(cpu, f"%%memsnap step={3 * n + 2}\ndel a\n__b{n}__ = torch.empty(2**14)")
        run(cpu, f"%%memsnap step={3 * n + 3}\nc = 1")
    ivs = session().intervals
    for before, after in zip(ivs, ivs[1:]):
        assert after.baseline_allocated == before.end_allocated and not after.moved, after.step


def test_a_full_ring_claims_no_move_of_the_start(cpu):
    run(cpu, "%%memsnap step=1\na = torch.ones(16)")
    run(cpu, "%%memsnap step=2 max_entries=3\nl = [torch.ones(1000) for _ in range(10)]")
    two = session().intervals[1]
    assert two.overflowed and two.moved is None  # its baseline is where the kept window starts


def test_steps_after_unrecorded_steps_are_exact(cpu):
    # a buffer replaced every step: allocated in an unrecorded step, freed in a recorded one
    loop = (
        "for step in range(1, 6):\n"
        "    mark(step)\n"
        "    buf = torch.empty(2 * 2**20, dtype=torch.uint8)\n"
        "    tmp = torch.empty(8 * 2**20, dtype=torch.uint8)\n"
        "    del tmp\n"
    )
    run(cpu, "%%memsnap steps=1,3,5\n" + loop)
    run(cpu, "%%memsnap step=9\n" + loop.split("mark(step)\n", 1)[1].replace("    ", ""))
    by_step = {iv.step: iv for iv in session().intervals}
    assert sorted(by_step) == [1, 3, 5, 9]
    for step in (3, 5, 9):  # the same work: the same figures, whether or not the step before was recorded
        iv = by_step[step]
        assert (iv.baseline_allocated, iv.peak_increase, iv.kept) == (2 * MiB, 8 * MiB, 0), step
    assert STATE.recording_devices() == []  # the followed gaps are closed too


_OPS = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 3), st.integers(1, 64)),
    st.tuples(st.just("drop"), st.integers(0, 3)),
    st.tuples(st.just("hold"), st.integers(1, 64)),
    st.tuples(st.just("release")),
    st.tuples(st.just("temp"), st.integers(1, 64)),
)


def _code(op: tuple) -> str:
    kind = op[0]
    if kind == "new":
        return f"v{op[1]} = torch.empty({op[2] * 1024}, dtype=torch.uint8)"
    if kind == "drop":
        return f"v{op[1]} = None"
    if kind == "hold":  # a graph only the hidden list reaches
        return f"hidden.append((torch.ones({op[1] * 256}, requires_grad=True) * 2).exp().sum())"
    if kind == "release":
        return "hidden.clear()"
    return f"_t = torch.empty({op[1] * 1024}, dtype=torch.uint8); del _t"


@given(st.lists(st.lists(_OPS, min_size=1, max_size=4), min_size=2, max_size=5))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_each_recorded_cell_starts_where_the_last_one_ended(cpu, cells):
    STATE.reset()
    run(cpu, "hidden = []\nv0 = v1 = v2 = v3 = None")
    for n, ops in enumerate(cells, start=1):
        run(cpu, f"%%memsnap step={n}\n" + "\n".join(map(_code, ops)))
    intervals = session().intervals
    for before, after in zip(intervals, intervals[1:]):
        assert after.baseline_allocated == before.end_allocated
        assert after.moved == 0
    for iv, ops in zip(intervals, cells):
        if all(op[0] in ("drop", "release") for op in ops):  # a cell that only lets go
            assert iv.peak_increase == 0 and iv.kept <= 0


def test_memory_freed_between_recorded_cells_leaves_the_start(cpu):
    # frees while nothing records: a model rebound, names deleted, a list let go in plain cells
    run(cpu, "x = torch.randn(64, 1024)\nmodel = torch.nn.Linear(1024, 1024)")
    run(cpu, "%%memsnap step=1\ny = model(x)")
    run(cpu, "model = torch.nn.Linear(1024, 1024)")  # the old weights live on in y's graph
    run(cpu, "%%memsnap step=2\ny = model(x)")  # ... until y is replaced here
    run(cpu, "del model, y")
    run(cpu, "%%memsnap step=3\nz = torch.ones(10)")
    run(cpu, "big = [torch.zeros(1024, 1024) for _ in range(3)]")
    run(cpu, "%%memsnap step=4\nz = torch.ones(10)")
    run(cpu, "big = None")
    run(cpu, "%%memsnap step=5\nz = torch.ones(10)")
    x, linear, y = 256 * 1024, 4 * MiB + 4096, 256 * 1024
    one, two, three, four, five = session().intervals
    assert (one.baseline_allocated, one.end_allocated) == (x + linear, x + linear + y)
    assert (two.baseline_allocated, two.moved) == (x + 2 * linear + y, linear)
    assert two.end_allocated == x + linear + y  # the old weights went with the old y
    assert (three.baseline_allocated, three.moved) == (x, -(linear + y))
    assert (four.baseline_allocated, four.moved) == (x + 40 + 12 * MiB, 12 * MiB)
    assert (five.baseline_allocated, five.moved) == (x + 40, -12 * MiB)


@pytest.mark.parametrize(
    "make",
    [
        "held = torch.ones(2**18).numpy()",  # a view whose tensor has no other name
        "held = torch.sparse_coo_tensor(torch.arange(2**16).unsqueeze(0), torch.ones(2**16), (2**16,))",
        "held = torch.ones(256, 256).to_sparse_csr()",
        "held = torch.nested.nested_tensor([torch.ones(2**16), torch.ones(2**15)], layout=torch.jagged)",
        "import collections\nheld = collections.deque([torch.ones(2**18)])",
        "import dataclasses\n@dataclasses.dataclass(slots=True)\nclass Box:\n    t: object\n"
        "held = Box(torch.ones(2**18))",
    ],
    ids=["numpy-view", "sparse-coo", "sparse-csr", "nested-jagged", "deque", "slots"],
)
def test_tensors_in_every_kind_of_holder_are_followed_out_of_the_namespace(cpu, make):
    run(cpu, make.replace("held =", "_warm ="))  # imports done unrecorded (nested: torch._dynamo, seconds)
    run(cpu, "del _warm")
    run(cpu, f"%%memsnap step=1\n{make}")
    run(cpu, "del held\nimport gc\ngc.collect()")  # what step 1 kept is freed where nothing records
    run(cpu, "%%memsnap step=2\npass")
    one, two = session().intervals
    assert one.kept >= 2**18
    assert (two.baseline_allocated, two.moved) == (one.baseline_allocated, -one.kept)  # said, not counted on


_PLAIN_OPS = st.one_of(
    st.tuples(st.just("new"), st.integers(0, 3), st.integers(1, 64)),
    st.tuples(st.just("drop"), st.integers(0, 3)),
    st.tuples(st.just("stash"), st.integers(0, 3)),
    st.tuples(st.just("unstash")),
)
_MEASURE = (  # every CPU tensor object in the process, by storage: what a walk cannot miss
    "def _measure():\n"
    "    import gc\n"
    "    gc.collect()  # what the collector would free at a random moment, freed now\n"
    "    live = {}\n"
    "    for o in gc.get_objects():\n"
    "        if issubclass(type(o), torch.Tensor) and o.device.type == 'cpu':\n"
    "            s = o.untyped_storage()\n"
    "            live[s.data_ptr()] = s.nbytes()\n"
    "    return sum(live.values())\n"
)


def _within_reach(cells: list) -> list:
    """The cells without the stashes the CPU route cannot follow: a tensor put out of every
    walk's reach before any walk saw it (allocated in a plain cell, or in the same recorded
    cell) lives and dies unseen. Everything else it follows exactly."""

    def reachable(ops: list) -> list:
        seen = [True] * 4  # v0..v3: whether a walk saw the tensor the name holds (each cell starts after one)
        kept = []
        for op in ops:
            if op[0] == "stash" and not seen[op[1]]:
                continue
            if op[0] == "new":
                seen[op[1]] = False
            kept.append(op)
        return kept

    # a recorded cell's start and end walk every name
    return [(reachable(plain), reachable(recorded) or [("temp", 1)]) for plain, recorded in cells]


def _plain(op: tuple) -> str:
    if op[0] == "stash":  # out of the walk's reach (it skips functions), still alive
        return f"_box().append(v{op[1]})\nv{op[1]} = None"
    if op[0] == "unstash":
        return "_box().clear()"
    return _code(op)


@given(
    st.lists(
        st.tuples(st.lists(_PLAIN_OPS, max_size=3), st.lists(st.one_of(_OPS, _PLAIN_OPS), min_size=1, max_size=3)),
        min_size=2,
        max_size=4,
    )
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_start_moves_by_what_plain_cells_did(cpu, cells):
    # each sequence from a fresh session: nothing of the last one's left to be freed during this one
    cpu.reset(new_session=False)
    gc.collect()
    STATE.reset()
    run(cpu, "import torch\nhidden = []\nv0 = v1 = v2 = v3 = None\n_box = (lambda b: lambda: b)([])\n" + _MEASURE)
    cells = _within_reach(cells)
    measured = []  # (before the plain cell, after it, after the recorded cell)
    for n, (plain, recorded) in enumerate(cells, start=1):
        m0 = cpu.run_cell("_measure()").result
        run(cpu, "\n".join(map(_plain, plain)) or "pass")
        m1 = cpu.run_cell("_measure()").result
        run(cpu, f"%%memsnap step={n}\n" + "\n".join(map(_plain, recorded)))
        measured.append((m0, m1, cpu.run_cell("_measure()").result))
    intervals = session().intervals
    for n, (iv, (_, recorded), (m0, m1, m2)) in enumerate(zip(intervals, cells, measured)):
        if n:
            assert iv.moved == m1 - m0, (n, cells)
            assert iv.baseline_allocated == intervals[n - 1].end_allocated + iv.moved
        if not any(op[0] in ("hold", "release") for op in recorded):  # no graph the measure cannot see
            assert iv.kept == m2 - m1, (n, cells)


@ONCE
def test_allocations_carry_the_python_stack_that_made_them(cpu):
    # numbered as a notebook numbers them (store_history), so the labels can be checked
    defined = cpu.run_cell("def grow(n):\n    big = torch.ones(n, 1024)\n    return big * 2\n", store_history=True)
    recorded = cpu.run_cell("%%memsnap step=1\nsmall = torch.ones(4)\nkeep = grow(512)", store_history=True)
    assert defined.success and recorded.success and recorded.execution_count == defined.execution_count + 1
    iv = session().intervals[0]
    wait_for_writes()
    snap = pickle.loads(iv.path.read_bytes())
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert all("frames" not in e for e in allocs if e["size"] < STACK_BYTES)
    big = [e for e in allocs if e["size"] >= STACK_BYTES]
    assert [e["size"] for e in big] == [2 * MiB, 2 * MiB]
    ones, product = big[0]["frames"], big[1]["frames"]
    # torch.ones is a C function called from Python: its own line. ``big * 2`` calls none, so the
    # allocation sits in grow's call: grow's def line. Outer frames: the line that made each call.
    assert [(f["name"], f["line"]) for f in ones[:2]] == [("grow", 2), ("<module>", 3)]  # cell lines
    assert [(f["name"], f["line"]) for f in product[:2]] == [("grow", 1), ("<module>", 3)]
    assert ones[0]["filename"] == product[0]["filename"] != ones[1]["filename"]  # two cells
    # in the dashboard: the user's lines first, ours (the magic running the cell) left out
    rows = {b["size"]: frame_lines(b["frames"]) for b in iv.top_blocks}
    cell = ones[1]["filename"]
    # each cell by the number the user sees beside it
    assert rows[2 * MiB][:2] == [
        f"grow (cell In[{defined.execution_count}]:1)",
        f"<module> (cell In[{recorded.execution_count}]:3)",
    ]
    assert all("memsnap_magic" not in r for r in rows[2 * MiB])
    assert cell.startswith("<ipython-input-")
    assert "records stacks of allocations of 1.0 KiB or more" in blocks_table(iv)


@ONCE
def test_allocations_made_on_one_line_share_its_frame_dicts_as_pytorch_shares_them(cpu):
    # each call of grow is a new node of the tracer's tree: its frames are still one dict a line
    run(cpu, "def grow(n):\n    return torch.ones(n, 1024)\n")
    run(cpu, "%%memsnap step=1\nkept = []\nfor _ in range(3):\n    kept.append(grow(256))")
    iv = session().intervals[0]
    wait_for_writes()
    snap = pickle.loads(iv.path.read_bytes())
    big = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["size"] >= STACK_BYTES]
    assert len(big) == 3
    stacks = [e["frames"] for e in big]
    assert [(f["name"], f["line"]) for f in stacks[0][:2]] == [("grow", 2), ("<module>", 4)]
    for depth in (0, 1):  # the same frame, the same dict: the file writes it once
        assert len({id(s[depth]) for s in stacks}) == 1
    assert stacks[1] == stacks[0] and stacks[2] == stacks[0]


@ONCE
def test_blocks_carried_into_the_next_step_keep_their_stacks(cpu):
    run(cpu, "def make():\n    return torch.ones(2**18)\n")
    run(cpu, "%%memsnap step=1\nhist = [make().requires_grad_().exp().sum()]")
    run(cpu, "%%memsnap step=2\nother = torch.ones(2**18)")
    two = session().intervals[1]
    held = [b for b in two.top_blocks if b.get("before") and b["size"] == MiB]
    assert held and all(frame_lines(b["frames"]) for b in held)


@ONCE
def test_context_none_records_no_stacks(cpu):
    run(cpu, "%%memsnap step=1 context=none\nbig = torch.ones(2**18)")
    iv = session().intervals[0]
    assert iv.context == "none"
    assert all(not b.get("frames") for b in iv.top_blocks)
    assert "context=none" in blocks_table(iv)


def test_the_block_table_dates_and_groups_what_earlier_steps_left(cpu):
    from memsnap_magic.views.dashboard import Dashboard

    run(cpu, "hold = []\ndef grow():\n    hold.append(torch.empty(2**22))\n")  # 16 MiB each
    run(cpu, "%%memsnap step=1\nw = torch.ones(2**18)")  # 1 MiB, not from grow
    for step in (2, 3, 4):
        run(cpu, f"%%memsnap step={step}\ngrow()")
    run(cpu, "%%memsnap step=5\ngrow()\ntmp = torch.empty(2**20); del tmp")
    d = Dashboard()
    d.step.value = 4  # step 5
    table = d.blocks.value
    rows = table.split("<tr>")[2:]
    (held,) = [r for r in rows if ">3 × 16.0 MiB<" in r]  # one row for the three, dated
    (new,) = [r for r in rows if ">16.0 MiB<" in r]
    assert ">steps 2–4<" in held and ">this step<" in new
    stacks = session().intervals[-1].context != "none"  # the site, where stacks were recorded
    assert ("grow (cell In[" in held) is stacks and ("grow (cell In[" in new) is stacks
    assert any(">1.0 MiB<" in r and ">step 1<" in r for r in rows)


@ONCE
def test_a_table_without_any_stack_drops_the_column(cpu):
    from memsnap_magic.views.explain import blocks_table

    run(cpu, "%%memsnap step=1 context=none\nbig = torch.ones(2**18)")
    table = blocks_table(session().intervals[0])
    assert "allocated by" not in table and "no stack (" not in table
    assert "no stacks: recorded with context=none" in table


def test_the_process_resident_memory_is_kept_beside_the_trace(tmp_path):
    import torch

    from memsnap_magic import Recorder
    from memsnap_magic.files.snapshot import load_snapshot
    from memsnap_magic.views.explain import usage_line

    with Recorder(device="cpu", out=tmp_path, step=2, namespace={}, wait=True):
        x = torch.ones(16 << 20)  # noqa: F841  64 MiB: past glibc's largest mmap threshold, fresh pages
    (iv,) = session().intervals
    assert iv.usage_start["rss"] > 0 and iv.usage_end["rss"] >= iv.usage_start["rss"] + (32 << 20)
    assert usage_line(iv).startswith("process resident memory at the step's end: ")
    entries = load_snapshot(iv.path)["device_traces"][0]
    assert {e["user_metadata"] for e in entries} == {"memsnap step 2"}


def test_accelerator_only_options_are_refused_on_the_cpu(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"compile_context=: only accelerators record that"):
        shell.run_cell("%%memsnap device=cpu compile_context=true\nran = 1").raise_error()
    assert "ran" not in shell.user_ns


def test_the_walk_never_unpacks_saved_tensors(cpu):
    # a checkpointed forward is recomputed by its unpack hook: reading the graph must not run it
    run(
        cpu,
        "from torch.utils.checkpoint import checkpoint\n"
        "bn = torch.nn.BatchNorm1d(4); lin = torch.nn.Linear(4, 4)\n"
        "x = (torch.randn(8, 4) + 5).requires_grad_()\n"
        "calls = []\n"
        "def block(t):\n    calls.append(1)\n    return bn(lin(t))",
    )
    run(cpu, "%%memsnap step=1\nout = checkpoint(block, x, use_reentrant=False).sum()")
    run(cpu, "%%memsnap step=2\nkept = [out]\ndel out")  # a graph no name reaches directly
    assert cpu.user_ns["calls"] == [1] and int(cpu.user_ns["bn"].num_batches_tracked) == 1
    # hooks that hand their tensor out once: the user's backward still gets it
    run(
        cpu,
        "store = {}\n"
        "def pack(t):\n    store[len(store)] = t\n    return len(store) - 1\n"
        "def unpack(k):\n    return store.pop(k)",
    )
    run(
        cpu,
        "%%memsnap step=3\nwith torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n"
        "    loss = (x * 3).sin().sum()\nlosses = [loss]\ndel loss",
    )
    run(cpu, "%%memsnap step=4\ny = torch.ones(16)")
    run(cpu, "losses[0].backward()")
    assert cpu.user_ns["x"].grad is not None


def test_the_walk_runs_none_of_the_users_code(cpu):
    run(
        cpu,
        "calls = []\n"
        "class Proxy:\n    __slots__ = ('t',)\n"
        "    def __init__(self): self.t = torch.ones(8)\n"
        "    def __getattr__(self, name):\n        calls.append('getattr ' + name); raise AttributeError(name)\n"
        "class D(dict):\n    def values(self):\n        calls.append('values'); return super().values()\n"
        "class L(list):\n    def __iter__(self):\n        calls.append('iter'); return super().__iter__()\n"
        "class Prop:\n    @property\n    def __dict__(self):\n        calls.append('prop __dict__'); return {}\n"
        "class T(torch.Tensor):\n    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        calls.append('torch_function')\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n"
        "class Name(str):\n    def __eq__(self, other):\n        calls.append('eq'); return True\n"
        "    __hash__ = str.__hash__\n"
        "class Meta(type):\n    def __getattribute__(cls, name):\n"
        "        calls.append('meta ' + name); return type.__getattribute__(cls, name)\n"
        "class Odd(metaclass=Meta):\n    kept = torch.ones(4)\n"
        "class Hashing(type):\n    def __hash__(cls):\n        calls.append('hash'); return 1\n"
        "    def __eq__(cls, other):\n        calls.append('eq'); return cls is other\n"
        "class Held(metaclass=Hashing):\n    pass\n"
        "held = Held(); held.t = torch.ones(4)\n"
        "class Key(str):\n    def startswith(self, *a):\n        calls.append('startswith'); return False\n"
        "    __hash__ = str.__hash__\n"
        "globals()[Key('keyed')] = torch.ones(4)\n"
        "def named(w=torch.ones(4)):\n    return w\n"
        "named.__module__ = Name('x')\n"
        "p, d, l, q = Proxy(), D(a=torch.ones(4)), L([torch.ones(4)]), Prop()\n"
        "t = torch.ones(1024).as_subclass(T)\n"
        "calls.clear()",
    )
    run(cpu, "%%memsnap step=1\npass")
    assert cpu.user_ns["calls"] == []
    # and what the containers hold is still found: the start holds their tensors
    assert session().intervals[0].path is not None
    assert session().intervals[0].baseline_allocated >= 4096 + 16 * 5  # Odd.kept, held.t, keyed too


@ONCE
def test_a_profile_hook_of_the_users_keeps_running(cpu):
    run(
        cpu,
        "import sys\nseen = []\n"
        "def hook(frame, event, arg):\n    if event == 'call' and frame.f_code.co_name == 'mine': seen.append(1)\n"
        "def mine(): return torch.ones(4)",
    )
    run(cpu, "sys.setprofile(hook)")
    with pytest.warns(RuntimeWarning, match=r"profile hook is on \(sys.setprofile: hook\)"):
        run(cpu, "%%memsnap step=1\nmine()")
    run(cpu, "sys.setprofile(None); after = sys.getprofile()")
    assert cpu.user_ns["seen"] == [1] and cpu.user_ns["after"] is None
    assert session().intervals[0].path is not None
    # one set inside the cell outlives the tracer's end, as it would without the magic
    run(cpu, "%%memsnap step=2\nsys.setprofile(hook)")
    run(cpu, "kept = sys.getprofile(); sys.setprofile(None)")
    assert cpu.user_ns["kept"] is cpu.user_ns["hook"]


def test_a_chained_cells_value_does_not_keep_the_namespace_alive(cpu):
    run(cpu, "import weakref, gc")
    run(cpu, "%%memsnap step=1 clear=false\nbig = torch.empty(2**20, dtype=torch.uint8); rb = weakref.ref(big)\n1")
    run(cpu, "del big; gc.collect(); gone = rb() is None")
    assert cpu.user_ns["gone"]
    run(cpu, "%memsnap off")


def test_the_first_recorded_step_frees_what_was_made_before_recording_when_it_died(cpu):
    # gradients from an unrecorded warm-up step: the profiler never reports their frees
    run(
        cpu,
        "model = torch.nn.Linear(1024, 1024); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = torch.randn(8, 1024)\n"
        "def train_step():\n    opt.zero_grad(); model(x).sum().backward(); opt.step()\n"
        "train_step()",
    )
    for step in (1, 2, 3):
        run(cpu, f"%%memsnap step={step}\ntrain_step()")
    one, two, three = session().intervals
    assert one.peak_increase == two.peak_increase == three.peak_increase < 64 * 1024
    assert one.freed_unseen is None and one.kept == 0
    run(cpu, f"t = torch.ones({MiB})")  # made unrecorded, freed inside the next recorded cell
    run(cpu, f"%%memsnap step=4\ndel t\nu = torch.ones({3 * MiB // 4})")
    four = session().intervals[-1]
    assert four.peak_increase == 0 and four.kept == -MiB


def test_a_free_no_event_dates_makes_the_peak_a_stated_bound(cpu):
    from memsnap_magic.views.explain import caveats
    from memsnap_magic.views.report import describe

    run(cpu, f"t = torch.ones({MiB})")
    run(cpu, f"%%memsnap step=1\nt.resize_({4 * MiB})")  # the storage lives on; its old block is gone
    (one,) = session().intervals
    assert one.freed_unseen == 4 * MiB and one.kept == 12 * MiB
    assert "peak may count 4.0 MiB freed unseen" in describe(one)
    assert any("the peak is an upper bound" in c for c in caveats(one))
    wait_for_writes()
    with open(one.path, "rb") as f:
        assert pickle.load(f)["memsnap"]["freed_unseen"] == 4 * MiB


def test_memory_pytorch_did_not_allocate_never_moves_the_start(cpu):
    run(cpu, "import numpy as np")
    run(cpu, "%%memsnap step=1\nw = torch.from_numpy(np.ones(1 << 18, dtype=np.float32))\nz = torch.ones(100) * 2")
    run(cpu, "%%memsnap step=2\nq = torch.ones(10)")
    run(cpu, "%%memsnap step=3\ndel w\nq2 = torch.ones(10)")
    one, two, three = session().intervals
    assert (two.moved, three.moved) == (0, 0)
    assert two.baseline_allocated == one.end_allocated and three.baseline_allocated == two.end_allocated


def test_the_steps_between_listed_ones_are_followed_not_said_to_move_the_start(cpu):
    run(cpu, "held = []")
    run(cpu, "%%memsnap steps=2,4\nfor step in range(1, 5):\n    mark(step)\n    held.append(torch.ones(1 << 18))")
    two, four = session().intervals
    assert four.baseline_allocated == two.end_allocated + MiB  # step 3's tensor, followed
    assert not four.moved


def test_a_clear_false_history_marks_each_entry_with_its_own_step_and_says_where_it_counts_from(cpu, capsys):
    run(cpu, "keep = []")
    run(cpu, "%%memsnap step=8 clear=false\nkeep.append(torch.ones(1 << 18))")
    run(cpu, "%%memsnap step=9 clear=false\nt = torch.ones(10)")
    run(cpu, "%%memsnap step=10\nu = torch.ones(12)")
    lines = capsys.readouterr().out.splitlines()
    assert "kept +1.0 MiB · " in lines[0] and "clear=false" not in lines[0]
    assert all("kept +1.0 MiB (from step 8's start: clear=false)" in line for line in lines[1:3])
    wait_for_writes()
    with open(session().intervals[-1].path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    marks = [(e["size"], e["user_metadata"]) for e in trace if e["action"] == "alloc"]
    assert marks == [(MiB, "memsnap step 8"), (40, "memsnap step 9"), (48, "memsnap step 10")]
    run(cpu, "%%memsnap step=11\nv = torch.ones(4)")  # the chain ended: a history of its own
    assert "clear=false" not in capsys.readouterr().out


def test_the_table_of_a_chain_step_dates_what_its_earlier_steps_made(cpu):
    run(cpu, "keep = []\ndef leaky():\n    keep.append(torch.ones(1 << 18))")
    run(cpu, "%%memsnap step=12 clear=false\nleaky()")
    run(cpu, "%%memsnap step=13\nt = torch.ones(1 << 17)")
    thirteen = session().intervals[-1]
    rows = blocks_table(thirteen).split("<tr>")
    (kept,) = [r for r in rows if ">1.0 MiB<" in r]
    assert ">step 12<" in kept and "this step" not in kept
    (mine,) = [r for r in rows if ">512.0 KiB<" in r]
    assert ">this step<" in mine


def test_a_scripts_recorder_follows_the_locals_of_the_function_running_it(tmp_path):
    """``main()`` keeps the last step's tensor in a local and lets the one before go between
    blocks: each start is what the function holds, and says it moved."""
    import torch

    from memsnap_magic import Recorder

    def main():
        keep = None
        for step in range(1, 5):
            with Recorder(step=step, device="cpu", out=tmp_path):
                new = torch.empty((step + 1) * 2**18, dtype=torch.uint8)  # 512K, 768K, 1M, 1.25M
            keep = new  # the previous step's tensor is freed here, between blocks
            del new
        return keep

    main()
    sizes = [(step + 1) * 2**18 for step in range(1, 5)]
    starts = [0, *sizes[:-1]]
    assert [iv.baseline_allocated for iv in session().intervals] == starts
    assert [iv.end_allocated for iv in session().intervals] == [s + n for s, n in zip(starts, sizes)]
    assert [iv.moved for iv in session().intervals][2:] == [-sizes[0], -sizes[1]]


def test_a_scripts_recorder_keeps_no_local_alive(tmp_path):
    """Reading a running function's locals must not pin them (Python 3.11 keeps a copy in the
    frame), nor may a recorder keep the frame of the function that made it once it returned."""
    import weakref

    import torch

    from memsnap_magic import Recorder

    def main():
        big = torch.ones(2**20)
        alive = weakref.ref(big)
        with Recorder(step=1, device="cpu", out=tmp_path):
            torch.ones(10)
        del big  # after the block: freed here, as without the recorder
        return alive() is None

    def made_in_a_helper():
        held = torch.ones(2**20)
        return Recorder(step=2, device="cpu", out=tmp_path), weakref.ref(held)

    assert main()
    recorder, held = made_in_a_helper()
    assert held() is None  # the helper returned: its locals are gone
    with recorder:
        torch.ones(10)


@pytest.mark.parametrize("where", ["in the chain's first step", "in a plain cell between its steps"])
def test_a_never_cleared_history_does_not_bring_back_what_it_freed_of_the_start(cpu, where):
    """A block from before recording, freed in a clear=false step, stayed live in the chain's
    next file and in every later step's start (the watch had forgotten it); freed in a plain
    cell between two steps (right before too), it must stay right."""
    E = 10 * MiB
    run(cpu, f"a = torch.empty({E}, dtype=torch.uint8); b = torch.empty({3 * MiB}, dtype=torch.uint8)")
    if where == "in the chain's first step":
        run(cpu, f"%%memsnap step=1 clear=false\ndel a\nc = torch.empty({MiB}, dtype=torch.uint8)")
    else:
        run(cpu, f"%%memsnap step=1 clear=false\nc = torch.empty({MiB}, dtype=torch.uint8)")
        run(cpu, "del a")
    run(cpu, f"%%memsnap step=2 clear=false\nd = torch.empty({2 * MiB}, dtype=torch.uint8)")
    run(cpu, f"%%memsnap step=3\ne = torch.empty({4 * MiB}, dtype=torch.uint8); del e")
    run(cpu, "%%memsnap step=4\nx = 1")
    _, two, three, four = session().intervals
    assert two.end_allocated == three.end_allocated == 6 * MiB  # b, c and d
    assert three.peak_allocated == (14 if where == "in a plain cell between its steps" else 13) * MiB
    assert four.baseline_allocated == four.end_allocated == 6 * MiB and not four.moved
    snap = load_snapshot(three.path)
    live = sum(b["requested_size"] for seg in snap["segments"] for b in seg["blocks"])
    assert live == 6 * MiB
