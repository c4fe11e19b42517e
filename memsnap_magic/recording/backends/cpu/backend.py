"""CPU: an allocation history built from the profiler's raw memory events.

PyTorch has no history recorder for CPU tensors. ``profile_memory=True`` makes the CPU allocator
report every allocation and free while the profiler runs, with only the user scope enabled (a
training step costs ~1.1x; a loop of tiny tensors ~10x, all of it the profiler's, and ~2 KB of
memory per event until the session ends). ``history`` turns the events into
``alloc``/``free_requested``/``free_completed`` entries and the blocks live at the end into
segments, so the analysis and memory_viz read CPU dumps like CUDA ones.

What the profiler cannot see is corrected from the tensors reachable from the user's namespace,
walked at the interval's start and end (a few ms, unlike a full ``gc.get_objects()`` walk):
- they form the baseline (blocks live at the start), which the profiler never saw allocated;
- one of them gone at the end was freed silently (the allocator reports no free for blocks
  allocated while profiling was off). Its free is placed when its storage died (a weak
  reference's callback, on the profiler's clock), or just before the first allocation reusing
  any of its bytes (before the ring's window: none), else at the interval's end: the peak is
  then an upper bound, and says so.
Tensors reachable only from elsewhere (closures, autograd graphs of unnamed results) stay invisible.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from ...options import DEFAULTS
from ...process_state import STATE
from ..base import Backend, BackendError, Names
from .frames import STACK_BYTES
from .history import History
from .limits import (
    PROFILER_REFUSED,
    TAKEN_OVER,
    profile_hook_on,
    refuse_if_too_old,
    warn_if_huge,
    warn_if_untested,
)
from .live_tensors import live_storages
from .oom import allocator_failure, available_bytes, traceback_frames
from .profiler import _Profiler, resident_bytes
from .storage_refs import StorageRefs

if TYPE_CHECKING:
    from ...options import Options


def _when_freed(storages: dict[int, Any], died: Callable[[int], None]) -> list[Any]:
    """Weak references calling ``died(address)`` when each storage is freed: a storage's Python
    object lives exactly as long as the storage once made, so its death is the block's free."""
    refs = []
    for ptr, storage in storages.items():
        with contextlib.suppress(TypeError):
            refs.append(weakref.ref(storage, lambda _, ptr=ptr: died(ptr)))  # type: ignore[misc]  # a lambda's default
    return refs


class CpuBackend(Backend):
    """Records CPU tensor allocations; keeps events across cells while ``clear=false`` chains.

    An interval is open from ``begin`` to ``end``. The profiler reports its events only when
    stopped, so ``snapshot`` stops it and ``end(keep=True)`` starts it again for a chain.
    """

    has_allocator_peak = False
    stack_bytes = STACK_BYTES
    clears_in_place = False  # reading the events ends the profiler session: a new step starts a new one
    thread_bound = True  # a profiler session lives in its thread's state: another thread finds none to stop
    users_frames_only = True  # its stacks are built from the tracer up to the user's outermost frame
    host = True
    label = "the CPU route"

    device = "cpu"

    def __init__(self) -> None:
        if STATE.cpu_profiler is None:
            STATE.cpu_profiler = _Profiler()
        self._profiler: _Profiler = STATE.cpu_profiler
        self._open = False  # an interval is being recorded
        self._gap = False  # a session that only follows what is allocated and freed (steps= loops)
        self._history = History(0, {})
        self._live_start: dict[int, int] = {}
        self._carried: dict[int, int] = {}  # the blocks live at the last interval's end, not seen freed since
        self._carried_frames: dict[int, list[dict[str, Any]]] = {}  # their stacks
        self._watch = StorageRefs()  # the storages of carried blocks and start blocks a walk found
        self._foreign = StorageRefs()  # storages of memory PyTorch's allocator did not make, while they live
        self._stacks = True  # record Python stacks (context=all/alloc)
        self._namespace: Names | None = None
        self._also: Any = None  # the cell's value, until the snapshot has walked it
        # When the start's storages died (address -> time_ns), by weak-reference callbacks: the
        # profiler reports no free of a block allocated while it was off.
        self._died: dict[int, int] = {}
        self._dying: list[Any] = []
        self._max_entries = DEFAULTS.max_entries
        self._cells_seen = -1  # notebook cells begun when the last interval ended (STATE.cells_begun)

    @property
    def recording(self) -> bool:  # type: ignore[override]  # read-only: the profiler's state says it
        return self._open or self._gap

    @classmethod
    def available(cls, kind: str) -> bool:
        return True

    @classmethod
    def for_device(cls, device: str) -> CpuBackend:
        refuse_if_too_old()
        warn_if_untested()
        return cls()

    def configure(self, options: Options) -> None:
        given = [k for k in ("compile_context", "skip_actions") if getattr(options, k)]
        if given:
            raise BackendError(
                f"{'= and '.join(given)}=: only accelerators record that; the CPU route has no such trace"
            )
        self._max_entries = options.max_entries
        self._stacks = options.context in ("all", "alloc")
        if self._open:  # a clear=false chain goes on with this cell's ring size
            self._history.keep_newest(self._max_entries)

    def warm_up(self) -> None:
        self._profiler.warm_up()

    def begin(self, *, fresh: bool, namespace: Names | None = None) -> None:
        """Open an interval. Its start holds the tensors in the namespace and the blocks the last
        interval ended with (an autograd graph kept in a list stays counted), updated by what a
        followed gap saw allocated and freed."""
        from torch._C._autograd import _profiler_enabled

        if self._open and not fresh:
            return
        if self._gap:
            self._close_gap()
        elif self._profiler.running:
            self._profiler.stop()  # a fresh history: what it held is dropped
        elif _profiler_enabled():
            raise BackendError(
                "device=cpu: torch.profiler is already running; the CPU route "
                "records through it, so stop that profiler first"
            )
        self._profiler.warm_up()
        self._namespace = namespace
        self.incomplete = None
        names = self._names()
        # Where a notebook cell ran since the last interval ended, or something appeared (or this
        # is the first), an autograd graph made meanwhile may hold what no name reaches, as a loss
        # whose backward runs in this cell holds its forward's activations: graphs are walked too.
        ran = STATE.cells_begun > self._cells_seen + 1 or not self._carried
        walked, found = self._walk_start(names, graphs=ran)
        if not ran and not walked.keys() <= self._carried.keys():
            walked, found = self._walk_start(names, graphs=True)
        # Carried blocks the walk no longer reaches but once saw: freed since (a plain cell's `del`)?
        hidden = {p: n for p, n in self._carried.items() if p not in walked}
        for ptr in self._watch.gone(hidden):
            del hidden[ptr], self._carried[ptr]
            self._carried_frames.pop(ptr, None)
        self._watch.see(found, walked)
        self._died, self._dying = {}, _when_freed(found, self._died_into)
        self._live_start = {**hidden, **walked}  # a storage found at a carried address is what lives there
        frames = {p: f for p, f in self._carried_frames.items() if self._live_start.get(p) == self._carried.get(p)}
        stacks = self._stacks and not profile_hook_on()
        self._history = History(self._max_entries, self._live_start, frames=stacks, start_frames=frames)
        self._profiler.start(stacks=stacks)
        self._open = True

    def _walk_start(self, names: dict[str, Any] | None, graphs: bool) -> tuple[dict[int, int], dict[int, Any]]:
        """The storages the namespace holds (address -> bytes, address -> storage), memory
        PyTorch did not allocate left out."""
        found: dict[int, Any] = {}
        walked = live_storages(names, storages=found, graphs=graphs) if names is not None else {}
        return {p: n for p, n in walked.items() if not self._foreign.holds(p, found[p])}, found

    def snapshot(self) -> dict[str, Any]:
        return self.snapshot_marked(None)

    def snapshot_marked(self, mark: str | None) -> dict[str, Any]:
        """The events so far (the profiler stops to report them; ``end`` decides what follows)."""
        if self._profiler.running:
            events = self._profiler.stop()
            if events is None:
                self.incomplete = TAKEN_OVER
            else:
                before = self._history.count
                self._history.add(events, held=self._profiler.spent)
                self._profiler.events_read += self._history.count - before
                warn_if_huge(self._history.count, stacks=self._history.stacks is not None)
        found: dict[int, Any] = {}
        roots, self._also = self._roots(), None
        walked = live_storages(roots, storages=found) if roots is not None else {}
        self._cells_seen = STATE.cells_begun
        # The start's blocks the walk does not reach now are live unless their storage is gone:
        # freed during the interval, unreported when allocated while nothing recorded.
        hidden = {p: n for p, n in self._live_start.items() if p not in walked}
        gone = self._watch.gone(hidden)
        live_end = {**{p: n for p, n in hidden.items() if p not in gone}, **walked}
        snap = self._history.snapshot(
            live_end,
            time.time_ns() // 1000,
            self._max_entries,
            died=self._died,
            compact=True,
            mark=mark,
            lazy=mark is not None,  # a step's own: its entries are built by the writer (``files.pending``)
        )
        self.freed_unseen = self._history.freed_unseen
        blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
        # A storage that appeared in the interval with no allocation event and that PyTorch's
        # allocator did not make (numpy's memory under torch.from_numpy): never counted later
        foreign = {
            p
            for p in walked
            if p not in self._history.tables.last and p not in self._live_start and not found[p].resizable()
        }
        self._foreign.forget_freed()
        self._foreign.see(found, foreign)
        self._carried = {b["address"]: b["requested_size"] for b in blocks}
        self._carried_frames = {b["address"]: b["frames"] for b in blocks if b["frames"]}
        # a reference at an address the interval allocated or freed at is an earlier storage's
        self._watch.forget(self._history.tables.last)
        self._watch.see(found, self._carried)
        # the start's blocks stay watched too: a clear=false history's next snapshot asks again
        # whether they live (one freed in this step would come back in the next one's end)
        self._watch.keep_only({**self._live_start, **self._carried})
        if roots is not None and not self._watch.covers(self._carried):
            # blocks no name reaches: an autograd graph kept alive (a loss in a list) may hold them
            found = {}
            live_storages(roots, storages=found, graphs=True)
            self._watch.see(found, self._carried)
        return snap

    def _died_into(self, ptr: int) -> None:
        self._died[ptr] = time.time_ns()  # the profiler's events are stamped on this clock

    def reach_also(self, value: Any) -> None:
        self._also = value  # walked with the namespace by the next snapshot, then let go

    def _roots(self) -> dict[str, Any] | None:
        """What the end's walk starts from: the namespace (the user's own dict, never a copy that
        would keep its objects alive) and the cell's value, which IPython stores only after us."""
        names = self._names()
        if names is None or self._also is None:
            return names
        return {**names, "<the cell's value>": self._also}

    def _names(self) -> dict[str, Any] | None:
        names = self._namespace
        return names() if callable(names) else names

    def follow(self, namespace: Names | None = None) -> None:
        from torch._C._autograd import _profiler_enabled

        if not self._open and not self._gap and not _profiler_enabled():
            self._profiler.start()
            self._gap = True
            self._namespace = namespace

    def failed_request(self, error: BaseException | None, time_us: int) -> dict[str, Any] | None:
        failed = allocator_failure(error)
        if failed is None:
            return None
        error, requested = failed
        entry: dict[str, Any] = {"action": "oom", "size": requested, "stream": 0, "time_us": time_us}
        free = available_bytes()
        if free is not None:
            entry["device_free"] = free
        entry["frames"] = traceback_frames(error)
        return entry

    def incomplete_because(self, error: BaseException) -> str | None:
        # PyTorch allows one profiler session a thread: torch.autograd.profiler_legacy (and any
        # profiler started while ours runs that does not take it over) raises this
        if isinstance(error, RuntimeError) and "Profiler is already enabled" in str(error):
            return PROFILER_REFUSED
        return None

    def usage(self) -> dict[str, int] | None:
        rss = resident_bytes()
        return {"rss": rss} if rss is not None else None

    def end(self, *, keep: bool) -> None:
        from torch._C._autograd import _profiler_enabled

        self._also = None
        if self._gap and not keep:
            self._close_gap(watch=True)
            if not self._open:
                self._namespace = None
        if self._open and keep:  # a clear=false chain goes on recording between cells
            self._history.window.resolve()  # its nodes are freed with this session's results
            if not self._profiler.running and not _profiler_enabled():
                self._profiler.start(stacks=self._history.stacks is not None)
            return
        if self._open:
            if self._profiler.running:
                self._profiler.stop()
            self._open = False
            # its window (a tuple per event of the ring) is freed with the session's results, after the cell
            self._profiler.spent.append(self._history)
            self._history = History(0, {})
            self._live_start = {}
            self._namespace = None
            self._dying, self._died = [], {}
        if not self.recording:
            self._profiler.release()

    def abandon(self) -> None:
        # the dead thread's profiler session can be neither stopped nor read from here; a session
        # opened and closed in this thread clears what it left (left as it is, it crashed the process at exit)
        self._profiler.clear_lost()
        self._open = self._gap = False
        self._history = History(0, {})
        self._live_start, self._namespace = {}, None
        self._dying, self._died = [], {}
        self._also = None

    def _close_gap(self, watch: bool = False) -> None:
        """Fold what the gap saw into the carried blocks: allocated ones join, freed ones leave.
        ``watch``: the cell ends here, so the storages of what it allocated are looked for and
        watched (a plain cell's ``del`` of them then moves the next start)."""
        self._gap = False
        roots = self._profiler.stop()
        if roots is None:  # a torch.profiler took the session over: what happened is unknown
            return
        gap = History(0, {})
        gap.add(roots, held=self._profiler.spent)
        self._profiler.events_read += gap.count
        self._watch.forget(gap.tables.last)  # its events say what lives there
        for ptr, size in gap.tables.last.items():
            self._carried_frames.pop(ptr, None)  # the gap records no stacks
            if size > 0:
                self._carried[ptr] = size
            else:
                self._carried.pop(ptr, None)
        names = self._names() if watch else None
        if names is not None and any(size > 0 for size in gap.tables.last.values()):
            found: dict[int, Any] = {}
            live_storages(names, storages=found)
            self._watch.see(found, self._carried)
