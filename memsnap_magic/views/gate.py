"""A memory gate for CI: does a new run stay within tolerances of a baseline, step by step?

``memsnap check BASELINE NEW`` and the pytest marker ``limit_torch_memory`` come here. Pure:
intervals (as ``scan.read_run`` gives them) and tolerances in, verdicts and their lines out;
nothing here reads files or imports torch.

Steps are matched by step number, rank and device. A step exceeds when its peak grew over the
baseline's by more than the ``peak`` tolerance, or what it kept (end minus start) grew by more
than the ``kept`` tolerance. A tolerance is bytes (``1MiB``, ``512 KiB``, ``0``) or a share
(``2%``): of the baseline step's peak for ``peak``, of its start for ``kept`` (what it keeps
may be nothing, and no share of nothing tells a leak from noise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.units import BYTES_HELP, parse_bytes
from ..results.stacks import brief, site_bytes
from .words import fmt_bytes, step_list

if TYPE_CHECKING:
    from ..results.intervals import Interval


@dataclass(frozen=True)
class Tolerance:
    """How much a figure may grow over the baseline's: bytes, or a share of a reference."""

    amount: float  # bytes, or a fraction of the reference when ``share``
    share: bool
    text: str  # as given, for the lines

    def limit(self, reference: int) -> int:
        """The bytes allowed over a baseline whose reference figure is ``reference``."""
        return int(self.amount * max(reference, 0)) if self.share else int(self.amount)

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.share else fmt_bytes(int(self.amount))


def parse_tolerance(text: str) -> Tolerance:
    """``2%`` (a share) or bytes (``1MiB``) → a ``Tolerance``; ``ValueError`` saying what is allowed."""
    if isinstance(text, str) and text.strip().endswith("%"):
        number = text.strip()[:-1].strip().lstrip("+")
        try:
            value = float(number)
        except ValueError:
            value = -1.0
        if not (0 <= value < float("inf")):
            raise ValueError(f"{text!r}: give a share as a number of 0 or more with %, or {BYTES_HELP}")
        return Tolerance(value / 100, True, text.strip())
    return Tolerance(parse_bytes(text), False, text.strip() if isinstance(text, str) else str(text))


Key = tuple[int, int, str]  # step, rank, device


@dataclass(frozen=True)
class StepCheck:
    """One step of both runs: their figures, the limits, and where the growth came from."""

    step: int
    rank: int
    device: str
    peak_baseline: int
    peak_new: int
    peak_limit: int
    kept_baseline: int
    kept_new: int
    kept_limit: int
    peak_site: tuple[str, int] | None = None  # the site whose bytes alive at the peak grew most
    kept_site: tuple[str, int] | None = None  # the site whose kept bytes grew most
    peak_what: tuple[str, int] | None = None  # the category whose bytes at the peak grew most
    kept_what: tuple[str, int] | None = None  # the category whose bytes at the end grew most

    @property
    def peak_growth(self) -> int:
        return self.peak_new - self.peak_baseline

    @property
    def kept_growth(self) -> int:
        return self.kept_new - self.kept_baseline

    @property
    def exceeds(self) -> list[str]:
        """Which figures grew past their limit: ``peak``, ``kept``, both or none."""
        return [
            name
            for name, growth, limit in (
                ("peak", self.peak_growth, self.peak_limit),
                ("kept", self.kept_growth, self.kept_limit),
            )
            if growth > limit
        ]


@dataclass
class Verdict:
    """The steps both runs hold, checked, and the steps only one of them holds."""

    checks: list[StepCheck]
    peak: Tolerance
    kept: Tolerance
    only_baseline: list[Key] = field(default_factory=list)
    only_new: list[Key] = field(default_factory=list)

    @property
    def failed(self) -> list[StepCheck]:
        return [c for c in self.checks if c.exceeds]


def compare(baseline: Sequence[Interval], new: Sequence[Interval], peak: Tolerance, kept: Tolerance) -> Verdict:
    """Each step of ``new`` against the same step (rank, device) of ``baseline``; where a step
    exceeds, the site and category whose bytes grew most (a later file of one step wins, as
    ``read_run`` orders them)."""
    from ..results.findings import leak_sites

    base = {_key(iv): iv for iv in baseline}
    mine = {_key(iv): iv for iv in new}
    leaking = _leak_sites(new, leak_sites)
    checks = []
    for key in sorted(base.keys() & mine.keys()):
        a, b = base[key], mine[key]
        check = StepCheck(
            *key,
            peak_baseline=a.peak_allocated,
            peak_new=b.peak_allocated,
            peak_limit=peak.limit(a.peak_allocated),
            kept_baseline=a.kept,
            kept_new=b.kept,
            kept_limit=kept.limit(a.baseline_allocated),
        )
        if "peak" in check.exceeds:
            check = _with(check, peak_site=_grown(_at_peak(a), _at_peak(b)))
            check = _with(check, peak_what=_grown(a.by_category_at_peak or {}, b.by_category_at_peak or {}))
        if "kept" in check.exceeds:
            site = _grown(_rows(a.kept_by_site), _rows(b.kept_by_site)) or leaking.get(key)
            # what the end holds from before the step ("other") is no part of what the step kept
            ends = [{k: v for k, v in (iv.by_category or {}).items() if k != "other"} for iv in (a, b)]
            check = _with(check, kept_site=site, kept_what=_grown(*ends))
        checks.append(check)
    return Verdict(
        checks,
        peak,
        kept,
        only_baseline=sorted(base.keys() - mine.keys()),
        only_new=sorted(mine.keys() - base.keys()),
    )


def _key(iv: Interval) -> Key:
    return iv.step, iv.rank, iv.device


def _with(check: StepCheck, **changes: Any) -> StepCheck:
    from dataclasses import replace

    return replace(check, **changes)


def _rows(rows: Sequence[Sequence[Any]]) -> dict[str, int]:
    """``[[site, bytes, blocks], ...]`` → site → bytes."""
    return {row[0]: row[1] for row in rows}


def _at_peak(iv: Interval) -> dict[str, int]:
    """Bytes per site of the largest blocks alive at the step's peak (earlier steps' blocks keep
    the stacks they were allocated with)."""
    return site_bytes(iv.top_blocks)


def _grown(before: dict[str, int], after: dict[str, int]) -> tuple[str, int] | None:
    """The key whose value grew most from ``before`` to ``after``, with its growth; None if none grew."""
    growth = [(k, v - before.get(k, 0)) for k, v in after.items() if v > before.get(k, 0)]
    return max(growth, key=lambda kv: kv[1]) if growth else None


def _leak_sites(intervals: Sequence[Interval], leak_sites: Any) -> dict[Key, tuple[str, int]]:
    """The leaking site ``findings.leak_sites`` names for each step of each rank and device."""
    groups: dict[tuple[int, str], list[Interval]] = {}
    for iv in intervals:
        groups.setdefault((iv.rank, iv.device), []).append(iv)
    found: dict[Key, tuple[str, int]] = {}
    for (rank, device), ivs in groups.items():
        for leak in leak_sites(ivs, [iv.step for iv in ivs]):  # largest first: the first named stays
            for step, nbytes in zip(leak.steps, leak.kept):
                found.setdefault((step, rank, device), (leak.site, nbytes))
    return found


def lines(verdict: Verdict, several: bool = False) -> list[str]:
    """One line per step that exceeds (what grew, by how much, and the site and category that
    grew most), then one line of the outcome. ``several``: name each step's rank and device."""
    out = []
    for c in verdict.failed:
        where = f"step {c.step}" + (f" rank {c.rank} ({c.device})" if several else "")
        grew = "; ".join(_growth_phrase(c, name, verdict) for name in c.exceeds)
        # what it kept is the leak's own figure: its site first; else what was alive at the peak
        site, what = (c.kept_site, c.kept_what) if "kept" in c.exceeds else (c.peak_site, c.peak_what)
        cause = f" at {brief(site[0])} ({fmt_bytes(site[1], signed=True)})" if site is not None else ""
        cause += f", {_category(what[0])}" if what is not None else ""
        out.append(f"memsnap check: {where}: {grew}{';' if cause else ''}{cause}")
    shown = f"peak +{verdict.peak}, kept +{verdict.kept}"
    count = len(verdict.checks)
    if verdict.failed:
        failing = len(verdict.failed)
        out.append(f"memsnap check: {failing} of {count} step{'s' * (count > 1)} exceed the tolerances ({shown})")
    else:
        out.append(f"memsnap check: {count} step{'s' * (count > 1)} within the tolerances ({shown})")
    return out


def _growth_phrase(c: StepCheck, name: str, verdict: Verdict) -> str:
    """``kept +2.0 MiB more (±0 B → +2.0 MiB, allowed +1.0 MiB)`` or the peak's."""
    if name == "peak":
        before, after, limit, tolerance = c.peak_baseline, c.peak_new, c.peak_limit, verdict.peak
        text = f"peak +{fmt_bytes(after - before)} ({fmt_bytes(before)} → {fmt_bytes(after)}"
    else:
        before, after, limit, tolerance = c.kept_baseline, c.kept_new, c.kept_limit, verdict.kept
        text = (
            f"kept {fmt_bytes(after - before, signed=True)} more "
            f"({fmt_bytes(before, signed=True)} → {fmt_bytes(after, signed=True)}"
        )
    share = f" = {tolerance}" if tolerance.share else ""
    return f"{text}, allowed +{fmt_bytes(limit)}{share})"


def _category(name: str) -> str:
    """A category as the line says what held the bytes."""
    return "alive since before the step (other)" if name == "other" else f"held as {name}"


def unmatched(verdict: Verdict) -> list[str]:
    """Lines naming the steps only one run holds (not compared)."""
    out = []
    for keys, which in ((verdict.only_baseline, "BASELINE"), (verdict.only_new, "NEW")):
        if keys:
            steps = sorted({k[0] for k in keys})
            out.append(f"memsnap check: {step_list(steps)} only in {which}: not compared")
    return out


def records(verdict: Verdict) -> dict[str, Any]:
    """The verdict as JSON-ready data (``memsnap check --json``)."""
    return {
        "passed": not verdict.failed,
        "peak_tolerance": verdict.peak.text,
        "kept_tolerance": verdict.kept.text,
        "steps": [
            {
                "step": c.step,
                "rank": c.rank,
                "device": c.device,
                "peak_baseline": c.peak_baseline,
                "peak_new": c.peak_new,
                "peak_growth": c.peak_growth,
                "peak_limit": c.peak_limit,
                "kept_baseline": c.kept_baseline,
                "kept_new": c.kept_new,
                "kept_growth": c.kept_growth,
                "kept_limit": c.kept_limit,
                "exceeds": c.exceeds,
                "peak_site": list(c.peak_site) if c.peak_site else None,
                "kept_site": list(c.kept_site) if c.kept_site else None,
                "peak_category": list(c.peak_what) if c.peak_what else None,
                "kept_category": list(c.kept_what) if c.kept_what else None,
            }
            for c in verdict.checks
        ],
        "only_baseline": [list(k) for k in verdict.only_baseline],
        "only_new": [list(k) for k in verdict.only_new],
    }


def top_sites(sites: dict[str, int], count: int = 3) -> str:
    """The largest sites, ``64.0 MiB make_big (test_x.py:12); 1.0 MiB …``, or why there are none."""
    ranked = sorted(((s, b) for s, b in sites.items() if b > 0), key=lambda sb: -sb[1])
    ranked = [sb for sb in ranked if sb[1] >= 1024] or ranked  # a few bytes beside MiB are noise
    ranked = ranked[:count]
    if not ranked:
        return "no allocation site recorded"
    return "; ".join(f"{fmt_bytes(b)} {brief(s)}" for s, b in ranked)
