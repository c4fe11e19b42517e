"""A recorded step's allocations matched across recorded sizes.

``prediction`` fits each allocation's size against a dimension (batch, sequence length): it needs
to know which allocation at one size is which at another. The same code allocates in the same
order, so allocations are matched in order, by the site that made them (their frames' chain) and
their category, with sizes that can belong to one law. Where a size adds, drops or swaps some (a
workspace, another algorithm), the alignment of highest score is found between the common head
and tail, and an item that two alignments of that score match differently stays unmatched. On
the CPU route an allocation under 1 KiB has no frames, so a frameless allocation may match any
site of its category (less surely than a site matches).

Pure numpy over the columns ``prediction_recording`` reads.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from .prediction_recording import NO_SITE, Recording


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
