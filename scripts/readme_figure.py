"""Draw docs/overview.png (the dashboard's overview) from the snapshots a demo run wrote.

usage: python scripts/readme_figure.py [SNAPSHOT_DIR] [--out docs/overview.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from memsnap_magic import load_snapshot, summarize
from memsnap_magic.plots import overview_figure, png
from memsnap_magic.session_state import Interval, Session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("snapshots", nargs="?", default="demo-out/memsnap", type=Path)
    parser.add_argument("--out", default="docs/overview.png", type=Path)
    args = parser.parse_args()
    s = Session()
    for path in sorted(args.snapshots.glob("step*/*.pickle"), key=lambda p: int(p.parent.name[4:])):
        snap = load_snapshot(path)
        sm, meta = summarize(snap), snap.get("memsnap", {})
        s.add(Interval(step=meta.get("step", int(path.parent.name[4:])), rank=meta.get("rank", 0),
                       device=meta.get("device", "?"), path=path, clear=meta.get("clear", True),
                       baseline_allocated=sm.baseline_allocated, peak_allocated=sm.peak_allocated,
                       end_allocated=sm.end_allocated, trace_entries=sm.trace_entries,
                       error=meta.get("error")))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(png(overview_figure(s.intervals)))
    print(args.out)


if __name__ == "__main__":
    main()
