"""Everything that turns figures into words for people, shared by the magic, the CLI and the dashboard.

Byte counts, the one-line report after a cell, the interval table, readable stack frames (and
which frames to drop), why a block has no stack, and bytes per allocation site. Analysis stays
numbers; what a number means to a reader is decided here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.clean import clean
from ..core.names import number_list, run_label, shown_path
from ..recording.backends import backend_class
from ..results.stacks import frame_lines, site

if TYPE_CHECKING:
    from ..results.intervals import Interval

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    """Binary units, as torch and memory_viz print them: ``4.0 MiB``, ``+512 B``."""
    if n is None:
        return "—"
    sign = ("+" if n > 0 else "-" if n < 0 else "±") if signed else ("-" if n < 0 else "")
    value = float(abs(n))
    # compared as printed, and never four digits before the point: 1,048,568 B is 1.0 MiB, not
    # 1024.0 KiB, and 1,024,000 B is 1.0 MiB, not 1000.0 KiB (it read as a thousand of a unit)
    for unit in _UNITS:
        if unit == _UNITS[-1] or (value < 1000 if unit == "B" else round(value, 1) < 1000):
            break
        value /= 1024
    text = f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    return sign + text


def describe(iv: Interval, replaced: Interval | None = None, chain_from: int | None = None) -> str:
    """The compact line printed after each ``%%memsnap`` cell: short enough for one line of a
    notebook before the file's path, which comes last; comparisons live in the table and dashboard.
    ``replaced``: the interval of the same step (in the same run) this one replaced.
    ``chain_from``: the step whose start a ``clear=false`` history (and so every figure) counts from."""
    parts = [
        f"memsnap step {iv.step}" + (f" rank {iv.rank}" if iv.rank else "") + (f" (run {iv.run})" if iv.run else ""),
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
    head = (
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
    if tags:
        head = (*head[:3], "tag", *head[3:])
    if runs:
        head = ("run", *head)
    rows = [head]
    for iv in intervals:
        row = (
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
    from unicodedata import combining, east_asian_width

    return sum(2 if east_asian_width(c) in "WF" else 0 if combining(c) else 1 for c in text)


def step_list(steps: Sequence[int]) -> str:
    """``step 4`` for one, ``steps 3–4`` for consecutive numbers, ``steps 1, 5, 10``, ``steps 1–40, 50``."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if list(steps) == list(range(steps[0], steps[0] + len(steps))):
        return f"steps {steps[0]}–{steps[-1]}"
    return f"steps {number_list(steps)}"


def bar_figures(iv: Interval) -> str:
    """One step's figures, exact to the byte, for the bar the pointer is on (the dashboard)."""
    where = iv.device if iv.rank == 0 else f"{iv.device}, rank {iv.rank}"
    failed = f" · raised {iv.error}" if iv.error else ""
    return (
        f"<b>step {iv.step}</b> ({html.escape(where)}){html.escape(failed)}: peak {_exact(iv.peak_allocated)}"
        f" = start {_exact(iv.baseline_allocated)} + {_exact(iv.peak_increase)} in the step"
        f" · kept {_exact(iv.kept, signed=True)} · {iv.trace_entries:,} entries"
        f"<br>never cleared, its snapshot would hold {iv.cumulative_trace_entries:,} entries"
        f" and show a peak of {_exact(iv.cumulative_peak_allocated)}"
    )


def ranks_figures(intervals: Sequence[Interval]) -> str:
    """One step across ranks/devices: the largest and smallest peak and their gap, exact."""
    ranked = sorted(intervals, key=lambda iv: iv.peak_allocated)
    low, high = ranked[0], ranked[-1]
    return (
        f"<b>step {high.step}</b> across {len(ranked)} ranks/devices: largest peak {_exact(high.peak_allocated)}"
        f" (rank {high.rank} · {html.escape(high.device)}), smallest {_exact(low.peak_allocated)}"
        f" (rank {low.rank} · {html.escape(low.device)}), gap {_exact(high.peak_allocated - low.peak_allocated)}"
    )


def _exact(n: int, signed: bool = False) -> str:
    sign = "+" if signed and n > 0 else ""
    return f"{fmt_bytes(n, signed=signed)} ({sign}{n:,} B)"


def compare_runs(label: str, ivs: Sequence[Interval], other_label: str, other: Sequence[Interval]) -> str | None:
    """One run against another on the steps both have: where the peak changed most, and what
    the steps kept in total; None when they share no step."""
    theirs = {iv.step: iv for iv in other}
    common = [(iv, theirs[iv.step]) for iv in ivs if iv.step in theirs]
    if not common:
        return None
    mine, base = max(common, key=lambda pair: abs(pair[0].peak_allocated - pair[1].peak_allocated))
    change = mine.peak_allocated - base.peak_allocated
    kept_mine, kept_base = sum(a.kept for a, _ in common), sum(b.kept for _, b in common)
    peaks = (
        f"largest peak change at step {mine.step} ({fmt_bytes(base.peak_allocated)} → "
        f"{fmt_bytes(mine.peak_allocated)}, {fmt_bytes(change, signed=True)})"
        if change
        else "the same peaks"
    )
    return (
        f"{label} vs {other_label} on {step_list(sorted(a.step for a, _ in common))}: {peaks}; kept in total "
        f"{fmt_bytes(kept_base, signed=True)} → {fmt_bytes(kept_mine, signed=True)}"
    )


def oom_report(iv: Interval) -> str | None:
    """What the failed allocation asked for, what the device had free, and what held the memory
    at that moment (by category where the file says, and the largest sites)."""
    oom = iv.oom
    if oom is None:
        return None
    total = (iv.usage_end or {}).get("total")
    text = f"out of memory: asked for {fmt_bytes(oom['requested'])}"
    if oom.get("site"):
        text += f" at {oom['site']}"
    if oom["device_free"] is not None:
        text += f" with {fmt_bytes(oom['device_free'])} free" + (f" of {fmt_bytes(total)}" if total else "")
    text += f"; {fmt_bytes(oom['allocated'])} allocated then"
    if oom.get("by_category"):
        text += " (" + ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in oom["by_category"].items()) + ")"
    if oom.get("sites"):
        text += "; most held by " + ", ".join(f"{site} {fmt_bytes(nbytes)}" for site, nbytes, _ in oom["sites"][:3])
    return text


def caveats(iv: Interval) -> list[str]:
    """What makes a step's figures a partial view, in words (the dashboard's step; the table marks
    the same steps): a full ring, a recording that lost events, a start that moved unseen."""
    said = []
    if iv.overflowed:
        said.append(
            f"the trace ring was full ({iv.trace_entries:,} entries, max_entries=): the step's oldest events "
            "were dropped, so its start, peak and kept figures are those of the window kept, not of the whole "
            "step (a larger max_entries= keeps more)"
        )
    if iv.incomplete:
        said.append(f"incomplete: {iv.incomplete}")
    if iv.freed_unseen:
        said.append(
            f"{fmt_bytes(iv.freed_unseen)} allocated before recording began was freed at a moment nothing "
            "reported (no allocation reused it and its storage was not seen dying): it is counted until the "
            "step's end, so the peak is an upper bound, at most that much too high"
        )
    if iv.moved:
        said.append(
            f"the start moved {fmt_bytes(iv.moved, signed=True)} since step {iv.moved_since} ended"
            " (memory changed between the recorded cells, where nothing recorded it)"
        )
    return said


def usage_line(iv: Interval) -> str | None:
    """The device's (or process's) use at the step's end beside what PyTorch allocated: the gap
    is memory the trace does not see (other processes, CUDA context, graphs, fragmentation)."""
    end = iv.usage_end or {}
    if "total" in end and "free" in end:
        in_use = end["total"] - end["free"]
        parts = [f"device at the step's end: {fmt_bytes(in_use)} in use of {fmt_bytes(end['total'])}"]
        if "reserved" in end:
            parts.append(f"PyTorch reserved {fmt_bytes(end['reserved'])}, allocated {fmt_bytes(iv.end_allocated)}")
            parts.append(f"{fmt_bytes(max(in_use - end['reserved'], 0))} in use outside PyTorch's allocator")
        return " · ".join(parts)
    if "rss" in end:
        return (
            f"process resident memory at the step's end: {fmt_bytes(end['rss'])} "
            f"(tensors the trace saw: {fmt_bytes(iv.end_allocated)})"
        )
    return None


def count_of(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'s' * (n != 1)}"


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


def why_no_frames(block: dict[str, Any], iv: Interval) -> str:
    """Why a block has no stack, as memory_viz explains frameless blocks."""
    if block.get("before"):
        return "live before this step's recording started"
    backend = backend_class(iv.device)
    if backend is not None and not backend.records_stacks:
        return f"{backend.label} records no stacks"
    if iv.context in ("none", "state"):
        return f"recorded with context={iv.context}: trace entries carry no stack"
    if backend is not None and block.get("size", 0) < backend.stack_bytes:
        return f"{backend.label} records stacks of allocations of {fmt_bytes(backend.stack_bytes)} or more"
    return "no Python frames (allocated from C++ or the autograd thread)"


TABLE_ROWS = 10


def blocks_table(iv: Interval, earlier: Sequence[Interval] = ()) -> str:
    """HTML: the largest blocks alive at the peak, since when, and who allocated them.

    Blocks of one size from one site are one row ("5 × 32.0 MiB"); a block live before the step
    is dated by ``earlier`` (the steps before it, same rank and device) where one of them made
    it. The "allocated by" column is left out when no block has a stack; why is said below."""
    from ..results.findings import born_in

    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    reasons: list[str] = []
    for b in iv.top_blocks:
        frames = tuple(frame_lines(b.get("frames") or []))
        reason = "" if frames else why_no_frames(b, iv)
        if reason and reason not in reasons:
            reasons.append(reason)
        made_in = b.get("made_in")  # a clear=false history: the step before this one that made it
        earlier_here = type(made_in) is int and made_in != iv.step and not b.get("before")
        # one row per size and call chain (``site``): one line reached from two calls is two rows
        key = (b["size"], site(b) if frames else "", reason, bool(b.get("before")) or earlier_here, b.get("category"))
        group = groups.setdefault(key, {"count": 0, "steps": set(), "unknown": False, "frames": frames})
        group["count"] += 1
        shared = group["frames"]
        if frames[: len(shared)] != shared:  # one site reached through different calls: only what they share
            common = next((n for n, (a, b) in enumerate(zip(shared, frames)) if a != b), min(len(shared), len(frames)))
            group["frames"], group["varied"] = shared[:common], True
        if earlier_here:
            group["steps"].add(made_in)
        elif b.get("before"):
            step = born_in(b, earlier)
            if step is None:
                group["unknown"] = True
            else:
                group["steps"].add(step)
    if not groups:
        return "<i>nothing was allocated at this step's peak</i>"
    stacks = any(key[1] for key in groups)
    labelled = any(key[4] for key in groups)
    rows = []
    for (size, _, reason, before, category), group in list(groups.items())[:TABLE_ROWS]:
        count, frames = group["count"], group["frames"]
        cells = [f"{count} × {fmt_bytes(size)}" if count > 1 else fmt_bytes(size)]
        if labelled:
            cells.append(html.escape((category or "unknown").replace("_", " ")))
        cells.append(_since(before, group))
        if stacks:
            if frames:
                lines = [html.escape(line) for line in frames]
                if group.get("varied"):
                    lines.append("<i>(reached through different calls)</i>")
                cells.append("<br>".join(lines))
            else:  # say why once, below the table, instead of on every row
                cells.append(f"<i>no stack ({'*' * (reasons.index(reason) + 1)})</i>")
        rows.append(
            f"<tr><td style='text-align:right;padding-right:1em'>{cells[0]}</td>"
            + "".join(f"<td style='padding-right:1em'>{c}</td>" for c in cells[1:])
            + "</tr>"
        )
    left = "<th style='text-align:left;padding-right:1em'>"  # spaced as the cells below: headers never run together
    head = "<th style='padding-right:1em'>size</th>" + (f"{left}what</th>" if labelled else "")
    head += f"{left}allocated in</th>"
    if stacks:
        head += f"{left}allocated by</th>"
        notes = "".join(f"<br><small>{'*' * (n + 1)} {html.escape(r)}</small>" for n, r in enumerate(reasons))
    else:
        notes = "<br><small>no stacks: " + html.escape("; ".join(reasons)) + "</small>"
    more = len(groups) - TABLE_ROWS
    if more > 0:
        notes = f"<br><small>and {more} smaller row{'s' * (more > 1)}</small>" + notes
    return (
        "<b>Largest allocations alive at the peak</b><table><tr>" + head + "</tr>" + "".join(rows) + "</table>" + notes
    )


def _since(before: bool, group: dict[str, Any]) -> str:
    """When a row's blocks were allocated: this step, earlier steps, or before anything recorded."""
    if not before:
        return "this step"
    parts = [step_list(sorted(group["steps"]))] if group["steps"] else []
    if group["unknown"]:
        parts.append("before recording")
    return ", ".join(parts)
