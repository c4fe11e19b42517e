"""Weak references to the storages a namespace walk found (``live_tensors``), kept between walks."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any


class StorageRefs:
    """Weak references to storages the walk found, by address, so that a block it saw once is
    known freed later even when nothing recorded the free and no walk reaches it any more."""

    def __init__(self) -> None:
        self._refs: dict[int, Any] = {}

    def see(self, storages: dict[int, Any], wanted: Container[int]) -> None:
        """Refer to each storage of ``storages`` (address -> storage) whose address is ``wanted``."""
        from torch.multiprocessing.reductions import StorageWeakRef

        refs = self._refs
        for ptr, storage in storages.items():
            ref = refs.get(ptr)
            # the same StorageImpl: a weak reference keeps its control block, so its pointer is not reused
            if (ref is None or ref.cdata != storage._cdata) and ptr in wanted:
                refs[ptr] = StorageWeakRef(storage)

    def gone(self, blocks: dict[int, int]) -> set[int]:
        """The addresses of ``blocks`` (address -> bytes) whose storage was seen and is now freed,
        or resized in place (its memory moved)."""
        import torch

        freed = set()
        for ptr, nbytes in blocks.items():
            ref = self._refs.get(ptr)
            if ref is None:
                continue
            storage = None if ref.expired() else torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
            if storage is None or storage.data_ptr() != ptr or storage.nbytes() != nbytes:
                freed.add(ptr)
        return freed

    def holds(self, ptr: int, storage: Any) -> bool:
        """Whether the storage referred to at ``ptr`` is ``storage`` itself, still alive."""
        ref = self._refs.get(ptr)
        return ref is not None and not ref.expired() and ref.cdata == storage._cdata

    def forget_freed(self) -> None:
        """Drop the references whose storages are gone."""
        self._refs = {p: r for p, r in self._refs.items() if not r.expired()}

    def covers(self, ptrs: Iterable[int]) -> bool:
        """Whether every address of ``ptrs`` is referred to."""
        return all(p in self._refs for p in ptrs)

    def forget(self, ptrs: Container[int]) -> None:
        """Drop the references at ``ptrs``: events there say what lives at them now."""
        self._refs = {p: r for p, r in self._refs.items() if p not in ptrs}

    def keep_only(self, ptrs: Container[int]) -> None:
        self._refs = {p: r for p, r in self._refs.items() if p in ptrs}
