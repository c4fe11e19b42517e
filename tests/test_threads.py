"""Blocks in several threads at once: one records the device, the others run unrecorded and say
so, and nothing of ours ever raises or leaves PyTorch's profiler in a thread that did not start it."""

from __future__ import annotations

import random
import threading
import warnings

import pytest

from memsnap_magic import Recorder, load_snapshot, session, wait_for_writes


def _blocks(out, seed: int, threads: int, blocks: int, nested: bool) -> tuple[list[str], list[int], list[str]]:
    """Run ``threads`` threads of ``blocks`` Recorder blocks each (the default namespace, as a
    script's: its walk makes the window between blocks wide); what raised, which steps' bodies
    ran, and our warnings."""
    import torch

    errors: list[str] = []
    ran: list[int] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        for i in range(blocks):
            step = (k + 1) * 1000 + i
            try:
                with Recorder(step=step, device="cpu", out=out):
                    if nested and rng.random() < 0.5:
                        with Recorder(step=step + 500, device="cpu", out=out):
                            x = torch.ones(rng.randint(1, 4096))
                    else:
                        x = torch.ones(rng.randint(1, 4096))
                    del x
                    with lock:
                        ran.append(step)
            except Exception as e:  # ours or not: the body must have run and nothing raised
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    with warnings.catch_warnings(record=True) as caught:  # not thread-safe: one around all threads
        warnings.simplefilter("always")
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    said = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    return errors, ran, said


@pytest.mark.parametrize(
    ("seed", "threads", "nested"), [(1, 2, False), (2, 4, False), (3, 4, True), (4, 3, True), (5, 4, False)]
)
def test_blocks_in_several_threads_never_raise_and_each_recorded_file_holds_its_step(
    tmp_path, capfd, seed, threads, nested
):
    blocks = 20
    errors, ran, said = _blocks(tmp_path, seed, threads, blocks, nested)
    assert errors == []
    assert len(ran) == threads * blocks  # every body ran, recorded or not
    recorded = [iv for iv in session().intervals if iv.path is not None]
    assert recorded, "some block recorded"
    assert all("runs unrecorded" in m for m in said), said  # nothing but that was said
    assert not any("step None" in m for m in said)  # a block whose dump is under way names its step
    assert len(recorded) + len(said) >= threads * blocks, [iv.step for iv in session().intervals]
    wait_for_writes()
    for iv in recorded:
        snap = load_snapshot(iv.path)
        marks = {e.get("user_metadata") for t in snap["device_traces"] for e in t if e["action"] == "alloc"}
        assert marks <= {f"memsnap step {iv.step}"}, (iv.step, marks)
    err = capfd.readouterr().err
    # PyTorch's words when a session is stopped from a thread that did not start it
    assert "no active profiling session" not in err and "PythonTracer::stop()" not in err
