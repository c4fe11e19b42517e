"""Stacks in our dumps stop at the user's outermost frame (the notebook cell, the script's module):
the magic's own frames and the shell, kernel, event loop and runner frames beneath a cell are not
written, on the CPU route as it builds its stacks and for an accelerator's (PyTorch's) before the
dump. Readers cut a foreign file's stacks the same way, so a summary and its file agree."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

from memsnap_magic import load_snapshot, session, wait_for_writes
from memsnap_magic.recording.dump import write_files
from memsnap_magic.results.stacks import keep_user_frames, user_frames

DATA = Path(__file__).parent / "data"
SHELL_PARTS = ("/IPython/", "/ipykernel/", "/asyncio/", "/memsnap_magic/", "/_pytest/", "/pluggy/", "runpy")


def _stacks(snap: dict) -> list[list[dict]]:
    out = [e["frames"] for t in snap["device_traces"] for e in t if e.get("frames")]
    return out + [b["frames"] for seg in snap["segments"] for b in seg["blocks"] if b.get("frames")]


def _is_shell(frame: dict) -> bool:
    return any(part in frame["filename"] for part in SHELL_PARTS) or frame["filename"].startswith("<frozen")


def test_a_cells_cpu_stacks_end_at_the_cell(cpu):
    cpu.run_cell("def make():\n    return torch.ones(4096)\n")
    assert cpu.run_cell("%%memsnap step=1\nx = make()\ny = torch.ones(8192)").success
    wait_for_writes()
    stacks = _stacks(load_snapshot(session().intervals[-1].path))
    assert stacks and all(not _is_shell(f) for frames in stacks for f in frames)
    outermost = {frames[-1]["name"] for frames in stacks}
    assert outermost == {"<module>"}  # the cell itself, whichever line allocated


def test_a_scripts_stacks_end_at_its_module_with_no_runner_beneath(tmp_path):
    pkg = tmp_path / "job"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        textwrap.dedent("""
        import torch
        from memsnap_magic import Recorder, session, wait_for_writes

        def step():
            return torch.ones(4096)

        with Recorder(step=1, device="cpu", out="out"):
            x = step()
        wait_for_writes()
        print(session().intervals[-1].path)
        """)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "job.train"], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=True
    )
    stacks = _stacks(load_snapshot(tmp_path / proc.stdout.strip().splitlines()[-1]))
    assert stacks and all(not _is_shell(f) for frames in stacks for f in frames)
    assert {(tmp_path / frames[-1]["filename"]).resolve() for frames in stacks} == {(pkg / "train.py").resolve()}


def test_an_accelerators_stacks_are_cut_before_the_dump_and_stay_shared(tmp_path):
    snap = load_snapshot(DATA / "cuda_step_raw_stacks.pickle")  # PyTorch's own stacks, from an H200, uncut
    before = _stacks(snap)
    assert any(_is_shell(f) for frames in before for f in frames)  # IPython beneath every cell
    lists_before = len({id(frames) for frames in before})
    keep_user_frames(snap)
    after = _stacks(snap)
    assert len({id(frames) for frames in after}) <= lists_before  # shared stacks stay shared
    for old, new in zip(before, after):
        assert new == old[: len(new)]  # the innermost part, unchanged
        assert not any(_is_shell(f) for f in new) or new == old  # a stack of no user frame: kept whole
    assert any(len(new) < len(old) for old, new in zip(before, after))


def test_the_written_file_is_the_cut_one_and_its_summary_says_the_same(tmp_path):
    from memsnap_magic.results.intervals import digest, interval_from_digest
    from memsnap_magic.results.scan import read_run

    snap = load_snapshot(DATA / "cuda_step_raw_stacks.pickle")
    d = digest(copy.deepcopy(snap))  # the summary is made before the cut, as the recorder makes it
    path = tmp_path / "step1" / "x_rank0.pickle"
    assert write_files(snap, path, d, interval_from_digest(d, path), trim=True).message is None
    written = load_snapshot(path)
    assert not any(_is_shell(f) for frames in _stacks(written) for f in frames if frames[-1] is f)
    (from_summary,) = read_run([path])
    (path.parent / (path.name + ".summary.json")).unlink()
    (from_file,) = read_run([path])
    assert from_summary.top_blocks == from_file.top_blocks and from_summary.kept_by_site == from_file.kept_by_site


def test_user_frames_keeps_library_only_stacks_whole_and_is_idempotent():
    lib = [{"filename": "/x/site-packages/IPython/core/a.py", "line": 1, "name": "f"}]
    assert user_frames(lib) is lib and user_frames(lib, whole_if_none=False) == []
    mixed = [{"filename": "/x/site-packages/torch/nn/m.py", "line": 2, "name": "forward"}]
    mixed += [{"filename": "/tmp/ipykernel_7/123.py", "line": 3, "name": "<module>"}, *lib]
    once = user_frames(mixed)
    assert [f["name"] for f in once] == ["forward", "<module>"] and user_frames(once) is once
