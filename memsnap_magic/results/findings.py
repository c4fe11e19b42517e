"""What a run of steps says at a glance: which steps leaked, which spiked. Numbers only; ``views.explain``
turns them into the dashboard's headline.

The rules, chosen so that noise makes no claim:
- a step **leaks** when it keeps more than ``max(1 MiB, 1 % of its start)`` (``kept`` is its end
  minus its start; in a file labelled by category, at most what it made and kept besides
  parameters, gradients and optimizer state, unless the same kind of state grew past the floor
  in it and in a step beside it: an optimizer made anew each step, not its first step);
  consecutive leaking steps form one run;
- a step **spikes** when what it held only for a while (the most it held at once of what it
  both allocated and freed: ``Interval.transient``) stands out from the run's typical such
  figure (the median over the steps shown) by more than half of it, more than four times the
  run's usual spread (the median distance from it), and more than ``max(1 MiB, 1 % of its
  start)``. What a step kept (a leak, an optimizer's first state) is not held for a while, so a
  leaking run neither shrinks its steps' figures nor pulls the typical one down; ±10 % noise
  stays within the margin; at least three steps are needed to tell what is typical;
- an allocation **site leaks** in a leaking step when what is held from there at the step's end
  grew since the step before's end by more than ``max(1 MiB, 1 % of the step's start)``; the
  first step shown, with no step before it, when it allocated that much there and still held it
  and the site grows in the next step too. Consecutive such steps form one run. A buffer each
  step replaces (gradients made anew after ``zero_grad()``) holds the same at every end: no leak.
  Files without the sites of what they hold use what the step allocated and held.

A ``clear=false`` step's snapshot goes on into the next one, whose figures then count from the
chain's start: the rules read each step's own share (its start is the step before's end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from ..core.categories import GRADIENT, MODEL_STATE, OPTIMIZER_STATE, OTHER, PARAMETER
from .digests import HELD_SITES
from .intervals import Interval, holds
from .measures import Figures

MiB = 1 << 20
FLOOR = MiB  # below this no step leaks or spikes, whatever its start
SHARE = 0.01  # ... nor by less than this share of its start


@dataclass(frozen=True)
class Leak:
    """Consecutive leaking steps: ``first``..``last`` (step numbers) and what each kept."""

    steps: tuple[int, ...]
    kept: tuple[int, ...]
    since: int | None  # the step before the run, whose end the run started from

    @property
    def total(self) -> int:
        return sum(self.kept)


@dataclass(frozen=True)
class SiteLeak:
    """An allocation site that kept memory in consecutive leaking steps."""

    site: str
    steps: tuple[int, ...]
    kept: tuple[int, ...]  # what the site kept in each of them
    since: int | None = None  # the step whose end the first one's growth counts from, if not the one before it

    @property
    def total(self) -> int:
        return sum(self.kept)


@dataclass(frozen=True)
class Spike:
    step: int
    held: int  # what it held only for a while
    typical: int  # the median of that over the steps shown
    rise: int  # its peak over its own start


def floor(start: int) -> float:
    """What a step must keep to leak, or hold for a while past the typical to spike."""
    return max(FLOOR, SHARE * start)


@dataclass(frozen=True)
class _Own(Figures):
    """A step's own figures where its snapshot also holds the step before it (``clear=false``)."""

    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    kept_by_site: list[list[Any]] = field(default_factory=list)
    held_by_site: list[list[Any]] = field(default_factory=list)


def own_figures(intervals: Sequence[Any]) -> list[Any]:
    """Each step as the rules read it: as it is, or, where its history went on from the step
    before (that step had ``clear=false``), from that step's end, with only the bytes per site
    it added."""
    out: list[Any] = []
    for n, iv in enumerate(intervals):
        prev = intervals[n - 1] if n else None
        if prev is None or getattr(prev, "clear", True) or not holds(iv, prev):
            out.append(iv)
            continue
        before = {site: nbytes for site, nbytes, _ in getattr(prev, "kept_by_site", [])}
        added = [[s, b - before.get(s, 0), k] for s, b, k in getattr(iv, "kept_by_site", []) if b > before.get(s, 0)]
        added.sort(key=lambda row: -row[1])
        held = getattr(iv, "held_by_site", [])  # what an end holds does not depend on the chain
        out.append(_Own(prev.end_allocated, iv.peak_allocated, iv.end_allocated, iv.trace_entries, added, held))
    return out


def leaked(iv: Figures) -> int:
    """What a step kept that may be a leak: all it kept, or, where its file says what each block
    was, no more than what it made and kept besides parameters, gradients and optimizer state
    (AdamW's first step keeps its state and the gradients: no leak)."""
    parts: dict[str, int] | None = getattr(iv, "by_category", None)
    if not parts:
        return iv.kept
    return min(iv.kept, sum(v for k, v in parts.items() if k not in MODEL_STATE and k != OTHER))


def leaks(intervals: Sequence[Figures], steps: Sequence[int]) -> list[Leak]:
    """Runs of consecutive leaking steps, in order (``steps[i]`` names ``intervals[i]``)."""
    intervals = own_figures(intervals)
    amounts = [_leaked_at(intervals, i) for i in range(len(intervals))]
    leaking = [i for i, kept in enumerate(amounts) if kept]
    return [
        Leak(
            steps=tuple(steps[j] for j in run),
            kept=tuple(amounts[j] for j in run),
            since=steps[run[0] - 1] if run[0] > 0 and _ended_before(intervals[run[0] - 1], intervals[run[0]]) else None,
        )
        for run in _consecutive(leaking)
    ]


def _leaked_at(intervals: Sequence[Figures], i: int) -> int:
    """What step ``i`` leaked, 0 if it did not: ``leaked`` past the floor, or all it kept where
    that is model state grown step after step: the same kind of state (``_POOLS``) grew past the
    floor in it and in a step beside it (an optimizer made anew each step, the old ones' state
    still held). An optimizer's first step grows its state once; a cell that makes the gradients
    and the next that makes the optimizer's state grow two kinds; the first step shown, whose
    growth is unknown, counts where the step after it does."""
    iv = intervals[i]
    limit, own = floor(iv.baseline_allocated), leaked(iv)
    if own > limit:
        return own
    if iv.kept <= limit:
        return 0
    if i == 0:
        repeated = len(intervals) > 1 and intervals[1].kept > floor(intervals[1].baseline_allocated)
        return int(iv.kept) if repeated and _regrown(intervals, 1) else 0
    return int(iv.kept) if _regrown(intervals, i) else 0


# Kinds of state a step may grow by design once; grown step after step, they are a leak. Old
# optimizers' or models' state is no longer seen as theirs: it counts as ``other``.
_POOLS = ((GRADIENT,), (OPTIMIZER_STATE, OTHER), (PARAMETER, OTHER))


def _regrown(intervals: Sequence[Figures], i: int) -> bool:
    """Whether a kind of state grew past the floor in step ``i`` (``i`` ≥ 1) and in a step beside it."""
    beside = set().union(*(_grown(intervals, j) for j in (i - 1, i + 1) if 1 <= j < len(intervals)))
    return bool(_grown(intervals, i) & beside)


def _grown(intervals: Sequence[Figures], i: int) -> set[int]:
    """The pools (indices into ``_POOLS``) whose state at step ``i``'s end grew past the floor
    over step ``i - 1``'s; none where either file has no labels."""
    now, before = (getattr(intervals[j], "by_category", None) for j in (i, i - 1))
    if not now or before is None:
        return set()
    limit = floor(intervals[i].baseline_allocated)
    return {n for n, pool in enumerate(_POOLS) if sum(now.get(c, 0) - before.get(c, 0) for c in pool) > limit}


def _ended_before(earlier: Any, later: Any) -> bool:
    """Whether the step shown before another also ran before it (a step recorded after a
    larger one is shown before it, and what is "held since" it means nothing)."""
    a, b = getattr(earlier, "end_us", None), getattr(later, "end_us", None)
    return a is None or b is None or a <= b


def _consecutive(positions: Sequence[int]) -> list[list[int]]:
    """Ascending positions split into runs of consecutive ones: [1, 2, 4] -> [[1, 2], [4]]."""
    runs: list[list[int]] = []
    for i in positions:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def leak_sites(intervals: Sequence[Interval], steps: Sequence[int]) -> list[SiteLeak]:
    """Sites that kept memory in leaking steps, as runs of consecutive steps, largest total first."""
    own = own_figures(intervals)
    ends = [_held(iv, HELD_SITES) for iv in own]
    before, after = _neighbours_in_time(intervals)
    held: dict[str, dict[int, int]] = {}  # site -> position of the step -> bytes it kept there
    # (site, position of a step) -> position of the step its growth there counts from, where the
    # site grew by more than the step itself kept there: the steps between added to it
    spans: dict[tuple[str, int], int] = {}
    for i, iv in enumerate(own):
        limit = floor(iv.baseline_allocated)
        if leaked(iv) <= limit:
            continue
        j, k = before.get(i), after.get(i)
        here, then, next_ = ends[i], ends[j] if j is not None else None, ends[k] if k is not None else None
        if j is not None and here is not None and then is not None:
            grown = _growth(then, here)
            own_kept = {s: b for s, b, _ in iv.kept_by_site}
            spans.update(((s, i), j) for s, b in grown.items() if b > own_kept.get(s, 0) + limit)
        elif here is not None and k is not None and next_ is not None:  # the first: its next confirms
            later = _growth(here, next_)
            grown = {s: b for s, b, _ in iv.kept_by_site if later.get(s, 0) > floor(own[k].baseline_allocated)}
        else:
            grown = {s: b for s, b, _ in iv.kept_by_site}
        for site, nbytes in grown.items():
            if nbytes > limit:
                held.setdefault(site, {})[i] = nbytes
    found = [
        SiteLeak(site, tuple(steps[j] for j in run), tuple(by_step[j] for j in run), _since(steps, spans, site, run[0]))
        for site, by_step in held.items()
        for part in _consecutive(sorted(by_step))
        # a step whose growth spans steps not shown starts a run of its own
        for run in _split(part, [_since(steps, spans, site, j) is not None for j in part])
    ]
    return sorted(found, key=lambda leak: -leak.total)


def _split(run: list[int], starts: list[bool]) -> list[list[int]]:
    """``run`` cut before each position marked in ``starts`` (the first always starts one)."""
    parts: list[list[int]] = []
    for position, start in zip(run, starts):
        if start or not parts:
            parts.append([])
        parts[-1].append(position)
    return parts


def _since(steps: Sequence[int], spans: dict[tuple[str, int], int], site: str, first: int) -> int | None:
    """The step a site's growth in step ``steps[first]`` counts from, where that growth spans
    steps numbered between the two that are not shown (steps 1 and 9 listed, the site grown by
    more than step 9 kept there: grown somewhere in 2-9); None where it is the step before it,
    or a later one recorded earlier (steps 1, 5, 3)."""
    j = spans.get((site, first))
    if j is None or type(steps[j]) is not int or type(steps[first]) is not int or steps[j] >= steps[first] - 1:
        return None
    return steps[j]


def _neighbours_in_time(intervals: Sequence[Any]) -> tuple[dict[int, int], dict[int, int]]:
    """Position -> the position of the step that ran just before it, and just after it: by the
    time each ended where every step says (steps recorded 1, 5, 3, 4: step 3 follows step 5's
    end), else the order shown."""
    ended = [getattr(iv, "end_us", None) for iv in intervals]
    order = (
        sorted(range(len(intervals)), key=lambda i: (ended[i], i))
        if all(type(t) is int for t in ended)
        else list(range(len(intervals)))
    )
    return dict(zip(order[1:], order)), dict(zip(order, order[1:]))


def _held(iv: Any, full: int) -> tuple[dict[str, int], bool] | None:
    """What a step's end holds per site, and whether that list was cut (None: the file has none)."""
    rows = getattr(iv, "held_by_site", None)
    if not rows:
        return None
    return {site: nbytes for site, nbytes, _ in rows}, len(rows) >= full


def _growth(before: tuple[dict[str, int], bool], after: tuple[dict[str, int], bool]) -> dict[str, int]:
    """Bytes each site holds at ``after``'s end beyond ``before``'s (a site missing from a cut list
    is not known to have held nothing: it is left out)."""
    then, cut = before
    return {s: b - then.get(s, 0) for s, b in after[0].items() if s in then or not cut}


STANDS_OUT = 0.5  # a spike holds more than typical by this share of typical...
SPREADS = 4  # ... and by this many times the run's median distance from typical


def spikes(intervals: Sequence[Figures], steps: Sequence[int]) -> list[Spike]:
    """Steps whose memory held only for a while stands out from the others', in step order."""
    if len(intervals) < 3:  # too few to tell what is typical
        return []
    intervals = own_figures(intervals)
    held = [held_for_a_while(iv) for iv in intervals]
    typical = median(held)
    spread = median(abs(h - typical) for h in held)
    found = [
        Spike(step, h, int(typical), iv.peak_increase)
        for step, iv, h in zip(steps, intervals, held)
        if h - typical > max(STANDS_OUT * typical, SPREADS * spread, floor(iv.baseline_allocated))
    ]
    return sorted(found, key=lambda s: s.step)


def held_for_a_while(iv: Figures) -> int:
    """What a step held only for a while: the most it held at once of what it both allocated and
    freed, where known; else its peak above the higher of its start and end (a step built by
    hand, or one of a ``clear=false`` chain, whose snapshot holds the steps before it too)."""
    known = getattr(iv, "transient", None)
    if type(known) is int:
        return known
    return iv.peak_allocated - max(iv.baseline_allocated, iv.end_allocated)


def born_in(block: dict[str, Any], earlier: Sequence[Interval]) -> int | None:
    """The step that allocated a block live before this one began: the latest of ``earlier``
    (same rank and device, in order) that ended with a block of this address and size of its own
    making. None when none did (allocated before recording, or among blocks too small to keep)."""
    addr: Any = block.get("addr")
    size = block.get("size")
    for iv in reversed(earlier):
        if iv.born.get(addr) == size:
            return iv.step
    return None
