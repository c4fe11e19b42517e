"""``memsnap predict PATHS --at batch=64``: will it fit? A step's peak at another size, from the
same step recorded at three or more sizes with ``scale=`` (the model is ``results.prediction``,
its words ``views.prediction``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.clean import one_line
from ..results.prediction import parse_capacity, parse_size, predict
from ..results.scan import default_jobs
from ..views.prediction import prediction_text
from .check import _unicode_all
from .paths import add_paths, read_session


def add(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "predict",
        help="will it fit? a step's peak at another size, from three or more recorded sizes",
        description="Predict a step's peak at another size (--at batch=64) from the same step recorded at "
        "three or more sizes of that dimension with scale= (scale=batch:8 on %%memsnap or Recorder; files "
        "without that dimension are left out). The step is replayed, allocation by allocation, each "
        "allocation's size fitted as a polynomial of degree 2 at most; a step that does something else at "
        "some sizes is refused with the first difference. Exit 2 with one line when nothing can be predicted.",
    )
    add_paths(p)
    p.add_argument("--at", type=_size, required=True, metavar="NAME=SIZE", help="the size to predict at: batch=64")
    p.add_argument(
        "--capacity",
        type=_capacity,
        default=None,
        metavar="BYTES|auto",
        help="memory to fit in: bytes (80GiB) or auto (the device's memory less what was in use outside "
        "PyTorch at the recorded steps; on the CPU the memory available); says the largest size that fits",
    )
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    s = read_session(args.paths, args.jobs or default_jobs())
    try:
        p = predict(s, at=args.at, capacity=args.capacity)
    except ValueError as e:  # nothing to predict from, or PredictionRefused's one line
        print(f"memsnap predict: {one_line(str(e).removeprefix('predict: '))}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(_unicode_all(p.to_record()), sys.stdout, indent=1, allow_nan=False)
        print()
    else:
        print(prediction_text(p))
    return 0


def _size(text: str) -> dict[str, float]:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("predict: ")) from None


def _capacity(text: str) -> str | int:
    if text == "auto":
        return text
    try:
        return parse_capacity(text)
    except ValueError as e:  # argparse names the option already
        raise argparse.ArgumentTypeError(str(e).removeprefix("capacity: ")) from None
