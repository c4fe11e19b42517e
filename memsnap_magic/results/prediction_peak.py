"""What the predicted peak is made of: the bytes alive then by category and site, the moment it
happens, and the sites that grow most toward the target size, each with its law.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .prediction_model import BEFORE, Replay, StepModel
from .prediction_words import law_words, site_name


@dataclass(frozen=True)
class Growth:
    """A site whose bytes alive at the predicted peak grow with the dimension, and its law."""

    site: str
    law: str  # in words: "4 × seq² + 512 × seq bytes"
    bytes_at: int  # at the target size
    bytes_smallest: int  # at the smallest recorded size
    coefficients: tuple[float, float, float]  # bytes, per unit, per unit²

    def __str__(self) -> str:
        return f"{self.site}: {self.law}"


@dataclass(frozen=True)
class PeakMoment:
    """When the predicted peak happens: at which event of the step, and the allocation there."""

    event: int  # index among the step's allocations and frees; -1: before the first
    fraction: float  # of the step's events
    site: str  # where the allocation that reaches the peak is made
    after_us: int | None  # into the step at the largest recorded size (None: no times recorded)


def at_peak(model: StepModel, replay: Replay) -> dict[str, dict[str, int]]:
    live = np.flatnonzero(replay.alive)
    cats = model.names.category_names()
    by_cat = {cats[c]: b for c, b in zip(*_sums(model.category[live], replay.sizes[live]))}
    by_site: dict[str, int] = {}
    for site, b in zip(*_sums(model.site[live], replay.sizes[live])):
        name = site_name(model.names, site)
        by_site[name] = by_site.get(name, 0) + b
    return {"category": _largest_first(by_cat), "site": _largest_first(by_site)}


def _largest_first(bytes_by: dict[str, int]) -> dict[str, int]:
    """The entries that hold bytes, the largest first."""
    return dict(sorted(((k, v) for k, v in bytes_by.items() if v), key=lambda kv: -kv[1]))


def _sums(keys: np.ndarray, values: np.ndarray) -> tuple[list[int], list[int]]:
    """Each distinct key and the sum of its values, as Python ints."""
    uniq, which = np.unique(keys, return_inverse=True)
    return uniq.tolist(), np.bincount(which.ravel(), weights=values, minlength=len(uniq)).astype(np.int64).tolist()


def when(model: StepModel, replay: Replay) -> PeakMoment:
    ref, p = model.ref, replay.index
    if p < 0:
        return PeakMoment(-1, 0.0, site_name(model.names, BEFORE), None)
    item = int(ref.item[p])
    site = site_name(model.names, int(model.site[item]))
    first, here = ref.trace[int(ref.entry[0])].get("time_us"), ref.trace[int(ref.entry[p])].get("time_us")
    after = here - first if type(first) is int and type(here) is int else None
    return PeakMoment(p, p / len(ref.sign), site, after)


def growth(model: StepModel, replay: Replay, target: float, dim: str, top: int = 5) -> list[Growth]:
    """The sites alive at the peak whose bytes grow most from the smallest recorded size to the
    target, each with the law its allocations there add up to."""
    live = np.flatnonzero(replay.alive)
    uniq, which = np.unique(model.site[live], return_inverse=True)
    which = which.ravel()

    def sums(weights: np.ndarray) -> np.ndarray:
        summed: np.ndarray = np.bincount(which, weights=weights, minlength=len(uniq))
        return summed

    at, smallest = sums(replay.sizes[live]), sums(model.predict_sizes(model.recs[0].value)[live])
    laws = np.stack([sums(c) for c in model.law_rows(live).T], axis=1)
    by_name: dict[str, list[Any]] = {}
    for k, site in enumerate(uniq.tolist()):
        name = site_name(model.names, site)
        if name in by_name:
            entry = by_name[name]
            entry[0], entry[1], entry[2] = entry[0] + at[k], entry[1] + smallest[k], entry[2] + laws[k]
        else:
            by_name[name] = [at[k], smallest[k], laws[k]]
    found = [
        Growth(name, law_words(c, dim, target), int(a), int(b), (float(c[0]), float(c[1]), float(c[2])))
        for name, (a, b, c) in by_name.items()
        if a > b
    ]
    found.sort(key=lambda g: -(g.bytes_at - g.bytes_smallest))
    return found[:top]
