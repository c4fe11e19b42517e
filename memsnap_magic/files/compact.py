"""A trace whose viewer-only entries are written in later: the CPU route's, while the cell waits.

Each CPU allocation is two trace entries and each free three: the ``alloc`` and ``free_completed``
that carry its bytes, and ``segment_alloc``, ``free_requested`` and ``segment_free``, which only
PyTorch's viewer reads (it replays blocks inside segments) and which repeat their block entry's
fields. Figures, labels and marks read the block entries alone, so the CPU route keeps only those
(``Compact``; a step's own are not even built while the user waits: ``pending``), and ``complete``
writes the companions in just before the file is written, off the cell's critical path: 80,000
events are 200,000 dicts, 120,000 of them companions. The completed trace is the one a single pass
would have built, entry for entry (``tests/test_compact.py`` holds the two together).
"""

from __future__ import annotations

from typing import Any, Callable


class Compact(list):  # type: ignore[type-arg]
    """The block entries of a trace in order (and any other entry: an ``oom``, the snapshot marker),
    with what completing it adds. ``segments``: each block entry gets its segment event (allocations
    a ``segment_alloc`` before, frees a ``segment_free`` after; every free a ``free_requested``
    before). ``cut_first``: the ring cut the first entry's group, so what came before that
    entry in it is not written (a kept ``segment_free`` of a group whose ``free_completed`` was cut
    is in the list itself). ``companions``: how many entries completing adds. ``marked``: how
    many of its first entries were given their step's mark as they were built."""

    segments: bool = True
    cut_first: bool = False
    companions: int = 0
    marked: int = 0

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a Compact trace is written completed: compact.complete(snapshot) first")


def ring_cut(
    n: int, allocs: int, action_at: Callable[[int], Any], max_entries: int, segments: bool
) -> tuple[int, int, int]:
    """Where the ring cuts a trace of ``n`` block entries (``allocs`` of them allocations;
    ``action_at(i)``: entry i's action) whose completed form holds the newest ``max_entries``:
    ``(first, cut, companions)``: the first entry kept, how many of its group's completed entries
    are cut, and how many entries completing the kept ones adds."""
    alloc_group, free_group = (2, 3) if segments else (1, 2)
    total = free_group * n - (free_group - alloc_group) * allocs
    first, cut = 0, max(total - max_entries, 0)
    while cut and first < n:  # groups wholly older than the window
        size = alloc_group if action_at(first) == "alloc" else free_group
        if cut < size:
            break
        cut -= size
        first += 1
    return first, cut, total - max(total - max_entries, 0) - (n - first)


def segment_free_left(segments: bool, action: Any, cut: int) -> bool:
    """Whether the ring's cut of ``cut`` entries through the first kept group (its entry's
    ``action``) leaves only that free's ``segment_free``: the entry is written as it."""
    return segments and action == "free_completed" and cut == 2


def cut_head(kept: Compact, cut: int) -> None:
    """The kept trace's first entry, whose group the ring cut by ``cut`` entries: where that
    leaves a free's ``segment_free`` alone, the entry becomes it; else what came before it in
    its group is not written (``cut_first``)."""
    if not cut:
        return
    head = kept[0]
    if segment_free_left(kept.segments, head["action"], cut):
        kept[0] = {**head, "action": "segment_free"}
    else:
        kept.cut_first = True


def entries(trace: Any) -> int:
    """How many entries ``trace`` (a list, a ``Compact`` or a ``pending.Pending``, which counts
    its ``companions`` as ``Compact`` does) holds once completed."""
    return len(trace) + getattr(trace, "companions", 0)


def expand(trace: Compact) -> list[dict[str, Any]]:
    """The completed trace: each block entry with its companions, copies of it (same fields and
    frames list, mark and category)."""
    out: list[dict[str, Any]] = []
    add, segments = out.append, trace.segments
    for n, e in enumerate(trace):
        action = e.get("action")
        whole = n > 0 or not trace.cut_first
        if action == "alloc":
            if segments and whole:
                add(_companion(e, "segment_alloc"))
            add(e)
        elif action == "free_completed":
            if whole:
                add(_companion(e, "free_requested"))
            add(e)
            if segments:
                add(_companion(e, "segment_free"))
        else:
            add(e)
    return out


def complete(snap: dict[str, Any], pause: Callable[[], None] | None = None) -> None:
    """Write the companions into every ``Compact`` trace of ``snap``, in place. A trace still to
    build (``pending.Pending``, the one trace with ``built``) is built first, with ``pause``
    between slices."""
    traces = snap.get("device_traces")
    if type(traces) is list:
        for i, trace in enumerate(traces):
            build = getattr(trace, "built", None)
            if build is not None:
                trace = build(pause)
            if type(trace) is Compact:
                traces[i] = expand(trace)


def _companion(entry: dict[str, Any], action: str) -> dict[str, Any]:
    """A copy of a block entry as another action: a CPU segment is its one block, so a segment
    event is that block's (its category too: the viewer's segment timeline is coloured by it)."""
    made = dict(entry)
    made["action"] = action
    return made
