"""What the dashboard says about steps (the findings' headline is ``headline``): runs compared, one step's exact
figures, its caveats, its out-of-memory report, and the largest blocks alive at its peak (HTML
where the dashboard shows it so)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..recording.backends import backend_class
from ..results.findings import born_in
from ..results.holders import held_by
from ..results.intervals import Interval
from ..results.stacks import frame_lines, site
from .words import fmt_bytes, step_list


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


def run_comparisons(label: str, compared: list[tuple[str, list[Interval]]]) -> list[str]:
    """Run ``label`` against each other run of ``compared`` ((label, intervals) per run), always
    earlier run → later one (the order they began in, ``compared``'s), so a fix recorded after
    reads as before → after whichever run is selected."""
    names = [name for name, _ in compared]
    mine = dict(compared)[label]
    lines = []
    for name, other in compared:
        if name == label:
            continue
        pair = (label, mine, name, other) if names.index(label) > names.index(name) else (name, other, label, mine)
        if (line := compare_runs(*pair)) is not None:
            lines.append(line)
    return lines


def failure_banner(iv: Interval) -> str:
    """HTML over a step that raised or ran out of memory (empty for one that did neither)."""
    oom = oom_report(iv)
    return (
        f"<div style='color:#fff;background:#c0392b;padding:4px 8px;"
        f"border-radius:3px'><b>Step {iv.step} raised {html.escape(iv.error or 'nothing')}</b>"
        f" — the snapshot shows memory up to the failure" + (f"<br>{html.escape(oom)}" if oom else "") + "</div>"
        if iv.error or oom
        else ""
    )


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
        group = groups.setdefault(key, {"count": 0, "steps": set(), "unknown": False, "frames": frames, "held": {}})
        group["count"] += 1
        holder = held_by(b, iv, earlier)
        if holder is not None:
            group["held"][holder] = group["held"].get(holder, 0) + 1
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
    holders = any(group["held"] for group in groups.values())
    rows = []
    for (size, _, reason, before, category), group in list(groups.items())[:TABLE_ROWS]:
        count, frames = group["count"], group["frames"]
        cells = [f"{count} × {fmt_bytes(size)}" if count > 1 else fmt_bytes(size)]
        if labelled:
            cells.append(html.escape((category or "unknown").replace("_", " ")))
        cells.append(_since(before, group))
        if holders:
            cells.append(_held_cell(group["held"], count))
        if stacks:
            if frames or group.get("varied"):  # calls that share no frame: said so, never "no stack"
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
    head += f"{left}allocated in</th>" + (f"{left}held by</th>" if holders else "")
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


def _held_cell(held: dict[str, int], count: int) -> str:
    """Who held a row's blocks at their step's end (``retention``): the path holding most of
    them, and how many others; nothing where no walk said."""
    if not held:
        return ""
    path, n = max(held.items(), key=lambda item: item[1])
    others = len(held) - 1
    more = f" <i>(+{others} more)</i>" if others else ""
    share = f" <i>({n} of {count})</i>" if n < count and not others else ""
    return f"<code>{html.escape(path)}</code>{share}{more}"


def _since(before: bool, group: dict[str, Any]) -> str:
    """When a row's blocks were allocated: this step, earlier steps, or before anything recorded."""
    if not before:
        return "this step"
    parts = [step_list(sorted(group["steps"]))] if group["steps"] else []
    if group["unknown"]:
        parts.append("before recording")
    return ", ".join(parts)
