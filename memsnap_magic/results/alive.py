"""The blocks alive at one event of an interval: what the dashboard's table and ``memsnap diff``
list. Only the events of the largest sizes are paired by address, widening until enough blocks
are found, since a block's alloc and free carry the same requested size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .analysis import Summary
from .pairing import SPARSE, by_address, end_blocks, sorted_contains

_LOOK_PER_BLOCK = 32  # events looked at per wanted block before widening the search


def alive_at(summary: Summary, index: int | None = None, top: int = 10) -> list[dict[str, Any]]:
    """The largest blocks allocated after replayed event ``index`` (default: the peak).

    Each item: ``size``, ``addr``, ``frames`` (the trace's or the block's stack, possibly
    empty), ``before`` (True when the block was already live when the window started),
    ``category`` (the file's label, see ``labels``; None where it has none) and ``mark``
    (its allocation's ``user_metadata``, which step of a ``clear=false`` history made it).
    With ``top``, only events of the largest sizes are paired by address, widening until
    ``top`` blocks are found; ``top=0`` pairs them all.
    """
    if top < 0:
        raise ValueError(f"top must be 0 (every block) or more, not {top}")
    p = summary.peak_index if index is None else index
    size = summary.events[1]
    m = len(size)
    look = top * _LOOK_PER_BLOCK
    # pairing by size needs the end state's sizes to be the trace's (requested) ones
    while top and look < m and summary.requested_sizes:
        cut = np.partition(size, m - look)[m - look]  # the look-th largest size
        sel = np.flatnonzero(size >= cut)
        if len(sel) > len(summary.trace) // SPARSE:  # no cheaper than pairing every event
            break
        items = _alive_among(summary, p, sel, end_blocks(summary.segments, summary.device, cut), top)
        if len(items) >= top:  # every block of size >= cut is here, and none smaller can rank
            return items[:top]
        look *= 8
    items = _alive_among(summary, p, None, summary.end, top)
    return items[:top] if top else items


def kept(summary: Summary) -> list[dict[str, Any]]:
    """The blocks the interval allocated and still held at its end, largest first (items as
    ``alive_at``'s). A block alive at the end was allocated in the window exactly when the trace
    allocates at its address: its last event there is that allocation."""
    order, a, _, _ = summary.paired
    made = a[summary.events[0][order] > 0]  # the allocations' addresses, ascending
    end = summary.end
    return _end_items(end, np.flatnonzero(sorted_contains(made, end[0])), before=False)


def temporaries(summary: Summary) -> int:
    """The most bytes alive at once of the blocks the interval both allocated and freed: what it
    held only for a while. Blocks live at its start and blocks it kept are left out, so a step
    that keeps a leak (before or after its peak) holds as much for a while as one that does not.
    Events at one address alternate, so a block made here and freed here is an allocation whose
    next event at its address is a free."""
    sign, size, _ = summary.events
    n = len(sign)
    if not n:
        return 0
    order, _, _, last = summary.paired
    paired = np.flatnonzero(~last)  # sorted positions with a later event at the same address
    first, then = order[paired], order[paired + 1]
    made = (sign[first] > 0) & (sign[then] < 0)
    first, then = first[made], then[made]
    delta = np.zeros(n, dtype=np.int64)
    delta[first] = size[first]
    delta[then] = -size[first]
    return max(int(np.cumsum(delta).max()), 0)


def held(summary: Summary) -> list[dict[str, Any]]:
    """Every block alive at the interval's end, whichever step allocated it, largest first."""
    end = summary.end
    return _end_items(end, np.arange(len(end[0])), before=False)


def _end_items(
    end: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]], chosen: np.ndarray, before: bool, top: int = 0
) -> list[dict[str, Any]]:
    """Items (as ``alive_at``'s) for the end-state blocks ``chosen``, largest first, ``top`` of them."""
    end_addr, end_size, blocks = end
    chosen = chosen[np.argsort(-end_size[chosen], kind="stable")]
    if top:
        chosen = chosen[:top]
    return [
        {
            "size": int(end_size[i]),
            "addr": int(end_addr[i]),
            "before": before,
            "frames": blocks[i].get("frames") or [],
            "category": blocks[i].get("category"),
            "mark": None,
        }
        for i in chosen.tolist()
    ]


def _alive_among(
    summary: Summary,
    p: int,
    sel: np.ndarray | None,
    end: tuple[np.ndarray, np.ndarray, list[dict[str, Any]]],
    top: int,
) -> list[dict[str, Any]]:
    """``alive_at`` over the events ``sel`` (None: every event) and the end-state blocks ``end`` only."""
    sign, size, entry = summary.events
    if sel is None:  # every event: the pairing the summary shares
        order, a, first, last = summary.paired
        at = order
    else:
        sign, size = sign[sel], size[sel]
        order, a, first, last = by_address(summary.addresses(entry[sel]))
        at = sel[order]
    # in address order: each event's index among all events, and the next one's at its address
    then = np.append(at[1:], np.iinfo(np.int64).max)
    signs = sign[order]
    alive_new = (signs > 0) & (at <= p) & (last | (then > p))
    alive_old = first & (signs < 0) & (at > p)  # live before the window, freed after index p
    chosen = np.flatnonzero(alive_new | alive_old)
    chosen = chosen[np.argsort(order[chosen])]  # in trace order
    if top:
        chosen = chosen[np.argsort(-size[order[chosen]], kind="stable")[:top]]
    trace = summary.trace
    rows = zip(size[order[chosen]].tolist(), a[chosen].tolist(), alive_old[chosen].tolist(), entry[at[chosen]].tolist())
    items = [
        {
            "size": block_size,
            "addr": addr,
            "before": before,
            "frames": [] if before else trace[e].get("frames") or [],
            "category": trace[e].get("category"),
            "mark": None if before else trace[e].get("user_metadata"),
        }
        for block_size, addr, before, e in rows
    ]

    # end-state blocks the trace never allocated (or freed and did not allocate again)
    live_addr = a[last & (signs > 0)]  # ascending
    items += _end_items(end, np.flatnonzero(~sorted_contains(live_addr, end[0])), before=True, top=top)
    items.sort(key=lambda item: -item["size"])  # stable: ties keep trace order
    return items
