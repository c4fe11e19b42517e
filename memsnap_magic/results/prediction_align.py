"""One recorded step read into columns, and its allocations matched across recorded sizes.

``prediction`` fits each allocation's size against a dimension (batch, sequence length): it needs
to know which allocation at one size is which at another. The same code allocates in the same
order, so allocations are matched in order, by the site that made them (their frames' chain) and
their category, with sizes that can belong to one law. Where a size adds, drops or swaps some (a
workspace, another algorithm), the alignment of highest score is found between the common head
and tail, and an item that two alignments of that score match differently stays unmatched. On
the CPU route an allocation under 1 KiB has no frames, so a frameless allocation may match any
site of its category (less surely than a site matches).

Pure numpy over snapshot dicts; ``summarize`` (public) gives the events and the baseline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, NamedTuple

import numpy as np

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
    trace = s.trace
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


class Expect(NamedTuple):
    """Per reference item, what its law from larger sizes says about the other's size: ``size``
    (NaN: no law yet), and ``fixed`` where the law is a constant (its size cannot differ there)."""

    size: np.ndarray
    fixed: np.ndarray


class Items(NamedTuple):
    """What matching reads of a recording's items: site, category and size."""

    site: np.ndarray
    cat: np.ndarray
    size: np.ndarray


def allocations(r: Recording) -> Items:
    """The step's allocations as matching reads them."""
    return Items(r.alloc_site, r.alloc_cat, r.alloc_size)


def freed_before(r: Recording) -> Items:
    """The blocks from before the step that it frees: by category and size (no sites)."""
    return Items(np.full(len(r.gone_size), NO_SITE), r.gone_cat, r.gone_size)


def _score(ref: Items, other: Items, i: Any, j: Any, square: float, laws: Expect) -> np.ndarray:
    """How well reference items ``i`` match other items ``j`` (a smaller size: ``square`` is the
    sizes' ratio, squared); -inf: they cannot be one allocation.

    They share a category and a site, or one or both have no frames: two frameless items are a
    weaker match than a site, and a frameless one against one with frames (an allocation that
    crossed 1 KiB) weaker still. A size never shrinks as the dimension grows, nor grows more than
    a degree-2 law with non-negative terms allows; four times that is let through at half the
    score (a valid convolution's (side - 2)² grows faster than side²). A size that is exactly
    what the reference item's law (``laws``, from larger sizes) gives here scores more; a constant
    law allows no other size. Nothing breaks a tie between two candidates (``_band`` leaves both
    unmatched): a guess there would be a silent error.
    """
    rs, os_ = ref.site[i], other.site[j]
    rz, oz = ref.size[i], other.size[j]
    strict = (rs == os_) & (rs != NO_SITE)
    bare = (rs == NO_SITE) & (os_ == NO_SITE)
    loose = (rs == NO_SITE) ^ (os_ == NO_SITE)
    allowed = (ref.cat[i] == other.cat[j]) & (strict | bare | loose)
    lawful = laws.size[i] == oz
    allowed &= (oz <= rz) & (rz <= oz * (4 * square)) & (lawful | ~laws.fixed[i])
    score = np.where(strict, STRICT, np.where(bare, BARE, LOOSE)) / np.where(rz > oz * square, 2.0, 1.0)
    score += np.where(lawful, LAW, 0.0)
    return np.where(allowed, score, -np.inf)


# scores: the same site, both frameless, one frameless, the size its law gives; an item left
# unmatched (all exact in binary)
STRICT, BARE, LOOSE, LAW, GAP = 4.0, 1.0, 0.5, 2.0, 1.0
SURE = 2.0  # a match by site (even at half score) or by law
BAND = 32  # how far, beyond the two lengths' difference, a match may lie off the diagonal
MAX_CELLS = 2_000_000  # the largest band aligned (cells: rows x diagonals), some 16 MB per table


def align(ref: Items, other: Items, ratio: float, laws: Callable[[], Expect] | None = None) -> np.ndarray:
    """For each item of the reference, its match among the other's items (-1: none), in order.

    ``ratio``: the reference's size over the other's; ``laws``: what each reference item's law
    says of its size in the other (asked for only where the two differ). Two sequences that
    match item for item are matched so at numpy speed (a constant that is not constant there
    is caught by the fit); else the common head and tail match one to one, and between them
    (where a size adds, drops or swaps allocations) the alignment of highest score is found by
    dynamic programming in a band around the diagonal.
    """
    n, m = len(ref.site), len(other.site)
    out = np.full(n, -1, dtype=np.int64)
    square = ratio * ratio
    if n == m and _in_step(ref, other, square):
        out[:] = np.arange(n)
        return out
    expect = laws() if laws is not None else _no_laws(n)
    length = min(n, m)
    head = _trusted(_score(ref, other, np.arange(length), np.arange(length), square, expect))
    back = np.arange(length - head)
    tail = _trusted(_score(ref, other, n - 1 - back, m - 1 - back, square, expect))
    out[:head] = np.arange(head)
    out[n - tail :] = np.arange(m - tail, m)
    i, j = _band(ref, other, head, n - tail, head, m - tail, square, expect)
    out[i] = j
    return out


def _in_step(ref: Items, other: Items, square: float) -> bool:
    """Whether two sequences of one length can match item for item (``_score``'s rules without
    laws): the common case, checked without scoring."""
    rs, os_ = ref.site, other.site
    rz, oz = ref.size, other.size
    return bool(
        np.array_equal(ref.cat, other.cat)
        and ((rs == os_) | (rs == NO_SITE) | (os_ == NO_SITE)).all()
        and (oz <= rz).all()
        and (rz <= oz * (4 * square)).all()
    )


def _no_laws(n: int) -> Expect:
    return Expect(np.full(n, np.nan), np.zeros(n, dtype=bool))


def _trusted(scores: np.ndarray) -> int:
    """How many leading pairs match one to one for sure: by site or by law (a frameless match may
    belong one item further, so it is left to the dynamic programming)."""
    unsure = scores < SURE
    return int(np.argmax(unsure)) if unsure.any() else len(scores)


def _band(
    ref: Items, other: Items, r0: int, r1: int, o0: int, o1: int, square: float, laws: Expect
) -> tuple[np.ndarray, np.ndarray]:
    """Needleman-Wunsch between reference items ``r0:r1`` and other items ``o0:o1`` within a band
    of diagonals: the pairs (reference index, other index) that every alignment of the highest
    score makes. Where two alignments score the same (two candidates for one frameless item, say)
    the items in question stay unmatched: nothing tells which is which."""
    ref = Items(*(a[r0:r1] for a in ref))
    other = Items(*(a[o0:o1] for a in other))
    laws = Expect(*(a[r0:r1] for a in laws))
    n, m = r1 - r0, o1 - o0
    lo = min(0, m - n) - BAND
    if n * (abs(m - n) + 2 * BAND + 1) > MAX_CELLS:  # too different to align: nothing matched here
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    f = _forward(ref, other, square, laws, lo)
    back = _forward(
        Items(*(a[::-1] for a in ref)), Items(*(a[::-1] for a in other)), square, Expect(*(a[::-1] for a in laws)), lo
    )
    width = f.shape[1]
    best = f[n, m - n - lo]
    i = np.arange(1, n + 1)[:, None]
    k = np.arange(width)[None, :]
    j = i + lo + k
    kb = m - n - 2 * lo - k  # the same cell in the reversed pass: the best score of what follows
    rest = np.where((kb >= 0) & (kb < width), back[n - i, np.clip(kb, 0, width - 1)], -np.inf)
    rest = np.where((j >= 0) & (j <= m), rest, -np.inf)
    cell = (j >= 1) & (j <= m) & (rest > -np.inf)
    score = np.full(cell.shape, -np.inf)
    score[cell] = _score(ref, other, np.broadcast_to(i - 1, cell.shape)[cell], (j - 1)[cell], square, laws)
    matched = f[i - 1, k] + score + rest == best
    up = np.full(cell.shape, -np.inf)
    up[:, :-1] = f[i - 1, k[:, 1:]] - GAP
    skipped = (up + rest == best).any(axis=1)
    sure = np.flatnonzero((matched.sum(axis=1) == 1) & ~skipped)
    return r0 + sure, o0 + (j[sure, matched[sure].argmax(axis=1)] - 1)


def _forward(ref: Items, other: Items, square: float, laws: Expect, lo: int) -> np.ndarray:
    """The best score of aligning each prefix pair, in band coordinates (row i, column j - i - lo),
    one numpy pass per row (a run of skipped other items by a running maximum)."""
    n, m = len(ref.site), len(other.site)
    width = max(0, m - n) + BAND - lo + 1
    k = np.arange(width)
    h = np.full((n + 1, width), -np.inf)
    j0 = lo + k  # row 0: j = k + lo
    first = (j0 >= 0) & (j0 <= m)
    h[0, first] = -GAP * j0[first]
    for i in range(1, n + 1):
        j = i + lo + k
        inside = (j >= 0) & (j <= m)
        diag = np.full(width, -np.inf)
        can = inside & (j >= 1)
        diag[can] = h[i - 1, can] + _score(ref, other, i - 1, j[can] - 1, square, laws)
        up = np.full(width, -np.inf)
        up[:-1] = h[i - 1, 1:] - GAP
        t = np.where(inside, np.maximum(diag, up), -np.inf)
        row = np.maximum.accumulate(t + GAP * k) - GAP * k
        h[i] = np.where(inside, row, -np.inf)
    return h
