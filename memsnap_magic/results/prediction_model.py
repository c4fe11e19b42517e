"""One step's model over a dimension: each aligned item's size as a polynomial, and the replay.

A naive fit of recorded peaks fails (the peak moves between allocations as sizes grow), so the
step itself is replayed: the largest recording's events, in its order, with every item's size
predicted at the target. An item is one allocation of the step, one block from before the step
that it frees, or, per category, the bytes alive all through it. Each size is fitted with the
lowest degree (at most 2) that reproduces every recorded size exactly (sizes are integers); where
none does (four or more sizes, a law that is no polynomial), by least squares at degree 2.
What training keeps by design (parameters, gradients, optimizer state) alive through the step
stays at its largest recording's bytes, whatever the others say.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .prediction_align import Expect, align, allocations, freed_before
from .prediction_recording import Interner, Recording, kept

BEFORE = -2  # site of what was alive before the step
CONSTANT = ("parameter", "gradient", "optimizer_state")  # kept bytes that never scale


@dataclass
class Replay:
    """The step replayed at one size: the peak, where it happens, and what is alive then."""

    peak: int  # requested bytes
    blocks: int  # allocator-level bytes (each block rounded up); ``peak`` where nothing rounds
    index: int  # event index of the peak; -1: before the first event
    alive: np.ndarray  # per item: alive at the peak
    sizes: np.ndarray  # per item: its predicted bytes


class StepModel:
    """The recordings of one step at several sizes, aligned to the largest (the reference)."""

    def __init__(self, recordings: list[Recording], names: Interner, rounding: int) -> None:
        self.recs = sorted(recordings, key=lambda r: r.value)
        self.ref = ref = self.recs[-1]
        self.names, self.rounding = names, rounding
        self.x = np.array([r.value for r in self.recs], dtype=np.float64)
        self.unit = float(self.x[-1]) or 1.0  # fitted in units of the largest size: well conditioned
        a, b = len(ref.alloc_size), len(ref.gone_size)
        # by category from the largest size's end state; another size's alike where its total is
        # the same (read from its own end state only where the totals differ)
        splits = [kept(ref, names) if r.kept_total == ref.kept_total else kept(r, names) for r in self.recs]
        cats = sorted({c for split in splits for c in split})
        self.n_alloc, self.n_gone = a, b
        n, m = a + b + len(cats), len(self.recs)
        self.sizes = np.zeros((n, m), dtype=np.float64)
        self.present = np.zeros((n, m), dtype=bool)
        # each recording is aligned to the next larger one and the matches chained up to the
        # reference: neighbours look most alike (an allocation crosses 1 KiB, and gains its
        # frames, between two of them, not across all); once two sizes are aligned, the size each
        # allocation's law gives at the next one down scores a match (a constant allows no other)
        self.matches: list[np.ndarray] = [np.arange(a)] * m  # each reference allocation's match there
        gone = [np.arange(b)] * m
        self._fill(m - 1, gone)
        for k in range(m - 2, -1, -1):
            r, up = self.recs[k], self.recs[k + 1]
            ratio = up.value / r.value if r.value else 1.0
            for chains, items, rows in (
                (self.matches, allocations, slice(0, a)),
                (gone, freed_before, slice(a, a + b)),
            ):
                laws = functools.partial(self._laws, k, chains[k + 1], rows, len(items(up).size))
                chains[k] = _chain(chains[k + 1], align(items(up), items(r), ratio, laws))
            self._fill(k, gone)
        self.present[a + b :] = True
        self.sizes[a + b :] = [[split.get(c, 0) for split in splits] for c in cats]
        self.category = np.concatenate([ref.alloc_cat, ref.gone_cat, np.array(cats, dtype=np.int64)])
        self.site = np.concatenate([ref.alloc_site, np.full(n - a, BEFORE)])
        category_names = names.category_names()
        constant = np.array([category_names[c] in CONSTANT for c in cats], dtype=bool)
        self.constant = np.concatenate([np.zeros(a + b, dtype=bool), constant])
        self.coef = self.fit()
        # aligned: found at every size, and growing steadily over them (a size never shrinks as
        # the dimension grows: a fit that falls somewhere matched different allocations)
        self.aligned = self.present.all(axis=1) & self.steady(self.coef)

    def _fill(self, k: int, gone: list[np.ndarray]) -> None:
        """Column ``k`` of ``sizes`` and ``present``: the matched allocations and freed blocks."""
        r, a, b = self.recs[k], self.n_alloc, self.n_gone
        for rows, match, sizes in (
            (slice(0, a), self.matches[k], r.alloc_size),
            (slice(a, a + b), gone[k], r.gone_size),
        ):
            hit = match >= 0
            self.present[rows, k] = hit
            self.sizes[rows, k][hit] = sizes[match[hit]]

    def _laws(self, k: int, to_up: np.ndarray, rows: slice, n_up: int) -> Expect:
        """What the laws of the sizes above ``k`` say of each item of recording ``k + 1`` at ``k``."""
        expect, fixed = self._expected(k)
        laws = Expect(np.full(n_up, np.nan), np.zeros(n_up, dtype=bool))
        hit = to_up >= 0
        laws.size[to_up[hit]] = expect[rows][hit]
        laws.fixed[to_up[hit]] = fixed[rows][hit]
        return laws

    def _expected(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each item's size at recording ``k`` by the law of the larger sizes it was found at
        (NaN: found at fewer than two of them), and whether that law is a constant."""
        use = np.arange(len(self.recs)) > k
        out, fixed = np.full(len(self.sizes), np.nan), np.zeros(len(self.sizes), dtype=bool)
        if use.sum() < 2:
            return out, fixed
        rows = np.flatnonzero(self.present[:, use].all(axis=1))
        known = self.sizes[rows][:, use]
        coef = _fit(self.x[use] / self.unit, known)
        u = self.x[k] / self.unit
        out[rows] = np.rint(coef[:, 0] + u * (coef[:, 1] + u * coef[:, 2]))
        fixed[rows] = (known == known[:, :1]).all(axis=1)
        return out, fixed

    def fit(self, use: np.ndarray | None = None) -> np.ndarray:
        """Coefficients (items x 3: constant, linear, square, in units of the largest size) from the
        recordings ``use`` (default: all); an item absent from them keeps its reference size."""
        m = len(self.recs)
        use = np.ones(m, dtype=bool) if use is None else use
        coef = np.zeros((len(self.sizes), 3))
        coef[:, 0] = self.sizes[:, -1]
        mask = self.present & use
        u = self.x / self.unit
        fitted = ~self.constant
        whole = fitted & mask.all(axis=1)  # most items: found at every size
        if whole.any():
            coef[whole] = _fit(u[use], self.sizes[whole][:, use])
        rest = np.flatnonzero(fitted & ~whole)
        if len(rest):
            codes = (mask[rest].astype(np.int64) << np.arange(m)).sum(axis=1)  # the sizes each was found at
            for code in np.unique(codes).tolist():
                pattern = (code >> np.arange(m)) & 1 == 1
                rows = rest[codes == code]
                if pattern.any():
                    coef[rows] = _fit(u[pattern], self.sizes[rows][:, pattern])
        return coef

    def steady(self, coef: np.ndarray) -> np.ndarray:
        """Per item: its fitted size does not fall anywhere over the recorded sizes (the slope,
        linear in the size, is checked at both ends)."""
        slack = 1e-6 * (np.abs(coef).sum(axis=1) + 1)
        rising: np.ndarray = np.all(
            [coef[:, 1] + 2 * coef[:, 2] * u >= -slack for u in (self.x[0] / self.unit, 1.0)], axis=0
        )
        return rising

    def predict_sizes(self, value: float, coef: np.ndarray | None = None) -> np.ndarray:
        """Each item's bytes at ``value``: never negative, whole bytes."""
        c = self.coef if coef is None else coef
        u = value / self.unit
        return np.maximum(np.rint(c[:, 0] + u * (c[:, 1] + u * c[:, 2])), 0).astype(np.int64)

    def replay(self, value: float, coef: np.ndarray | None = None, alive: bool = True) -> Replay:
        """The reference's events, in its order, with every item at its size at ``value``."""
        return self.replay_sizes(self.predict_sizes(value, coef), alive)

    def worst_case(self, value: float) -> Replay:
        """The replay with each unaligned item as large as a degree-2 law allows from its size
        at the largest recording (where there is no law, nothing says it grows less)."""
        sizes = self.predict_sizes(value)
        grow = max(1.0, value / self.ref.value) ** 2 if self.ref.value else 1.0
        worst = np.ceil(self.sizes[:, -1] * grow).astype(np.int64)
        return self.replay_sizes(np.where(self.aligned, sizes, np.maximum(sizes, worst)), alive=False)

    def replay_sizes(self, sizes: np.ndarray, alive: bool = True) -> Replay:
        """The reference's events, in its order, with the items at ``sizes``."""
        ref, a = self.ref, self.n_alloc
        level = int(sizes[a:].sum()) + np.cumsum(ref.sign * sizes[ref.item])
        index = int(level.argmax()) if len(level) else -1
        if index >= 0 and level[index] <= sizes[a:].sum():
            index = -1
        peak = int(level[index]) if index >= 0 else int(sizes[a:].sum())
        blocks = peak
        if self.rounding > 1:
            r = self.rounding
            rounded = np.where(sizes > 0, -(-sizes // r) * r, 0)
            rounded[a + self.n_gone :] = sizes[a + self.n_gone :]  # totals, not blocks: left as they are
            blocks_level = int(rounded[a:].sum()) + np.cumsum(ref.sign * rounded[ref.item])
            blocks = int(max(blocks_level.max(initial=0), rounded[a:].sum()))
        if not alive:
            return Replay(peak, blocks, index, np.zeros(0, dtype=bool), sizes)
        live = np.ones(len(sizes), dtype=bool)
        live[:a] = (ref.alloc_at <= index) & (ref.free_at > index)
        live[a : a + self.n_gone] = ref.gone_at > index
        return Replay(peak, blocks, index, live, sizes)

    def leave_one_out(self) -> dict[float, float]:
        """Relative error of the peak predicted at each recorded size from the others alone."""
        errors = {}
        for k, r in enumerate(self.recs):
            use = np.arange(len(self.recs)) != k
            predicted = self.replay(r.value, self.fit(use), alive=False).peak
            errors[r.value] = (predicted - r.peak) / r.peak if r.peak else 0.0
        return errors

    def law_rows(self, rows: np.ndarray) -> np.ndarray:
        """The coefficients of ``rows`` in the dimension's own units (bytes, per unit, per unit²)."""
        laws: np.ndarray = self.coef[rows] / np.array([1.0, self.unit, self.unit**2])
        return laws


def _chain(to_up: np.ndarray, up_to_here: np.ndarray) -> np.ndarray:
    """Reference -> the larger neighbour's matches, then on to this recording (-1 stays -1)."""
    out = np.full(len(to_up), -1, dtype=np.int64)
    hit = to_up >= 0
    out[hit] = up_to_here[to_up[hit]]
    return out


def _fit(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row of ``y`` (sizes at ``u``): coefficients of the lowest exact degree <= 2, else the
    least-squares degree-2 (or the highest the points allow) fit. Sizes are whole bytes, so a
    constant is one without spread, checked before any product."""
    out = np.zeros((len(y), 3))
    flat = np.ptp(y, axis=1) <= 0.01
    out[flat, 0] = y[flat, 0]
    todo = np.flatnonzero(~flat)
    top = min(2, len(u) - 1)
    for degree in range(1, top + 1):
        if not len(todo):
            break
        v = np.vander(u, degree + 1, increasing=True)
        rows = y[todo]
        sol = rows @ np.linalg.pinv(v).T  # least squares, every row at once
        if degree < top:
            exact = np.abs(sol @ v.T - rows).max(axis=1) <= 0.01 + 1e-12 * np.abs(rows).max(axis=1)
        else:
            exact = np.ones(len(todo), dtype=bool)
        out[todo[exact], : degree + 1] = sol[exact]
        todo = todo[~exact]
    return out
