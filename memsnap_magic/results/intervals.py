"""Intervals: what the session keeps of a snapshot, made the same way from any snapshot.

``digest`` serves the recorder (a snapshot it just took) and ``scan`` (files on disk, or their
summaries) alike; ``interval_from_digest`` names the result: the file's own ``memsnap`` block,
else its path in verl's layout, says which step, rank and device it holds. An interval keeps
figures, a decimated timeline and the blocks alive at the peak, never the snapshot, so a long
notebook does not hold hundreds of MB.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core import defaults
from ..core.categories import MODEL_STATE, category_name
from ..core.devices import trace_index
from ..core.errors import SnapshotError, excerpt
from ..files.layout import PathInfo, folder_run, parse_path
from ..files.meta import Meta
from ..files.snapshot import load_snapshot
from ..files.summary_fields import ENCODED, FIELDS
from .labels import totals
from .measures import Figures
from .stacks import Kinds, learn_cells, plain_frames, site

TOP_BLOCKS = 32  # blocks kept per interval: alive at the peak, and made here and alive at the end


@dataclass
class Interval(Figures):
    """One recorded interval (a cell, or one step of a loop). Bytes are ints."""

    step: int
    rank: int
    device: str
    path: Path | None
    baseline_allocated: int
    peak_allocated: int
    end_allocated: int
    trace_entries: int
    error: str | None = None
    allocator_peak_allocated: int | None = None
    clear: bool = True
    tag: str = defaults.TAG
    file_bytes: int | None = None
    overflowed: bool = False
    context: str = defaults.CONTEXT  # which events carried stacks when it was recorded
    incomplete: str | None = None  # why the snapshot holds less than the interval did
    # bytes live at the start that were freed at a time nothing reported (CPU): counted to the
    # end, so the peak is an upper bound by at most this much
    freed_unseen: int | None = None
    moved: int | None = None  # start minus the end of the interval recorded before it on this device
    moved_since: int | None = None  # that interval's step
    top_blocks: list[dict[str, Any]] = field(default_factory=list, repr=False)  # alive at the peak
    born: dict[int, int] = field(default_factory=dict, repr=False)  # address -> size: made here, alive at the end
    run: str = ""  # the run it belongs to; "": the session's own (cells without run=)
    scale: dict[str, int] | None = None  # the sizes it was recorded at (scale=batch:8), for predict
    # bytes per category (parameter, gradient, optimizer_state, activation, other, unknown) at the
    # end and at the peak, from the file's labels (see categories); None for unlabelled files
    by_category: dict[str, int] | None = None
    by_category_at_peak: dict[str, int] | None = None
    # what the interval allocated and still held at its end, per allocation site (the first
    # readable frame, the user's cells first): [site, bytes, blocks], largest first
    kept_by_site: list[list[Any]] = field(default_factory=list)
    # every block alive at its end, whichever step made it, per allocation site: [site, bytes,
    # blocks], the ``HELD_SITES`` largest; a site that grows from one step's end to the next holds more
    held_by_site: list[list[Any]] = field(default_factory=list)
    # the most it held at once of what it both allocated and freed (``alive.temporaries``): what a
    # spike is judged by; None where unknown (a step built by hand)
    transient: int | None = None
    # who keeps what it made and kept (``recording.retention``, walked when it kept more than the
    # leak floor): [path, bytes, blocks] from a name of the namespace, largest first; ``holders``
    # also has each path's route, the bytes no path reached and whether the walk was cut
    kept_by: list[list[Any]] = field(default_factory=list)
    holders: dict[str, Any] | None = None
    # what the device (free, total, reserved) or process (rss) held at the start and end, beyond
    # the trace: the gap between PyTorch's allocations and the device's use (see Backend.usage)
    usage_start: dict[str, int] | None = None
    usage_end: dict[str, int] | None = None
    # the last allocation the allocator could not serve (the trace's ``oom`` entry): the request,
    # the device's free bytes then, what was allocated and alive at that moment (by category,
    # by site); None when the step ran in memory
    oom: dict[str, Any] | None = None
    end_us: int | None = None  # when the snapshot was taken (µs since the epoch); None where a file does not say
    cumulative_peak_allocated: int = 0
    cumulative_trace_entries: int = 0
    # decimated allocated-bytes timeline (numpy arrays), for plots; None when not summarised
    time_us: Any = field(default=None, repr=False)
    allocated: Any = field(default=None, repr=False)

    def to_record(self) -> dict[str, Any]:
        rec = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("time_us", "allocated", "top_blocks", "born")
        }
        rec["path"] = str(self.path) if self.path is not None else None
        rec["peak_increase"] = self.peak_increase
        rec["kept"] = self.kept
        return rec


# What a digest holds besides its ``meta``: an Interval's fields as its snapshot gives them,
# declared (with their checks) in ``files.summary_fields``
CONTENT = (*FIELDS, *ENCODED)


def digest(snap: dict[str, Any], kept_blocks: bool = False) -> dict[str, Any]:
    """What an interval keeps of a snapshot, before a path or a session names it: its ``meta``
    (``Meta``) and the ``CONTENT`` fields. What ``summaries`` writes to a summary file, so a
    file read again is never unpickled again. ``kept_blocks``: also every block it made and
    kept, as (address, size, ``_role``): what the recorder asks who holds."""
    # here: numpy loads with the first digest (the magic imports this module at %load_ext, for holds)
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


def interval_from_digest(
    d: dict[str, Any],
    path: Path | None = None,
    *,
    position: int = 1,
    file_bytes: int | None = None,
    run: str | None = None,
) -> Interval:
    """The Interval of a snapshot's ``digest``. Step, rank and tag come from the snapshot's
    ``memsnap`` block, else from ``path`` (verl's layout), else ``position`` is the step. The run
    is ``run`` if given, else the one the file was recorded into, else the folder holding its
    step folder: a file read back never joins the session's own run (which holds what this
    kernel recorded)."""
    meta: Meta = d["meta"]
    learn_cells(meta.cells)  # a summary's, or a worker's reading: its blocks' cells read as In[N] here
    # a path's step, rank and tag stand in for the file's own where it lacks one
    named = parse_path(path) if path is not None and None in (meta.step, meta.rank, meta.tag) else PathInfo()
    return Interval(
        step=_first(meta.step, named.step, position),
        rank=_first(meta.rank, named.rank, 0),
        path=path,
        tag=_first(meta.tag, named.tag, defaults.TAG),
        file_bytes=file_bytes,
        overflowed=meta.max_entries is not None and d["trace_entries"] >= meta.max_entries,
        context=_first(meta.context, defaults.CONTEXT),
        run=_run_of(run, meta, path),
        **{key: getattr(meta, key) for key in FROM_META},
        kept_by=[list(row) for row in meta.holders["rows"]] if meta.holders else [],
        **{key: d[key] for key in CONTENT},
    )


# The recorder's facts an Interval takes from the file's ``Meta`` as they are: every field the
# two share, but those read with a fallback above (and the device, which the digest resolves)
RESOLVED = ("step", "rank", "tag", "context", "run", "device")
FROM_META = tuple(f.name for f in fields(Meta) if f.name in Interval.__dataclass_fields__ and f.name not in RESOLVED)


def interval_from_snapshot(snap: dict[str, Any], path: Path | None = None, **naming: Any) -> Interval:
    """Summarise a snapshot into an Interval: figures, a decimated timeline, the blocks alive at
    its peak (``digest``, named as ``interval_from_digest`` says, with its keywords)."""
    return interval_from_digest(digest(snap), path, **naming)


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


def _run_of(run: str | None, meta: Meta, path: Path | None) -> str:
    """The run given, else the one recorded, else the folder's (looked up only if needed: a
    path resolved costs a system call per folder, on every recorded cell)."""
    if run is not None:
        return run
    if meta.run is not None:
        return meta.run
    return folder_run(path) if path is not None else ""


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def digest_file(path: Path) -> dict[str, Any]:
    """The digest of a snapshot file; every failure a one-line ``SnapshotError`` naming it."""
    snap = load_snapshot(path)
    try:
        return digest(snap)
    except SnapshotError as e:  # its memsnap block
        raise SnapshotError(f"{path}: {e}") from None
    except UNREADABLE as e:
        raise unreadable(path, e) from None


UNREADABLE = (KeyError, TypeError, ValueError, OverflowError)  # what odd values in a checked file can raise


def unreadable(path: Path | str, e: BaseException) -> SnapshotError:
    """The one-line error for a file that loaded but whose values the analysis could not read."""
    return SnapshotError(f"{path}: cannot be summarised: {type(e).__name__}: {excerpt(str(e))}")


def holds(iv: Interval, prev: Interval) -> bool:
    """Whether ``iv``'s snapshot holds ``prev``'s entries: a clear=false interval's history goes
    on into the next one, unless recording stopped in between (``%memsnap off``, a reload): then
    ``iv``'s events all come after ``prev`` ended."""
    if prev.clear:
        return False
    if iv.end_us is not None and prev.end_us is not None and iv.end_us < prev.end_us:
        return False  # ``iv`` was recorded first (a lower step run later): it cannot hold ``prev``
    if iv.time_us is None or prev.end_us is None:  # nothing tells: as the chain says
        return True
    return len(iv.time_us) > 0 and int(iv.time_us[0]) <= prev.end_us
