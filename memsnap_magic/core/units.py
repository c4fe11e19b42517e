"""Bytes as people write and read them, in every layer: the views print them, the CLI and the
pytest marker read them, and an error found in ``results`` (a prediction refused) names them."""

from __future__ import annotations

import re

__all__ = ["BYTES_HELP", "fmt_bytes", "parse_bytes"]

_SHOWN = ("B", "KiB", "MiB", "GiB", "TiB")
_READ = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_AMOUNT = re.compile(r"\s*\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")
BYTES_HELP = "bytes: a number with an optional unit, B, KiB, MiB, GiB, TiB (KB, MB, GB, TB: powers of 1000)"


def fmt_bytes(n: int | None, signed: bool = False) -> str:
    """Binary units, as torch and memory_viz print them: ``4.0 MiB``, ``+512 B``."""
    if n is None:
        return "—"
    sign = ("+" if n > 0 else "-" if n < 0 else "±") if signed else ("-" if n < 0 else "")
    value = float(abs(n))
    # compared as printed, and never four digits before the point: 1,048,568 B is 1.0 MiB, not
    # 1024.0 KiB, and 1,024,000 B is 1.0 MiB, not 1000.0 KiB (it read as a thousand of a unit)
    for unit in _SHOWN:
        if unit == _SHOWN[-1] or (value < 1000 if unit == "B" else round(value, 1) < 1000):
            break
        value /= 1024
    text = f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
    return sign + text


def parse_bytes(text: str | int) -> int:
    """``64 MiB``, ``0 B``, ``1.5GiB``, ``2MB`` or an int → bytes; ``ValueError`` saying what is allowed."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"{text}: a size is 0 or more")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{type(text).__name__} {text!r}: give {BYTES_HELP}")
    m = _AMOUNT.fullmatch(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _READ:
        raise ValueError(f"{text!r}: give {BYTES_HELP}")
    return round(float(m.group(1)) * _READ[unit])
