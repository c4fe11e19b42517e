"""Intervals: what the session keeps of a snapshot, made the same way from any snapshot.

``digest`` (``digests``) serves the recorder (a snapshot it just took) and ``scan`` (files on
disk, or their summaries) alike; ``interval_from_digest`` names the result: the file's own ``memsnap`` block,
else its path in verl's layout, says which step, rank and device it holds. An interval keeps
figures, a decimated timeline and the blocks alive at the peak, never the snapshot, so a long
notebook does not hold hundreds of MB.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core import defaults
from ..core.errors import SnapshotError, excerpt
from ..files.layout import PathInfo, folder_run, parse_path
from ..files.meta import Meta
from ..files.snapshot import load_snapshot
from ..files.summary_fields import ENCODED, FIELDS
from .digests import digest
from .measures import Figures
from .stacks import learn_cells


@dataclass(frozen=True)
class Interval(Figures):
    """One recorded interval (a cell, or one step of a loop). Bytes are ints.

    Frozen: complete when it joins a session. What becomes known later (its cumulative figures
    as steps are added, the file's size once written) the session puts in a new record that
    takes its place (``dataclasses.replace``; ``Session.current`` finds it from the old one)."""

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
    # leak floor): its ``rows`` (``kept_by``), each path's route, the bytes no path reached and
    # whether the walk was cut
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
    # which recording this record is: the records the session makes of it (``replace``) share it
    origin: int = field(default_factory=itertools.count(1).__next__, repr=False, compare=False)

    @property
    def kept_by(self) -> list[list[Any]]:
        """Who keeps what it made and kept: [path, bytes, blocks] from a name of the namespace,
        largest first (``holders``' rows); [] where no walk ran."""
        return [list(row) for row in self.holders["rows"]] if self.holders else []

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "holders":  # where kept_by was a field of its own, before holders
                rec["kept_by"] = self.kept_by
            if f.name not in _UNRECORDED:
                rec[f.name] = getattr(self, f.name)
        rec["path"] = str(self.path) if self.path is not None else None
        rec["peak_increase"] = self.peak_increase
        rec["kept"] = self.kept
        return rec


_UNRECORDED = ("time_us", "allocated", "top_blocks", "born", "origin")  # not in to_record()


# What a digest holds besides its ``meta``: an Interval's fields as its snapshot gives them,
# declared (with their checks) in ``files.summary_fields``
CONTENT = (*FIELDS, *ENCODED)


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
