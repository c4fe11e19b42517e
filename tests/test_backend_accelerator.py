"""The accelerator path against a stand-in for ``torch.cuda`` / ``torch.cuda.memory``.

No GPU exists on our machines, so a small fake caching allocator records trace entries with
PyTorch's clearing semantics (``enabled=None`` stops and clears; ``clear_history=True`` clears
while recording goes on). The real path is exercised by ``benchmarks/gpu_check.py`` on a GPU.
"""

from __future__ import annotations

import types

import pytest
from IPython.core.error import UsageError

import memsnap_magic
from memsnap_magic import session
from memsnap_magic.recording import backends
from memsnap_magic.recording.backends import BackendError
from memsnap_magic.recording.backends.accelerator import AcceleratorBackend
from memsnap_magic.recording.options import Options

_UNSET = object()


class FakeAllocator:
    def __init__(self, with_clear_flag: bool = True) -> None:
        self.calls: list[tuple] = []
        self.enabled: str | None = None
        self.trace: list[dict] = []
        self.live: dict[int, int] = {}
        self.next_addr = 0x1000
        self.peak = self.current = 0
        # the two signatures PyTorch has had; _UNSET marks what the caller did not pass
        if with_clear_flag:

            def record(
                enabled="all",
                context=_UNSET,
                stacks=_UNSET,
                max_entries=_UNSET,
                device=_UNSET,
                clear_history=_UNSET,
                compile_context=_UNSET,
            ):
                self._record(
                    enabled,
                    context=context,
                    stacks=stacks,
                    max_entries=max_entries,
                    device=device,
                    clear_history=clear_history,
                    compile_context=compile_context,
                )
        else:

            def record(enabled="all", context=_UNSET, stacks=_UNSET, max_entries=_UNSET, device=_UNSET):
                self._record(enabled, context=context, stacks=stacks, max_entries=max_entries, device=device)

        self.memory = types.SimpleNamespace(_record_memory_history=record, _snapshot=self.snapshot)
        self.device = types.SimpleNamespace(
            reset_peak_memory_stats=lambda i: self._reset(i),
            max_memory_allocated=lambda i: self.peak,
            memory=self.memory,
        )

    def _record(self, enabled, **kw):
        kw = {k: v for k, v in kw.items() if v is not _UNSET}
        self.calls.append(("record", enabled, kw))
        if enabled is None or kw.get("clear_history"):
            self.trace = []
        self.enabled = enabled

    def _reset(self, index):
        self.calls.append(("reset_peak", index))
        self.peak = self.current

    def alloc(self, size: int) -> int:
        addr, self.next_addr = self.next_addr, self.next_addr + size
        self.live[addr] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        if self.enabled:
            self.trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0})
        return addr

    def free(self, addr: int) -> None:
        size = self.live.pop(addr)
        self.current -= size
        if self.enabled:
            self.trace += [
                {"action": a, "addr": addr, "size": size, "stream": 0} for a in ("free_requested", "free_completed")
            ]

    def snapshot(self) -> dict:
        self.calls.append(("snapshot",))
        segs = [
            {
                "device": 0,
                "address": a,
                "total_size": s,
                "stream": 0,
                "blocks": [{"size": s, "requested_size": s, "state": "active_allocated"}],
            }
            for a, s in self.live.items()
        ]
        return {"segments": segs, "device_traces": [list(self.trace)]}


@pytest.fixture(params=[True, False], ids=["clear_history", "toggle"])
def fake(request, shell, monkeypatch):
    fa = FakeAllocator(with_clear_flag=request.param)
    monkeypatch.setattr(backends, "resolve_device", lambda d: "cuda:0")
    monkeypatch.setattr(
        AcceleratorBackend, "for_device", classmethod(lambda cls, d: cls("cuda", 0, fa.device, fa.memory))
    )
    shell.user_ns["fa"] = fa
    return fa


def test_call_sequence_and_pass_through(shell, fake):
    assert shell.run_cell("%%memsnap step=1 context=alloc stacks=python max_entries=500\na = fa.alloc(100)").success
    records = [c for c in fake.calls if c[0] == "record"]
    kw = {"context": "alloc", "stacks": "python", "max_entries": 500}
    if "clear_history" in str(fake.memory._record_memory_history.__code__.co_varnames):
        assert records == [("record", "all", dict(kw, clear_history=True)), ("record", None, {})]
    else:
        assert records == [("record", None, {}), ("record", "all", kw), ("record", None, {})]
    names = [c[0] for c in fake.calls]
    assert names.index("reset_peak") < names.index("snapshot") < len(names) - 1
    assert names[-1] == "record" and fake.enabled is None  # stopped after the dump
    (iv,) = session().intervals
    assert iv.device == "cuda:0" and iv.peak_allocated == 100 and iv.allocator_peak_allocated == 100


def test_context_none_passes_none(shell, fake):
    shell.run_cell("%%memsnap context=none\npass")
    assert next(c for c in fake.calls if c[0] == "record" and c[1] == "all")[2]["context"] is None


def test_each_step_holds_only_its_own_entries(shell, fake):
    shell.run_cell("%%memsnap step=1\na = fa.alloc(100)")
    shell.run_cell("b = fa.alloc(7)")  # between cells: recording is off
    shell.run_cell("%%memsnap step=2\nc = fa.alloc(30)\nfa.free(a)")
    _, two = session().intervals
    assert (two.baseline_allocated, two.peak_allocated, two.end_allocated) == (107, 137, 37)
    from memsnap_magic import load_snapshot, wait_for_writes

    wait_for_writes()
    sizes = [e["size"] for e in load_snapshot(two.path)["device_traces"][0] if e["action"] == "alloc"]
    assert sizes == [30]


def test_steps_mark_clears_while_recording(shell, fake):
    assert shell.run_cell(
        "%%memsnap steps=2,3\nkeep = []\nfor s in range(1, 5):\n    mark(s)\n    keep.append(fa.alloc(s * 10))"
    ).success
    from memsnap_magic import load_snapshot, wait_for_writes

    wait_for_writes()
    got = {iv.step: [e["size"] for e in load_snapshot(iv.path)["device_traces"][0]] for iv in session().intervals}
    assert got == {2: [20], 3: [30]}
    assert fake.enabled is None


def test_clear_false_keeps_recording_on(shell, fake):
    shell.run_cell("%%memsnap step=1 clear=false\na = fa.alloc(100)")
    assert fake.enabled == "all"
    shell.run_cell("%%memsnap step=2\nb = fa.alloc(5)")
    assert session().intervals[1].trace_entries == 2 and fake.enabled is None


def test_a_continued_chain_keeps_the_allocator_peak_of_the_whole_chain(shell, fake):
    shell.run_cell("%%memsnap step=1 clear=false\na = fa.alloc(100)\nfa.free(a)")
    shell.run_cell("%%memsnap step=2\nb = fa.alloc(5)")
    assert [c[0] for c in fake.calls].count("reset_peak") == 1
    two = session().intervals[1]
    assert two.peak_allocated == two.allocator_peak_allocated == 100


def test_one_device_of_a_kind_owns_the_history_at_a_time(fake):
    fa = fake
    zero = AcceleratorBackend("cuda", 0, fa.device, fa.memory)
    one = AcceleratorBackend("cuda", 1, fa.device, fa.memory)
    for b in (zero, one):
        b.configure(Options())
    zero.begin(fresh=True)
    assert zero.recording and not one.recording
    with pytest.raises(BackendError, match="cuda:0 is still recording"):
        one.begin(fresh=True)  # enabled=None would stop and clear cuda:0's chain too
    one.end(keep=False)  # not the owner: leaves cuda:0's history alone
    assert zero.recording and fa.enabled == "all"
    zero.end(keep=False)
    assert not zero.recording and fa.enabled is None
    one.begin(fresh=True)
    assert one.recording


def test_unload_stops_recording(shell, fake):
    shell.run_cell("%%memsnap step=1 clear=false\na = fa.alloc(100)")
    shell.run_line_magic("unload_ext", "memsnap_magic")
    assert fake.enabled is None
    shell.run_line_magic("load_ext", "memsnap_magic")


def test_cuda_malloc_async_is_refused_with_a_clear_message(shell, monkeypatch):
    import torch

    monkeypatch.setattr(backends, "resolve_device", lambda d: "cuda:0")
    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "cudaMallocAsync", raising=False)
    res = shell.run_cell("%%memsnap device=cuda\nran = 1")
    assert isinstance(res.error_in_exec, UsageError) and "cudaMallocAsync" in str(res.error_in_exec)
    assert "ran" not in shell.user_ns


def test_missing_clear_flag_cannot_be_forced():
    fa = FakeAllocator(with_clear_flag=False)
    with pytest.raises(backends.BackendError, match="clear_history"):
        AcceleratorBackend("cuda", 0, fa.device, fa.memory, clear_route="flag")


def test_device_use_beside_the_trace_and_a_step_mark_on_every_entry(shell, fake):
    """free/total and reserved at the start and end (mem_get_info, memory_reserved where the
    module has them), the gap said in words; each entry names its step for memory_viz."""
    from memsnap_magic import load_snapshot
    from memsnap_magic.views.explain import usage_line

    GiB = 1 << 30
    fake.device.mem_get_info = lambda i: (80 * GiB - (3 * GiB + fake.current), 80 * GiB)
    fake.device.memory_reserved = lambda i: 2 * GiB
    assert shell.run_cell("%%memsnap step=4 run=after\na = fa.alloc(1 << 30)").success
    (iv,) = session().intervals
    assert iv.usage_start == {"free": 77 * GiB, "total": 80 * GiB, "reserved": 2 * GiB}
    assert iv.usage_end == {"free": 76 * GiB, "total": 80 * GiB, "reserved": 2 * GiB}
    assert usage_line(iv) == (
        "device at the step's end: 4.0 GiB in use of 80.0 GiB · PyTorch reserved 2.0 GiB, "
        "allocated 1.0 GiB · 2.0 GiB in use outside PyTorch's allocator"
    )
    memsnap_magic.wait_for_writes()
    entries = load_snapshot(iv.path)["device_traces"][0]
    assert entries and {e["user_metadata"] for e in entries} == {"memsnap step 4 (run after)"}


def test_a_module_without_memory_queries_records_no_use(shell, fake):
    assert shell.run_cell("%%memsnap\na = fa.alloc(10)").success
    (iv,) = session().intervals
    assert iv.usage_start is None and iv.usage_end is None


def test_newer_recording_options_pass_where_the_signature_has_them(shell, fake):
    has_compile = "compile_context" in fake.memory._record_memory_history.__code__.co_varnames
    res = shell.run_cell("%%memsnap compile_context=true\nran = 1")
    if has_compile:
        assert res.success and shell.user_ns["ran"] == 1
        assert next(c for c in fake.calls if c[0] == "record" and c[1] == "all")[2]["compile_context"] is True
    else:  # an older torch: said plainly, and the cell does not run
        with pytest.raises(UsageError, match=r"compile_context=: this torch .* records history without it"):
            res.raise_error()
        assert "ran" not in shell.user_ns
    # neither stand-in signature has skip_actions: refused, naming what the signature takes
    with pytest.raises(UsageError, match=r"skip_actions=: .*takes .*max_entries"):
        shell.run_cell("%%memsnap skip_actions=segment_map\npass").raise_error()
    with pytest.raises(UsageError, match=r"skip_actions=.*one or more of the allowed"):
        shell.run_cell("%%memsnap skip_actions=alloc\npass").raise_error()


def test_skip_actions_passes_as_a_list_where_the_signature_has_it(shell, fake):
    import inspect

    record = fake.memory._record_memory_history

    def with_skip(enabled="all", skip_actions=None, **kw):
        fake.calls.append(("skip", skip_actions))
        return record(enabled, **kw)

    *kept, _ = inspect.signature(record).parameters.values()
    skip = inspect.Parameter("skip_actions", inspect.Parameter.KEYWORD_ONLY, default=None)
    with_skip.__signature__ = inspect.Signature([*kept, skip])
    fake.memory._record_memory_history = with_skip
    assert shell.run_cell("%%memsnap skip_actions=segment_map,segment_unmap\nx = 1").success
    assert ("skip", ["segment_map", "segment_unmap"]) in fake.calls
