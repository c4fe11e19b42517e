"""The dump pipeline of one interval, as functions: take → label → stamp → meta → digest →
interval → write. ``Recorder`` (``recorder.py``) owns the block's lifecycle (start, stop,
nesting, threads, tasks) and calls ``take_and_hand_over`` when a step ends; everything from
the snapshot to the file is here, in the order it happens.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from ..core.devices import trace_index
from ..core.names import shown_path
from ..core.warn import warn
from ..files import layout, snapshot
from ..files.compact import complete
from ..files.layout import snapshot_path, step_mark
from ..files.meta import META_KEY, Meta, exception_name
from ..files.writer import WRITER, Done
from ..results import digests, intervals, labels, stacks
from .process_state import STATE, ChainSteps, Device
from .retention import walk_after

if TYPE_CHECKING:
    from pathlib import Path

    from ..results.intervals import Interval
    from ..results.labels import Roles
    from ..results.session import Session
    from .backends import Backend
    from .recorder import Recorder


def device_record(backend: Backend) -> Device:
    """The process's record of ``backend``'s device (made again after ``%memsnap reset``)."""
    record = STATE.devices.get(backend.device)
    if record is None:
        record = STATE.devices[backend.device] = Device(backend)
    return record


def take_and_hand_over(rec: Recorder, step: int, error: BaseException | None, keep: bool, cleared: bool) -> None:
    """Take the snapshot of ``step``, label and stamp it, give the session its interval and the
    writer its file (or write it now, for ``wait=true``). ``keep``: leave recording on after."""
    # Until the snapshot is taken every Python call is recorded on CPU (the tracer): as few as can be.
    backend, o = rec._backend, rec.options
    assert backend is not None
    watch, rec._watch = rec._watch, None
    if not backend.recording or backend.owner is not rec:  # %memsnap off or %unload_ext ran inside the block
        if watch is not None:
            rec._quietly(watch.detach)
        warn(
            f"memsnap: recording of step {step} on {backend.device} was stopped inside the block "
            "(%memsnap off?); nothing was written",
            stacklevel=4,
        )
        return
    end_us = time.time_ns() // 1000
    record = device_record(backend)
    # one step's mark is given to the entries as they are built; a clear=false history's several, by stamp
    this_step, chained = step_mark(step, o.run), record.chain_steps
    try:
        usage = rec._quietly(backend.usage)
        snap = rec._quietly(backend.snapshot_marked, this_step if chained is None or not chained.marks else None)
    finally:
        if watch is not None:  # its hooks come off the optimizers whatever happens next
            rec._quietly(watch.detach)
    allocator_peak = rec._quietly(backend.allocator_peak) if backend.has_allocator_peak else None

    if snap is None:
        rec._quietly(backend.end, keep=False)
        return
    failed = rec._quietly(backend.failed_request, error, end_us) if error is not None else None
    if failed is not None:  # before labelling: the entry is marked like the others
        snap["device_traces"][trace_index(backend.device)].append(failed)
    roles = rec._quietly(watch.finish) if watch is not None else None  # recording is off here
    _label_and_stamp(rec, snap, record, roles, this_step, keep, end_us)
    meta = _meta(rec, step, error, cleared, allocator_peak, usage, end_us)
    snap[META_KEY] = meta.to_dict()
    path: Path = snapshot_path(rec._out or o.out, step, o.tag, rec._rank, o.run)
    try:
        d = rec._quietly(digests.digest, snap, kept_blocks=True)
    finally:
        rec._quietly(backend.end, keep=keep)
    made = d.pop("kept_blocks", None) if d is not None else None  # for the walk, never in a summary
    if d is not None:  # what the summary shows names its cells as this kernel does, read anywhere
        rec._quietly(_name_cells, snap, d)
    # who keeps what the step kept, where that passed the leak floor; never walked into the
    # CPU route's recording (a clear=false chain's, still on), whose tracer would record the walk
    if d is not None and made and not (backend.host and backend.recording):
        rec._quietly(walk_after, snap, d, made, rec.reach.tensors(), backend.device)
    iv = rec._quietly(intervals.interval_from_digest, d, path, run=o.run or "") if d is not None else None
    write = functools.partial(write_files, snap, path, d, iv, trim=not backend.users_frames_only)
    now = o.wait or iv is None or not _folder_made(path)  # a folder that cannot be made: said in this cell
    if now:  # written before it joins the session: its record says how that went
        written = _write_now(write)
        if iv is not None:
            iv = replace(iv, path=written.where(path), file_bytes=written.file_bytes)
    if iv is not None:
        iv = _join_session(rec, iv, record, cleared)
    if not now and iv is not None:  # after what the user waits for: the figures, the report
        try:  # blocks while the write before waits: a Ctrl-C there means no file
            WRITER.submit(functools.partial(_write_in_background, write, rec, iv), str(path), rec.where)
        except BaseException:
            _apply_written(rec.session, rec._joined, iv, Written(None, None))
            raise


def _label_and_stamp(
    rec: Recorder,
    snap: dict[str, Any],
    record: Device,
    roles: Roles | None,
    this_step: str,
    keep: bool,
    end_us: int,
) -> None:
    """Label the blocks with the roles seen (parameters, gradients, optimizer state) and stamp
    each entry with its step; a clear=false history keeps its steps for the next snapshot."""
    device = record.backend.device
    # a clear=false history holds the steps before this one: each entry says which it came from,
    # and their blocks take the roles seen while those steps ran
    before = record.chain_steps or ChainSteps()
    record.chain_steps = None
    if roles is not None and before.timed:
        roles.timed[:0] = before.timed
    if roles:
        rec._quietly(labels.label_snapshot, snap, trace_index(device), roles, end_us)
    marks = [*before.marks, (rec._began_us, this_step)]
    rec._quietly(layout.stamp, snap, trace_index(device), marks)
    if keep:
        timed = [*roles.timed, (end_us, roles.end)] if roles is not None else before.timed
        timed = [(t, seen) for t, seen in timed if seen]
        record.chain_steps = ChainSteps(marks, timed)


def _meta(
    rec: Recorder,
    step: int,
    error: BaseException | None,
    cleared: bool,
    allocator_peak: int | None,
    usage: dict[str, int] | None,
    end_us: int,
) -> Meta:
    """The file's memsnap block: what the snapshot cannot say of itself."""
    backend, o = rec._backend, rec.options
    assert backend is not None
    return Meta(
        step=step,
        rank=rec._rank,
        device=backend.device,
        tag=o.tag,
        pid=os.getpid(),
        end_us=end_us,
        error=exception_name(error) if error is not None else None,
        clear=cleared,
        allocator_peak_allocated=allocator_peak,
        context=o.context if backend.records_stacks else "none",
        max_entries=o.max_entries,
        incomplete=backend.incomplete or (rec._quietly(backend.incomplete_because, error) if error else None),
        freed_unseen=backend.freed_unseen or None,
        run=o.run,
        scale=dict(o.scale) if o.scale is not None else None,
        usage_start=rec._usage,
        usage_end=usage,
    )


def _join_session(rec: Recorder, iv: Interval, record: Device, cleared: bool) -> Interval:
    """Add the interval to the session (and the block's list), with where its start moved since
    the device's last cleared interval ended, and report it; returns the record the session
    holds (with its cumulative figures)."""
    last, record.last_end = record.last_end, None  # what the last cleared interval here ended with
    # a full ring dropped the oldest entries: its baseline is the window's start, not the
    # interval's; the steps between two listed ones of a steps= loop were followed, not unseen
    followed = rec.steps is not None and bool(rec._joined)
    if last is not None and not iv.overflowed and not followed:
        iv = replace(iv, moved_since=last[0], moved=iv.baseline_allocated - last[1])
    if cleared:
        record.last_end = (iv.step, iv.end_allocated)
    previous = rec.session.previous(iv)
    rec.session.add(iv)
    iv = rec.session.current(iv)  # with its cumulative figures
    rec._joined[iv.origin] = iv
    if rec.report is not None:
        rec._quietly(rec.report, iv, previous)
    elif iv.incomplete:  # a block's figures, with no line printed to say it
        warn(f"memsnap: step {iv.step} on {record.backend.device} is incomplete: {iv.incomplete}", stacklevel=5)
    return iv


def _folder_made(path: Path) -> bool:
    """Whether the file's folder is there or could be made (here, in microseconds): a write that
    cannot even start fails in its own cell, not in the background after the cells that follow."""
    if os.path.isdir(path.parent):  # one stat, where making it costs a failed mkdir and a stat
        return True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return True


def _write_now(write: Callable[[], Written]) -> Written:
    written = write()
    if written.message is not None:
        warn(written.message, stacklevel=5)
    return written


def _write_in_background(write: Callable[[], Written], rec: Recorder, iv: Interval) -> Done:
    """The writer's job: write, and hand back what the session is to apply (``_apply_written``,
    run where the writer is waited for; it holds the block's list, not the recorder)."""
    written = write()
    return Done(written.message, functools.partial(_apply_written, rec.session, rec._joined, iv, written))


def _apply_written(session: Session, joined: dict[int, Interval], iv: Interval, written: Written) -> None:
    """The outcome of ``iv``'s write, into the session's record of it and the block's (``joined``)."""
    record = session.written(iv, written.where(iv.path), written.file_bytes)
    joined[record.origin] = record


def _name_cells(snap: dict[str, Any], d: dict[str, Any]) -> None:
    """The In[N] of the cells the digest's blocks were made in, into its meta and the file's."""
    cells = stacks.cells_in(b["frames"] for b in d["top_blocks"])
    if cells:
        d["meta"] = replace(d["meta"], cells=cells)
        snap[META_KEY]["cells"] = cells


def _all_cells(snap: dict[str, Any]) -> None:
    """Every cell the file's stacks pass through, into its meta (``memsnap diff`` names them all)."""
    meta = snap.get(META_KEY)
    if type(meta) is not dict:
        return
    frames = [e.get("frames") for t in snap.get("device_traces") or () for e in t]
    frames += [b.get("frames") for seg in snap.get("segments") or () for b in seg.get("blocks") or ()]
    found = stacks.cells_in(frames)
    if found:
        meta["cells"] = {**(meta.get("cells") or {}), **found}


class Written(NamedTuple):
    """How writing a step's files went: the snapshot file's size (None: not written) and what
    went wrong, in one line (None: nothing)."""

    file_bytes: int | None
    message: str | None

    def where(self, path: Path | None) -> Path | None:
        """The step's path where its file was written; None where it was not."""
        return path if self.file_bytes is not None else None


def write_files(
    snap: dict[str, Any], path: Path, d: dict[str, Any] | None, interval: Interval | None, trim: bool = False
) -> Written:
    """Write the snapshot, then its summary (``d``, where there is one); ``interval`` names the
    step in what is said. ``trim``: cut its stacks at the user's outermost frame first
    (PyTorch's run down through the shell and kernel: ~20 frames of IPython, ipykernel and
    asyncio under every cell)."""
    from ..files import summaries  # here: numpy loads with the first dump, not with %load_ext

    try:
        complete(snap, pause=WRITER.checkpoint)  # the entries left to build, a slice at a time
        if trim:
            stacks.keep_user_frames(snap)
        _all_cells(snap)
        snapshot.dump_snapshot(snap, path)
        size = path.stat().st_size
    except Exception as e:
        step = f"step {interval.step}" if interval is not None else "the interval"
        return Written(
            None, f"memsnap: could not write {shown_path(path)}: {_reason(e)}; {step} is kept in memory only"
        )
    if d is None:
        return Written(size, None)
    try:
        summaries.write_beside(path, d)
    except Exception as e:  # readers recompute what a summary would have said
        return Written(size, f"memsnap: could not write the summary beside {shown_path(path)}: {_reason(e)}")
    return Written(size, None)


def _reason(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
