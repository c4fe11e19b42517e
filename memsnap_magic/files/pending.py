"""A CPU trace whose block entries are built after the cell: ``Pending``.

The CPU route's trace is its ring's events, one dict each in PyTorch's schema. Building those
dicts is most of what a cell of many small allocations spends beyond reading PyTorch's events
(40,000 dicts: ~20 ms), yet while the user waits only the digest reads the trace, and it reads
columns. So the recorder hands over the ring's events as columns; the digest reads them
(``column``) and the few entries it shows (``[i]``, read-only); the labels of a model's blocks
are given as a column too (``label``), and an entry appended (an error's ``oom``, the labels'
marker) joins the ``tail``; the background writer builds the dicts (``built``) just before the
file is written. Whatever else reads it in the cell as a list (a ``clear=false`` chain's stamps,
a test) gets the built trace, the same one an eager build gives: the order, the keys, the ring's
cut and the shared frame lists.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable

from .compact import Compact, cut_head, ring_cut, segment_free_left

if TYPE_CHECKING:
    import numpy as np

# Builds the block entries of (times in ns, addresses, signed sizes: > 0 an allocation) events
Build = Callable[[list[int], list[int], list[int]], list[dict[str, Any]]]
SLICE = 8192  # entries built between two pauses of the writer


class Pending:
    """The block entries of a CPU trace as columns (``times`` in ns, ``ptrs``, signed ``sizes``),
    with ``frames`` given to some of them (index -> frame list) and ``tail``: entries after them
    (frees placed at the end). ``keep_newest`` takes the ring's cut; ``built`` the ``Compact`` an
    eager build gives. ``segments``, ``companions`` and ``marked`` as ``Compact``'s."""

    segments: bool = True
    companions: int = 0
    marked: int = 0

    def __init__(
        self,
        times: list[Any],
        ptrs: list[int],
        sizes: list[int],
        build: Build,
        read_times: Callable[[list[Any]], list[int]] | None = None,
        sizes_array: np.ndarray | None = None,
    ) -> None:
        self._times, self._ptrs, self._sizes, self._build = times, ptrs, sizes, build
        # ``times`` as given may be what each time is read from (``read_times``): read when needed
        self._read_times = read_times
        self.frames: dict[int, list[dict[str, Any]]] = {}
        self.tail: list[dict[str, Any]] = []
        self._first: int | None = None  # the first block entry the ring keeps, once cut
        self._cut = 0
        self._segment_free_head = False  # the cut leaves the first kept entry its segment_free alone
        # of the kept block entries (``label``): an index into the names each
        self._categories: tuple[list[Any], np.ndarray] | None = None
        self._built: Compact | None = None
        self._columns: dict[tuple[str, Any], np.ndarray] = {}  # what ``column`` gave
        # the block entries' fields as read (``_array``): ``sizes_array`` is ``sizes`` as one, if read
        self._arrays: dict[str, np.ndarray] = {} if sizes_array is None else {"size": sizes_array}
        # what readers in the cell derived from its columns, for the next (``results.pairing.paired``)
        self.memo: dict[str, Any] = {}

    # --- the ring --------------------------------------------------------------------------

    def keep_newest(self, max_entries: int, segments: bool) -> Compact | Pending:
        """Cut as ``newest_entries`` cuts a list; itself, or where the cut reaches past the block
        entries (a ring of a few entries) the built ``Compact``."""
        blocks = len(self._sizes)
        allocs = int((self._array("size") > 0).sum())
        first, cut, companions = ring_cut(blocks + len(self.tail), allocs, self._action, max_entries, segments)
        self._first, self._cut, self.segments, self.companions = first, cut, segments, companions
        if first >= blocks:
            return self.built()
        self._segment_free_head = segment_free_left(segments, self._action(first), cut)
        return self

    def _action(self, i: int) -> Any:
        """Entry ``i``'s action, counted before the cut (``_first``), as its built entry has it
        before ``cut_head``."""
        blocks = len(self._sizes)
        if i < blocks:
            return "alloc" if self._sizes[i] > 0 else "free_completed"
        return self.tail[i - blocks].get("action")

    # --- building --------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether its entries are built (then it answers as the built list)."""
        return self._built is not None

    def built(self, pause: Callable[[], None] | None = None) -> Compact:
        """The trace as a list, built once (``pause`` called between slices: the writer's
        checkpoints); what it is from then on."""
        if self._built is None:
            first = self._first or 0
            entries: list[dict[str, Any]] = []
            for lo in range(first, len(self._sizes), SLICE):
                if pause is not None:
                    pause()
                hi = min(lo + SLICE, len(self._sizes))
                entries += self._build(self._ns(self._times[lo:hi]), self._ptrs[lo:hi], self._sizes[lo:hi])
            for i, frames in self.frames.items():
                if i >= first:
                    entries[i - first]["frames"] = frames
            if self._categories is not None:  # after the frames, as labelling a built trace puts it
                names, codes = self._categories
                for entry, category in zip(entries, map(names.__getitem__, codes.tolist())):
                    entry["category"] = category
            kept = Compact(entries + self.tail[max(first - len(self._sizes), 0) :])
            kept.segments, kept.companions, kept.marked = self.segments, self.companions, self.marked
            if self._first is not None:
                cut_head(kept, self._cut)
            self._built = kept
            del self._times, self._ptrs, self._sizes, self._columns, self._arrays, self._categories
            self.memo.clear()
        return self._built

    def label(self, names: list[Any], codes: np.ndarray) -> None:
        """Give the kept entries their ``category``, ``names[codes[i]]`` for entry ``i``, as
        ``labels.label`` gives each entry of a list: the block entries' kept as codes (the writer
        makes them names), the tail's set in place. Before it is built (a built one is labelled
        as the list it is)."""
        assert self._built is None, "a built trace is labelled as a list"
        blocks = len(self._sizes) - (self._first or 0)
        self._categories = names, codes[:blocks]
        for entry, code in zip(self.tail, codes[blocks:].tolist()):
            entry["category"] = names[code]

    def _ns(self, times: list[Any]) -> list[int]:
        return self._read_times(times) if self._read_times is not None else times

    def times_of(self, index: np.ndarray) -> np.ndarray:
        """``time_us`` of the kept entries at ``index`` (not built yet), reading only theirs (a
        digest's timeline asks for ~2,000 of them)."""
        import numpy as np

        if self._read_times is None:
            picked: np.ndarray = self._read("time_us", -1)[index]
            return picked
        first, blocks = self._first or 0, len(self._sizes)
        at = [first + i for i in index.tolist()]
        read = iter(self._ns([self._times[j] for j in at if j < blocks]))
        times = [next(read) // 1000 if j < blocks else self.tail[j - blocks]["time_us"] for j in at]
        return np.array(times, dtype=np.int64)

    def _entry(self, i: int) -> dict[str, Any]:
        """Entry ``i`` of the kept trace, built alone (a copy: changing it changes nothing)."""
        first = self._first or 0
        j = first + i
        if j >= len(self._sizes):
            return self.tail[j - len(self._sizes)]
        entry = self._build(self._ns([self._times[j]]), [self._ptrs[j]], [self._sizes[j]])[0]
        if j in self.frames:
            entry["frames"] = self.frames[j]
        if self._categories is not None:
            names, codes = self._categories
            entry["category"] = names[codes[i]]
        if i == 0 and self._segment_free_head:
            entry["action"] = "segment_free"  # as ``cut_head`` makes it
        return entry

    # --- what the digest reads -------------------------------------------------------------

    def column(self, key: str, default: Any = None) -> np.ndarray | None:
        """``key`` of every kept entry, as ``results.pairing.column`` reads it from dicts (action
        as objects, sizes unsigned, times in µs; ``default`` where a tail entry has none); None
        for another key, or once built (then the list answers)."""
        if self._built is not None or key not in _KEYS:
            return None
        found = self._columns.get((key, default))
        if found is None:
            found = self._columns[key, default] = self._read(key, default)
        return found

    def is_action(self, name: str) -> np.ndarray:
        """Which kept entries' ``action`` is ``name``, as comparing the ``action`` column gives it,
        from the signed sizes (no string compared per block entry)."""
        import numpy as np

        found = self._columns.get(("is", name))
        if found is None:
            alloc = self._array("size")[self._first or 0 :] > 0
            blocks = alloc if name == "alloc" else ~alloc if name == "free_completed" else np.zeros_like(alloc)
            if self._segment_free_head:
                blocks = blocks.copy()
                blocks[0] = name == "segment_free"
            tail = np.fromiter((e.get("action") == name for e in self.tail), bool, len(self.tail))
            found = self._columns["is", name] = np.concatenate([blocks, tail])
        return found

    def actions_at(self, index: np.ndarray) -> list[Any]:
        """``action`` of the kept entries at ``index`` (a few: the rest are asked ``is_action``)."""
        first = self._first or 0
        found = [self._action(first + i) for i in index.tolist()]
        if self._segment_free_head:  # as ``cut_head`` makes the first kept entry
            found = ["segment_free" if i == 0 else a for i, a in zip(index.tolist(), found)]
        return found

    def _array(self, name: str) -> np.ndarray:
        """Every block entry's ``size`` (signed), ``addr`` or ``time`` (ns), as read, before the cut."""
        import numpy as np

        found = self._arrays.get(name)
        if found is None:
            held = {"size": self._sizes, "addr": self._ptrs, "time": self._times}[name]
            held = self._ns(held) if name == "time" else held
            found = self._arrays[name] = np.fromiter(held, np.int64, len(held))
        return found

    def _read(self, key: str, default: Any) -> np.ndarray:
        import numpy as np

        first = self._first or 0
        if key == "action":
            blocks = _actions()[(self._array("size")[first:] > 0).view(np.int8)]
            if self._segment_free_head:
                blocks[0] = "segment_free"
        elif key == "size":
            blocks = np.abs(self._array("size")[first:])
        elif key == "addr":
            blocks = self._array("addr")[first:]
        else:
            blocks = self._array("time")[first:] // 1000
        if not self.tail:
            return blocks
        # the frees placed after the window, and what was appended since (an oom, the marker)
        tail = np.array([e.get(key, default) for e in self.tail], dtype=blocks.dtype)
        return np.concatenate([blocks, tail])

    # --- a list, for everything else -------------------------------------------------------

    def __len__(self) -> int:
        if self._built is not None:
            return len(self._built)
        return len(self._sizes) - (self._first or 0) + len(self.tail)

    def __getitem__(self, i: Any) -> Any:
        if self._built is None and type(i) is slice and type(i.start) is int and i.stop is None and i.step is None:
            blocks = len(self) - len(self.tail)
            if blocks <= i.start:  # entries of the tail alone (those appended since a stamp): themselves
                return self.tail[i.start - blocks :]
        if self._built is not None or type(i) is not int:
            return self.built()[i]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("trace index out of range")
        return MappingProxyType(self._entry(i % n))  # read-only: a change would be lost

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.built())

    def append(self, entry: dict[str, Any]) -> None:
        """An entry after all the others (an oom, the labels' marker): the ring's cut, taken
        before, is not taken again, as for a built trace."""
        if self._built is None:
            self.tail.append(entry)
            self._columns.clear()
        else:
            self._built.append(entry)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a Pending trace is written completed: compact.complete(snapshot) first")


_KEYS = ("action", "size", "addr", "time_us")


@functools.cache
def _actions() -> np.ndarray:
    """Each block entry's action by whether it allocates (0, 1), as objects (made at the first
    digest: numpy does not load at ``%load_ext``)."""
    import numpy as np

    return np.array(["free_completed", "alloc"], dtype=object)


def built(trace: Any) -> Any:
    """``trace`` as a list: a ``Pending`` one built, any other as it is."""
    return trace.built() if type(trace) is Pending else trace
