"""The findings of a run of steps, one short line each: the words every front end shows.

``headline(intervals)`` is the one function the dashboard, its still copy, ``%memsnap list`` and
``memsnap summarize`` (text and ``--json``) call, so they never disagree. The rules are
``results.findings``; here they become words (see ``docs/diagnosis.md``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.clean import clean
from ..core.names import run_label
from ..results.advice import advice
from ..results.findings import FLOOR, Leak, SiteLeak, Spike, leak_sites, leaks, spikes
from ..results.holders import Holder, holder
from ..results.stacks import brief
from .words import fmt_bytes, step_list

if TYPE_CHECKING:
    from ..results.intervals import Interval

NOTHING = "no leak or spike"


def headline(intervals: Sequence[Interval]) -> str:
    """The findings of a run of steps, one line each (``\\n``-joined): which steps leaked, what
    keeps it and from which call, what to do, which steps spiked (see ``findings``)."""
    return "\n".join(finding_lines(intervals))


def finding_lines(intervals: Sequence[Interval]) -> list[str]:
    """``headline``'s lines; one saying nothing was found where nothing was (none for no steps)."""
    steps = [iv.step for iv in intervals]
    lines: list[str] = []
    runs = leaks(intervals, steps)
    for run in runs[:2]:
        lines.append(_leak(run))
    if len(runs) > 2:
        lines.append(f"{len(runs) - 2} more leaking run{'s' * (len(runs) > 3)}")
    kept = holder(intervals, max(runs, key=lambda r: r.total).steps) if runs else None
    lines += _holder(kept)
    sites = leak_sites(intervals, steps)
    if sites:
        lines.append(_site(sites))
    said = advice(kept)
    if said is not None:
        lines.append(f"do: {said.text}")
    found = spikes(intervals, steps)
    if found:
        lines.append(_spikes(found))
    if not lines and intervals:
        return [
            f"{NOTHING}: no step kept over {fmt_bytes(FLOOR)} (or 1 % of its start), "
            "nothing held for a while stands out"
        ]
    return lines


def _leak(run: Leak) -> str:
    low, high = min(run.kept), max(run.kept)
    if len(run.steps) == 1:
        what = f"{step_list(run.steps)} kept {fmt_bytes(run.kept[0], signed=True)}"
    elif high - low <= 0.05 * high:
        what = f"{step_list(run.steps)} each kept {fmt_bytes(_middle(run.kept), signed=True)}"
    else:
        what = f"{step_list(run.steps)} kept {fmt_bytes(low, signed=True)} to {fmt_bytes(high, signed=True)}"
    since = f" since step {run.since}" if run.since is not None else ""
    return f"leak: {what} ({fmt_bytes(run.total, signed=True)} held{since})"


_VIA = {"item": "each item", "key": "each entry"}


def _holder(h: Holder | None) -> list[str]:
    """``kept by `history` (list): +38.4 MiB per step, each item's autograd graph``; what no path
    reached, said as such; and whether the walk was cut short."""
    if h is None:
        return []
    cut = f" (the walk stopped at its bound, {h.cut}: more may hold it)" if h.cut else ""
    lines = []
    if h.name is not None:
        per = fmt_bytes(h.per_step, signed=True) + (" per step" if h.steps > 1 else "")
        whose = f"{_VIA[h.via]}'s" if h.via else "its"
        what = "autograd graph" if h.graph else "optimizer state" if h.state else ""
        said = f"{whose} {what}" if what else _VIA.get(h.via, "")
        lines.append(f"kept by `{h.name}` ({h.kind}): {per}" + (f", {said}" if said else "") + cut)
        cut = ""
    if h.unreached and (h.name is None or h.unreached > h.per_step):
        lines.append(f"kept: {fmt_bytes(h.unreached, signed=True)} a step not reachable from the notebook's names{cut}")
    return lines


def _site(sites: list[SiteLeak]) -> str:
    """The call that kept the most, at what rate, and over which steps."""
    top = sites[0]
    each = _middle(top.kept)
    per = (
        f"{fmt_bytes(each, signed=True)} per step over" if len(top.steps) > 1 else f"{fmt_bytes(each, signed=True)} in"
    )
    # the same site in other stretches of steps, then the other sites
    again = sorted(step for leak in sites[1:] if leak.site == top.site for step in leak.steps)
    others = len({leak.site for leak in sites} - {top.site})
    extra = [f"also {step_list(again)}"] if again else []
    extra += [f"{others} more site{'s' * (others > 1)}"] if others else []
    more = f" ({'; '.join(extra)})" if extra else ""
    since = f" since step {top.since}" if top.since is not None else ""
    return f"leak site: {brief(top.site)} kept {per} {step_list(top.steps)}{since}{more}"


def _spikes(found: list[Spike]) -> str:
    """Every spiking step named, each with what it held for a while: ``steps 2 and 6 held …``."""
    steps = and_list([str(s.step) for s in found])
    held = and_list([fmt_bytes(s.held, signed=True) for s in found])
    word = "spike: step" if len(found) == 1 else "spikes: steps"
    return f"{word} {steps} held {held} only for a while (typical {fmt_bytes(found[0].typical, signed=True)})"


Group = tuple[str, int, str]  # run, rank, device: the steps findings are looked for across


def groups(intervals: Sequence[Interval]) -> dict[Group, list[Interval]]:
    """The intervals of each run, rank and device, in order: what one headline reads (the
    dashboard shows one such group at a time)."""
    found: dict[Group, list[Interval]] = {}
    for iv in intervals:
        found.setdefault((iv.run, iv.rank, iv.device), []).append(iv)
    return found


def group_label(key: Group, keys: Sequence[Group]) -> str:
    """What tells ``key`` apart from the other groups: its run, rank and device where they differ."""
    parts = []
    run, rank, device = key
    if len({k[0] for k in keys}) > 1:
        parts.append(f"run {clean(run_label(run))}")  # the session's own cells: "this session", as elsewhere
    if len({k[1] for k in keys}) > 1:
        parts.append(f"rank {rank}")
    if len({k[2] for k in keys}) > 1:
        parts.append(device)
    return " · ".join(parts)


def findings_text(intervals: Sequence[Interval]) -> str:
    """The headline of each group, under the table of ``%memsnap list`` and ``memsnap summarize``."""
    found = groups(intervals)
    out = []
    for key, ivs in found.items():
        where = group_label(key, list(found))
        out.append(f"findings{f' ({where})' if where else ''}:")
        out += [f"  {line}" for line in finding_lines(ivs)]
    return "\n".join(out)


def and_list(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _middle(values: Sequence[int]) -> int:
    return sorted(values)[len(values) // 2]


# a finding's kind, by how its line starts: what the dashboard and the still copy mark it as
_KINDS: tuple[tuple[str, str], ...] = (
    ("leak site:", "site"),
    ("leak:", "leak"),
    ("kept by", "holder"),
    ("kept:", "holder"),
    ("do:", "advice"),
    ("spike:", "spike"),
    (NOTHING, "clear"),
)


Finding = tuple[str, str]  # (the run it is about, "" where one run is shown; the finding's line)


def findings_html(findings: Sequence[Finding]) -> str:
    """The findings as the dashboard and its still copy show them, right under the title: one
    line each, its kind's word in bold and a coloured rule beside it (``FINDINGS_CSS``), so a
    leak reads at a glance in a light or a dark theme."""
    out = []
    for run, line in findings:
        kind, word = _kind(line)
        text = f"<b>{html.escape(word)}</b>{html.escape(line[len(word) :])}" if word else html.escape(line)
        prefix = f"{html.escape(run)}: " if run else ""
        out.append(f"<div class='memsnap-finding memsnap-{kind}'>{prefix}{text}</div>")
    return "".join(out)


def finding_text(finding: Finding) -> str:
    """A finding as plain text: ``run: line``, or the line alone."""
    run, line = finding
    return f"{run}: {line}" if run else line


def _kind(line: str) -> tuple[str, str]:
    """(kind, the words naming it) of a finding's line; ("other", "") for a comparison of runs."""
    for start, kind in _KINDS:
        if line.startswith(start):
            return kind, start
    return "other", ""


FINDINGS_CSS = (
    ".memsnap-finding {margin: 2px 0; padding-left: 6px; border-left: 3px solid transparent;"
    " font-size: 1.05em; line-height: 1.35;} "
    ".memsnap-leak, .memsnap-holder, .memsnap-site {border-left-color: var(--jp-error-color1, #d32f2f);} "
    ".memsnap-advice {border-left-color: var(--jp-success-color1, #388e3c);} "
    ".memsnap-spike {border-left-color: var(--jp-warn-color1, #f57c00);} "
    ".memsnap-clear {border-left-color: var(--jp-border-color1, #bdbdbd);}"
)
