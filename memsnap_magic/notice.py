"""How memsnap speaks of its own trouble: a warning that never fails the user's cell."""

from __future__ import annotations

import sys
import warnings


def warn(message: str, stacklevel: int = 2) -> None:
    """One RuntimeWarning about our own trouble, which never raises: under ``-W error`` (or
    pytest's ``filterwarnings = error``) it is printed to stderr instead of failing the user's cell."""
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
    except Exception:
        print(f"RuntimeWarning: {message}", file=sys.stderr)
