"""What a recording backend is: the one interface the recorder calls, and its capabilities.

A backend turns recording on and off on one device and returns snapshot dicts in PyTorch's schema
(``torch.cuda.memory._snapshot()``). It knows nothing of files, sessions or IPython. Where
backends differ, a capability flag says so; nothing outside ``backends`` tests device names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Union

from ...core.devices import trace_index

if TYPE_CHECKING:
    from ..options import Options


Names = Union[dict[str, Any], Callable[[], dict[str, Any]]]


class BackendError(RuntimeError):
    """The requested device cannot record here (missing, or an allocator that cannot record)."""


class Backend(ABC):
    # Capabilities, read by the recorder and by the text that explains a recording.
    records_stacks: ClassVar[bool] = True  # trace entries can carry Python frames
    stack_bytes: ClassVar[int] = 0  # only allocations this large carry them
    has_allocator_peak: ClassVar[bool] = True  # the allocator keeps a peak of its own
    clears_in_place: ClassVar[bool] = True  # begin(fresh=True) while recording starts a new history
    host: ClassVar[bool] = False  # records host (CPU) memory
    thread_bound: ClassVar[bool] = False  # recording stops (and steps change) only in the thread that started it
    users_frames_only: ClassVar[bool] = False  # its stacks stop at the user's outermost frame as built
    label: ClassVar[str] = "the allocator"  # how messages name this route

    device: str  # "cpu", "cuda:0", ...
    recording: bool
    incomplete: str | None = None  # set by snapshot(): why it holds less than the interval did
    freed_unseen = 0  # set by snapshot(): bytes live at the start freed at a time no event gives
    owner: Any = None  # the recorder whose interval this is (set by it): only it ends or dumps it

    # The device family, for resolving ``device=``: ``kind`` is the registry's key.
    @classmethod
    @abstractmethod
    def available(cls, kind: str) -> bool:
        """Whether this machine has a device of ``kind``; may import torch."""

    @classmethod
    def current_index(cls, kind: str) -> int:
        """The index ``device=<kind>`` means (the current device)."""
        return 0

    @classmethod
    def device_count(cls, kind: str) -> int:
        return 1

    @classmethod
    @abstractmethod
    def for_device(cls, device: str) -> Backend:
        """The backend of a concrete device (``cuda:0``, ``cpu``); ``BackendError`` if it cannot record."""

    # One device's recording, in the order the recorder calls it.
    def configure(self, options: Options) -> None:
        """Take the options that shape recording (``max_entries``, ``context``, ``stacks``)."""

    def warm_up(self) -> None:
        """Pay one-off start costs now, before a loop whose steps are timed (``steps=``)."""

    @abstractmethod
    def begin(self, *, fresh: bool, namespace: Names | None = None) -> None:
        """Start an interval: a fresh history if ``fresh`` or not recording; reset peak stats.
        ``namespace``: the user's variables, for backends that must find what was live before
        (or a function giving them as they are when called: a script's locals change)."""

    @abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """The snapshot dict of everything recorded so far; recording goes on."""

    def snapshot_marked(self, mark: str | None) -> dict[str, Any]:
        """``snapshot()``, its entries given ``mark`` as their ``user_metadata`` where this
        backend builds them (cheaper than ``files.layout.stamp`` adding a key to each afterwards);
        else unmarked, for ``stamp``. ``mark`` None: several steps' marks, ``stamp``'s job."""
        return self.snapshot()

    def abandon(self) -> None:
        """Give up the interval a thread that has ended was recording (``thread_bound``
        backends: only that thread could have stopped it); nothing is dumped."""
        self.end(keep=False)

    @abstractmethod
    def end(self, *, keep: bool) -> None:
        """``keep``: leave recording on (cumulative). Otherwise stop and clear the history."""

    def reach_also(self, value: Any) -> None:
        """``value`` is live at the interval's end though no name holds it yet: the cell's
        result, which IPython keeps in ``Out`` only afterwards (the CPU route walks names)."""

    def follow(self, namespace: Names | None = None) -> None:
        """Between the recorded steps of a ``steps=`` loop: keep track of what is allocated and
        freed until the next ``begin``, where the end state alone would not tell (the CPU route).
        ``end(keep=False)`` stops it too. ``namespace``: as for ``begin``, where what the loop
        holds when the cell ends is found."""

    @property
    def family(self) -> str:
        """The device family (``cuda`` of ``cuda:1``): PyTorch keeps one history per family."""
        return self.device.partition(":")[0]

    @property
    def trace_index(self) -> int:
        """Which ``device_traces`` entry of a snapshot holds this device (as files are read back)."""
        return trace_index(self.device)

    def allocator_peak(self) -> int | None:
        """The allocator's own peak since ``begin`` (bytes, rounded), where ``has_allocator_peak``."""
        return None

    def failed_request(self, error: BaseException | None, time_us: int) -> dict[str, Any] | None:
        """The ``oom`` trace entry for ``error`` where the allocator writes none itself: the CPU
        allocator raises a ``RuntimeError`` and tells nobody. Accelerators record their own."""
        return None

    def incomplete_because(self, error: BaseException) -> str | None:
        """Why a block that raised ``error`` recorded less than it ran, where the recording itself
        is the cause (the CPU route's profiler session keeps another profiler from starting)."""
        return None

    def usage(self) -> dict[str, int] | None:
        """What the device (or process) holds now, beyond what the trace sees: ``free``, ``total``
        and ``reserved`` bytes on accelerators, ``rss`` on the CPU; None where it cannot tell."""
        return None
