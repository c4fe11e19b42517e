"""What an interval keeps of a snapshot (its digest): the figures, a decimated timeline, the
blocks alive at the peak, what it made and kept, by allocation site, by category, and its last
out-of-memory entry. Made the same way from any snapshot: one the recorder just took, a file on
disk, a summary's (which holds a digest); ``intervals`` names the ``Interval`` made of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..core.categories import MODEL_STATE, category_name
from ..core.devices import trace_index
from ..files.meta import Meta
from .labels import totals
from .stacks import Kinds, learn_cells, plain_frames, site

TOP_BLOCKS = 32  # blocks kept per interval: alive at the peak, and made here and alive at the end


def digest(snap: dict[str, Any], kept_blocks: bool = False) -> dict[str, Any]:
    """What an interval keeps of a snapshot, before a path or a session names it: its ``meta``
    (``Meta``) and the ``CONTENT`` fields. What ``summaries`` writes to a summary file, so a
    file read again is never unpickled again. ``kept_blocks``: also every block it made and
    kept, as (address, size, ``_role``): what the recorder asks who holds."""
    # here: numpy loads with the first digest (the magic imports intervals, and so this, at %load_ext)
    from .alive import alive_at, held, kept, temporaries
    from .analysis import decimate_index, pick_device, summarize

    meta = Meta.from_snapshot(snap)
    learn_cells(meta.cells)  # its cells named as the kernel that recorded it named them
    index = trace_index(meta.device) if meta.device is not None else pick_device(snap)
    summary = summarize(snap, index)
    keep = decimate_index(summary.allocated)
    at_end = kept(summary)
    name = _site_namer()  # kept and held share their blocks' frame lists: each is named once
    labelled = bool(summary.trace) and "category" in summary.trace[-1]  # labelled files end labelled
    # every block alive at the peak where the categories need them all; the table's largest else
    at_peak = alive_at(summary, top=0 if labelled else TOP_BLOCKS)
    return {
        "meta": meta,
        "device": meta.device if meta.device is not None else f"device:{index}",
        **summary.figures(),
        "top_blocks": [_plain(b) for b in at_peak[:TOP_BLOCKS]],
        "born": {b["addr"]: b["size"] for b in at_end[:TOP_BLOCKS]},  # largest first
        # sites of what can leak: a labelled file's parameters, gradients and optimizer state are
        # left out (gradients made anew where backward ran from another function would move site)
        "kept_by_site": _by_site(_leakable(at_end), name=name),
        "held_by_site": _by_site(_leakable(held(summary)), HELD_SITES, name),  # at_end's blocks among them
        **({"kept_blocks": [(b["addr"], b["size"], _role(b)) for b in at_end]} if kept_blocks else {}),
        "transient": temporaries(summary),
        "oom": _oom(summary),
        **(_category_figures(summary, at_peak) if labelled else {"by_category": None, "by_category_at_peak": None}),
        "time_us": summary.times_at(keep),
        "allocated": summary.allocated[keep],
    }


def _leakable(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in blocks if not _role(b)]


def _role(block: dict[str, Any]) -> str | None:
    """A labelled block's model-state category (parameter, gradient, optimizer_state), else None."""
    category = block["category"]
    return category if type(category) is str and category in MODEL_STATE else None


def _plain(block: dict[str, Any]) -> dict[str, Any]:
    """An item of ``alive_at`` as plain values: its frames as ``plain_frames``, a category only
    where the file gave a name."""
    category = block.get("category")
    return {
        "size": block["size"],
        "addr": block["addr"],
        "before": block["before"],
        "frames": plain_frames(block.get("frames")),
        "category": category_name(category) if category is not None else None,
        "made_in": marked_step(block.get("mark")),
    }


def marked_step(mark: Any) -> int | None:
    """The step our ``user_metadata`` mark names ("memsnap step 8"), else None."""
    found = _MARK.match(mark) if type(mark) is str else None
    return int(found.group(1)) if found else None


_MARK = re.compile(r"memsnap step (\d{1,10})(?!\d)")


SITES = 20  # sites kept per interval
HELD_SITES = 64  # sites of all that is held at the end


def _site_namer() -> Callable[[dict[str, Any]], str]:
    """``site`` of a block, each frame list named once: files share one frame list among many
    blocks, and frame dicts among lists (one namer serves every pass over one snapshot's blocks)."""
    named: dict[int, str] = {}
    memo: Kinds = {}

    def name(b: dict[str, Any]) -> str:
        frames = b.get("frames")
        if not frames:  # what it says depends on the block, not on a shared list
            return site(b)
        key = id(frames)
        found = named.get(key)
        if found is None:
            found = named[key] = site(b, memo)
        return found

    return name


def _by_site(
    blocks: list[dict[str, Any]], limit: int = SITES, name: Callable[[dict[str, Any]], str] | None = None
) -> list[list[Any]]:
    """[site, bytes, blocks] of ``blocks``, largest first, the ``limit`` largest."""
    name = name or _site_namer()
    sites: dict[str, list[Any]] = {}
    for b in blocks:
        site_name = name(b)
        row = sites.setdefault(site_name, [site_name, 0, 0])
        row[1] += b["size"]
        row[2] += 1
    return sorted(sites.values(), key=lambda row: -row[1])[:limit]


def _oom(summary: Any) -> dict[str, Any] | None:
    """The report of the trace's last ``oom`` entry, read from the replay up to it."""
    import numpy as np  # here, as in digest

    from .alive import alive_at

    if not len(summary.ooms):
        return None
    at = int(summary.ooms[-1])
    entry = summary.trace[at]
    index = int(np.searchsorted(summary.events[2], at)) - 1  # the last event replayed before it
    alive = alive_at(summary, index=index, top=0)
    return {
        "requested": _count(entry.get("size")),
        "site": site(entry) if plain_frames(entry.get("frames")) else None,
        "device_free": _count(entry.get("device_free")),
        "allocated": int(summary.allocated[index]) if index >= 0 else summary.baseline_allocated,
        "by_category": totals([(b["category"], b["size"]) for b in alive]),
        "sites": _by_site(alive)[:5],
    }


def _count(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value < 1 << 62 else None


def _category_figures(summary: Any, at_peak: list[dict[str, Any]]) -> dict[str, Any]:
    """``by_category`` and ``by_category_at_peak`` of a labelled file, from its end state and
    every block alive at its peak."""

    _, sizes, blocks = summary.end
    at_end = totals([(b.get("category"), int(s)) for b, s in zip(blocks, sizes.tolist())])
    peak = totals([(b["category"], b["size"]) for b in at_peak])
    return {"by_category": at_end or {}, "by_category_at_peak": peak or {}}
