"""One recorded step read into columns, for ``prediction``: its allocations and frees in order
(site, category, size), the blocks from before it that it frees, what it kept, and the ids
(sites, categories) the recordings of one prediction share.

Pure numpy over snapshot dicts; ``summarize`` (public) gives the events and the baseline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ..files.pending import built
from .analysis import Summary, summarize

NO_SITE = -1  # an allocation without frames (under 1 KiB on the CPU route, say)


class Interner:
    """Ids shared by the recordings of one prediction: sites (frames' chains) and categories."""

    def __init__(self) -> None:
        self.sites: dict[tuple[Any, ...], int] = {}
        self.site_frames: list[list[Any]] = []  # each site's frames, as first seen (read for names)
        self.categories: dict[str | None, int] = {}
        self.shown: dict[int, str] = {}  # site -> its name as people read it (made when asked)
        self._chains: dict[tuple[Any, ...], int] = {}  # a chain's fields as read -> its site

    def category(self, name: Any) -> int:
        name = name if type(name) is str else None
        return self.categories.setdefault(name, len(self.categories))

    def category_column(self, column: list[Any]) -> np.ndarray:
        """The ids of a column of categories (a name per distinct value, not per entry)."""
        try:
            ids = {c: self.category(c) for c in set(column)}
        except TypeError:  # something unhashable where a name belongs: no category
            return np.fromiter((self.category(c if type(c) is str else None) for c in column), np.int64, len(column))
        return np.fromiter(map(ids.__getitem__, column), dtype=np.int64, count=len(column))

    def category_names(self) -> list[str]:
        names = sorted(self.categories, key=self.categories.__getitem__)
        return [n or "unlabelled" for n in names]

    def site(self, frames: Any) -> int:
        """The id of a frames chain (from the allocation out to the code that ran a ``%%memsnap``
        body); cells are keyed by function and line, as their files are named per process
        (ipykernel) or per run (``<ipython-input-N-…>``)."""
        if type(frames) is not list or not frames:
            return NO_SITE
        frames = frames[:FRAMES_READ]
        try:  # the chain's fields read at C speed: a chain met before costs one lookup
            raw = tuple(map(_FIELDS, frames))
            found = self._chains.get(raw)
        except (KeyError, TypeError):  # a frame that is no frame, or a field that is no name
            raw, found = None, None
        if found is None:
            found = self._site_of([_frame_key(f) for f in frames], frames)
            if raw is not None:
                self._chains[raw] = found
        return found

    def _site_of(self, keys: list[tuple[Any, ...]], frames: list[Any]) -> int:
        if _RUNNER in keys:
            keys = keys[: keys.index(_RUNNER)]
        if not keys:
            return NO_SITE
        chain = tuple(keys)
        found = self.sites.get(chain)
        if found is None:
            found = self.sites[chain] = len(self.site_frames)
            self.site_frames.append(frames)
        return found


FRAMES_READ = 256  # frames of a stack read for its key: deeper recursion tells nothing more
_RUNNER = ("memsnap_magic/ipython/execute.py",)  # the frame that runs a cell body: what lies outside is the magic's
# where the magic runs a body: its module now, and where files recorded before the package had folders say
_RUNNER_FILES = tuple(
    path.replace("/", sep)
    for path in ("/memsnap_magic/ipython/execute.py", "/memsnap_magic/execute.py")
    for sep in "/\\"
)
_CELL = re.compile(r"^<ipython-input-\d+-|[/\\]ipykernel_\d+[/\\]")
_PACKAGES = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")
_FOLDERS = re.compile(r"^.*[/\\]")


_FIELDS = itemgetter("filename", "line", "name")


def _frame_key(frame: Any) -> tuple[Any, ...]:
    """(file, line, function) of a frame (a dict, or those fields already read): a cell's file as
    ``<cell>``, an installed one from its package on, any other by its name alone (recordings made
    in other environments or folders still match); ``_RUNNER`` for the frame that runs a
    ``%%memsnap`` body. What is not a frame's field keys as None."""
    if type(frame) is dict:
        frame = (frame.get("filename"), frame.get("line"), frame.get("name"))
    elif type(frame) is not tuple or len(frame) != 3:
        return _RUNNER if frame is _RUNNER else (None, None, None)
    filename, line, name = frame
    if type(filename) is not str:
        filename = None
    elif filename.endswith(_RUNNER_FILES):
        return _RUNNER
    elif ("<ipython-input-" in filename or "ipykernel_" in filename) and _CELL.search(filename):
        filename = "<cell>"
    else:  # where an environment or a checkout lies differs between machines: not which file it is
        filename = _PACKAGES.sub("", filename) if "-packages" in filename else _FOLDERS.sub("", filename)
    return (filename, line if type(line) is int else None, name if type(name) is str else None)


@dataclass
class Recording:
    """One step recorded at one size, as columns over the events that change allocated bytes.

    Items are the step's allocations (``alloc_*``) and the blocks alive before it that it freed
    (``gone_*``); ``kept_total`` is what was alive before the step and never freed in it (by
    category: ``kept``, read from the end state when asked).
    """

    value: float
    step: Any
    peak: int  # the recorded peak (``summarize``'s), requested bytes
    baseline: int
    entries: int  # the trace's entries, as the file holds them
    sign: np.ndarray  # per event: +1 allocation, -1 free
    item: np.ndarray  # per event: its item (allocations first, then blocks from before the step)
    entry: np.ndarray  # per event: its trace entry
    alloc_size: np.ndarray
    alloc_site: np.ndarray
    alloc_cat: np.ndarray
    alloc_at: np.ndarray  # event index of the allocation
    free_at: np.ndarray  # event index of its free; len(sign): alive at the end
    gone_size: np.ndarray
    gone_cat: np.ndarray
    gone_at: np.ndarray
    kept_total: int
    made: np.ndarray = field(repr=False)  # addresses of the step's allocations alive at its end
    summary: Summary = field(repr=False)
    trace: list[dict[str, Any]] = field(repr=False, default_factory=list)
    split: dict[int, int] | None = field(repr=False, default=None)  # ``kept``'s, once read


def read_recording(snap: dict[str, Any], value: float, names: Interner, device: int | None = None) -> Recording:
    """A step's events paired by address: each allocation with its free, each free of a block from
    before the step on its own; categories and sites read for the allocations only."""
    s = summarize(snap, device)
    sign, size, entry = s.events
    n = len(sign)
    trace = built(s.trace)  # its entries' dicts: categories and frames
    allocs = np.flatnonzero(sign > 0)
    rows = list(map(trace.__getitem__, entry[allocs].tolist()))  # the allocations' entries, read once
    addr = _addresses(trace, rows, entry, allocs, sign)
    order = np.argsort(addr, kind="stable")
    same = addr[order][1:] == addr[order][:-1]
    prev = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, n, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    nxt[order[:-1][same]] = order[1:][same]

    following = nxt[allocs]
    freed = following < n
    freed[freed] = sign[following[freed]] < 0
    free_at = np.where(freed, following, n)
    gone = np.flatnonzero((sign < 0) & ((prev < 0) | (sign[np.maximum(prev, 0)] < 0)))

    item = np.empty(n, dtype=np.int64)
    item[allocs] = np.arange(len(allocs))
    item[free_at[freed]] = np.flatnonzero(freed)
    item[gone] = len(allocs) + np.arange(len(gone))

    stacks = list(map(dict.get, rows, repeat("frames")))
    ids = list(map(id, stacks))
    by_id = dict(zip(ids, stacks))  # a file shares one frames list among many entries
    memo = {key: names.site(frames) for key, frames in by_id.items()}
    sites = np.fromiter(map(memo.__getitem__, ids), dtype=np.int64, count=len(ids))
    alloc_cat = names.category_column(list(map(dict.get, rows, repeat("category"))))
    gone_cat = names.category_column([trace[i].get("category") for i in entry[gone].tolist()])
    gone_size = size[gone]
    return Recording(
        value=value,
        step=(snap.get("memsnap") or {}).get("step"),
        peak=s.peak_allocated,
        baseline=s.baseline_allocated,
        entries=s.trace_entries,
        sign=sign,
        item=item,
        entry=entry,
        alloc_size=size[allocs],
        alloc_site=sites,
        alloc_cat=alloc_cat,
        alloc_at=allocs,
        free_at=free_at,
        gone_size=gone_size,
        gone_cat=gone_cat,
        gone_at=gone,
        kept_total=s.baseline_allocated - int(gone_size.sum()),
        made=addr[allocs[~freed]],
        summary=s,
        trace=trace,
    )


def _addresses(
    trace: list[dict[str, Any]], rows: list[dict[str, Any]], entry: np.ndarray, allocs: np.ndarray, sign: np.ndarray
) -> np.ndarray:
    """``addr`` of every event, compared as unsigned (PyTorch writes int64): the allocations' from
    their entries already read, the frees' from theirs (a CPU trace's other entries unread)."""
    addr = np.empty(len(sign), dtype=np.int64)
    frees = np.flatnonzero(sign < 0)
    addr[allocs] = np.fromiter(map(_ADDR, rows), dtype=np.int64, count=len(rows))
    addr[frees] = np.fromiter(map(_ADDR, map(trace.__getitem__, entry[frees].tolist())), np.int64, len(frees))
    return addr.astype(np.uint64)


_ADDR = itemgetter("addr")


def kept(r: Recording, names: Interner) -> dict[int, int]:
    """Bytes alive all through the step, by category: the end state's blocks the step did not
    allocate; ``kept_total`` is ``summarize``'s figure, and what the blocks do not explain is
    ``other``. Read once asked (a walk over every end-state block)."""
    if r.split is None:
        r.split = _kept(r.summary, r.made, r.kept_total, names)
    return r.split


def _kept(s: Summary, made: np.ndarray, total: int, names: Interner) -> dict[int, int]:
    addr, size, blocks = s.end
    before = np.flatnonzero(~np.isin(addr, made))
    cats = names.category_column([blocks[i].get("category") for i in before.tolist()])
    kept = {int(c): int(b) for c, b in zip(*_sums(cats, size[before])) if b}
    rest = total - sum(kept.values())
    if rest:
        c = names.category("other")
        kept[c] = kept.get(c, 0) + rest
    return kept


def _sums(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct key and the sum of its values."""
    uniq, which = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(which.ravel(), weights=values, minlength=len(uniq)).astype(np.int64)
