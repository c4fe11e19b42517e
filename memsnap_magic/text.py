"""Everything that turns figures into words for people, shared by the magic, the CLI and the dashboard.

Byte counts, the one-line report after a cell, the interval table, readable stack frames (and
which frames to drop), why a block has no stack, and bytes per allocation site. Analysis stays
numbers; what a number means to a reader is decided here.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .backends import backend_class

if TYPE_CHECKING:
    from .intervals import Interval

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows
_CONTROLS = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)], "?")


def clean(text: str, limit: int = 300) -> str:
    """Text a file supplied (a path, a frame's name), safe to print: no control characters or
    escape sequences, at most ``limit`` characters."""
    text = str(text).translate(_CONTROLS)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = 300) -> str:
    """A message on one line (its line breaks become spaces), cleaned."""
    return clean(" ".join(str(text).split()), limit)


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    """Binary units, as torch and memory_viz print them: ``4.0 MiB``, ``+512 B``."""
    if n is None:
        return "—"
    sign = ("+" if n > 0 else "-" if n < 0 else "±") if signed else ("-" if n < 0 else "")
    value = float(abs(n))
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    text = f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    return sign + text


def describe(iv: Interval, previous: Interval | None) -> str:
    """The compact line printed after each ``%%memsnap`` cell."""
    parts = [
        f"memsnap step {iv.step}",
        iv.device if iv.rank == 0 else f"{iv.device} rank {iv.rank}",
        f"peak {fmt_bytes(iv.peak_allocated)} ({fmt_bytes(iv.peak_increase, signed=True)} over "
        f"start {fmt_bytes(iv.baseline_allocated)})",
        f"kept {fmt_bytes(iv.kept, signed=True)}",
    ]
    if previous is not None:
        parts.append(
            f"vs step {previous.step}: peak {fmt_bytes(iv.peak_allocated - previous.peak_allocated, signed=True)}"
        )
    if iv.allocator_peak_allocated is not None:
        parts.append(f"allocator peak {fmt_bytes(iv.allocator_peak_allocated)}")
    entries = f"{iv.trace_entries:,} entries" + (" (ring full: oldest dropped)" if iv.overflowed else "")
    backend = backend_class(iv.device)
    if iv.trace_entries == 0 and not (backend is not None and backend.host):
        entries += f": nothing was allocated on {iv.device} (CPU tensors? record them with device=cpu)"
    parts.append(entries)
    if iv.error:
        parts.append(f"cell raised {iv.error}")
    if iv.incomplete:
        parts.append(f"incomplete: {iv.incomplete}")
    if iv.moved:  # memory changed where nothing recorded it: the start is what was found, not followed
        parts.append(f"start moved {fmt_bytes(iv.moved, signed=True)} since step {iv.moved_since} ended")
    parts.append(f"-> {clean(str(iv.path))}" if iv.path is not None else "-> not written")
    return " · ".join(parts)


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
    rows = [head]
    for iv in intervals:
        rows.append(
            (
                str(iv.step),
                str(iv.rank),
                iv.device,
                fmt_bytes(iv.baseline_allocated),
                fmt_bytes(iv.peak_allocated),
                fmt_bytes(iv.peak_increase, signed=True),
                fmt_bytes(iv.kept, signed=True),
                fmt_bytes(iv.cumulative_peak_allocated),
                f"{iv.trace_entries:,}",
                f"{iv.cumulative_trace_entries:,}",
                iv.error or "",
                clean(str(iv.path)) if iv.path else "(not written)",
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def loaded_line(intervals: Sequence[Interval]) -> str:
    """What ``%memsnap load`` brought in."""
    steps = sorted({iv.step for iv in intervals})
    ranks = sorted({iv.rank for iv in intervals})
    return (
        f"memsnap: loaded {len(intervals)} snapshot(s): steps {', '.join(map(str, steps))}; "
        f"ranks {', '.join(map(str, ranks))}"
    )


# Frames: a recorded stack runs from the allocation out through the user's code, the magic,
# IPython and the kernel. People want their cells first, then the library code that allocated.
_INPUT = re.compile(r"^<ipython-input-(\d+)-")
_RUNS_CELLS = re.compile(r"(?:^|[/\\])memsnap_magic[/\\]execute\.py$")  # where the magic runs a body
_SITE = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def _field(frame: dict[str, Any], key: str) -> str:
    """A frame's filename or name; "?" where a file gives something else (frames are data)."""
    value = frame.get(key)
    return value if type(value) is str else "?"


def _line(frame: dict[str, Any]) -> int | str:
    line = frame.get("line")
    return line if type(line) is int and 0 < line < 1 << 31 else "?"  # 0: a module's entry, no line yet


def _is_cell_frame(frame: dict[str, Any]) -> bool:
    name = _field(frame, "filename")
    return name.startswith("<ipython-input-") or "/ipykernel_" in name


def _where(frame: dict[str, Any]) -> str:
    name = _field(frame, "filename")
    cell = _INPUT.match(name)
    if cell:
        return f"cell In[{cell.group(1)}]"
    if _is_cell_frame(frame):
        return "notebook cell"
    return _SITE.sub("", name)


def frame_lines(frames: list[Any], limit: int = 4) -> list[str]:
    """A few readable frames: the notebook's cells first, then the innermost others.

    From the frame that runs a ``%%memsnap`` body outwards a stack says nothing about the user's
    code, so it is dropped (the ``%%memsnap`` line's own cell with it). A file's stack may hold
    anything: what is not a frame is left out, what is not a name reads "?".
    """
    frames = [f for f in frames if type(f) is dict] if type(frames) is list else []
    outer = next((i for i, f in enumerate(frames) if _RUNS_CELLS.search(_field(f, "filename"))), len(frames))
    frames = frames[:outer]
    ordered = [f for f in frames if _is_cell_frame(f)] + [f for f in frames if not _is_cell_frame(f)]
    return [clean(f"{_field(f, 'name')} ({_where(f)}:{_line(f)})") for f in ordered[:limit]]


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


def site(block: dict[str, Any]) -> str:
    """Where a block was allocated: its first readable frame, or why it has none."""
    lines = frame_lines(block.get("frames") or [], limit=1)
    if lines:
        return lines[0]
    return "(no stack: live before the snapshot's window)" if block.get("before") else "(no stack recorded)"


def site_bytes(blocks: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Bytes per allocation site (the first frame, notebook cells first)."""
    sites: dict[str, int] = defaultdict(int)
    named: dict[tuple[int, bool], str] = {}  # real files share one frame list among many blocks
    for b in blocks:
        key = (id(b.get("frames")), bool(b.get("before")))
        if key not in named:
            named[key] = site(b)
        sites[named[key]] += b["size"]
    return dict(sites)


def blocks_table(iv: Interval) -> str:
    """HTML: the largest blocks alive at the peak, since when, and who allocated them."""
    rows, reasons = [], []
    for b in iv.top_blocks:
        frames = frame_lines(b.get("frames") or [])
        if frames:
            text = "<br>".join(html.escape(line) for line in frames)
        else:  # say why once, below the table, instead of on every row
            reason = why_no_frames(b, iv)
            if reason not in reasons:
                reasons.append(reason)
            text = f"<i>no stack ({'*' * (reasons.index(reason) + 1)})</i>"
        since = "before the step" if b.get("before") else "this step"
        rows.append(
            f"<tr><td style='text-align:right;padding-right:1em'>{fmt_bytes(b['size'])}</td>"
            f"<td style='padding-right:1em'>{since}</td><td>{text}</td></tr>"
        )
    if not rows:
        return "<i>nothing was allocated at this step's peak</i>"
    notes = "".join(f"<br><small>{'*' * (n + 1)} {html.escape(r)}</small>" for n, r in enumerate(reasons))
    return (
        "<b>Largest allocations alive at the peak</b><table><tr><th>size</th>"
        "<th style='text-align:left'>live since</th><th style='text-align:left'>allocated by</th></tr>"
        + "".join(rows)
        + "</table>"
        + notes
    )
