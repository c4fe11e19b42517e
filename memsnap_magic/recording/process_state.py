"""The process-wide state of memsnap_magic: one object, one public ``reset()``.

Everything that outlives a cell lives here: the session the magic fills, the recorders running
now (``mark()`` talks to the innermost), one ``Device`` record per device (its backend, so
recording left on by a ``clear=false`` cell is found again by the next cell, and what its next
interval continues from), which accelerator kinds are recording
(PyTorch records every device of a kind at once), the CPU profiler session and the one-time
warnings already given (their keys: ``core.warn.WARNED``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.warn import WARNED, warn
from ..files.writer import wait_for_writes
from ..results.session import Session

if TYPE_CHECKING:
    from .backends.base import Backend
    from .recorder import Recorder  # which imports this module


@dataclass
class ChainSteps:
    """The earlier steps of a clear=false history, which its next snapshot holds too: when each
    began and its mark (entries are stamped with their own step), and the roles seen at moments
    of those steps (an optimizer step's gradients), so their blocks are labelled as they were."""

    marks: list[tuple[int, str]] = field(default_factory=list)  # (start_us, mark)
    timed: list[tuple[int, Any]] = field(default_factory=list)  # (time_us, roles.Storages)


@dataclass
class Device:
    """What the process keeps of one device across cells: its backend, and what the next
    interval recorded there continues from."""

    backend: Backend
    last_end: tuple[int, int] | None = None  # (step, end bytes) of its last cleared interval
    chain: str | None = None  # the run whose clear=false history it goes on recording
    chain_steps: ChainSteps | None = None  # the steps that history holds so far

    def end_chain(self) -> None:
        """The recording here ended (and any clear=false history with it): the next interval
        starts afresh, and the device, which outlives the block, keeps no recorder alive (nor
        the namespace it was given)."""
        self.chain = self.chain_steps = None
        self.backend.owner = None


_MAKING = threading.Lock()


class State:
    def __init__(self) -> None:
        self._session: Session | None = None
        self.active: list[Recorder] = []  # the Recorders running now, innermost last
        self.devices: dict[str, Device] = {}  # device name -> its backend and continuity, reused across cells
        self.recording_kinds: dict[str, str] = {}  # accelerator kind -> the device whose history it records
        self.cpu_profiler: Any = None  # one profiler session per process (its warm-up is paid once)
        self.warned = WARNED  # keys of the one-time warnings already given (``core.warn.warn_once``)
        self.live_dashboard: Any = None  # weakref to the one dashboard that redraws (the newest shown)
        self.cells_begun = 0  # notebook cells run since %load_ext (counted before each runs)

    @property
    def session(self) -> Session:
        if self._session is None:
            with _MAKING:  # two threads asking first must get one session, not one each
                if self._session is None:
                    self._session = Session()
        return self._session

    def recording_devices(self) -> list[str]:
        """The devices whose recording we started and left on."""
        return [name for name, d in self.devices.items() if d.backend.recording]

    def give_up_orphaned(self) -> list[str]:
        """Give up the recordings whose thread has ended, and their session with it (a block's,
        or a clear=false history one left on), each with one warning; returns their devices."""
        gone = []
        for name, d in self.devices.items():
            owner = d.backend.owner
            if d.backend.recording and owner is not None and owner.orphaned():
                owner.abandon()
                gone.append(name)
        self.active[:] = [r for r in self.active if not r.orphaned()]
        return gone

    def stop_all(self) -> list[str]:
        """Stop every recording we started; returns the devices that were recording."""
        stopped, failures = self.give_up_orphaned(), []
        for name, d in self.devices.items():
            backend, owner = d.backend, d.backend.owner
            if backend.recording and owner is not None and owner.elsewhere():
                # a live thread's CPU session: only that thread can stop it (its block's end will)
                failures.append(f"{name}: recorded by another thread, which alone can stop it")
                continue
            if backend.recording:
                try:
                    backend.end(keep=False)
                    stopped.append(name)
                    d.end_chain()
                except Exception as e:  # try every backend; report what could not stop
                    failures.append(f"{name}: {type(e).__name__}: {e}")
        # the blocks stopped: their ends find nothing of theirs recording, and say so
        self.active[:] = [r for r in self.active if r.recording()]
        if failures:
            warn("memsnap: could not stop recording on " + "; ".join(failures))
        return stopped

    def reset(self) -> None:
        """Stop our recordings and forget intervals, session defaults and dashboards, as in a
        fresh process (pending writes finish first, as at exit). The CPU profiler object and the
        one-time warnings stay: they belong to the process, not to a session."""
        self.stop_all()
        wait_for_writes()
        self.active.clear()
        self.devices.clear()
        self.recording_kinds.clear()
        self._session = None
        self.live_dashboard = None


STATE = State()


def session() -> Session:
    """The process-wide session the magic and ``Recorder`` add to."""
    return STATE.session
