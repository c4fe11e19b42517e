"""End-to-end check of ``%%memsnap`` on a real CUDA device, in a few minutes.

Run it on the GPU machine from the repository root::

    pip install -e .
    python benchmarks/gpu_check.py                      # results in benchmarks/results/
    python benchmarks/gpu_check.py --out-dir "$OUT" --work-dir /tmp/memsnap_gpu_work

``--work-dir`` is where the shell runs and the per-step snapshots go (default ``<out-dir>/work``);
put it elsewhere to keep those files out of what you collect. Without ``pip install -e .`` the
script imports the package from the checkout it lives in (torch and IPython must be installed).

Without CUDA (or with ``--dry-run``) the same flow runs on the CPU backend with a tiny model and
fewer repeats, and the OOM provocation is skipped; it takes well under a minute on 2 cores and is
what ``tests/test_gpu_check.py`` runs. A dry run writes to ``benchmarks/results/dry_run/`` unless
``--out-dir`` is given, so it never overwrites a real GPU result.

What it does, in an in-process IPython shell with ``%load_ext memsnap_magic``:

1. ``setup``: a ``TransformerEncoderLayer`` (d_model=512, nhead=8; batch 16, seq 128) with AdamW.
2. Four phases of recorded training steps, each with one step that leaks a tensor of known size:
   ``%%memsnap step=N`` cells, then ``%%memsnap steps=...`` cells with ``mark(step)`` in a loop,
   each under the default clearing route (``clear_history=True`` where torch has it) and under
   disable + re-enable (``clear_route="toggle"``). Every step's file is loaded and checked to hold
   only that step's entries (see ``verify_reset``), and its snapshot-derived peak (requested bytes)
   is compared with ``torch.cuda.max_memory_allocated`` (rounded bytes). Between two
   ``step=N`` cells the first cell's end already switched recording off (``enabled=None``, which
   clears as well), so the route's own clearing is isolated only in the ``steps=`` phases.
3. ``oom``: a cell that raises ``torch.cuda.OutOfMemoryError``; the error must reach IPython
   unchanged and the step's snapshot must hold an ``oom`` trace entry.
4. ``fixtures``: two small real snapshots (<= 2 MB) copied to ``<out-dir>/fixtures/``, with the
   figures the magic derived from them (``tests/test_gpu_fixtures.py`` checks them on the CPU).
5. ``auto_device``: a cell without ``device=`` must record the accelerator; ``cpu_quiet``: a
   ``device=cpu context=none`` cell in this process (its session without the CPU activity: see
   ``profiler._quiet_activities``) keeps exactly the 3 MiB it made, and nothing reaches stderr.
6. ``overhead``: median wall time of a few training steps plain vs under ``%%memsnap
   stacks=python`` (``overhead_ratio``; the body alone: ``body_overhead_ratio``), and the magic's
   latency after the cell body vs a bare ``_snapshot()`` + ``pickle.dump(protocol=4)``
   (``added_latency_ratio``), plus a cProfile of one recorded cell; ``large_trace``: the same
   latency ratio for a cell of ~200k trace entries (the file is written in the background:
   target <= 0.75x), and the plain cell after each (``median_next_cell_s``), which starts by
   waiting for that write.
7. ``views``: ``%memsnap list`` and ``%memsnap show`` over this run's intervals.
8. ``async_allocator``: in a subprocess under ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``,
   the magic must refuse with a ``UsageError`` naming it (skipped on the CPU).
9. ``demo``: ``notebooks/demo.ipynb``'s code cells in a subprocess with ``DEVICE`` set to this
   device; step 2 must spike by its 64 MiB temporary and step 3 keep its activations; the run
   ``fixed`` repeats steps 1-3 without either; after the demo's ``%memsnap reset``, each step of
   run ``leak`` keeps its loss's graph, held by ``history``, and batch 64 is predicted from the
   steps recorded at batch 2, 4 and 8 (``predict``, as its cell asks).
10. ``categories``: an MLP + AdamW, then a ``TransformerEncoderLayer`` + AdamW (four times the
   setup's batch, dropout off), on this device in both loop orders (``zero_grad`` first or last):
   ``parameter`` is exactly the parameters' bytes at each step's peak and end, ``gradient`` at the
   end all or none of them by the loop order, ``optimizer_state`` exactly the bytes of the
   optimizer's state tensors on this device (Adam's moments; its ``step`` counters too where they
   live there), the categories sum to the peak and end, the block's ``activation`` at the peak is
   at least the analytical lower bound of what its forward saves (``saved_by_forward`` reports
   what ``saved_tensors_hooks`` saw), and each file carries an ``unknown`` category (memory_viz
   throws without one).
11. ``newer_options``: ``compile_context=`` and ``skip_actions=`` pass through where this torch's
   signature has them, else a one-line UsageError and the cell does not run (CPU: refused).
12. ``files``: three back-to-back cells (keep, keep, free): each step's baseline must equal the
   end of the step before it (continuity); each file must be pickle protocol 4 with a step mark on
   every entry and frames on every allocation, and its summary beside it must read back to the
   very figures, blocks and timeline the file gives.
13. ``retention``: issue 41's planted leaks (``leak_scenarios.py``) on this device: losses kept
   with their graphs in a list, a dict cache of activations, a forward hook storing outputs on its
   module, an optimizer made anew each step while a list of schedulers holds the old ones. Each
   must be named by its holder and pattern, each step's kept bytes exact (known without the walk:
   by construction, the optimizer's own state, ``saved_tensors_hooks``) and every one of them
   reached by a path; each healthy twin must claim nothing.
14. ``prediction``: issue 42's answer tried (``gpu_predict.fit_under_cap``, in a process of its
   own): a ``TransformerEncoderLayer`` of the setup's size + head + AdamW recorded at a few batch
   sizes with ``scale=batch:N``; the largest batch predicted to fit under a cap the allocator
   enforces (``torch.cuda.set_per_process_memory_fraction``: it bounds what is *reserved*, so the
   largest reserved-minus-allocated gap seen at the recorded steps is taken off the cap and the
   margin left is stated) must run, and 10 % more must raise ``OutOfMemoryError``. The CPU has no
   cap to hit: the dry run records both batches and compares their peaks with the cap.
15. ``prediction_accuracy``: ``gpu_predict.check``: each workload of ``tests/predict_workloads.py``
   predicted at its target from smaller sizes (each size its own process), against the target's
   own recording and ``max_memory_allocated``: within 5 %, the branching step refused (skipped
   in the dry run).

Each section is wrapped (and cut by SIGALRM when it overruns; ``--budget-s``, default 420 s,
bounds the whole run): a failure is recorded (with its traceback) under ``errors`` in
``<out-dir>/gpu.json``, which is rewritten after every section, and the next section runs.
Exit status: 0 when every section ran, 1 when any failed. Failed *checks* (a reset that did not
hold, a missing ``oom`` entry) are results, not failures: read ``checks`` in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import pickle
import re
import shlex
import shutil
import signal
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
try:
    import memsnap_magic  # noqa: F401
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers
from common import interleaved, make_shell  # noqa: E402

MiB = 1 << 20
FIXTURE_LIMIT = 2_000_000  # bytes: "<= 2 MB" under either reading of MB
OOM_NUMEL = int(1e15)  # 4 PB of float32: refused at once by any allocator
OOM_STEP = 50
FIXTURE_MAX_ENTRIES = (100_000, 2_000, 500, 120)  # tried in order until the file fits


class SectionTimeout(BaseException):
    """Raised by SIGALRM when a section overruns; a BaseException so no ``except Exception``
    inside the package swallows it."""


@dataclass(frozen=True)
class Plan:
    """Sizes and repeat counts: the real GPU run or the CPU dry run."""

    device: str  # "cuda" or "cpu"
    d_model: int
    nhead: int
    ff: int
    batch: int
    seq: int
    leak_bytes: int
    gap_s: float  # idle time between intervals, so their time_us ranges cannot touch
    repeats: int  # interleaved repeats of the overhead measurement
    bench_steps: int  # training steps per timed cell
    large_tensors: int  # tensors made and freed in the large-trace cell (~3 trace entries each)
    large_repeats: int  # interleaved repeats of the large-trace latency measurement
    section_timeout_s: int
    retention_width: int  # the planted leaks' MLP width and batch (``leak_scenarios``)
    retention_batch: int
    predict_cap: int  # bytes: the cap the largest batch is predicted under (``prediction``)
    predict_sizes: tuple[int, ...]  # the batch sizes recorded for it
    predict_cases: tuple[str, ...]  # ``gpu_predict``'s workloads checked (``prediction_accuracy``)

    @property
    def dry_run(self) -> bool:
        return self.device == "cpu"


GPU_PLAN = Plan(
    device="cuda",
    d_model=512,
    nhead=8,
    ff=2048,
    batch=16,
    seq=128,
    leak_bytes=64 * MiB,
    gap_s=0.1,
    repeats=15,
    bench_steps=5,
    large_tensors=70_000,
    large_repeats=3,
    section_timeout_s=150,
    retention_width=1024,
    retention_batch=1024,
    predict_cap=1 << 30,  # a batch of a few hundred: a few times the largest recorded, not a hundred
    predict_sizes=(8, 16, 32, 64),  # a fourth size: the leave-one-out error too
    predict_cases=("mlp", "transformer", "encoder", "conv", "branch"),
)
DRY_PLAN = Plan(
    device="cpu",
    d_model=32,
    nhead=4,
    ff=64,
    batch=4,
    seq=16,
    leak_bytes=1 * MiB,
    gap_s=0.03,
    repeats=3,
    bench_steps=2,
    large_tensors=1_500,
    large_repeats=2,
    section_timeout_s=60,
    retention_width=256,
    retention_batch=1024,
    predict_cap=4 * MiB,
    predict_sizes=(2, 4, 8),
    predict_cases=(),  # a process per size and workload: minutes on 2 cores
)


@dataclass(frozen=True)
class Phase:
    name: str
    mode: str  # "cell": one %%memsnap cell per step; "marked": steps= + mark()
    route: str  # "default" or "toggle"
    steps: tuple[int, ...]
    leak_step: int


PHASES = (
    Phase("cell_steps_default", "cell", "default", (1, 2, 3), 2),
    Phase("cell_steps_toggle", "cell", "toggle", (4, 5, 6), 5),
    Phase("marked_steps_default", "marked", "default", (7, 8, 9), 8),
    Phase("marked_steps_toggle", "marked", "toggle", (10, 11, 12), 11),
)


@dataclass
class Leak:
    step: int
    addr: int
    size: int


@dataclass
class State:
    """What the sections share."""

    plan: Plan
    out_dir: Path
    work_dir: Path
    results: dict[str, Any]
    shell: Any = None
    leaks: list[Leak] = field(default_factory=list)
    previous_keys: set[tuple[Any, ...]] = field(default_factory=set)
    log: io.StringIO = field(default_factory=io.StringIO)
    deadline: float = float("inf")  # time.perf_counter() after which no section starts
    bare_phases: dict[str, list[float]] = field(default_factory=dict)  # the bare recorder's split


# --------------------------------------------------------------------------- shell and cells


def now_us() -> int:
    return time.time_ns() // 1000


def run_cell(state: State, code: str) -> tuple[Any, list[str]]:
    """Run one cell with its printed output kept in the log; returns (result, warnings)."""
    buf = io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(buf),
        contextlib.redirect_stderr(buf),
    ):
        warnings.simplefilter("always")
        res = state.shell.run_cell(code, store_history=True)
    state.log.write(f"--- cell\n{code}\n--- output\n{buf.getvalue()}\n")
    if isinstance(res.error_in_exec, SectionTimeout):
        raise res.error_in_exec
    notes = [f"{w.category.__name__}: {w.message}" for w in caught if "memsnap" in str(w.message)]
    return res, notes


def setup_code(plan: Plan) -> str:
    return f"""
import time
import torch
torch.manual_seed(0)
_dev = torch.device({plan.device!r})
model = torch.nn.TransformerEncoderLayer(d_model={plan.d_model}, nhead={plan.nhead},
                                         dim_feedforward={plan.ff}, batch_first=True).to(_dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn({plan.batch}, {plan.seq}, {plan.d_model}, device=_dev)
leak = []
t_start, t_marked = {{}}, {{}}

def train_step():
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()

def sync():
    if _dev.type == "cuda":
        torch.cuda.synchronize()

for _ in range(2):  # warm-up: optimizer state, library workspaces
    loss = train_step()
sync()
"""


def leak_line(plan: Plan, indent: str = "") -> str:
    return f"{indent}leak.append(torch.empty({plan.leak_bytes}, dtype=torch.uint8, device=_dev))\n"


def require_success(res: Any, what: str) -> None:
    if not res.success:
        err = res.error_in_exec or res.error_before_exec
        raise RuntimeError(f"{what} failed: {type(err).__name__}: {err}")


# --------------------------------------------------------------------------- backends and routes


def device_key(plan: Plan) -> str:
    return f"cuda:{torch.cuda.current_device()}" if plan.device == "cuda" else "cpu"


def use_route(plan: Plan, route: str) -> None:
    """Stop any recording and make the next cells use ``route`` ("default" or "toggle")."""
    from memsnap_magic.recording.process_state import STATE, Device

    STATE.stop_all()
    if plan.device != "cuda":
        return  # the CPU backend has a single route: restart the profiler
    from memsnap_magic.recording.backends.accelerator import AcceleratorBackend

    key = device_key(plan)
    if route == "default":
        STATE.devices.pop(key, None)  # the magic builds it as usual (clear_route="auto")
    else:
        STATE.devices[key] = Device(
            AcceleratorBackend("cuda", torch.cuda.current_device(), torch.cuda, torch.cuda.memory, clear_route=route)
        )


def current_route(plan: Plan) -> str:
    from memsnap_magic.recording.process_state import STATE

    known = STATE.devices.get(device_key(plan))
    if known is None:
        return "none"
    return getattr(known.backend, "clear_route", "cpu-profiler")


def interval_for(step: int, tag: str = "torch_memory") -> Any:
    """The newest interval of ``step``, its file on disk (files are written in the background)."""
    from memsnap_magic import session, wait_for_writes

    wait_for_writes()
    found = [iv for iv in session().intervals if iv.step == step and iv.tag == tag]
    if not found:
        raise RuntimeError(f"no interval recorded for step {step} tag {tag}")
    return found[-1]


def abs_path(path: Any) -> Path:
    from memsnap_magic import wait_for_writes

    wait_for_writes()  # the file is read next
    p = Path(path)
    return p if p.is_absolute() else Path.cwd() / p


# --------------------------------------------------------------------------- checks


def device_trace(snap: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    index = torch.cuda.current_device() if plan.device == "cuda" else 0
    traces = snap["device_traces"]
    return traces[index] if index < len(traces) else []


def entry_key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["action"], e.get("addr"), e["size"], e.get("time_us"))


def verify_reset(
    trace: list[dict[str, Any]],
    window: tuple[int, int],
    previous_keys: set[tuple[Any, ...]],
    earlier_leaks: list[Leak],
    own_leak: Leak | None,
) -> dict[str, Any]:
    """Does this step's trace hold only this step's entries? Four independent checks.

    - ``in_window``: every ``time_us`` lies in [start - gap/2, end + gap/2]. ``start`` is taken
      just before the step begins and follows an idle gap after the previous step ended, so an
      entry left over from the previous step is at least ``gap`` older than ``start``; the gap/2
      margin absorbs the approximate-clock conversion of ``time_us``, which is far below 50 ms.
    - ``shared_with_previous``: entries identical to one of the previous step's, including their
      microsecond timestamp, can only be copies that survived the clear (with no ``time_us``
      identical allocation patterns repeat legitimately, so then this check is skipped).
    - ``stale_leak_allocs``: an earlier step leaked a tensor that is still alive, so the allocator
      cannot hand out its address again; an ``alloc`` of that (address, size) here is stale.
    - ``own_leak_seen``: positive control; the leaking step itself must show its leak's alloc,
      so the two checks above are not passing vacuously on an empty or blind trace.

    In ``%%memsnap step=N`` cells the previous cell already switched recording off (which clears
    too), so the route's own clearing is exercised alone only by the ``steps=`` + ``mark()`` phases.
    """
    lo, hi = window
    times = [e["time_us"] for e in trace if "time_us" in e]
    allocs = {(e.get("addr"), e["size"]) for e in trace if e["action"] == "alloc"}
    checks: dict[str, Any] = {
        "nonempty": bool(trace),
        "entries_before_start": sum(t < lo for t in times),
        "entries_after_end": sum(t > hi for t in times),
        "in_window": (lo <= min(times) and max(times) <= hi) if times else None,
        # diagnostics for the clock: first entry after lo, last before hi (us)
        "first_entry_after_lo_us": (min(times) - lo) if times else None,
        "last_entry_before_hi_us": (hi - max(times)) if times else None,
        # informational: the marker each _snapshot() leaves after its read
        # (CUDA); the previous dump's marker should have been cleared
        "snapshot_markers": sum(e["action"] == "snapshot" for e in trace),
    }
    if times and len(times) == len(trace):
        checks["shared_with_previous"] = len({entry_key(e) for e in trace} & previous_keys)
    else:
        checks["shared_with_previous"] = None
    checks["stale_leak_allocs"] = sum((lk.addr, lk.size) in allocs for lk in earlier_leaks)
    checks["own_leak_seen"] = ((own_leak.addr, own_leak.size) in allocs) if own_leak else None
    checks["verified"] = bool(
        checks["nonempty"]
        and checks["in_window"] is not False
        and not checks["shared_with_previous"]
        and checks["stale_leak_allocs"] == 0
        and checks["own_leak_seen"] is not False
    )
    return checks


def reference_peak(snap: dict[str, Any], device: int) -> int:
    """Interval peak by the plain recipe of docs/snapshot-format.md section 5.1 (cross-check)."""
    live: dict[int, int] = {}
    baseline, deltas = 0, []
    trace = snap["device_traces"][device] if device < len(snap["device_traces"]) else []
    frees = (
        ("free_completed", "free")
        if any(e["action"] in ("free_completed", "free") for e in trace)
        else ("free_requested",)
    )
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif e["action"] in frees:
            size = live.pop(e["addr"], None)
            if size is None:
                size = e["size"]
                baseline += size
            deltas.append(-size)
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in live:
                baseline += b.get("requested_size") or b["size"]
            addr += b["size"]
    cur = peak = baseline
    for d in deltas:
        cur += d
        peak = max(peak, cur)
    return peak


ROUND = 512  # the caching allocator rounds every request up to a multiple of this (kMinBlockSize)


def peak_rounding(snap: dict[str, Any], device: int) -> dict[str, int]:
    """What the allocator's blocks add to the requested bytes alive at the snapshot's peak.

    The trace holds requested bytes; ``max_memory_allocated`` counts blocks. Each block alive at
    the (first) requested peak adds its block size less its request: read from the end state's
    segments when the block is still there (a large block is not split when <= 1 MiB would remain,
    so no rule can say), else the request rounded up to 512 B (``from_rule``).
    """
    trace = snap["device_traces"][device] if device < len(snap["device_traces"]) else []
    frees = (
        ("free_completed", "free")
        if any(e["action"] in ("free_completed", "free") for e in trace)
        else ("free_requested",)
    )
    end_blocks: dict[int, tuple[int, int]] = {}  # addr -> (block size, requested) at the end
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                end_blocks[addr] = (b["size"], b.get("requested_size") or b["size"])
            addr += b["size"]
    events = [
        (e["action"] == "alloc", e["addr"], e["size"]) for e in trace if e["action"] == "alloc" or e["action"] in frees
    ]
    live: dict[int, int] = {}
    before: dict[int, int] = {}  # alive when the trace began
    for is_alloc, addr, size in events:
        if is_alloc:
            live[addr] = size
        elif live.pop(addr, None) is None:
            before[addr] = size
    for addr, (_, requested) in end_blocks.items():
        if addr not in live:  # alive throughout
            before.setdefault(addr, requested)
    alive, cur = dict(before), sum(before.values())
    peak, peak_at, at_peak = cur, -1, dict(alive)
    for i, (is_alloc, addr, size) in enumerate(events):
        if is_alloc:
            alive[addr] = size
            cur += size
        else:
            cur -= alive.pop(addr, 0)
        if cur > peak:
            peak, peak_at, at_peak = cur, i, dict(alive)
    freed_later = {addr for is_alloc, addr, _ in events[peak_at + 1 :] if not is_alloc}
    from_segments = from_rule = 0
    for addr, requested in at_peak.items():
        end = end_blocks.get(addr)
        if end is not None and addr not in freed_later and end[1] == requested:
            from_segments += end[0] - requested
        else:
            from_rule += -requested % ROUND
    return {"requested_peak": peak, "from_segments": from_segments, "from_rule": from_rule}


def allocator_stats(plan: Plan) -> dict[str, int] | None:
    """The allocator's own peaks since the interval began (the magic resets them at its start)."""
    if plan.device != "cuda":
        return None
    stats = torch.cuda.memory_stats()
    return {
        "requested_peak": int(stats.get("requested_bytes.all.peak", -1)),
        "allocated_peak": int(stats["allocated_bytes.all.peak"]),
    }


def step_record(
    state: State,
    step: int,
    phase: Phase,
    window: tuple[int, int],
    notes: list[str],
    stats: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Load the step's file, run the reset checks, compare the peaks. ``stats``: the allocator's
    peaks as the step ended (``allocator_stats``), where it did not end with the cell."""
    from memsnap_magic import load_snapshot

    plan = state.plan
    iv = interval_for(step)
    path = abs_path(iv.path) if iv.path is not None else None
    if path is None:
        raise RuntimeError(f"step {step}: snapshot was not written ({notes})")
    snap = load_snapshot(path)
    trace = device_trace(snap, plan)
    own = next((lk for lk in state.leaks if lk.step == step), None)
    earlier = [lk for lk in state.leaks if lk.step < step]
    checks = verify_reset(trace, window, state.previous_keys, earlier, own)
    state.previous_keys = {entry_key(e) for e in trace}
    index = torch.cuda.current_device() if plan.device == "cuda" else 0
    alloc_peak = iv.allocator_peak_allocated
    snap_peak = iv.peak_allocated
    stats = stats or allocator_stats(plan)
    rounding = peak_rounding(snap, index)
    explained = snap_peak + rounding["from_segments"] + rounding["from_rule"]
    return {
        "step": step,
        "phase": phase.name,
        "mode": phase.mode,
        "clear_route": current_route(plan),
        "leaked_bytes": plan.leak_bytes if own else 0,
        "snapshot_peak_allocated": int(snap_peak),
        "reference_peak_allocated": reference_peak(snap, index),
        "allocator_max_memory_allocated": None if alloc_peak is None else int(alloc_peak),
        "peak_gap_rel": None if not alloc_peak else (alloc_peak - snap_peak) / alloc_peak,
        # the gap to the byte: the allocator's own requested-bytes peak is the snapshot's, and the
        # blocks alive at that peak add their rounding (read from the segments, else 512 B)
        "allocator_requested_peak": None if stats is None else stats["requested_peak"],
        "rounding_at_peak": rounding,
        "peak_explained": None if alloc_peak is None else explained,
        "peak_explained_to_the_byte": None
        if stats is None
        else stats["requested_peak"] == snap_peak and explained == alloc_peak,
        "baseline_allocated": int(iv.baseline_allocated),
        "end_allocated": int(iv.end_allocated),
        "kept": int(iv.kept),
        "reset_verified": checks.pop("verified"),
        "reset_checks": checks,
        "trace_entries": int(iv.trace_entries),
        "overflowed": bool(iv.overflowed),
        "file": str(path),
        "file_bytes": iv.file_bytes,
        "warnings": notes,
    }


# --------------------------------------------------------------------------- sections


def section_setup(state: State) -> None:
    state.shell = make_shell(state.work_dir)
    res, _ = run_cell(state, setup_code(state.plan))
    require_success(res, "setup cell")


def note_leak(state: State, step: int) -> None:
    t = state.shell.user_ns["leak"][-1]
    state.leaks.append(Leak(step=step, addr=int(t.data_ptr()), size=int(t.nbytes)))


def run_cell_phase(state: State, phase: Phase) -> None:
    """One ``%%memsnap step=N`` cell per step; start time taken just before each cell."""
    plan = state.plan
    use_route(plan, phase.route)
    for step in phase.steps:
        body = "loss = train_step()\n" + (leak_line(plan) if step == phase.leak_step else "") + "sync()\n"
        time.sleep(plan.gap_s)
        start = now_us()
        res, notes = run_cell(state, f"%%memsnap step={step} device={plan.device}\n{body}")
        end = now_us()
        require_success(res, f"step {step}")
        if step == phase.leak_step:
            note_leak(state, step)
        margin = int(plan.gap_s * 1e6 / 2)
        state.results["steps"].append(step_record(state, step, phase, (start - margin, end + margin), notes))


def run_marked_phase(state: State, phase: Phase) -> None:
    """One ``%%memsnap steps=...`` cell; ``mark(step)`` starts each step inside a loop."""
    plan = state.plan
    use_route(plan, phase.route)
    listed = ",".join(map(str, phase.steps))
    code = (
        f"%%memsnap steps={listed} device={plan.device}\n"
        f"for _s in {phase.steps!r}:\n"
        f"    sync()\n"
        f"    time.sleep({plan.gap_s})\n"
        f"    t_start[_s] = time.time_ns() // 1000\n"
        f"    mark(_s)\n"
        f"    t_marked[_s] = time.time_ns() // 1000\n"
        f"    loss = train_step()\n"
        f"    if _s == {phase.leak_step}:\n" + leak_line(plan, "        ") + "    sync()\n"
        # the allocator's peaks are reset at every mark: read each step's before the next mark
        "    step_stats[_s] = _allocator_stats()\n"
    )
    state.shell.user_ns.update(step_stats={}, _allocator_stats=lambda: allocator_stats(plan))
    res, notes = run_cell(state, code)
    end = now_us()
    require_success(res, f"marked cell {listed}")
    ns = state.shell.user_ns
    for leaked in (lk for lk in ns["leak"] if int(lk.data_ptr()) not in {x.addr for x in state.leaks}):
        state.leaks.append(Leak(step=phase.leak_step, addr=int(leaked.data_ptr()), size=int(leaked.nbytes)))
    margin = int(plan.gap_s * 1e6 / 2)
    for n, step in enumerate(phase.steps):
        # step N's snapshot is taken inside mark(N+1): t_marked of the next step bounds it
        hi = ns["t_marked"][phase.steps[n + 1]] if n + 1 < len(phase.steps) else end
        window = (ns["t_start"][step] - margin, hi + margin)
        stats = ns["step_stats"][step]
        state.results["steps"].append(step_record(state, step, phase, window, notes, stats))


def section_phase(phase: Phase) -> Callable[[State], None]:
    def run(state: State) -> None:
        if state.shell is None:
            raise RuntimeError("setup failed; nothing to run")
        (run_cell_phase if phase.mode == "cell" else run_marked_phase)(state, phase)

    run.__name__ = phase.name
    return run


def section_oom(state: State) -> None:
    plan = state.plan
    if plan.device != "cuda":
        state.results["oom"] = {"skipped": True, "reason": "no CUDA device (dry run)"}
        return
    from memsnap_magic import load_snapshot

    use_route(plan, "default")
    step = OOM_STEP
    code = (
        f"%%memsnap step={step} device=cuda tag=oom\n"
        f"small = torch.empty(1 << 20, device=_dev)\n"
        f"huge = torch.empty({OOM_NUMEL}, device=_dev)\n"
    )
    t0 = time.perf_counter()
    res, notes = run_cell(state, code)
    elapsed = time.perf_counter() - t0
    err = res.error_in_exec
    iv = interval_for(step, "oom")
    path = abs_path(iv.path) if iv.path is not None else None
    oom_entries = []
    if path is not None:
        oom_entries = [e for e in device_trace(load_snapshot(path), plan) if e["action"] == "oom"]
    state.shell.user_ns.pop("small", None)
    torch.cuda.empty_cache()
    state.results["oom"] = {
        "skipped": False,
        "step": step,
        "elapsed_s": round(elapsed, 3),
        "error_type": None if err is None else f"{type(err).__module__}.{type(err).__qualname__}",
        "error_is_cuda_oom": type(err) is torch.cuda.OutOfMemoryError,
        "cell_failed": not res.success,
        "interval_error": iv.error,
        "file": None if path is None else str(path),
        "file_bytes": iv.file_bytes,
        "oom_entries": len(oom_entries),
        "oom_entry": {k: v for k, v in oom_entries[0].items() if k != "frames"} if oom_entries else None,
        # the report read from the file: the request, free bytes, what was allocated (1 MiB `small`)
        "report": iv.oom,
        "report_ok": report_ok(iv.oom),
        "warnings": notes,
        "caught": caught_oom(state),
    }


def report_ok(report: dict[str, Any] | None) -> bool:
    """The report read from the file names the 4 PB request and the 4 MiB ``small`` allocated then."""
    return bool(report) and report["requested"] == OOM_NUMEL * 4 and report["allocated"] >= 1 << 22


def caught_oom(state: State) -> dict[str, Any]:
    """An out-of-memory error the cell catches itself (a search for the largest batch that fits):
    the cell succeeds, and the step's file still holds the failed request, reported."""
    step = OOM_STEP + 1
    code = (
        f"%%memsnap step={step} device=cuda tag=oom_caught\n"
        "small = torch.empty(1 << 20, device=_dev)\n"
        "try:\n"
        f"    huge = torch.empty({OOM_NUMEL}, device=_dev)\n"
        "except torch.cuda.OutOfMemoryError:\n"
        "    _caught = True\n"
    )
    res, notes = run_cell(state, code)
    iv = interval_for(step, "oom_caught")
    caught = state.shell.user_ns.pop("_caught", False)
    state.shell.user_ns.pop("small", None)
    torch.cuda.empty_cache()
    return {
        "step": step,
        "cell_succeeded": bool(res.success),
        "caught_in_cell": caught,
        "interval_error": iv.error,
        "file_written": iv.path is not None,
        "report": iv.oom,
        "report_ok": report_ok(iv.oom),
        "ok": bool(res.success) and caught and iv.error is None and iv.path is not None and report_ok(iv.oom),
        "warnings": notes,
    }


def section_auto_device(state: State) -> None:
    """A cell with no ``device=``, as a user writes it: it must record the accelerator."""
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    use_route(state.plan, "default")
    res, notes = run_cell(state, "%%memsnap step=70 tag=auto\nloss = train_step()\nsync()\n")
    require_success(res, "auto-device cell")
    iv = interval_for(70, "auto")
    expected = device_key(state.plan)
    state.results["auto_device"] = {
        "device": iv.device,
        "expected": expected,
        "ok": iv.device == expected and iv.path is not None,
        "trace_entries": int(iv.trace_entries),
        "warnings": notes,
    }


def section_cpu_quiet(state: State) -> None:
    """The CPU route without stacks in this process (the accelerator in use): its session records
    with a kineto activity the process has no device for, in place of the CPU's. The cell must
    keep exactly what it made, and nothing the session says (kineto, CUPTI) may reach stderr."""
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    from memsnap_magic.recording.backends.cpu.profiler import _stderr_caught
    from memsnap_magic.recording.process_state import STATE

    code = (
        "%%memsnap device=cpu context=none step=75 tag=cpuquiet\n"
        "kept_cpu = [torch.empty(2**20, dtype=torch.uint8) for _ in range(3)]\n"
    )
    with _stderr_caught() as caught:
        res, notes = run_cell(state, code)
    require_success(res, "CPU route cell without stacks")
    iv = interval_for(75, "cpuquiet")
    profiler = STATE.cpu_profiler
    quiet = sorted(str(a) for a in profiler._quiet) if profiler is not None and profiler._quiet else None
    lines = [line.decode(errors="replace").rstrip() for line in caught()]
    kept = int(iv.end_allocated - iv.baseline_allocated)
    state.results["cpu_quiet"] = {
        "kept": kept,
        "expected": 3 * 2**20,
        "quiet_activities": quiet,
        "stderr": lines,
        "warnings": notes,
        "ok": kept == 3 * 2**20 and quiet is not None and not lines,
    }
    state.shell.run_cell("del kept_cpu")


def section_views(state: State) -> None:
    """``%memsnap list`` and ``show`` over this run's real intervals (ipywidgets, matplotlib)."""
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    shell = state.shell
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        shell.run_line_magic("memsnap", "list")
    from IPython.core.displaypub import CapturingDisplayPublisher

    plain, shell.display_pub = shell.display_pub, CapturingDisplayPublisher()
    try:
        t0 = time.perf_counter()
        shell.run_line_magic("memsnap", "show")
        show_s = time.perf_counter() - t0
    finally:
        captured, shell.display_pub = shell.display_pub.outputs, plain
    data = captured[-1]["data"] if captured else {}  # the still copy beside the widget
    state.results["views"] = {
        "list_lines": len(buf.getvalue().splitlines()),
        "list_head": buf.getvalue().splitlines()[:4],
        "show_mimetypes": sorted({mime for output in captured for mime in output["data"]}),
        "show_s": round(show_s, 3),
        "show_text": data.get("text/plain", "")[:2000],
    }


def section_categories(state: State) -> None:
    """An MLP + AdamW, then a transformer block + AdamW, on this device, both loop orders: the
    parameter, gradient and optimizer-state bytes are exactly what the model and optimizer hold,
    the categories sum to the peak and the end, the block's activations at the peak are at least
    the analytical lower bound of what its forward saves, and memory_viz finds an ``unknown``
    category in every file (it throws otherwise)."""
    import torch

    plan = state.plan
    device = plan.device
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to(device)
    x, y = torch.randn(256, 1024, device=device), torch.randint(0, 10, (256,), device=device)
    found = category_steps(state, "mlp", mlp, lambda: torch.nn.functional.cross_entropy(mlp(x), y))

    # Four times the setup's batch, so the forward's saved tensors outweigh AdamW's temporaries and
    # the step's peak falls in the forward/backward, where the lower bound applies.
    batch, seq, d, ff = 4 * plan.batch, plan.seq, plan.d_model, plan.ff
    block = torch.nn.TransformerEncoderLayer(d, plan.nhead, ff, dropout=0.0, batch_first=True).to(device)
    src = torch.randn(batch, seq, d, device=device)
    # Distinct tensors allocated by the forward and saved for the backward, fp32, dropout off:
    # LayerNorm 1's input (x + attention), its output (linear 1's input), the ReLU's output
    # (linear 2's input), LayerNorm 2's input (the residual sum), its output (the loss's input).
    # Attention's own saved q, k, v and outputs come on top, so this is a lower bound.
    bound = 4 * batch * seq * (ff + 4 * d)
    from leak_scenarios import saved_bytes  # beside this script, as the retention section's

    saved = saved_bytes(block, src)
    steps = category_steps(state, "transformer", block, lambda: block(src).pow(2).mean())
    for f in steps:
        f["activation_lower_bound"] = bound
        f["saved_by_forward"] = saved  # what saved_tensors_hooks saw, for comparison
        f["activation_at_least_bound"] = f["by_category_at_peak"].get("activation", 0) >= bound
    found += steps
    keys = (
        "sums_match",
        "parameter_exact",
        "gradient_exact",
        "optimizer_state_exact",
        "unknown_in_file",
        "usage_ok",
        "marked",
    )
    state.results["categories"] = {
        "steps": found,
        "ok": bool(found)
        and all(all(f[k] for k in keys) for f in found)
        and all(f["activation_at_least_bound"] for f in steps),
    }


def category_steps(state: State, name: str, model: Any, loss_fn: Callable[[], Any]) -> list[dict[str, Any]]:
    """Three recorded steps of ``model`` + AdamW in each loop order; each step's categories
    against the bytes the model and optimizer hold on this device."""
    import torch

    from memsnap_magic import Recorder, wait_for_writes
    from memsnap_magic.core.devices import trace_index
    from memsnap_magic.files.snapshot import load_snapshot
    from memsnap_magic.results.session import Session

    device = state.plan.device
    usage_keys = {"rss"} if device == "cpu" else {"free", "total", "reserved"}
    p_bytes = sum(p.nbytes for p in model.parameters())
    found = []
    for order in ("zero_grad first", "zero_grad last"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        session = Session()
        for step in (1, 2, 3):
            with Recorder(
                device=device,
                out=state.work_dir / "categories" / name / order.replace(" ", "_"),
                step=step,
                model=model,
                optimizer=opt,
                session=session,
            ):
                if order == "zero_grad first":
                    opt.zero_grad()
                loss_fn().backward()
                opt.step()
                if order == "zero_grad last":
                    opt.zero_grad()
                if device != "cpu":
                    torch.cuda.synchronize()
        wait_for_writes()
        # Adam's moments, plus its per-parameter `step` counters where they live on this device
        # (on CPU unless capturable or fused)
        o_bytes = sum(
            t.nbytes
            for s in opt.state.values()
            for t in s.values()
            if torch.is_tensor(t) and t.device.type == torch.device(device).type
        )
        g_end = 0 if order == "zero_grad last" else p_bytes
        for iv in session.intervals:
            peak, end = iv.by_category_at_peak or {}, iv.by_category or {}
            snap = load_snapshot(iv.path)
            names = {e.get("category") for t in snap["device_traces"] for e in t}
            found.append(
                {
                    "model": name,
                    "order": order,
                    "step": iv.step,
                    "peak_allocated": iv.peak_allocated,
                    "by_category_at_peak": peak,
                    "by_category": end,
                    "parameter_bytes": p_bytes,
                    "optimizer_state_bytes": o_bytes,
                    "sums_match": sum(peak.values()) == iv.peak_allocated and sum(end.values()) == iv.end_allocated,
                    "parameter_exact": peak.get("parameter") == p_bytes == end.get("parameter"),
                    # the gradients at the end are all or none; at the peak, at most all of them
                    "gradient_exact": end.get("gradient", 0) == g_end and peak.get("gradient", 0) <= p_bytes,
                    "optimizer_state_exact": end.get("optimizer_state") == o_bytes
                    and peak.get("optimizer_state", 0) in ((0, o_bytes) if iv.step == 1 else (o_bytes,)),
                    "unknown_in_file": "unknown" in names,
                    # the device's use beside the trace, and each entry naming its step for memory_viz
                    "usage_end": iv.usage_end,
                    "usage_ok": bool(iv.usage_end) and set(iv.usage_end) >= usage_keys,
                    "marked": all(
                        str(e.get("user_metadata", "")).startswith(f"memsnap step {iv.step}")
                        for e in snap["device_traces"][trace_index(iv.device)]
                    ),
                }
            )
    return found


def section_newer_options(state: State) -> None:
    """``compile_context=true`` and ``skip_actions=segment_map,segment_unmap``: passed where this
    torch's ``_record_memory_history`` has them (the cell runs, its step is recorded), else one
    UsageError naming the option (the cell does not run). The CPU route refuses both."""
    import inspect

    import torch

    shell = state.shell
    if shell is None:
        raise RuntimeError("setup failed; nothing to run")
    device = state.plan.device
    params = set(inspect.signature(torch.cuda.memory._record_memory_history).parameters)
    found = {}
    for step, (key, value) in enumerate(
        (("compile_context", "true"), ("skip_actions", "segment_map,segment_unmap")), 90
    ):
        shell.user_ns.pop("_ran", None)
        res = shell.run_cell(f"%%memsnap step={step} device={device} {key}={value}\n_ran = 1\n", store_history=False)
        error = res.error_before_exec or res.error_in_exec
        expected = device != "cpu" and key in params
        found[key] = {
            "in_signature": key in params,
            "ran": "_ran" in shell.user_ns,
            "error": f"{type(error).__name__}: {error}" if error else None,
            "ok": (res.success and "_ran" in shell.user_ns)
            if expected
            else (type(error).__name__ == "UsageError" and key in str(error) and "_ran" not in shell.user_ns),
        }
    state.results["newer_options"] = {**found, "ok": all(f["ok"] for f in found.values())}


def section_files(state: State) -> None:
    from memsnap_magic import load_snapshot
    from memsnap_magic.files import summaries
    from memsnap_magic.results.intervals import interval_from_snapshot
    from memsnap_magic.results.scan import read_intervals

    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    plan = state.plan
    steps = (70, 71, 72)
    for n, step in enumerate(steps):
        body = f"_files_{n} = torch.ones({(n + 1) << 18}, device=_dev)\n" + ("del _files_0\n" if n == 2 else "")
        res, _ = run_cell(state, f"%%memsnap step={step} device={plan.device} tag=files\n{body}sync()\n")
        require_success(res, "files cell")
    ivs = [interval_for(step, "files") for step in steps]
    continuity = [
        {
            "step": b.step,
            "baseline": b.baseline_allocated,
            "previous_end": a.end_allocated,
            "ok": b.baseline_allocated == a.end_allocated,
        }
        for a, b in zip(ivs, ivs[1:])
    ]
    files = []
    for iv in ivs:
        path = abs_path(iv.path)
        snap = load_snapshot(path)
        trace = device_trace(snap, plan)
        allocs = [e for e in trace if e["action"] == "alloc"]
        (warm,) = read_intervals([path])  # from the summary beside it
        cold = interval_from_snapshot(snap, path, file_bytes=path.stat().st_size)
        same = (
            warm.to_record() == cold.to_record()
            and warm.top_blocks == cold.top_blocks
            and warm.allocated.tolist() == cold.allocated.tolist()
            and warm.time_us.tolist() == cold.time_us.tolist()
        )
        files.append(
            {
                "step": iv.step,
                "protocol_4": path.read_bytes()[:2] == b"\x80\x04",
                "entries": len(trace),
                "marked": bool(trace)
                and all(str(e.get("user_metadata", "")).startswith(f"memsnap step {iv.step}") for e in trace),
                "frames_on_allocs": bool(allocs) and all(e.get("frames") for e in allocs),
                # stacks stop at the user's outermost frame: none of the magic's or IPython's beneath
                "users_frames_only": not any(
                    "/IPython/" in f.get("filename", "") or "memsnap_magic" in f.get("filename", "")
                    for e in trace
                    for f in e.get("frames") or ()
                ),
                "summary_beside": summaries.beside(path).is_file(),
                "summary_equals_file": same,
            }
        )
    flags = ("protocol_4", "marked", "frames_on_allocs", "users_frames_only", "summary_beside", "summary_equals_file")
    ok = all(c["ok"] for c in continuity) and all(f[k] for f in files for k in flags)
    state.results["files"] = {"continuity": continuity, "files": files, "ok": ok}


def section_retention(state: State) -> None:
    """Each planted leak named by its holder and pattern, its kept bytes exact and reached by a
    path, on this device; each healthy twin claiming nothing (``leak_scenarios``)."""
    import leak_scenarios

    plan = state.plan
    found = []
    for name in leak_scenarios.SCENARIOS:
        for healthy in (False, True):
            outcome = leak_scenarios.run(
                name,
                healthy,
                plan.device,
                state.work_dir / "retention",
                width=plan.retention_width,
                batch=plan.retention_batch,
            )
            found.append(leak_scenarios.judged(outcome))
    state.results["retention"] = {"scenarios": found, "ok": len(found) == 8 and all(f["ok"] for f in found)}


PREDICT_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])  # benchmarks/, where gpu_predict lives
import gpu_predict
print("\\nRESULT " + json.dumps(gpu_predict.fit_under_cap(**json.loads(sys.argv[2])), default=str))
"""


def section_prediction(state: State) -> None:
    """The largest batch of a transformer block predicted to fit under a cap: it must run, 10 %
    more must not (``gpu_predict.fit_under_cap``, in a fresh process: the cap stays set there)."""
    plan = state.plan
    work = state.work_dir / "prediction"
    work.mkdir(parents=True, exist_ok=True)
    asked = {
        "device": plan.device,
        "out": str(work / "steps"),
        "cap": plan.predict_cap,
        "d_model": plan.d_model,
        "nhead": plan.nhead,
        "ff": plan.ff,
        "seq": plan.seq,
        "sizes": list(plan.predict_sizes),
    }
    timeout = max(10, plan.section_timeout_s - 10)
    found = run_probe(PREDICT_PROBE, [str(REPO_ROOT / "benchmarks"), json.dumps(asked)], work, timeout)
    state.results["prediction"] = found


def section_prediction_accuracy(state: State) -> None:
    """``gpu_predict.check`` over this plan's workloads: each predicted at its target from smaller
    sizes, against its own recording; the branching one refused."""
    import gpu_predict

    plan = state.plan
    if not plan.predict_cases:
        reason = "the workloads' sizes are a GPU's (benchmarks/gpu_predict.py --device cpu runs them)"
        state.results["prediction_accuracy"] = {"skipped": True, "reason": reason}
        return
    cases = tuple(c for c in gpu_predict.CASES if c[0] in plan.predict_cases)
    work = state.work_dir / "prediction_accuracy"
    work.mkdir(parents=True, exist_ok=True)
    rows = gpu_predict.check(plan.device, work, jobs=2 if plan.dry_run else 4, cases=cases)
    state.results["prediction_accuracy"] = {"rows": rows, "ok": gpu_predict.accurate(rows)}


def run_probe(code: str, args: list[str], cwd: Path, timeout_s: int, **env: str) -> dict[str, Any]:
    """Run ``code`` in a fresh Python process with this checkout importable and ``env`` added;
    return the JSON it printed on its ``RESULT `` line."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout_s, cwd=cwd
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"probe failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(line[len("RESULT ") :])


ASYNC_PROBE = """
import json, torch
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
sh.run_line_magic("load_ext", "memsnap_magic")
torch.empty(1, device="cuda")
res = sh.run_cell("%%memsnap step=1\\nx = 1\\n")
err = res.error_before_exec or res.error_in_exec
print("RESULT " + json.dumps({"allocator": torch.cuda.get_allocator_backend(),
                             "error_type": type(err).__name__ if err else None,
                             "message": str(err) if err else None, "cell_ran": "x" in sh.user_ns}))
"""


def section_async_allocator(state: State) -> None:
    """Under ``backend:cudaMallocAsync`` the magic must refuse with a message naming it."""
    if state.plan.device != "cuda":
        state.results["async_allocator"] = {"skipped": True, "reason": "no CUDA device (dry run)"}
        return
    found = run_probe(ASYNC_PROBE, [], state.work_dir, 120, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    found["ok"] = (
        found["allocator"] == "cudaMallocAsync"
        and found["error_type"] == "UsageError"
        and "cudaMallocAsync" in (found["message"] or "")
    )
    state.results["async_allocator"] = found


DEMO_PROBE = """
import json, re, sys
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
import memsnap_magic

notebook, device = sys.argv[1], sys.argv[2]
cells = [''.join(c["source"]) for c in json.load(open(notebook))["cells"] if c["cell_type"] == "code"]
setup = [n for n, c in enumerate(cells) if re.search(r'^DEVICE = ', c, re.M)]
assert len(setup) == 1, "the demo's setup cell sets DEVICE once"
cells[setup[0]] = re.sub(r'^DEVICE = .*$', f'DEVICE = {device!r}', cells[setup[0]], count=1, flags=re.M)
sh = InteractiveShell.instance(display_pub_class=CapturingDisplayPublisher)
failed, forgotten = [], []
for n, code in enumerate(cells):
    if re.search(r'^%memsnap reset', code, re.M):  # the steps it forgets, as they were
        forgotten += memsnap_magic.session().to_records()
    res = sh.run_cell(code)
    if not res.success:
        failed.append([n, repr(res.error_before_exec or res.error_in_exec)])
try:
    p = memsnap_magic.predict(batch=64, capacity="48MiB")  # as the demo's predict cell asks
    predicted = {"peak_allocated": p.peak_allocated, "recorded": {str(k): v for k, v in p.recorded.items()},
                 "largest": p.largest(), "growth": [str(g) for g in p.growth[:2]]}
except ValueError as e:
    predicted = {"error": str(e)}
# on a line of its own: a cell ending in an object that displays itself leaves its "Out[N]: " open
print("\\nRESULT " + json.dumps({"cells": len(cells), "failed": failed,
                             "intervals": forgotten + memsnap_magic.session().to_records(),
                             "predicted": predicted,
                             "displayed": [sorted(o["data"]) for o in sh.display_pub.outputs]},
                            default=str))
"""


def section_demo(state: State) -> None:
    """notebooks/demo.ipynb's code cells in a fresh process, with ``DEVICE`` set to this device."""
    workdir = state.work_dir / "demo"
    workdir.mkdir(parents=True, exist_ok=True)
    found = run_probe(
        DEMO_PROBE, [str(REPO_ROOT / "notebooks" / "demo.ipynb"), state.plan.device], workdir, 150, MPLBACKEND="Agg"
    )
    by_step = {r["step"]: r for r in found["intervals"] if r["run"] == ""}  # the session's own run
    fixed = {r["step"]: r for r in found["intervals"] if r["run"] == "fixed"}  # the demo's second run
    spike = by_step[2]["peak_allocated"] - by_step[2]["baseline_allocated"]
    demo = {
        "cells": found["cells"],
        "failed": found["failed"],
        "devices": sorted({r["device"] for r in found["intervals"]}),
        "steps": [
            {
                k: r[k]
                for k in (
                    "run",
                    "step",
                    "baseline_allocated",
                    "peak_allocated",
                    "kept",
                    "trace_entries",
                    "cumulative_trace_entries",
                    "clear",
                )
            }
            for r in found["intervals"]
        ],
        "step2_rise": spike,
        "step3_kept": by_step[3]["kept"],
        "fixed_step2_rise": fixed[2]["peak_allocated"] - fixed[2]["baseline_allocated"] if 2 in fixed else None,
        "fixed_step3_kept": fixed[3]["kept"] if 3 in fixed else None,
        "show_displayed": any("application/vnd.jupyter.widget-view+json" in d for d in found["displayed"]),
    }
    # who keeps the memory: each step of run "leak" keeps its loss's graph, held by `history`
    leak = [r for r in found["intervals"] if r["run"] == "leak"]
    demo["leak_kept"] = [r["kept"] for r in leak]
    # the names the paths to what each step kept start from (``history[2].grad_fn → …``)
    demo["leak_kept_by"] = sorted({re.split(r"[\[.]", row[0])[0] for r in leak for row in r["kept_by"] or ()})
    # will it fit: batch 2, 4, 8 recorded with scale=, batch 64 predicted above them
    sized = {r["scale"]["batch"]: r["peak_allocated"] for r in found["intervals"] if (r["scale"] or {}).get("batch")}
    demo["predicted"] = found["predicted"]
    leak_ok = [r["step"] for r in leak] == [1, 2, 3, 4] and all(k > 0 for k in demo["leak_kept"])
    demo["leak_ok"] = leak_ok and demo["leak_kept_by"] == ["history"]
    demo["fit_ok"] = sorted(sized) == [2, 4, 8] and found["predicted"].get("peak_allocated", 0) > sized[8]
    # the demo's story: step 2 spikes by its 64 MiB temporary; step 3 keeps its 4 MiB activations;
    # the run "fixed" repeats steps 1-3 with both fixed, in files and figures of its own; run
    # "leak" is named with its holder; batch 64 is predicted from batch 2, 4 and 8
    demo["ok"] = (
        demo["leak_ok"]
        and demo["fit_ok"]
        and not found["failed"]
        and demo["devices"] == [device_key(state.plan)]
        and spike >= 64 * MiB
        and by_step[3]["kept"] >= 4 * MiB
        and sorted(fixed) == [1, 2, 3]
        and demo["fixed_step2_rise"] < spike - 32 * MiB
        and demo["fixed_step3_kept"] < MiB
        and demo["show_displayed"]
    )
    state.results["demo"] = demo


def fixture_step(state: State) -> tuple[Any, int]:
    """A training-step interval whose file is under the size limit: the full step if it fits,
    else a ring."""
    plan = state.plan
    use_route(plan, "default")
    for n, max_entries in enumerate(FIXTURE_MAX_ENTRIES):
        step = 60 + n
        res, _ = run_cell(
            state,
            f"%%memsnap step={step} device={plan.device} tag=fixture "
            f"max_entries={max_entries}\nloss = train_step()\nsync()\n",
        )
        require_success(res, "fixture cell")
        iv = interval_for(step, "fixture")
        if iv.path is not None and iv.file_bytes is not None and iv.file_bytes <= FIXTURE_LIMIT:
            return iv, max_entries
    raise RuntimeError(f"no step snapshot under {FIXTURE_LIMIT} bytes, even with max_entries={FIXTURE_MAX_ENTRIES[-1]}")


def copy_fixture(iv: Any, dest: Path) -> dict[str, Any]:
    """Copy an interval's file; record the figures the magic derived from it on the GPU, which the
    CPU tests (tests/test_gpu_fixtures.py) check the fixture against."""
    from memsnap_magic import load_snapshot

    src = abs_path(iv.path)
    size = src.stat().st_size
    if size > FIXTURE_LIMIT:
        raise RuntimeError(f"{src} is {size} bytes, over the {FIXTURE_LIMIT}-byte fixture limit")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    snap = load_snapshot(dest)  # must load with the package's safe loader
    return {
        "path": str(dest),
        "bytes": dest.stat().st_size,
        "trace_entries": sum(len(t) for t in snap["device_traces"]),
        "step": iv.step,
        "device": iv.device,
        "error": iv.error,
        "interval_trace_entries": int(iv.trace_entries),
        "baseline_allocated": int(iv.baseline_allocated),
        "peak_allocated": int(iv.peak_allocated),
        "end_allocated": int(iv.end_allocated),
        "allocator_max_memory_allocated": iv.allocator_peak_allocated,
        "top_blocks": [{"addr": b["addr"], "size": b["size"], "before": b["before"]} for b in iv.top_blocks[:5]],
    }


def section_fixtures(state: State) -> None:
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    kind = state.plan.device
    dest = state.out_dir / "fixtures"
    fixtures: dict[str, Any] = {}
    state.results["fixtures"] = fixtures
    iv, max_entries = fixture_step(state)
    fixtures[f"{kind}_step.pickle"] = dict(copy_fixture(iv, dest / f"{kind}_step.pickle"), max_entries=max_entries)
    if kind == "cuda":
        oom = interval_for(OOM_STEP, "oom")
        if oom.path is None:
            raise RuntimeError("the oom section left no snapshot to copy")
        fixtures["cuda_oom.pickle"] = copy_fixture(oom, dest / "cuda_oom.pickle")


def bare_recorder(plan: Plan, path: Path, max_entries: int = 100_000) -> tuple[Callable[[], None], Callable[[], None]]:
    """(begin, dump): the recording the magic does, minus the magic, for the latency baseline.

    CUDA: ``_record_memory_history`` with the magic's settings, then ``_snapshot()`` +
    ``pickle.dump(protocol=4)`` + disable. CPU (dry run): the CPU backend used directly.
    """
    if plan.device == "cuda":
        mem = torch.cuda.memory
        params = inspect.signature(mem._record_memory_history).parameters
        wanted = {"context": "all", "stacks": "python", "max_entries": max_entries, "clear_history": True}
        kwargs = {k: v for k, v in wanted.items() if k in params}

        def begin() -> None:
            if "clear_history" not in params:
                mem._record_memory_history(None)
            mem._record_memory_history("all", **kwargs)

        def stop() -> None:
            mem._record_memory_history(None)

        snapshot = mem._snapshot
    else:
        from memsnap_magic.recording.backends.cpu.backend import CpuBackend

        backend = CpuBackend()

        def begin() -> None:
            backend.begin(fresh=True, namespace=None)

        def stop() -> None:
            backend.end(keep=False)

        def snapshot() -> dict:
            from memsnap_magic.files.compact import complete

            snap = backend.snapshot()
            complete(snap)  # its viewer-only entries, written in as every dump of it does
            return snap

    def dump() -> None:
        t0 = time.perf_counter()
        snap = snapshot()
        t1 = time.perf_counter()
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        t2 = time.perf_counter()
        stop()
        t3 = time.perf_counter()
        for name, seconds in (("snapshot", t1 - t0), ("dump", t2 - t1), ("disable", t3 - t2)):
            phases.setdefault(name, []).append(seconds)

    phases: dict[str, list[float]] = {}
    dump.phases = phases  # type: ignore[attr-defined]  # seconds of each call, by phase
    return begin, dump


def phase_targets(plan: Plan) -> list[tuple[Any, str]]:
    """What the magic does after a recorded body, as the functions it calls: the foreground (the
    snapshot, the categories' labels, the step marks, the summary, ending the recording, handing
    the file over) and the background writer's (the dump, the summary beside it)."""
    from memsnap_magic.files import layout, snapshot, summaries
    from memsnap_magic.files.writer import Writer
    from memsnap_magic.recording import dump
    from memsnap_magic.recording.backends.accelerator import AcceleratorBackend
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend
    from memsnap_magic.results import intervals, labels, stacks

    backend = AcceleratorBackend if plan.device == "cuda" else CpuBackend
    return [
        (backend, "usage"),
        (backend, "snapshot_marked"),
        (backend, "allocator_peak"),
        (labels, "label_snapshot"),
        (layout, "stamp"),
        (intervals, "digest"),
        (backend, "end"),
        (intervals, "interval_from_digest"),
        (dump, "walk_after"),
        (Writer, "submit"),
        (stacks, "keep_user_frames"),
        (dump, "_all_cells"),
        (snapshot, "dump_snapshot"),
        (summaries, "write_beside"),
    ]


@contextlib.contextmanager
def timed_calls(targets: list[tuple[Any, str]]) -> Any:
    """Time every call of each ``(owner, name)`` while the block runs (any thread): {name: [s]}."""
    times: dict[str, list[float]] = {name: [] for _, name in targets}
    saved = []
    for owner, name in targets:
        fn = getattr(owner, name)
        saved.append((owner, name, owner.__dict__.get(name)))

        def wrapper(*args: Any, _fn: Callable[..., Any] = fn, _name: str = name, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                times[_name].append(time.perf_counter() - t0)

        setattr(owner, name, wrapper)
    try:
        yield times
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def recorded_and_bare(
    state: State, folder: str, body: str, options: str, first_step: int, max_entries: int = 100_000
) -> tuple[Path, dict[str, Callable[[], str]]]:
    """The cells to time: ``body`` under ``%%memsnap <options>`` (a new step each call) and under
    the bare recorder (``bare_recorder``), both writing below ``work_dir/folder``."""
    plan = state.plan
    use_route(plan, "default")
    bench = state.work_dir / folder
    bench.mkdir(parents=True, exist_ok=True)
    begin, dump = bare_recorder(plan, bench / "bare.pickle", max_entries=max_entries)
    state.shell.user_ns.update(_bare_begin=begin, _bare_dump=dump)
    counter = iter(range(first_step, first_step + 1000))

    def recorded() -> str:
        return (
            f"%%memsnap step={next(counter)} device={plan.device} {options} "
            f"out={shlex.quote(str(bench / 'memsnap'))}\n{body}"
        )

    state.bare_phases = dump.phases  # type: ignore[attr-defined]
    return bench, {"recorded": recorded, "bare": lambda: f"_bare_begin()\n{body}_bare_dump()\n"}


def timed_cell(state: State, code: str) -> tuple[float, float]:
    """(total wall seconds of the cell, seconds from the body's end until the cell returned)."""
    t0 = time.perf_counter()
    res, _ = run_cell(state, code)
    t1 = time.perf_counter()
    require_success(res, "timed cell")
    return t1 - t0, t1 - state.shell.user_ns["_t_body_end"]


def section_overhead(state: State) -> None:
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    plan = state.plan
    body = f"for _i in range({plan.bench_steps}):\n    loss = train_step()\nsync()\n_t_body_end = time.perf_counter()\n"
    bench, timed = recorded_and_bare(state, "bench", body, "stacks=python tag=overhead", 1000)
    recorded = timed["recorded"]
    cells: dict[str, Callable[[], str]] = {"plain": lambda: body, **timed}
    for make in cells.values():  # warm-up, untimed
        timed_cell(state, make())
    totals: dict[str, list[float]] = {k: [] for k in cells}
    after: dict[str, list[float]] = {k: [] for k in cells}
    names = list(cells)
    with timed_calls(phase_targets(plan)) as magic_phases:
        for r in range(plan.repeats):
            for name in names[r % 3 :] + names[: r % 3]:  # rotate the order: no kind always runs first
                total, tail = timed_cell(state, cells[name]())
                totals[name].append(total)
                after[name].append(tail)
    med = {k: statistics.median(v) for k, v in totals.items()}
    med_after = {k: statistics.median(v) for k, v in after.items()}
    state.results["overhead_ratio"] = med["recorded"] / med["plain"]
    state.results["added_latency_ratio"] = med_after["recorded"] / med_after["bare"]
    # the body alone (cell start to the body's end): recording cost without the dump after it
    body = {k: statistics.median(t - a for t, a in zip(totals[k], after[k])) for k in cells}
    state.results["body_overhead_ratio"] = body["recorded"] / body["plain"]
    state.results["overhead"] = {
        "repeats": plan.repeats,
        "train_steps_per_cell": plan.bench_steps,
        "median_total_s": med,
        "median_after_body_s": med_after,
        "median_body_s": body,
        "total_s": totals,
        "after_body_s": after,
        "split_s": {  # median seconds a cell, as for the large cell
            "magic": {k: statistics.median(v) if v else None for k, v in magic_phases.items()},
            "bare": {k: statistics.median(v) for k, v in state.bare_phases.items()},
        },
        "bare_route": "torch.cuda.memory._snapshot + pickle.dump(protocol=4)"
        if plan.device == "cuda"
        else "CpuBackend.snapshot + pickle.dump(protocol=4)",
    }
    state.results["overhead"]["profile_after_body"] = profile_recorded_cell(state, recorded())
    from memsnap_magic import wait_for_writes

    wait_for_writes()  # before its folder goes
    shutil.rmtree(bench, ignore_errors=True)  # timing artifacts only


def section_large_trace(state: State) -> None:
    """The added latency at scale: one cell of ~3 x ``large_tensors`` allocator events, the magic
    (snapshot, atomic dump, summary, clear) vs a bare ``_snapshot()`` + ``pickle.dump``."""
    if state.shell is None:
        raise RuntimeError("setup failed; nothing to run")
    plan = state.plan
    max_entries = 4 * plan.large_tensors
    body = (
        f"for _i in range({plan.large_tensors}):\n    _t = torch.empty(1, device=_dev)\n"
        "del _t\nsync()\n_t_body_end = time.perf_counter()\n"
    )
    bench, cells = recorded_and_bare(
        state, "bench_large", body, f"tag=large max_entries={max_entries}", 2000, max_entries
    )
    recorded = cells["recorded"]
    after: dict[str, list[float]] = {k: [] for k in cells}
    # the plain cell right after each: it starts by waiting for the magic's background write
    following: dict[str, list[float]] = {k: [] for k in cells}
    from memsnap_magic import session, wait_for_writes

    with timed_calls(phase_targets(plan)) as magic_phases:
        for r in range(plan.large_repeats):
            for name in ("recorded", "bare") if r % 2 == 0 else ("bare", "recorded"):
                after[name].append(timed_cell(state, cells[name]())[1])
                following[name].append(timed_cell(state, "_t_body_end = time.perf_counter()\n")[0])
        wait_for_writes()
    iv = session().intervals[-1]
    med = {k: statistics.median(v) for k, v in after.items()}
    summarize_ratio = summarize_vs_load(abs_path(iv.path), plan.large_repeats)
    state.results["large_trace"] = {
        "tensors": plan.large_tensors,
        "trace_entries": int(iv.trace_entries),
        "file_bytes": iv.file_bytes,
        "bare_file_bytes": (bench / "bare.pickle").stat().st_size,
        "repeats": plan.large_repeats,
        "median_after_body_s": med,
        "after_body_s": after,
        "added_latency_ratio": med["recorded"] / med["bare"],
        "next_cell_s": following,
        "median_next_cell_s": {k: statistics.median(v) for k, v in following.items()},
        "summarize_vs_pickle_load": summarize_ratio,
        # where the time after the body goes, median seconds a cell: the magic's calls (foreground
        # up to submit; dump_snapshot and write_beside run in the background) and the bare route's
        "split_s": {
            "magic": {k: statistics.median(v) if v else None for k, v in magic_phases.items()},
            "bare": {k: statistics.median(v) for k, v in state.bare_phases.items()},
        },
        "profile_after_body": profile_recorded_cell(state, recorded()),
    }
    wait_for_writes()  # before its folder goes
    shutil.rmtree(bench, ignore_errors=True)


def summarize_vs_load(path: Path, repeats: int) -> dict[str, Any]:
    """Issue 5's first row on a real snapshot: ``summarize`` vs ``pickle.load`` of the same file,
    interleaved, a collection before each timed call (as ``benchmarks/bench_summarize.py``)."""
    from memsnap_magic import summarize

    def load() -> Any:
        with open(path, "rb") as f:
            return pickle.load(f)

    snap = load()
    frames = [len(e.get("frames", ())) for t in snap["device_traces"] for e in t]
    times = interleaved({"summarize": lambda: summarize(snap), "pickle_load": load}, repeats, warmup=0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "ratio": med["summarize"] / med["pickle_load"],
        "median_s": med,
        "times_s": times,
        "entries": len(frames),
        "mean_frames_per_entry": statistics.fmean(frames) if frames else 0.0,
    }


def profile_recorded_cell(state: State, code: str, top: int = 12) -> list[dict[str, Any]]:
    """Where the magic's time after the body goes: cProfile's heaviest memsnap/torch calls."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    run_cell(state, code)
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = [
        {
            "function": f"{Path(file).name}:{line}:{name}",
            "calls": nc,
            "cumulative_s": round(ct, 6),
            "own_s": round(tt, 6),
        }
        for (file, line, name), (_, nc, tt, ct, _) in stats.items()
        if "memsnap_magic" in file or name in ("_snapshot", "dump", "replace", "fsync")
    ]
    return sorted(rows, key=lambda r: -r["cumulative_s"])[:top]


SECTIONS: tuple[tuple[str, Callable[[State], None]], ...] = (
    ("setup", section_setup),
    *((p.name, section_phase(p)) for p in PHASES),
    ("oom", section_oom),
    ("fixtures", section_fixtures),
    ("auto_device", section_auto_device),
    ("cpu_quiet", section_cpu_quiet),
    ("overhead", section_overhead),
    ("large_trace", section_large_trace),
    ("views", section_views),
    ("categories", section_categories),
    ("newer_options", section_newer_options),
    ("files", section_files),
    ("retention", section_retention),
    ("prediction", section_prediction),
    ("prediction_accuracy", section_prediction_accuracy),
    ("async_allocator", section_async_allocator),
    ("demo", section_demo),
)


# --------------------------------------------------------------------------- driver


def write_json(state: State) -> Path:
    path = state.out_dir / "gpu.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.results, indent=2, default=str))
    os.replace(tmp, path)
    (state.out_dir / "cells.log").write_text(state.log.getvalue())
    return path


def _alarm(signum: int, frame: Any) -> None:
    raise SectionTimeout("section timed out")


def run_section(state: State, name: str, fn: Callable[[State], None]) -> None:
    """Run one section; record its failure instead of raising; write the JSON either way."""
    t0 = time.perf_counter()
    ok = False
    remaining = state.deadline - t0
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(max(1, min(state.plan.section_timeout_s, remaining))))
    try:
        if remaining < 5:
            raise TimeoutError("not started: the --budget-s time is spent")
        fn(state)
        ok = True
    except (Exception, SectionTimeout) as e:
        state.results["errors"].append(
            {"section": name, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        )
    finally:
        signal.alarm(0)
        with contextlib.suppress(Exception):
            from memsnap_magic.recording.process_state import STATE

            STATE.stop_all()  # never leave recording on for the next section
        state.results["sections"][name] = {"ok": ok, "elapsed_s": round(time.perf_counter() - t0, 3)}
        state.results["checks"] = summarize_checks(state.results)
        write_json(state)


def summarize_checks(results: dict[str, Any]) -> dict[str, Any]:
    steps = results["steps"]
    oom = results.get("oom") or {}
    gaps = [s["peak_gap_rel"] for s in steps if s["peak_gap_rel"] is not None]
    return {
        "all_reset_verified": bool(steps) and all(s["reset_verified"] for s in steps),
        "routes_seen": sorted({s["clear_route"] for s in steps}),
        "snapshot_peak_le_allocator_peak": all(
            s["snapshot_peak_allocated"] <= s["allocator_max_memory_allocated"]
            for s in steps
            if s["allocator_max_memory_allocated"] is not None
        ),
        "snapshot_peak_matches_reference": all(
            s["snapshot_peak_allocated"] == s["reference_peak_allocated"] for s in steps
        ),
        "max_peak_gap_rel": max(gaps) if gaps else None,
        "peaks_explained_to_the_byte": None
        if not steps or steps[0].get("peak_explained_to_the_byte") is None
        else all(s["peak_explained_to_the_byte"] for s in steps),
        "oom_ok": None
        if oom.get("skipped", True)
        else bool(oom.get("error_is_cuda_oom") and oom.get("oom_entries") and oom.get("report_ok")),
        "caught_oom_ok": None if oom.get("skipped", True) else bool((oom.get("caught") or {}).get("ok")),
        "auto_device_ok": (results.get("auto_device") or {}).get("ok"),
        "async_allocator_refused": (results.get("async_allocator") or {}).get("ok"),
        "demo_ok": (results.get("demo") or {}).get("ok"),
        "categories_ok": (results.get("categories") or {}).get("ok"),
        "newer_options_ok": (results.get("newer_options") or {}).get("ok"),
        "files_ok": (results.get("files") or {}).get("ok"),
        "retention_ok": (results.get("retention") or {}).get("ok"),
        "prediction_fits_ok": (results.get("prediction") or {}).get("ok"),
        "prediction_accurate": (results.get("prediction_accuracy") or {}).get("ok"),
    }


def fmt_mib(n: int | None) -> str:
    return f"{'-':>9}" if n is None else f"{n / MiB:9.2f}"


def print_summary(results: dict[str, Any]) -> None:
    print(
        f"memsnap gpu_check: {results['device']} · torch {results['torch']}"
        f"{' · DRY RUN' if results['dry_run'] else ''} · {results['total_s']:.1f} s"
    )
    print(f"{'step':>4} {'mode':6} {'route':12} {'entries':>7} {'snap MiB':>9} {'alloc MiB':>9} {'gap':>7} reset")
    for s in results["steps"]:
        gap = "-" if s["peak_gap_rel"] is None else f"{s['peak_gap_rel']:7.2%}"
        print(
            f"{s['step']:>4} {s['mode']:6} {s['clear_route']:12} {s['trace_entries']:>7} "
            f"{fmt_mib(s['snapshot_peak_allocated'])} {fmt_mib(s['allocator_max_memory_allocated'])} "
            f"{gap:>7} {'ok' if s['reset_verified'] else 'FAILED'}"
            f"{'  (leak)' if s['leaked_bytes'] else ''}"
        )
    oom = results.get("oom") or {}
    if oom.get("skipped", True):
        print(f"oom: skipped ({oom.get('reason', 'not run')})")
    else:
        print(
            f"oom: {oom['error_type']} · unchanged={oom['error_is_cuda_oom']} · "
            f"oom entries={oom['oom_entries']} · report={oom['report_ok']} · {oom['elapsed_s']} s · "
            f"caught in the cell: ok={(oom.get('caught') or {}).get('ok')}"
        )
    ratio = results.get("overhead_ratio")
    lat = results.get("added_latency_ratio")
    body = results.get("body_overhead_ratio")
    print(
        f"overhead_ratio={'-' if ratio is None else f'{ratio:.3f}'} · "
        f"body_overhead_ratio={'-' if body is None else f'{body:.3f}'} · "
        f"added_latency_ratio={'-' if lat is None else f'{lat:.3f}'}"
    )
    large = results.get("large_trace") or {}
    if large:
        split = large["split_s"]
        ms = lambda d: ", ".join(f"{k} {v * 1e3:.1f}" for k, v in d.items() if v is not None)  # noqa: E731
        after = {k: f"{v * 1e3:.0f} ms" for k, v in large["median_after_body_s"].items()}
        print(
            f"large_trace: {large['trace_entries']} entries · added_latency_ratio={large['added_latency_ratio']:.3f} "
            f"({after['recorded']} vs {after['bare']})"
        )
        print(f"  magic, ms a cell: {ms(split['magic'])}")
        print(f"  bare,  ms a cell: {ms(split['bare'])}")
    retention = (results.get("retention") or {}).get("scenarios") or []
    if retention:
        said = [f"{r['scenario']}{' twin' if r['healthy'] else ''} {'ok' if r['ok'] else 'FAILED'}" for r in retention]
        print("retention: " + " · ".join(said))
    fit = results.get("prediction") or {}
    if fit.get("largest"):
        print(
            f"prediction: batch {fit['largest']} predicted to fit {fmt_mib(fit['cap']).strip()} MiB "
            f"(gap {fmt_mib(fit['gap']).strip()} MiB, margin {fmt_mib(fit['margin']).strip()} MiB): "
            f"ran={fit['largest_ran']['fits']} · batch {fit['bigger']}: ran={fit['bigger_ran']['fits']} (must not)"
        )
    accuracy = (results.get("prediction_accuracy") or {}).get("rows") or []
    if accuracy:
        said = [f"{r['workload']} {'refused' if 'refused' in r else format(r['error'], '+.2%')}" for r in accuracy]
        print("prediction accuracy: " + " · ".join(said))
    if (results.get("prediction_accuracy") or {}).get("skipped"):
        print(f"prediction accuracy: skipped ({results['prediction_accuracy']['reason']})")
    print("checks: " + " · ".join(f"{k}={v}" for k, v in results["checks"].items()))
    for e in results["errors"]:
        print(f"section {e['section']} FAILED: {e['error']}")
    print(f"-> {results['json']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where gpu.json and fixtures/ go (default benchmarks/results, "
        "or benchmarks/results/dry_run for a dry run)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="the shell's working directory, where the step snapshots are written (default <out-dir>/work)",
    )
    p.add_argument("--dry-run", action="store_true", help="run on the CPU with a tiny model (automatic without CUDA)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="no section starts after this many seconds; a running one is cut at it "
        "(default 420 on CUDA, 120 for a dry run)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    os.environ.setdefault("MPLBACKEND", "Agg")  # no GUI backend if anything plots
    dry = args.dry_run or not torch.cuda.is_available()
    plan = DRY_PLAN if dry else GPU_PLAN
    default_out = REPO_ROOT / "benchmarks" / "results" / ("dry_run" if dry else "")
    out_dir = (args.out_dir or default_out).resolve()
    work_dir = (args.work_dir or out_dir / "work").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    import memsnap_magic

    results: dict[str, Any] = {
        "device": "cpu (dry run)" if dry else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dry_run": dry,
        "python": sys.version.split()[0],
        "memsnap_magic": memsnap_magic.__version__,
        "plan": asdict(plan),
        "work_dir": str(work_dir),
        "json": str(out_dir / "gpu.json"),
        "steps": [],
        "oom": {},
        "fixtures": {},
        "overhead_ratio": None,
        "body_overhead_ratio": None,
        "added_latency_ratio": None,
        "overhead": {},
        "sections": {},
        "checks": {},
        "errors": [],
        "total_s": 0.0,
    }
    budget = args.budget_s if args.budget_s is not None else (120.0 if dry else 420.0)
    state = State(plan=plan, out_dir=out_dir, work_dir=work_dir, results=results, deadline=t0 + budget)
    cwd = Path.cwd()
    try:
        for name, fn in SECTIONS:
            run_section(state, name, fn)
    finally:
        os.chdir(cwd)
        results["total_s"] = round(time.perf_counter() - t0, 3)
        results["checks"] = summarize_checks(results)
        write_json(state)
    print_summary(results)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
