"""Recording backends: device resolution and one backend per device, from ``core.devices.KINDS``.

Backend modules load on first use, so importing this package imports neither torch nor them.
"""

from __future__ import annotations

import importlib
from typing import Any

from ...core.devices import KINDS, Kind
from ..process_state import STATE, Device
from .base import Backend, BackendError

__all__ = ["KINDS", "Backend", "BackendError", "Kind", "backend_class", "get_backend", "resolve_device"]


def backend_class(device: str) -> Any:
    """The backend class (a ``Backend`` subclass) of a device name (``cuda:1``, ``cpu``); None
    for a family we do not know.
    Its module loads now (the views ask what a family can do without starting anything)."""
    kind = KINDS.get(device.partition(":")[0])
    if kind is None:
        return None
    return getattr(importlib.import_module(f".{kind.module}", __package__), kind.cls)


def resolve_device(device: str) -> str:
    """``auto``/``cuda``/``cuda:K``/... → a concrete ``kind:index`` or ``cpu``; BackendError if absent."""
    kind, _, index = device.partition(":")
    if kind == "auto":
        kind = next(k for k in KINDS if _class(k).available(k))
    elif not _class(kind).available(kind):
        import torch

        raise BackendError(
            f"device={device}: this machine has no {kind.upper()} device "
            f"(torch {torch.__version__}); use device=cpu or device=auto"
        )
    if not KINDS[kind].indexed:
        return kind
    cls = _class(kind)
    i = int(index) if index else cls.current_index(kind)
    count = cls.device_count(kind)
    if i >= count:
        raise BackendError(f"device={device}: only {count} {kind} device(s) here (indices 0..{count - 1})")
    return f"{kind}:{i}"


def get_backend(device: str) -> Backend:
    """The backend of a concrete device from ``resolve_device``, reused across cells; the caller
    configures it once it knows the backend is free to record."""
    known = STATE.devices.get(device)
    if known is None:
        known = STATE.devices[device] = Device(_class(device).for_device(device))
    return known.backend


def _class(device: str) -> type[Backend]:
    cls = backend_class(device)
    if cls is None:
        raise BackendError(f"device={device}: not a device family memsnap knows ({', '.join(KINDS)})")
    return cls
