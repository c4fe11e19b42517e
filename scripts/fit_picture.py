"""Draw docs/fit.png, the dashboard's fit view of docs/prediction.md's worked example.

usage: python scripts/fit_picture.py [--out docs/fit.png] [--capacity 48MiB]

Records ``tests/predict_workloads.py``'s transformer step (a ``TransformerEncoderLayer``, a head and
AdamW on the CPU) at sequence lengths 64, 128, 256 and 512, each in its own process as a user
recording sizes in separate runs would, then draws the fit view of those four files as the
dashboard does (``views.fit``), and prints its words. Takes some ten seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (64, 128, 256, 512)


def record(out: Path, size: int) -> Path:
    """One size of the step, in its own process: the written file."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "predict_workloads.py"), "transformer", str(size), str(out / f"s{size}")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "fit.png")
    parser.add_argument("--capacity", default="48MiB", help="the capacity line (default: %(default)s)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # this checkout, not an installed copy
    os.environ.setdefault("MPLBACKEND", "Agg")
    from memsnap_magic.results.scan import read_run
    from memsnap_magic.views.fit import fit_figure, fit_of, fit_words

    with tempfile.TemporaryDirectory() as tmp:
        paths = [record(Path(tmp), size) for size in SIZES]
        fit = fit_of(read_run(paths), args.capacity)
        if fit is None:
            raise SystemExit("fit_picture: the files were recorded without scale=")
        fig = fit_figure(fit)
        # smaller than the dashboard's PNG: the picture is kept in the repository
        fig.savefig(args.out, format="png", dpi=150, pil_kwargs={"optimize": True})
    print("\n".join(fit_words(fit)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
