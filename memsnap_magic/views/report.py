"""What the magic and the CLI print: the line after each ``%%memsnap`` cell, the interval table,
and what a load read (or skipped)."""

from __future__ import annotations

from collections.abc import Sequence
from unicodedata import combining, east_asian_width

from ..core.clean import clean
from ..core.names import run_label, shown_path
from ..recording.backends import backend_class
from ..results.intervals import Interval
from .words import count_of, fmt_bytes, number_list, scale_text, step_list


def describe(iv: Interval, replaced: Interval | None = None, chain_from: int | None = None) -> str:
    """The compact line printed after each ``%%memsnap`` cell: short enough for one line of a
    notebook before the file's path, which comes last; comparisons live in the table and dashboard.
    ``replaced``: the interval of the same step (in the same run) this one replaced.
    ``chain_from``: the step whose start a ``clear=false`` history (and so every figure) counts from.
    A step recorded with ``scale=`` says its sizes as ``predict`` is asked for them (``at batch=8``)."""
    sizes = ", ".join(f"{name}={size}" for name, size in (iv.scale or {}).items())  # as predict asks
    parts = [
        f"memsnap step {iv.step}"
        + (f" rank {iv.rank}" if iv.rank else "")
        + (f" (run {iv.run})" if iv.run else "")
        + (f" at {sizes}" if sizes else ""),
        iv.device,
        f"peak {fmt_bytes(iv.peak_allocated)} ({fmt_bytes(iv.peak_increase, signed=True)} over start)",
        f"kept {fmt_bytes(iv.kept, signed=True)}"
        + (f" (from step {chain_from}'s start: clear=false)" if chain_from is not None else ""),
    ]
    entries = f"{iv.trace_entries:,} entries" + (" (ring full: oldest dropped)" if iv.overflowed else "")
    backend = backend_class(iv.device)
    if iv.trace_entries == 0 and not (backend is not None and backend.host):
        entries += f": nothing was allocated on {iv.device} (CPU tensors? record them with device=cpu)"
    parts.append(entries)
    if iv.error:
        parts.append(f"cell raised {iv.error}")
    if iv.oom is not None:
        parts.append(f"out of memory asking for {fmt_bytes(iv.oom['requested'])}")
    if iv.incomplete:
        parts.append(f"incomplete: {iv.incomplete}")
    if iv.freed_unseen:
        parts.append(f"peak may count {fmt_bytes(iv.freed_unseen)} freed unseen")
    if iv.moved:  # memory changed where nothing recorded it: the start is what was found, not followed
        parts.append(f"start moved {fmt_bytes(iv.moved, signed=True)} since step {iv.moved_since} ended")
    if replaced is not None:
        elsewhere = replaced.path is not None and iv.path is not None and replaced.path != iv.path
        stays = f" (its file stays: {shown_path(replaced.path)})" if elsewhere and replaced.path else ""
        parts.append(f"replaced the earlier step {replaced.step}{stays}")
    where = shown_path(iv.path) if iv.path is not None else "not written"
    return " · ".join(parts) + f" → {where}"


def interval_table(intervals: Sequence[Interval]) -> str:
    """The ``%memsnap list`` / ``memsnap summarize`` table."""
    if not intervals:
        return "memsnap: no intervals yet (run a %%memsnap cell)"
    head: tuple[str, ...] = (
        "step",
        "rank",
        "device",
        "baseline",
        "peak",
        "increase",
        "kept",
        "cum. peak",
        "entries",
        "cum. entries",
        "error",
        "file",
    )
    allocator = any(iv.allocator_peak_allocated is not None for iv in intervals)
    if allocator:
        head = (*head[:5], "alloc. peak", *head[5:])
    runs = len({iv.run for iv in intervals}) > 1
    tags = len({iv.tag for iv in intervals}) > 1  # one step under two tags is two rows: say which
    scales = any(iv.scale for iv in intervals)  # the sizes each step ran at (scale=batch:8)
    if scales:
        head = (*head[:3], "scale", *head[3:])
    if tags:
        head = (*head[:3], "tag", *head[3:])
    if runs:
        head = ("run", *head)
    rows = [head]
    for iv in intervals:
        row: tuple[str, ...] = (
            str(iv.step),
            str(iv.rank),
            iv.device,
            fmt_bytes(iv.baseline_allocated),
            fmt_bytes(iv.peak_allocated),
            fmt_bytes(iv.peak_increase, signed=True),
            fmt_bytes(iv.kept, signed=True),
            fmt_bytes(iv.cumulative_peak_allocated),
            f"{iv.trace_entries:,}" + " ring full" * iv.overflowed + " incomplete" * bool(iv.incomplete),
            f"{iv.cumulative_trace_entries:,}",
            iv.error or "",
            shown_path(iv.path) if iv.path else "(not written)",
        )
        if allocator:
            row = (*row[:5], fmt_bytes(iv.allocator_peak_allocated), *row[5:])
        if scales:
            row = (*row[:3], scale_text(iv.scale), *row[3:])
        if tags:
            row = (*row[:3], clean(iv.tag), *row[3:])
        if runs:
            row = (run_label(iv.run), *row)
        rows.append(row)
    widths = [max(map(_columns, (r[c] for r in rows))) for c in range(len(head))]
    return "\n".join("  ".join(v + " " * (w - _columns(v)) for v, w in zip(r, widths)).rstrip() for r in rows)


def _columns(text: str) -> int:
    """The terminal columns ``text`` takes: wide characters (a run named 日本) take two."""
    if text.isascii():
        return len(text)
    return sum(2 if east_asian_width(c) in "WF" else 0 if combining(c) else 1 for c in text)


def files_phrase(intervals: Sequence[Interval]) -> str:
    """``3 steps``; ``6 snapshots: 3 steps × 2 ranks`` where several ranks (or runs) share the steps."""
    steps = len({iv.step for iv in intervals})
    ranks = len({iv.rank for iv in intervals})
    runs = len({iv.run for iv in intervals})
    if len(intervals) == steps:
        return count_of(steps, "step")
    parts = [count_of(steps, "step")] + [count_of(n, noun) for n, noun in ((ranks, "rank"), (runs, "run")) if n > 1]
    return f"{count_of(len(intervals), 'snapshot')}: {' × '.join(parts)}"


def loaded_line(intervals: Sequence[Interval], replaced: int = 0, skipped: Sequence[Interval] = ()) -> str:
    """What ``%memsnap load`` brought in, and into which run(s); ``skipped``: older files of a
    step and rank the files hold twice (a kernel restarted), as ``memsnap summarize`` says."""
    steps = sorted({iv.step for iv in intervals})
    ranks = sorted({iv.rank for iv in intervals})
    runs: dict[str, int] = {}
    for iv in intervals:
        runs[iv.run] = runs.get(iv.run, 0) + 1
    into = ", ".join(f"{run_label(name)!r}" + (f" ({n})" if len(runs) > 1 else "") for name, n in runs.items())
    again = f" (replacing {count_of(replaced, 'step')} already in the session)" if replaced else ""
    line = (
        f"memsnap: loaded {count_of(len(intervals) - len(skipped), 'snapshot')} into run{'s' * (len(runs) > 1)} "
        f"{into}{again}: {step_list(steps)}; rank{'s' * (len(ranks) > 1)} {number_list(ranks)}"
    )
    return f"{line}\n{skipped_line(skipped)}" if skipped else line


def skipped_line(skipped: Sequence[Interval]) -> str:
    """The older files of steps written twice (a kernel restarted), read past: the first, and
    how many more (``memsnap summarize`` and ``%memsnap load`` say it alike)."""
    old = skipped[0]
    more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
    if old.end_us is None:  # a file that does not say when it was written (verl's): the later read stands
        path = clean(str(old.path))
        return f"memsnap: step {old.step} rank {old.rank} is in two files; skipped {path}{more}, read before the other"
    return f"memsnap: step {old.step} rank {old.rank} has a newer file; skipped {clean(str(old.path))}{more}"
