"""Recording backends: device resolution and one backend per device, from ``registry.KINDS``.

Backend modules load on first use, so importing this package imports neither torch nor them.
"""

from __future__ import annotations

from ..state import STATE
from .base import Backend, BackendError
from .registry import KINDS, Kind, backend_class

__all__ = ["KINDS", "Backend", "BackendError", "Kind", "backend_class", "get_backend", "resolve_device"]


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
    backend = STATE.backends.get(device)
    if backend is None:
        backend = STATE.backends[device] = _class(device).for_device(device)
    return backend


def _class(device: str) -> type[Backend]:
    cls = backend_class(device)
    if cls is None:
        raise BackendError(f"device={device}: not a device family memsnap knows ({', '.join(KINDS)})")
    return cls
