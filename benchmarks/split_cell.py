"""Where a ``%%memsnap`` cell spends its time, part by part: issue 44's empty-cell and 40k rows, split.

Not a row of ``run.py`` (no reference, no target): the evidence behind those rows' notes. In the
shell ``bench_cell`` uses (the MLP and its optimizer in the namespace, one torch thread), each of
the magic's parts is wrapped in a timer and the cell run ``--cells`` times, alternating with the
plain cell and with PyTorch's own profiler session around the same cell, its Python tracer on
(as the default ``context=all`` runs it). ``--cell empty`` (``_tiny = 1``): the session alone, its
results freed, as ``bench_cell``'s note; ``--cell 40k`` (40,000 ``torch.empty(4)``): the session to
its event tree, ``bench_cpu_floor``'s floor; ``--cell nodes``: what each attribute of PyTorch's
tree costs to read, per node, on that 40k loop's tree (the reading every reader of it pays).
Printed: the median milliseconds of each part per cell, cold (a full collection before each
call, as ``run.py`` times it: a collection reads every object of the process and leaves the
caches cold) and warm (the caches as the cell before left them). The whole cells are timed unwrapped first
(``interleaved``, as ``run.py`` times its rows); then the parts, in cells of their own.

    .venv/bin/python benchmarks/split_cell.py [--cell empty|40k|nodes] [--cells 60]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench_cpu_floor import TREE_END, loop
from common import (
    BARE_END,
    BARE_ON,
    BARE_TRACER_SETUP,
    MLP_SETUP,
    close_shell,
    interleaved,
    make_shell,
    run_cell,
    timed,
    torch_threads,
)

# (label, module, attribute), in the order a cell runs them; an indented label is part of the
# one above it (its time included there)
PARTS = [
    ("the cell's body compiled", "ipython.execute", "CellCode.__init__"),
    ("start", "recording.recorder", "Recorder.start"),
    ("  the watch of models and optimizers (their storages now)", "recording.reach", "Reach.new_watch"),
    ("  opening the interval", "recording.backends.cpu.backend", "CpuBackend.begin"),
    ("    the namespace's storages (walk)", "recording.backends.cpu.backend", "CpuBackend._walk_start"),
    ("    PyTorch's session started (and an RSS read)", "recording.backends.cpu.profiler", "_Profiler.start"),
    ("stop", "recording.recorder", "Recorder.stop"),
    ("  the snapshot", "recording.backends.cpu.backend", "CpuBackend.snapshot_marked"),
    ("    PyTorch's session stopped, its event tree", "recording.backends.cpu.profiler", "_Profiler.stop"),
    ("    the tree read (History.add)", "recording.backends.cpu.history", "History.add"),
    ("    the snapshot dict (History.snapshot)", "recording.backends.cpu.history", "History.snapshot"),
    ("  the watch's end (storages again)", "recording.roles", "Watch.finish"),
    ("  the labels (categories) and the step's mark on the entries", "recording.dump", "_label_and_stamp"),
    ("  the digest (figures, blocks, sites)", "results.digests", "digest"),
    ("  the step's folder made (a write that cannot start fails in its cell)", "recording.dump", "_folder_made"),
    ("  the session joined, the line printed", "recording.dump", "_join_session"),
    ("  the file handed to the writer", "files.writer", "Writer.submit"),
    ("  the interval ended (PyTorch's results freed)", "recording.backends.cpu.backend", "CpuBackend.end"),
    ("both namespace walks (live_storages)", "recording.backends.cpu.backend", "live_storages"),
]


def wrap(spent: dict[str, float]) -> Callable[[], None]:
    """Every part of ``PARTS`` timed into ``spent`` (seconds, summed over calls); returns what
    puts the parts back as they were."""
    undo = []
    for label, module, attribute in PARTS:
        owner: Any = importlib.import_module(f"memsnap_magic.{module}")
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = owner.__dict__[name]
        setattr(owner, name, _timed(fn, label, spent))
        undo.append((owner, name, fn))

    def unwrap() -> None:
        for owner, name, fn in reversed(undo):
            setattr(owner, name, fn)

    return unwrap


def _timed(fn: Callable[..., Any], label: str, spent: dict[str, float]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - t

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", choices=["empty", "40k", "nodes"], default="empty", help="the cell split (empty)")
    parser.add_argument("--cells", type=int, default=60, help="cells of each kind, cold and warm (60)")
    args = parser.parse_args()
    cells = args.cells
    if args.cell == "nodes":
        node_costs()
        return
    from memsnap_magic import wait_for_writes

    body, end = ("_tiny = 1\n", BARE_END) if args.cell == "empty" else (loop(40_000, 4), TREE_END)
    kinds = {
        "%%memsnap": "%%memsnap\n" + body,
        "plain": body,
        "PyTorch's session": BARE_ON + body + end,
    }
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as work, torch_threads(1):
        shell = make_shell(Path(work))
        try:
            run_cell(shell, MLP_SETUP + BARE_TRACER_SETUP)
            for _ in range(5):  # the profiler's one-off start, the first digest's imports
                run_cell(shell, kinds["%%memsnap"])
            for collect in (True, False):
                cell = {kind: functools.partial(run_cell, shell, code) for kind, code in kinds.items()}
                whole = interleaved(cell, cells, warmup=0, settle=wait_for_writes, collect=collect)
                spent: dict[str, float] = {}
                parts: dict[str, list[float]] = {label: [] for label, _, _ in PARTS}
                unwrap = wrap(spent)
                try:
                    for _ in range(cells):
                        wait_for_writes()
                        spent.clear()
                        timed(cell["%%memsnap"], collect)
                        for label in parts:
                            parts[label].append(spent.get(label, 0.0))
                finally:
                    unwrap()
                _report("cold: a full collection before each call" if collect else "warm", whole, parts)
        finally:
            close_shell(shell)
            wait_for_writes()
            os.chdir(here)


def node_costs(repeats: int = 3) -> None:
    """Nanoseconds per node of each attribute of PyTorch's event tree of a 40k ``torch.empty(4)``
    loop recorded with the Python tracer: every node's, then each allocation's fields'. Each
    attribute is read on a fresh session's tree, its nodes' wrappers made first (as a reader
    walking the levels has them), medians of ``repeats``."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # before kineto starts: no USDT lines
    import torch
    from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
    from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig
    from torch._C._profiler import _ExtraFields_Allocation as Allocation

    config = ProfilerConfig(ProfilerState.KINETO, False, True, True, False, False, _ExperimentalConfig())

    def tree() -> tuple[Any, list[Any]]:
        _prepare_profiler(config, {ProfilerActivity.CPU})
        _enable_profiler(config, {ProfilerActivity.CPU}, {RecordScope.USER_SCOPE})
        for _ in range(40_000):
            t = torch.empty(4)
        del t
        result = _disable_profiler()
        nodes, level = [], result.experimental_event_tree()
        while level:
            nodes += level
            level = [child for node in level for child in node.children]
        return result, nodes

    def cost(name: str, of_allocations: bool) -> float:
        """Median ns per item of reading ``name`` of every node (or every allocation's fields)."""
        costs = []
        for _ in range(repeats):
            result, nodes = tree()
            items = [f for f in (n.extra_fields for n in nodes) if type(f) is Allocation] if of_allocations else nodes
            gc.collect()
            t = time.perf_counter()
            [getattr(item, name) for item in items]
            costs.append((time.perf_counter() - t) / len(items) * 1e9)
            del result, nodes, items
        return statistics.median(costs)

    with torch_threads(1):
        _, nodes = tree()
        kinds = sorted({str(n.tag).rsplit(".", 1)[-1] for n in nodes})
        print(f"a 40k loop's tree: {len(nodes):,} nodes ({', '.join(kinds)}); ns per node read")
        for name in ("duration_time_ns", "start_time_ns", "tag", "extra_fields", "children"):
            print(f"  {name:<18} {cost(name, False):6.0f}")
        for name in ("ptr", "alloc_size"):
            print(f"  {name:<18} {cost(name, True):6.0f} (per allocation's fields)")


def _report(title: str, whole: dict[str, list[float]], parts: dict[str, list[float]]) -> None:
    ms = {k: statistics.median(v) * 1000 for k, v in whole.items()}
    plain = ms["plain"]
    print(f"\n{title} (medians, ms a cell)")
    session = ms["PyTorch's session"] - plain
    print(f"  the plain cell {plain:.2f}; PyTorch's session around it +{session:.2f}")
    print(f"  the %%memsnap cell +{ms['%%memsnap'] - plain:.2f} over the plain cell, of which:")
    for label, times in parts.items():
        print(f"    {label:<72} {statistics.median(times) * 1000:6.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
