"""Where issue 44's RSS row goes, and what each way out of it costs: the evidence behind its note.

Not a row of ``run.py`` (no target): the row is ``bench_cpu_floor``'s ``cpu_cell_rss_over_tracer``,
a cell of 150k ``torch.empty(4)`` (300k events) with stacks against PyTorch's session with its
tracer, to its tree. Here that session then reads every allocation back as the benchmark's
``read`` reference does (the tree a level at a time, a fields object per allocation), in fresh
processes (medians of ``--repeats``), keeping:

- every node and fields object read, as the cell keeps them for its writer to free;
- the fields objects only, each level's call nodes let go once their children are read (an
  allocation's node lives as long as its fields object: PyTorch ties them);
- nothing but each allocation's address and size;
- all, the session's own results (its buffers) freed before the tree is read.

Then, in this process, what freeing a session's results costs inside a cell (the price of the
last way), after sessions of 40k and 200k allocations with the tracer (medians of ``--repeats``).

    .venv/bin/python benchmarks/split_rss.py [--allocations 150000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time

from bench_cpu_events import peak_kib
from bench_cpu_floor import KEPT_END, TREE_END, loop
from common import BARE_TRACER

# The session's results are _held[0], its tree's roots _held[1] (KEPT_END). KEEP names what each
# level adds to _held; LET_GO what is dropped before the next level.
READ = """
from itertools import chain as _chain, compress as _compress
from operator import attrgetter as _get, not_ as _not
from torch._C._profiler import _ExtraFields_Allocation as _Alloc
_level = _held[1]
while _level:
    _leaf = list(map(_not, map(_get("duration_time_ns"), _level)))
    _f = list(map(_get("extra_fields"), _compress(_level, _leaf)))
    _a = [f for f in _f if type(f) is _Alloc]
    _held += [KEEP, list(map(_get("ptr"), _a)), list(map(_get("alloc_size"), _a))]
    _inner = list(_compress(_level, map(_not, _leaf)))
    _level = list(_chain.from_iterable(map(_get("children"), _inner)))
    LET_GO
del _level, _f, _a, _leaf, _inner
"""

WAYS = {
    "all kept": ("_level, _f", "pass"),
    "call nodes let go": ("_f", "_inner = None"),
    "addresses and sizes only kept": ("None", "_inner = _f = _a = None"),
}


def peaks(allocations: int, repeats: int) -> dict[str, float]:
    """Median peak RSS (MB) of each way, and of the session to its tree alone (``floor``)."""
    body = BARE_TRACER + loop(allocations, 4)
    cells = {"floor": body + TREE_END}
    for name, (keep, let_go) in WAYS.items():
        cells[name] = body + KEPT_END + READ.replace("KEEP", keep).replace("LET_GO", let_go)
    freed_first = READ.replace("_level = _held[1]\n", "_held[0] = None\n_level = _held[1]\n", 1)
    cells["buffers freed first"] = body + KEPT_END + freed_first.replace("KEEP", "_level, _f").replace("LET_GO", "pass")
    found: dict[str, list[float]] = {name: [] for name in cells}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(repeats):  # alternated, a fresh process each
            for name, cell in cells.items():
                found[name].append(peak_kib(cell, work)[1] / 1024)
    return {name: statistics.median(v) for name, v in found.items()}


def freeing_costs(allocations: int, repeats: int) -> dict[str, float]:
    """Milliseconds to free a tracer session's results, then its tree, after ``allocations``."""
    import torch
    from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
    from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig

    config = ProfilerConfig(ProfilerState.KINETO, False, True, True, False, False, _ExperimentalConfig())
    results, trees = [], []
    for _ in range(repeats):
        gc.collect()
        _prepare_profiler(config, {ProfilerActivity.CPU})
        _enable_profiler(config, {ProfilerActivity.CPU}, {RecordScope.USER_SCOPE})
        for _ in range(allocations):
            t = torch.empty(4)
        del t
        result = _disable_profiler()
        roots = result.experimental_event_tree()
        start = time.perf_counter()
        del result
        middle = time.perf_counter()
        del roots
        results.append(middle - start)
        trees.append(time.perf_counter() - middle)
    return {"results": statistics.median(results) * 1e3, "tree": statistics.median(trees) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allocations", type=int, default=150_000, help="allocations of the RSS cell (150000)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes of each way; sessions freed (3)")
    args = parser.parse_args()
    found = peaks(args.allocations, args.repeats)
    floor = found.pop("floor")
    print(f"peak RSS, {2 * args.allocations:,} events with the tracer: the session to its tree {floor:.0f} MB")
    for name, mb in found.items():
        print(f"  then reading every allocation, {name:30s} {mb - floor:+7.1f} MB")
    for allocations in (40_000, 200_000):
        cost = freeing_costs(allocations, args.repeats)
        print(
            f"freeing a tracer session's results after {allocations:,} allocations: {cost['results']:.0f} ms "
            f"(its tree after them: {cost['tree']:.0f} ms)"
        )


if __name__ == "__main__":
    main()
