"""What the CLI says of files recorded in a notebook, read in another process: cells by their
In[N] (as the recording kernel numbered them), sites ordered by the size of their change."""

from __future__ import annotations

import re

import pytest

from memsnap_magic import session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.results import stacks as readable


@pytest.fixture
def kernel(cpu):
    """The shell names its cells' files as a Jupyter kernel does (a hash of their code), so only
    the kernel's own map gives their In[N]."""
    from ipykernel.compiler import XCachingCompiler

    cpu.compile = XCachingCompiler()
    readable.know_cells(cpu.compile._filename_map)
    return cpu


@pytest.fixture
def another_process(monkeypatch):
    """Reading as a process that never ran the notebook: no cell numbers of its own."""

    def forget() -> None:
        monkeypatch.setattr(readable, "_cell_numbers", {})
        monkeypatch.setattr(readable, "_file_cells", {})

    return forget


def test_diff_names_a_notebooks_cells_as_the_kernel_did_and_ranks_by_size(kernel, capsys, another_process):
    cpu = kernel
    cpu.run_cell("keep = []\ndef grow(n):\n    keep.append(torch.ones(n))\n")
    cpu.run_cell("def shrink():\n    keep.pop(0)\n")
    assert cpu.run_cell("%%memsnap step=1\ngrow(1 << 20)\ngrow(1 << 10)").success
    assert cpu.run_cell("%%memsnap step=2\nshrink()\ngrow(1 << 22)").success
    wait_for_writes()
    a, b = (str(iv.path) for iv in session().intervals)
    capsys.readouterr()
    another_process()
    assert main(["diff", a, b]) == 0
    out = capsys.readouterr().out
    assert "notebook cell" not in out and re.search(r"grow \(cell In\[\d+\]:3\)", out), out
    section = out.split("bytes kept")[1].splitlines()[1:]
    changes = [
        int(float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m.group(2)])
        for line in section
        if (m := re.match(r"\s*[+-]?([\d.]+) (B|KiB|MiB)", line))
    ]
    assert changes == sorted(changes, reverse=True)  # by the size of the change, whatever its sign


def test_summarize_names_cells_from_a_file_read_without_its_summary(kernel, capsys, another_process, tmp_path):
    cpu = kernel
    cpu.run_cell("keep = []\ndef grow(n):\n    keep.append(torch.ones(n))\n")
    for step in (1, 2, 3):
        assert cpu.run_cell(f"%%memsnap step={step} out={tmp_path}\ngrow(1 << 20)").success
    wait_for_writes()
    for summary in tmp_path.rglob("*.summary.json"):
        summary.unlink()  # read from the files themselves
    capsys.readouterr()
    another_process()
    assert main(["summarize", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "notebook cell" not in out and re.search(r"grow \(cell In\[\d+\]:3\)", out), out
