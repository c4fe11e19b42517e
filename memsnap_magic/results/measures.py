"""The figures every interval has, and the two derived from them, defined once.

``analysis.Summary`` (computed from a snapshot) and ``intervals.Interval`` (kept per
step) both carry these; the derived ones are properties here, so they cannot disagree.
"""

from __future__ import annotations

# Bytes are requested bytes, as the trace records them.
FIELDS = ("baseline_allocated", "peak_allocated", "end_allocated", "trace_entries")


class Figures:
    baseline_allocated: int  # live when the interval started
    peak_allocated: int  # the most live at once during it
    end_allocated: int  # live when it ended
    trace_entries: int

    @property
    def peak_increase(self) -> int:
        """How far the interval rose over its start."""
        return self.peak_allocated - self.baseline_allocated

    @property
    def kept(self) -> int:
        """Allocated at the end minus at the start: what the interval left behind (a leak)."""
        return self.end_allocated - self.baseline_allocated

    def figures(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in FIELDS}
