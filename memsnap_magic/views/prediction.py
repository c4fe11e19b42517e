"""Will it fit? ``memsnap_magic.predict`` over this session's runs, and a prediction in words.

The model is ``results.prediction`` (pure: recordings in, a ``Prediction`` out); here the
session the magic fills is what it reads when nothing else is given, so
``%%memsnap run=b2 scale=batch:2`` cells (three sizes or more) then ``predict(batch=64)`` is all
a notebook needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..recording.process_state import STATE
from ..results.prediction import Prediction
from ..results.prediction import predict as _predict

__all__ = ["predict"]


def predict(
    recorded: Any = None,
    at: Mapping[str, float] | None = None,
    capacity: int | str | None = None,
    *,
    run: str | Iterable[str] | None = None,
    steps: Iterable[int] | None = None,
    device: int | None = None,
    rounding: int | None = None,
    **sizes: float,
) -> Prediction:
    """Predict a step's peak at a larger size from the same step recorded at three or more sizes.

    ``predict(batch=64)`` reads this session's steps recorded with ``scale=batch:N`` (each size
    its own run: ``%%memsnap run=b8 scale=batch:8``); ``recorded`` gives others instead: a
    ``Session``, intervals, files or folders' files as ``(path, {"batch": 8})`` pairs, or files
    recorded with ``scale=``. ``run``: only these runs; ``steps``: only these steps (the highest
    predicted peak of the steps wins). ``capacity``: bytes, ``"80GiB"`` or ``"auto"`` (the
    device's memory less what was in use outside PyTorch, on the CPU the memory available), for
    ``fits`` and ``largest()``: the largest size predicted to fit.

    The step is replayed, allocation by allocation, with each allocation's size fitted as a
    polynomial (degree <= 2) of the size; ``ValueError`` says what cannot be predicted from, and
    ``PredictionRefused`` (a ``ValueError``) names the first difference where the step does
    something else at some sizes. Limits: docs/prediction.md.
    """
    return _predict(
        STATE.session if recorded is None else recorded,
        at,
        capacity,
        run=run,
        steps=steps,
        device=device,
        rounding=rounding,
        **sizes,
    )
