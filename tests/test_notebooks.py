"""Every notebook in notebooks/ runs in a real kernel (nbclient) without errors."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from memsnap_magic import load_snapshot

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
pytestmark = pytest.mark.kernel


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(cwd))
    return nb


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path, tmp_path):
    nb = execute(path, tmp_path)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert [o for o in outputs if o.output_type == "error"] == []
    assert [o.text for o in outputs if o.get("name") == "stderr"] == []  # no warnings or log noise


def test_demo_files_hold_only_their_own_step(tmp_path):
    execute(Path(__file__).parent.parent / "notebooks" / "demo.ipynb", tmp_path)
    files = {int(p.parent.name[4:]): p for p in (tmp_path / "memsnap").glob("step*/*.pickle")}
    assert sorted(files) == [1, 2, 3, 4, 5, 6, 8, 10]
    windows = {}
    for step, path in files.items():
        snap = load_snapshot(path)
        times = [e["time_us"] for e in snap["device_traces"][0]]
        assert snap["memsnap"]["step"] == step and times
        windows[step] = (min(times), max(times))
    # cleared steps do not overlap in time; steps 5 and 6 follow clear=false cells, so their
    # files start where step 4 started and grow
    order = [1, 2, 3, 4, 8, 10]
    for a, b in zip(order, order[1:]):
        assert windows[a][1] < windows[b][0], (a, b, windows)
    assert windows[4][0] == windows[5][0] == windows[6][0]
    assert windows[4][1] < windows[5][1] < windows[6][1] < windows[8][0]
