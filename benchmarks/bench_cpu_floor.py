"""The CPU route against PyTorch's own sessions **to their event tree** (issue 44, rows 1-5).

The floors are PyTorch's sessions as the CPU route runs them, ``_disable_profiler()`` then
``experimental_event_tree()`` and nothing else, the tree and the session's results freed inside
the timed cell: with its Python tracer on for the default ``context=all`` (stacks), off for
``context=none``. Whatever a ``%%memsnap`` cell costs beyond its floor is ours. Every call starts
once the writes before it are done (a cell's latency, not its write); interleaved medians.

The cell leaves freeing PyTorch's results (~1 µs per event) to its background writer, which the
floor pays inside, so each note also gives the cell against the same session with its results
kept and freed untimed after the call (``kept``), and what merely reading every allocation's
address and size back through PyTorch's Python API costs on that (the tree walked, a fields
object per allocation, all kept too: ``read``): no reader of its events goes under that. And
what any writer of PyTorch's schema pays in the cell at the least on the 40k rows (``entries``):
the events read (with the tracer, their times read and put in time order), then the trace entry
(a dict) of each event the default ring keeps, by code of its own (none of ours).

Rows:

- 40k tiny ``torch.empty(4)`` in one cell (80k events), default options / the tracer session to
  its tree (target <= 1.15x), and ``context=none`` / the bare session to its tree (<= 1.10x),
  in a namespace like the demo's, as the issue asks: a model, its optimizer and a batch
  (``MLP_SETUP``), so the cell walks them and labels its blocks by what they are;
- 200k ``torch.empty(16)`` (400k events; the default ``max_entries`` ring overflows), the same two
  ratios (<= 1.15x, <= 1.10x);
- for both, reported: the ``context=none`` cell against the session it runs now, without the CPU
  activity (``QUIET``: the same events, no kineto CPU trace), to its tree; the issue's floor
  for ``context=none`` is the CPU activity's session, which that cell no longer pays for;
- beyond ``max_entries`` our work must not grow with the cell's length: our time after PyTorch's
  tree is made (timed inside the cell: from ``experimental_event_tree()``'s return to the cell's
  end) per event, at 1M events against 200k, ``context=none`` and default ``max_entries``
  (target <= 1.10x); in the note the same with stacks;
- 300k allocation events, ``max_entries=1000``: the cell's peak RSS above the tracer session's
  own (to its tree, fresh processes, medians of three each, alternated; target <= 100 MB); in
  the note the peak of that session then reading every allocation as ``read`` does, all kept.
"""

from __future__ import annotations

import statistics
import time

from bench_cpu_events import peak_kib
from common import (
    BARE,
    BARE_TRACER,
    MLP_SETUP,
    QUIET,
    Context,
    Row,
    close_shell,
    interleaved,
    make_shell,
    run_cell,
    torch_threads,
)

NAME = "cpu_floor"

# PyTorch's session to its event tree; the tree (and with it the session's results) freed in the cell
TREE_END = "_roots = _disable_profiler().experimental_event_tree()\ndel _roots\n"
# The same session to its tree, the tree and the session's results kept (``_held``) and freed
# untimed before the next call, as the cell leaves them to its background writer: the floor
# without the freeing its cell pays for (~1 µs per event)
KEPT_END = "_held = [_disable_profiler()]\n_held.append(_held[0].experimental_event_tree())\n"
# That, then every allocation's address and size read as any reader of the tree must: the tree
# walked a level at a time (a node's fields read only where it has no duration: allocations are
# instants), each allocation's fields object, address and size; C-level passes, all kept too
READ_END = (
    KEPT_END
    + """
from itertools import chain as _chain, compress as _compress
from operator import attrgetter as _get, not_ as _not
from torch._C._profiler import _ExtraFields_Allocation as _Alloc
_level = _held[1]
while _level:
    _leaf = list(map(_not, map(_get("duration_time_ns"), _level)))
    _f = list(map(_get("extra_fields"), _compress(_level, _leaf)))
    _a = [f for f in _f if type(f) is _Alloc]
    _held += [_level, _f, list(map(_get("ptr"), _a)), list(map(_get("alloc_size"), _a))]
    _level = list(_chain.from_iterable(map(_get("children"), _compress(_level, map(_not, _leaf)))))
del _level, _f, _a, _leaf
"""
)

# That, with each allocation's time read too and the events put in time order (a stable sort of
# their times): a tree read a level at a time gives the events out of order (a free sits under
# the Python call, an allocation under the C function inside it), so a reader of the tracer's tree
# that builds entries in order pays this before it builds anything (the times kept, for ``ENTRIES_END``)
READ_TIMED_END = (
    KEPT_END
    + """
from itertools import chain as _chain, compress as _compress
from operator import attrgetter as _get, not_ as _not
import numpy as _np
from torch._C._profiler import _ExtraFields_Allocation as _Alloc
_level, _times = _held[1], []
while _level:
    _leaf = list(map(_not, map(_get("duration_time_ns"), _level)))
    _n = list(_compress(_level, _leaf))
    _f = list(map(_get("extra_fields"), _n))
    _is = [type(f) is _Alloc for f in _f]
    _a = list(_compress(_f, _is))
    _times += map(_get("start_time_ns"), _compress(_n, _is))
    _held += [_level, _f, list(map(_get("ptr"), _a)), list(map(_get("alloc_size"), _a))]
    _level = list(_chain.from_iterable(map(_get("children"), _compress(_level, map(_not, _leaf)))))
_held += [_times, _np.argsort(_np.array(_times, dtype=_np.int64), kind="stable")]
del _level, _times, _leaf, _n, _f, _is, _a
"""
)


def _ring_entries(order: str, times: str) -> str:
    """Code building the ring's entries from ``_ptrs`` and ``_sizes`` (as read), ``order`` (the
    indices into them in time order) and ``times`` (an iterable of the times of ``_newest``)."""
    return f"""
_newest = {order}[len(_sizes) - int(_np.searchsorted(
    _np.where(_np.array(_sizes, dtype=_np.int64)[{order}] > 0, 2, 3)[::-1].cumsum(), _RING, side="right")):].tolist()
_held.append([
    {{"action": "alloc", "addr": p, "size": s, "stream": 0, "time_us": t // 1000}}
    if s > 0
    else {{"action": "free_completed", "addr": p, "size": -s, "stream": 0, "time_us": t // 1000}}
    for t, p, s in zip({times}, map(_ptrs.__getitem__, _newest), map(_sizes.__getitem__, _newest))
])
del _ptrs, _sizes, _newest
"""


# The least any writer of PyTorch's schema pays in the cell: the events read, then the trace
# entries of those the default ring keeps (``max_entries``; an ``alloc`` is two entries once its
# ``segment_alloc`` is written in, a ``free_completed`` three), a dict of the schema's five fields
# each, in time order, all kept. Written from PyTorch's objects alone, none of our code, and
# without what a snapshot needs besides (the end state, any figure). With the tracer: after
# ``READ_TIMED_END``'s reading, which puts the events in time order
ENTRIES_END = (
    READ_TIMED_END
    + """
_ptrs, _sizes = list(_chain.from_iterable(_held[4:-2:4])), list(_chain.from_iterable(_held[5:-2:4]))
"""
    + _ring_entries("_held[-1]", "map(_held[-2].__getitem__, _newest)")
)
# Without the tracer a session's tree is its allocations alone, in time order: each event's fields
# object, address and size read, the time only of those the ring keeps
FLAT_ENTRIES_END = (
    KEPT_END
    + """
from operator import attrgetter as _get
import numpy as _np
from torch._C._profiler import _ExtraFields_Allocation as _Alloc
_f = list(map(_get("extra_fields"), _held[1]))
assert set(map(type, _f)) == {_Alloc}, "the bare session's tree holds other events than allocations"
_ptrs, _sizes = list(map(_get("ptr"), _f)), list(map(_get("alloc_size"), _f))
_held += [_f, _ptrs, _sizes]
del _f
"""
    + _ring_entries("_np.arange(len(_sizes))", 'map(_get("start_time_ns"), map(_held[1].__getitem__, _newest))')
)


def loop(allocations: int, numel: int) -> str:
    return f"for _ in range({allocations}):\n    t = torch.empty({numel})\n"


class _AfterTree:
    """Times the cell's work after PyTorch's event tree is made: from the CPU profiler's ``stop``
    returning to the end of the cell (``run_cell`` returning)."""

    def __init__(self) -> None:
        from memsnap_magic.recording.backends.cpu import profiler

        self._cls = profiler._Profiler
        self._stop = self._cls.stop
        self.at: float | None = None

    def __enter__(self) -> _AfterTree:
        inner, outer = self._stop, self

        def stop(profiler: object) -> object:
            try:
                return inner(profiler)  # type: ignore[arg-type]
            finally:
                outer.at = time.perf_counter()

        self._cls.stop = stop  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls.stop = self._stop  # type: ignore[method-assign]

    def cell(self, shell: object, code: str, into: list[float]) -> None:
        self.at = None
        run_cell(shell, code)
        end = time.perf_counter()
        assert self.at is not None
        into.append(end - self.at)


def run(ctx: Context) -> list[Row]:
    from memsnap_magic import wait_for_writes
    from memsnap_magic.recording.options import Options

    tiny = ctx.pick(40_000, 8_000)  # torch.empty(4): 80k events
    ring = ctx.pick(200_000, 60_000)  # torch.empty(16): 400k events, past the default ring
    grow = ctx.pick((100_000, 500_000), (20_000, 100_000))  # 200k and 1M events
    shell = make_shell(ctx.work / "cpu_floor")

    def settle() -> None:  # no call pays for the writes before it, nor for what a reading kept
        wait_for_writes()
        shell.user_ns.pop("_held", None)

    after: dict[str, list[float]] = {}
    try:
        run_cell(shell, "import torch")
        shell.user_ns["_RING"] = Options().max_entries  # the ring the entries' floor keeps: the default
        run_cell(shell, "%%memsnap device=cpu\nwarm = torch.ones(4)")  # the profiler's one-off start
        med: dict[str, dict[str, float]] = {}
        with torch_threads(1), _AfterTree() as tree:
            for name, (n, numel) in {"tiny": (tiny, 4), "ring": (ring, 16)}.items():
                # the tiny rows in a training notebook's namespace; the ring's, about length, without
                run_cell(shell, MLP_SETUP if name == "tiny" else "del model, opt, x, y")
                body = loop(n, numel)
                calls = {
                    "all": lambda body=body: run_cell(shell, "%%memsnap device=cpu\n" + body),
                    "tracer_tree": lambda body=body: run_cell(shell, BARE_TRACER + body + TREE_END),
                    "none": lambda body=body: run_cell(shell, "%%memsnap device=cpu context=none\n" + body),
                    "bare_tree": lambda body=body: run_cell(shell, BARE + body + TREE_END),
                    "quiet_tree": lambda body=body: run_cell(shell, QUIET + body + TREE_END),
                    "tracer_kept": lambda body=body: run_cell(shell, BARE_TRACER + body + KEPT_END),
                    "bare_kept": lambda body=body: run_cell(shell, BARE + body + KEPT_END),
                    "tracer_read": lambda body=body: run_cell(shell, BARE_TRACER + body + READ_END),
                    "bare_read": lambda body=body: run_cell(shell, BARE + body + READ_END),
                    "tracer_timed": lambda body=body: run_cell(shell, BARE_TRACER + body + READ_TIMED_END),
                }
                if name == "tiny":  # where reading leaves the target too little for anything else
                    calls["tracer_entries"] = lambda body=body: run_cell(shell, BARE_TRACER + body + ENTRIES_END)
                    calls["bare_entries"] = lambda body=body: run_cell(shell, BARE + body + FLAT_ENTRIES_END)
                times = interleaved(calls, ctx.repeats, settle=settle)
                med[name] = {k: statistics.median(v) for k, v in times.items()}
            for n in grow:
                for context in ("none", "all"):
                    key = f"{context}_{2 * n}"
                    after[key] = []
                    code = f"%%memsnap device=cpu context={context}\n" + loop(n, 16)
                    tree.cell(shell, code, [])  # a warm-up call, not kept
                    for _ in range(min(ctx.repeats, 7)):
                        wait_for_writes()
                        tree.cell(shell, code, after[key])
            wait_for_writes()
    finally:
        close_shell(shell)

    rows = []
    for name, n, what in (
        ("tiny", tiny, f"{tiny // 1000}k tiny torch.empty(4) in one cell ({2 * tiny // 1000}k events)"),
        ("ring", ring, f"{ring // 1000}k torch.empty(16) in one cell ({2 * ring // 1000}k events, the ring overflows)"),
    ):
        m = med[name]
        for mode, session, limit in (("all", "tracer", 1.15), ("none", "bare", 1.10)):
            floor, kept, read = f"{session}_tree", f"{session}_kept", f"{session}_read"
            value = m[mode] / m[floor]
            # against the floor without its freeing: the cell's own, and merely reading every event's
            reading, unfreed = m[read] / m[kept], m[mode] / m[kept]
            ours_ms = (m[mode] - m[floor]) * 1e3
            # what the target leaves after that reading, and what the cell spends beyond it
            left_ms, beyond_ms = (limit * m[floor] - m[read]) * 1e3, (m[mode] - m[read]) * 1e3
            timed = (
                f", with their times read and the events put in time order {m['tracer_timed'] / m[kept]:.2f}x"
                if mode == "all"
                else ""
            )
            # the least any in-cell writer of PyTorch's schema pays: that reading, then the ring's
            # times and entries, against the floor itself
            entries = m[f"{session}_entries"] / m[floor] if f"{session}_entries" in m else None
            rows.append(
                Row(
                    f"cpu_{name}_{mode}_vs_tree",
                    f"%%memsnap {what}, " + ("default options" if mode == "all" else "context=none"),
                    "PyTorch's session "
                    + ("with its Python tracer" if mode == "all" else "(bare)")
                    + " to its event tree",
                    value,
                    "x",
                    f"<= {limit:g}x",
                    value <= limit,
                    {
                        "median_s": m,
                        "ours_ms": ours_ms,
                        "vs_kept": unfreed,
                        "read_vs_kept": reading,
                        "left_after_read_ms": left_ms,
                        "beyond_read_ms": beyond_ms,
                        **({"entries_vs_floor": entries} if entries is not None else {}),
                        "events": 2 * n,
                    },
                    f"{m[mode] * 1e3:.0f} vs {m[floor] * 1e3:.0f} ms, ours {ours_ms:.0f} ms; against that session "
                    f"with its results freed after the call (as the cell frees them: {m[kept] * 1e3:.0f} ms) "
                    f"{unfreed:.2f}x, where merely reading every allocation's address and size is {reading:.2f}x"
                    f"{timed}; the target leaves {left_ms:.0f} ms after that reading, the cell spends "
                    f"{beyond_ms:.0f} ms beyond it"
                    + (
                        f"; reading the events as any reader must, then building the trace entries the ring keeps "
                        f"(PyTorch's schema, in time order; no end state, no figure; none of our code): "
                        f"{entries:.2f}x the floor"
                        if entries is not None
                        else ""
                    ),
                )
            )
        # the session the context=none cell runs now: the floor above is the CPU activity's
        quiet = m["none"] / m["quiet_tree"]
        rows.append(
            Row(
                f"cpu_{name}_none_vs_quiet_tree",
                f"%%memsnap {what}, context=none",
                "the session it runs, without the CPU activity (MTIA's), to its event tree",
                quiet,
                "x",
                "reported",
                None,
                {"median_s": {k: m[k] for k in ("none", "quiet_tree", "bare_tree")}, "events": 2 * n},
                f"{m['none'] * 1e3:.0f} vs {m['quiet_tree'] * 1e3:.0f} ms, "
                f"ours {(m['none'] - m['quiet_tree']) * 1e3:.0f} ms; "
                f"that session costs {m['quiet_tree'] / m['bare_tree']:.2f}x the CPU activity's "
                f"({m['bare_tree'] * 1e3:.0f} ms)",
            )
        )
    per_event = {k: statistics.median(v) / (int(k.split("_")[1])) * 1e9 for k, v in after.items()}
    small, large = 2 * grow[0], 2 * grow[1]
    growth = {c: per_event[f"{c}_{large}"] / per_event[f"{c}_{small}"] for c in ("none", "all")}
    rows.append(
        Row(
            "cpu_ring_ours_per_event_growth",
            f"ours after PyTorch's event tree per event, {large // 1000}k events, context=none, default max_entries",
            f"the same at {small // 1000}k events",
            growth["none"],
            "x",
            "<= 1.1x",
            growth["none"] <= 1.1,
            {"ns_per_event": per_event, "after_tree_s": after, "with_stacks": growth["all"]},
            f"{per_event[f'none_{small}']:.0f} → {per_event[f'none_{large}']:.0f} ns per event; with stacks "
            f"{growth['all']:.2f}x ({per_event[f'all_{small}']:.0f} → {per_event[f'all_{large}']:.0f} ns)",
        )
    )
    main = ctx.pick(150_000, 30_000)  # allocations: 300k events
    cell_peak, tracer_peak, read_peak = [], [], []
    for _ in range(ctx.pick(3, 1)):  # fresh processes, alternated
        cell_peak.append(peak_kib(f"%%memsnap device=cpu max_entries=1000\n{loop(main, 4)}", str(ctx.work))[1])
        tracer_peak.append(peak_kib(BARE_TRACER + loop(main, 4) + TREE_END, str(ctx.work))[1])
        read_peak.append(peak_kib(BARE_TRACER + loop(main, 4) + READ_END, str(ctx.work))[1])
    cell_mib, tracer_mib = statistics.median(cell_peak) / 1024, statistics.median(tracer_peak) / 1024
    read_mib = statistics.median(read_peak) / 1024
    rows.append(
        Row(
            "cpu_cell_rss_over_tracer",
            f"peak RSS of the cell above the tracer session's to its tree, {2 * main:,} events, max_entries=1000",
            "PyTorch's session with its Python tracer, to its tree (fresh processes)",
            cell_mib - tracer_mib,
            "MB",
            "<= 100 MB",
            cell_mib - tracer_mib <= 100,
            {
                "cell_peak_mib": [k / 1024 for k in cell_peak],
                "tracer_peak_mib": [k / 1024 for k in tracer_peak],
                "read_peak_mib": [k / 1024 for k in read_peak],
            },
            f"peaks {cell_mib:.0f} vs {tracer_mib:.0f} MB (medians of {len(cell_peak)} fresh processes each); "
            f"that session then reading every allocation's address and size, keeping what it read as the "
            f"cell does (to free it after the cell): {read_mib - tracer_mib:+.0f} MB, "
            f"ours {cell_mib - read_mib:+.0f} MB",
        )
    )
    return rows
