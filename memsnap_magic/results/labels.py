"""Label a snapshot's blocks with what they were: the ``category`` key PyTorch's memory_viz
colours trace entries by, and ours to sum per step.

A block is a parameter, gradient or optimizer state when a storage of that role, with its address
and size, was seen (``Roles``, which ``recording.roles`` fills) while the block was alive; else
``activation`` when the interval allocated it, ``other`` when it was live before. Entries that
are not blocks (segments, the snapshot marker) are ``unknown``; memory_viz throws on a file with
categories but no ``unknown`` (a typo in its legend code), so one is always there.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..core.categories import ACTIVATION, ORDER, OTHER, UNKNOWN, category_name
from ..files.pending import Pending, built

if TYPE_CHECKING:
    from .pairing import Actions

Storages = dict[int, tuple[int, str]]  # storage address -> (bytes, category)
# address -> (trace index, action, size, time_us) of its allocations and frees, in trace order
Events = dict[int, list[tuple[int, Any, Any, Any]]]


@dataclass
class Roles:
    """What was seen (by ``recording.roles``): storages live at the start, at each optimizer step
    (with the time, µs since the epoch as trace entries carry it), and at the end."""

    start: Storages = field(default_factory=dict)
    timed: list[tuple[int, Storages]] = field(default_factory=list)
    end: Storages = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.start or self.end or any(seen for _, seen in self.timed))


_FREES = ("free_requested", "free_completed", "free")
OTHER_NAMES = 16  # names beyond ORDER a file's categories are summed under


def label(
    trace: list[dict[str, Any]] | Pending, end: list[tuple[int, dict[str, Any]]], roles: Roles, end_us: int
) -> None:
    """Give every entry of ``trace`` and every ``(address, block)`` of ``end`` (the allocated
    blocks of the snapshot's end state) a ``category``, in place. A trace still to build
    (``files.pending``) is labelled by its columns and stays so."""
    wanted = set(roles.start) | set(roles.end) | {a for _, seen in roles.timed for a in seen}
    found = _label_columns(trace, wanted, roles) if type(trace) is Pending and not trace.ready else None
    live, unknown = found if found is not None else _label_entries(built(trace), wanted, roles)
    for addr, block in end:
        size = block.get("requested_size") or block.get("size")
        block["category"] = _role(roles.end, addr, size) or live.get(addr) or _role(roles.start, addr, size) or OTHER
    if not unknown:  # a marker for the moment of the snapshot: not a block, so of no category
        trace.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": end_us, "category": UNKNOWN})


def _label_entries(trace: list[dict[str, Any]], wanted: set[int], roles: Roles) -> tuple[dict[int, str], bool]:
    """``label``'s pass over a list: each entry's category set; the category of each address's
    block still allocated at the end, and whether any entry is of none (``unknown``). One pass
    reads the entries (each a dict somewhere in memory: reading them is the cost); the few
    allocations a role was seen in, known only once their frees are, are given it after."""
    live: dict[int, str] = {}  # address -> category of the block the trace allocated there
    events: Events = defaultdict(list)  # those at the wanted addresses
    unknown = False
    last = len(trace) - 1
    addr: Any  # an int wherever the action is an allocation or a free (schema checks it)
    for i, e in enumerate(trace):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = e["category"] = ACTIVATION
            if addr in wanted:
                events[addr].append((i, action, e.get("size"), e.get("time_us", -1)))
        elif action in _FREES:
            category = live.get(addr)
            if category is None:  # live before the interval: what the start saw there
                category = _role(roles.start, addr, e.get("size")) or OTHER
            e["category"] = category
            if action != "free_requested":
                live.pop(addr, None)
            if addr in wanted:
                events[addr].append((i, action, e.get("size"), e.get("time_us", -1)))
        elif action == "segment_alloc" and i < last and _same_block(e, trace[i + 1], "alloc"):
            e["category"] = ACTIVATION  # a segment of that one block (the CPU route's)
        elif action == "segment_free" and i > 0 and _same_block(e, trace[i - 1], "free_completed"):
            e["category"] = trace[i - 1]["category"]
        else:
            e["category"] = UNKNOWN
            unknown = True
    places: dict[int, dict[int, int]] = {}  # address -> trace index -> its place among the address's events
    for i, role in _seen_allocations(events, roles).items():
        seq = events[trace[i]["addr"]]
        place = places.setdefault(trace[i]["addr"], {event[0]: n for n, event in enumerate(seq)})[i]
        _give_role(trace, i, role, islice(seq, place + 1, None), live)
    return live, unknown


def _give_role(
    trace: list[dict[str, Any]], i: int, role: str, after: Iterable[tuple[int, Any, Any, Any]], live: dict[int, str]
) -> None:
    """Allocation ``i`` was that ``role``: so were what the pass gave its category from it (its
    one-block segment, its frees up to the one that completes, their segment), and the address's
    block at the end where it is still allocated. ``after``: the events at its address after it."""
    entry = trace[i]
    entry["category"] = role
    if i > 0 and trace[i - 1].get("action") == "segment_alloc" and _same_block(trace[i - 1], entry, "alloc"):
        trace[i - 1]["category"] = role
    for j, action, _, _ in after:
        if action == "alloc":  # allocated again: what follows is that block's
            return
        trace[j]["category"] = role
        segment = trace[j + 1] if j < len(trace) - 1 else {}
        if segment.get("action") == "segment_free" and _same_block(segment, trace[j], "free_completed"):
            segment["category"] = role
        if action != "free_requested":  # completed: freed
            return
    live[entry["addr"]] = role


def _label_columns(trace: Pending, wanted: set[int], roles: Roles) -> tuple[dict[int, str], bool] | None:
    """``_label_entries`` over a trace's columns, its categories handed to it as one; None where
    it holds an entry that pass reads its neighbours for (a segment event past the ring's head,
    a free not completed), which only a list answers. Its block entries are allocations and
    completed frees, so a free takes the category of the previous event at its address where
    that is an allocation (the block it frees), else the start's role there, else ``other``."""
    import numpy as np

    from .pairing import Actions, addresses, column, paired

    action = Actions(trace)
    is_alloc, is_free = action.is_("alloc"), action.is_("free_completed")
    other = np.flatnonzero(~(is_alloc | is_free))
    for i, act in zip(other.tolist(), action.at(other).tolist()):
        if act in _FREES or act == "segment_alloc" or (act == "segment_free" and i > 0):
            return None
    addr, size = column(trace, "addr", 0), column(trace, "size", 0)
    # each entry's category as an index into ``names`` (an object array is slow to fill)
    names = [UNKNOWN, ACTIVATION]
    code = is_alloc.astype(np.int32)
    seen = _seen_allocations(_events_in_columns(trace, action, addr, size, wanted), roles)
    for i, role in seen.items():
        code[i] = _code(names, role)
    # each address's allocations and frees in trace order
    events = np.flatnonzero(is_alloc | is_free)
    order, _, first, last = paired(trace, events, functools.partial(addresses, trace))
    at = events[order]  # trace index of each, grouped by address
    frees = np.flatnonzero(is_free[at])
    before = at[np.maximum(frees - 1, 0)]
    freeing = ~first[frees] & is_alloc[before]  # the previous event at its address is its allocation
    code[at[frees[freeing]]] = code[before[freeing]]
    unpaired = at[frees[~freeing]]
    for i, a_i, s_i in zip(unpaired.tolist(), addr[unpaired].tolist(), size[unpaired].tolist()):
        code[i] = _code(names, _role(roles.start, a_i, s_i) or OTHER)
    trace.label(names, code)  # the writer makes them names
    held = at[last & is_alloc[at]]  # the address's last event an allocation: allocated at the end
    live = dict(zip(addr[held].tolist(), map(names.__getitem__, code[held].tolist())))
    return live, bool(len(other))


def _code(names: list[str], name: str) -> int:
    """``name``'s index in ``names``, added where it is not there yet."""
    if name not in names:
        names.append(name)
    return names.index(name)


def _same_block(segment: dict[str, Any], block: dict[str, Any], action: str) -> bool:
    """Whether a segment event is exactly the one block of its neighbour ``block`` (the CPU
    route's segments always are): then it is drawn in that block's category."""
    return (
        block.get("action") == action
        and block.get("addr") == segment.get("addr")
        and block.get("size") == segment.get("size")
    )


def label_snapshot(snap: dict[str, Any], index: int, roles: Roles, end_us: int) -> None:
    """``label`` device ``index`` of a snapshot: its trace and its end state's allocated blocks."""
    end = []
    for seg in snap.get("segments", []):
        if seg.get("device") != index:
            continue
        addr = seg["address"]
        for block in seg["blocks"]:
            if block.get("state") == "active_allocated":
                end.append((addr, block))
            addr += block["size"]
    label(snap["device_traces"][index], end, roles, end_us)


def _role(storages: Storages, addr: Any, size: Any) -> str | None:
    seen = storages.get(addr)
    return seen[1] if seen is not None and seen[0] == size else None


def _events_in_columns(trace: Pending, action: Actions, addr: Any, size: Any, wanted: set[int]) -> Events:
    """The allocations and frees at the ``wanted`` addresses, by address (see ``Events``), from a
    trace's columns: the times of those alone read."""
    import numpy as np

    events: Events = defaultdict(list)
    looked = np.fromiter((a for a in wanted if type(a) is int and 0 <= a < 1 << 63), np.int64)
    at = np.flatnonzero(np.isin(addr, looked))
    if not len(at):
        return events
    rows = zip(at.tolist(), action.at(at).tolist(), addr[at].tolist(), size[at].tolist(), trace.times_of(at).tolist())
    for i, act, a, s, t in rows:
        if act == "alloc" or act in _FREES:
            events[a].append((i, act, s, t))
    return events


def _seen_allocations(events: Events, roles: Roles) -> dict[int, str]:
    """Trace index of each allocation a role was seen in while it was alive -> that role."""
    found: dict[int, str] = {}
    for addr, seq in events.items():
        for n, (i, action, size, born) in enumerate(seq):
            if action != "alloc":
                continue
            freed = next((t for _, a, _, t in seq[n + 1 :] if a != "alloc"), None)
            role = None
            if freed is None:
                role = _role(roles.end, addr, size)
            for t, seen in roles.timed:
                if role is None and born <= t and (freed is None or t <= freed):
                    role = _role(seen, addr, size)
            if role is not None:
                found[i] = role
    return found


def totals(pairs: list[tuple[Any, int]]) -> dict[str, int] | None:
    """Bytes per category of ``(category, bytes)`` pairs, in ``ORDER`` then the largest other
    names (at most ``OTHER_NAMES``; the rest count as ``unknown``); None when no pair has a
    category (a file nobody labelled). A name that is not text counts as ``unknown``."""
    sums: dict[str | None, int] = {}
    labelled = False
    for category, size in pairs:
        labelled = labelled or category is not None
        # only text is hashed: a file's deep tuple or colliding ints would cost a crash or minutes
        key = category if type(category) is str or category is None else ""
        sums[key] = sums.get(key, 0) + size
    if not labelled:
        return None
    named: dict[str, int] = {}
    for category, size in sums.items():
        key = category_name(category)
        named[key] = named.get(key, 0) + size
    others = sorted((c for c in named if c not in ORDER), key=lambda c: (-named[c], c))
    for extra in others[OTHER_NAMES:]:
        named[UNKNOWN] = named.get(UNKNOWN, 0) + named.pop(extra)
    ranked = [c for c in ORDER if c in named] + sorted(others[:OTHER_NAMES])
    return {c: named[c] for c in ranked}
