"""Draw docs/overview.png for the README from the snapshots a demo run wrote.

usage: python scripts/readme_figure.py [SNAPSHOT_DIR] [--out docs/overview.png]
Reads every <dir>/step<N>/*.pickle, summarises it, and plots per-interval versus cumulative peaks
and trace entries: the picture of why clearing after each dump matters.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from memsnap_magic import load_snapshot, summarize  # noqa: E402
from memsnap_magic.session_state import Interval, Session  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("snapshots", nargs="?", default="demo-out/memsnap", type=Path)
    parser.add_argument("--out", default="docs/overview.png", type=Path)
    args = parser.parse_args()
    s = Session()
    for path in sorted(args.snapshots.glob("step*/*.pickle"), key=lambda p: int(p.parent.name[4:])):
        snap = load_snapshot(path)
        sm = summarize(snap)
        meta = snap.get("memsnap", {})
        s.add(Interval(step=int(path.parent.name[4:]), rank=0, device=meta.get("device", "?"), path=path,
                       baseline_allocated=sm.baseline_allocated, peak_allocated=sm.peak_allocated,
                       end_allocated=sm.end_allocated, trace_entries=sm.trace_entries,
                       clear=meta.get("clear", True)))
    ivs = s.intervals
    x = range(len(ivs))
    labels = [str(i.step) for i in ivs]
    mib = 1 / 2**20
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    a.bar(x, [i.baseline_allocated * mib for i in ivs], color="#b8c4d6", label="live at step start")
    a.bar(x, [i.peak_increase * mib for i in ivs], bottom=[i.baseline_allocated * mib for i in ivs],
          color="#3b6fb6", label="peak increase in the step")
    a.plot(x, [i.cumulative_peak_allocated * mib for i in ivs], "o--", color="#d1495b",
           label="cumulative peak (never cleared)")
    a.set(title="Peak allocated memory per step", xlabel="step", ylabel="MiB")
    a.set_xticks(list(x), labels)
    a.legend(fontsize=8)
    b.bar(x, [i.trace_entries for i in ivs], color="#3b6fb6", label="entries in the step's file")
    b.plot(x, [i.cumulative_trace_entries for i in ivs], "o--", color="#d1495b",
           label="a never-cleared snapshot would hold")
    b.set(title="Snapshot size: cleared per step vs cumulative", xlabel="step", ylabel="trace entries")
    b.set_xticks(list(x), labels)
    b.legend(fontsize=8)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(args.out)


if __name__ == "__main__":
    main()
