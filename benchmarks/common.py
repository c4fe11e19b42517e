"""Shared by the benchmarks: result rows, interleaved timing, synthetic snapshots, an IPython shell.

Timing rule: a figure is a ratio against a reference measured in the same run, each side timed
alternately (ABAB...) so drift and noise from the (shared, 2-core) machine hit both alike; the
figure is the ratio of the medians. A garbage collection is forced before every timed call so no
side pays for the other's garbage.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import pickle
import random
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run from a checkout without ``pip install -e .``
    sys.path.insert(0, str(REPO_ROOT))

MiB = 1 << 20


@dataclass
class Row:
    """One line of the table; ``value`` is the measured ratio (``unit="x"``) or absolute value."""

    name: str
    what: str
    reference: str
    value: float
    unit: str  # "x", "s", "MB"
    target: str  # readable target, e.g. "<= 0.10x"
    passed: bool | None  # None: reported only, no target
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # shown after the value in the table

    def measured(self) -> str:
        text = f"{self.value:.3g}x" if self.unit == "x" else f"{self.value:.3g} {self.unit}"
        return f"{text} ({self.note})" if self.note else text


@dataclass(frozen=True)
class Context:
    """What every benchmark gets: quick or full mode, interleaved repeats, a scratch folder."""

    quick: bool
    repeats: int
    work: Path

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full


def ratio_row(
    name: str, what: str, reference: str, times: dict[str, list[float]], limit: float | None, **details: Any
) -> Row:
    """A row whose value is median(times["measured"]) / median(times["reference"]), target
    ``<= limit`` (``None``: reported only)."""
    med = {k: statistics.median(v) for k, v in times.items()}
    value = med["measured"] / med["reference"]
    pairs = [a / b for a, b in zip(times["measured"], times["reference"])]
    target, passed = ("report only", None) if limit is None else (f"<= {limit:g}x", value <= limit)
    return Row(
        name,
        what,
        reference,
        value,
        "x",
        target,
        passed,
        {
            "median_s": med,
            "median_of_pair_ratios": statistics.median(pairs),
            "times_s": times,
            "repeats": len(times["measured"]),
            **details,
        },
    )


def timed(fn: Callable[[], Any], collect: bool = True) -> float:
    """Wall time of one call, after a collection so earlier garbage is not billed to it
    (``collect=False``: none, the caches left as the call before left them)."""
    if collect:
        gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int,
    warmup: int = 1,
    settle: Callable[[], Any] | None = None,
    collect: bool = True,
) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, called in turn (A B A B ...); ``settle``
    runs untimed before each call (``wait_for_writes``: no call pays for the one before it);
    ``collect``: as ``timed``'s."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if settle is not None:
                settle()
            times[k].append(timed(fn, collect))
    return times


def pickle_loads_of(path: Path) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``pickle.load`` of ``path``, and the same with the cyclic collector paused (as
    ``load_snapshot`` pauses it): the two references of the loading and summarising rows."""

    def plain() -> Any:
        with open(path, "rb") as f:
            return pickle.load(f)

    def gc_off() -> Any:
        gc.disable()
        try:
            return plain()
        finally:
            gc.enable()

    return plain, gc_off


def rss_bytes() -> int:
    """Resident set size of this process (``/proc/self/statm``; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return int(psutil.Process().memory_info().rss)


# --------------------------------------------------------------------------- synthetic snapshots

T0_US = 1_750_000_000_000_000  # an epoch time in microseconds, like real traces


def _frame_pool(rng: random.Random, n: int) -> list[dict[str, Any]]:
    files = [f"/opt/venv/lib/python3.11/site-packages/torch/nn/modules/mod{i}.py" for i in range(40)]
    files += [f"/tmp/ipykernel_4242/{3000 + i}.py" for i in range(10)]
    return [{"filename": rng.choice(files), "line": rng.randrange(1, 2000), "name": f"fn_{i}"} for i in range(n)]


def make_snapshot(entries: int, frames: int = 4, seed: int = 0, live: int = 1000) -> dict[str, Any]:
    """A snapshot in PyTorch's schema with exactly ``entries`` trace entries.

    A random walk of allocations and frees around ``live`` live blocks: ``alloc`` entries and
    ``free_requested`` + ``free_completed`` pairs with ``addr``, ``size``, ``stream`` and
    ``time_us``; each entry carries its own list of ``frames`` frames ({filename, line, name}),
    drawn from a pool of distinct frame dicts that entries share (PyTorch's pickler memoizes
    repeated frames the same way; it also makes the ``pickle.load`` reference as cheap as it
    can realistically be). Some frees hit blocks allocated before the window (they make the
    baseline), freed addresses are reused, and the end-state segments hold exactly the blocks
    live at the end: the untouched pre-window ones and the trace's own (one segment each, with
    the freed space after it as an inactive block). Deterministic per seed.
    """
    rng = random.Random(seed)
    pool = _frame_pool(rng, 4000)
    choice, randrange, rand = rng.choice, rng.randrange, rng.random
    bump = 0x7F00_0000_0000
    free_slots: list[tuple[int, int]] = []  # (addr, capacity) of freed blocks, for reuse
    blocks: dict[int, tuple[int, int, list[dict[str, Any]]]] = {}  # addr -> (size, capacity, frames)

    def place(size: int) -> tuple[int, int]:
        nonlocal bump
        if free_slots and rand() < 0.6 and free_slots[-1][1] >= size:
            return free_slots.pop()
        cap = -(-size // 512) * 512
        addr, bump = bump, bump + cap
        return addr, cap

    def new_size() -> int:
        return int(2 ** (9 + rand() * 15)) + randrange(0, 512)  # 512 B .. 8 MiB, log-uniform

    before: list[int] = []  # pre-window blocks still live
    for _ in range(live):
        size = new_size()
        addr, cap = place(size)
        blocks[addr] = (size, cap, [choice(pool) for _ in range(frames)])
        before.append(addr)
    ours: list[int] = []  # blocks the trace allocated and that are still live
    trace: list[dict[str, Any]] = []
    t = T0_US
    while len(trace) < entries:
        t += randrange(1, 40)
        n_live = len(before) + len(ours)
        do_alloc = len(trace) > entries - 2 or rand() < (0.6 if n_live < live else 0.4) or n_live == 0
        if do_alloc:
            size = new_size()
            addr, cap = place(size)
            stack = [choice(pool) for _ in range(frames)]
            blocks[addr] = (size, cap, stack)
            ours.append(addr)
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": stack})
            continue
        pick_old = before and (not ours or rand() < 0.1)
        group = before if pick_old else ours
        i = randrange(len(group))
        group[i], group[-1] = group[-1], group[i]
        addr = group.pop()
        size, cap, _ = blocks.pop(addr)
        free_slots.append((addr, cap))
        for action in ("free_requested", "free_completed"):
            trace.append(
                {
                    "action": action,
                    "addr": addr,
                    "size": size,
                    "stream": 0,
                    "time_us": t,
                    "frames": [choice(pool) for _ in range(frames)],
                }
            )
    segments = []
    ends = sorted(blocks)
    for n, addr in enumerate(ends):
        size, cap, bframes = blocks[addr]
        # freed space up to the next live block (at most 2 MiB) stays in the segment, inactive
        gap = (ends[n + 1] if n + 1 < len(ends) else bump) - (addr + cap)
        total = cap + min(max(gap, 0), 2 * MiB)
        seg_blocks = [
            {"address": addr, "size": cap, "requested_size": size, "state": "active_allocated", "frames": list(bframes)}
        ]
        if total > cap:
            seg_blocks.append(
                {"address": addr + cap, "size": total - cap, "requested_size": 0, "state": "inactive", "frames": []}
            )
        segments.append(
            {
                "device": 0,
                "address": addr,
                "total_size": total,
                "allocated_size": cap,
                "active_size": cap,
                "requested_size": size,
                "stream": 0,
                "segment_type": "large" if total > MiB else "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": seg_blocks,
            }
        )
    return {"segments": segments, "device_traces": [trace], "allocator_settings": {}, "external_annotations": []}


def tiled_cuda_snapshot(entries: int) -> dict[str, Any]:
    """A snapshot of about ``entries`` entries made of a real CUDA step, repeated.

    ``tests/data/cuda_step.pickle`` was recorded on an H200 (``benchmarks/gpu_check.py``). Its
    blocks allocated and freed inside the step are repeated, each copy at fresh addresses, in
    front of its end state; entries share the recorded frame dicts and lists as PyTorch's own
    files do, which makes ``pickle.load`` cheaper per entry than for ``make_snapshot``'s.
    """
    snap = pickle.loads((REPO_ROOT / "tests" / "data" / "cuda_step.pickle").read_bytes())
    trace = snap["device_traces"][0]
    allocated = {e["addr"] for e in trace if e["action"] == "alloc"}
    freed = {e["addr"] for e in trace if e["action"] == "free_completed"} & allocated
    step = [e for e in trace if e.get("addr") in freed and e["action"] in ("alloc", "free_requested", "free_completed")]
    copies = -(-entries // len(step))
    tiled = [dict(e, addr=e["addr"] + (k << 40)) for k in range(1, copies + 1) for e in step]
    return dict(snap, device_traces=[tiled])


_CACHE: dict[tuple[int, int, int], dict[str, Any]] = {}


def snapshot(entries: int, frames: int = 4, seed: int = 0) -> dict[str, Any]:
    """``make_snapshot``, kept for the next benchmark of this run (generation takes seconds)."""
    key = (entries, frames, seed)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = make_snapshot(entries, frames, seed)
    return _CACHE[key]


def drop_cached() -> None:
    _CACHE.clear()
    gc.collect()


def interval_from(snap: dict[str, Any], step: int, path: Path | None = None) -> Any:
    """The ``Interval`` ``Recorder._finish`` builds from ``snap`` (the same function), as step ``step``."""
    from memsnap_magic.files.meta import META_KEY, Meta
    from memsnap_magic.results.intervals import interval_from_snapshot

    return interval_from_snapshot({**snap, META_KEY: Meta(step=step, rank=0, device="cpu").to_dict()}, path)


# --------------------------------------------------------------------------- IPython cells

# The bare profiler session (the CPU route's floor): what a cell does to open the cheapest session
# that sees the same allocation events (CPU activity, user scope, profile_memory on, nothing else);
# the code measured follows it, then BARE_END. With the Python tracer on: BARE_TRACER.
BARE_SETUP = """
from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig
_config = ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig())
"""
# The session itself, once a shell ran BARE_SETUP (or BARE_TRACER_SETUP): on a cell that does next
# to nothing, compiling the setup's imports would cost as much as the session.
BARE_ON = """_prepare_profiler(_config, {ProfilerActivity.CPU})
_enable_profiler(_config, {ProfilerActivity.CPU}, {RecordScope.USER_SCOPE})
"""
BARE = BARE_SETUP + BARE_ON
# The session a cell without stacks runs since the CPU route dropped the CPU activity there
# (``profiler._quiet_activities``): MTIA's, which this machine has no device for. The same
# allocation events; no kineto CPU trace built at its stop (it warns so on stderr: left there).
QUIET_ON = BARE_ON.replace("ProfilerActivity.CPU", "ProfilerActivity.MTIA")
QUIET = BARE_SETUP + QUIET_ON
assert QUIET != BARE
BARE_TRACER_SETUP = BARE_SETUP.replace("True, False, False, False, _Exp", "True, True, False, False, _Exp")
BARE_TRACER = BARE_TRACER_SETUP + BARE_ON  # with_stack=True
assert BARE_TRACER != BARE
# The session's end: its results are freed inside the cell. As a cell's last expression they would
# become its output, kept in ``Out`` until a later cell's output replaced them, and that cell would
# pay for freeing them (0.2-0.4 s after 300,000 events): a reference timed without its own cost.
BARE_END = "_results = _disable_profiler()\ndel _results\n"


MLP_SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 512)
y = torch.randint(0, 10, (64,))
"""


def mlp_steps(steps: int) -> str:
    """A cell body: ``steps`` training steps (forward, backward, step, zero_grad) of the MLP."""
    return (
        f"for _ in range({steps}):\n"
        "    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )


def make_shell(work_dir: Path) -> Any:
    """A fresh in-process IPython shell: history off, cwd ``work_dir``, memsnap_magic loaded."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    work_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(work_dir)
    InteractiveShell.clear_instance()
    cfg = Config()
    cfg.HistoryAccessor.enabled = False
    shell = InteractiveShell.instance(config=cfg)
    shell.run_line_magic("load_ext", "memsnap_magic")
    return shell


def close_shell(shell: Any) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell.run_line_magic("unload_ext", "memsnap_magic")
    InteractiveShell.clear_instance()


def run_cell(shell: Any, code: str) -> None:
    """Run a cell with its printed output (the magic's summary line) swallowed; raise its error."""
    with contextlib.redirect_stdout(io.StringIO()):
        res = shell.run_cell(code, store_history=False)
    if not res.success:
        raise RuntimeError(f"cell failed: {res.error_before_exec or res.error_in_exec!r}\n{code}")


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
