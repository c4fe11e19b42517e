"""A recorded cell's file is written once the cell is done: the write never shares the
interpreter with the rest of the user's cell. A hold nobody releases lapses; a wait releases it."""

from __future__ import annotations

import threading
import time

from memsnap_magic import session, wait_for_writes
from memsnap_magic.files.writer import HOLD_S, Writer


def test_a_held_job_starts_at_the_release():
    writer, started = Writer(), []
    writer.hold()
    writer.submit(lambda: started.append(time.monotonic()), "x")
    time.sleep(0.3)
    assert started == []
    released = time.monotonic()
    writer.release()
    writer.wait()
    assert started and started[0] >= released


def test_a_hold_nobody_releases_lapses_and_a_wait_releases_it():
    writer, done = Writer(), threading.Event()
    writer.hold()
    writer.submit(done.set, "x")
    assert done.wait(HOLD_S + 5)  # not forever
    writer.hold()
    writer.submit(lambda: None, "y")
    t0 = time.monotonic()
    writer.wait()  # releases: no lapse to sit out
    assert time.monotonic() - t0 < HOLD_S


def test_a_cells_file_is_written_after_the_cell(cpu, monkeypatch):
    from memsnap_magic.ipython.extension import _after_cell
    from memsnap_magic.recording import dump

    order = []
    real = dump.write_files
    monkeypatch.setattr(dump, "write_files", lambda *a, **k: order.append("write") or real(*a, **k))
    # the end of the cell (IPython's post-run hooks, a display) takes a while, the interpreter free
    cpu.events.unregister("post_run_cell", _after_cell)
    cpu.events.register("post_run_cell", lambda result: time.sleep(0.3) or order.append("cell done"))
    cpu.events.register("post_run_cell", _after_cell)
    assert cpu.run_cell("%%memsnap step=1\nx = torch.ones(1000)").success
    wait_for_writes()
    (iv,) = session().intervals
    assert iv.path.is_file() and order == ["cell done", "write"]
