"""Every notebook in notebooks/ runs in a real kernel (nbclient) without errors."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from memsnap_magic import load_snapshot

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
pytestmark = pytest.mark.kernel


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(cwd))
    return nb


def missing(path: Path) -> str | None:
    """A package the notebook imports that is not installed (an optional one, like ipyparallel)."""
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    names = {a or b for a, b in re.findall(r"^\s*(?:import (\w+)|from (\w+) import)", code, re.M)}
    return next((n for n in sorted(names) if importlib.util.find_spec(n) is None), None)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Each notebook executed once, in its own folder: path -> (notebook, folder); None when a
    package it needs is missing (the test that uses it skips)."""
    runs = {}
    for path in NOTEBOOKS:
        cwd = tmp_path_factory.mktemp(path.stem)
        runs[path.name] = None if missing(path) else (execute(path, cwd), cwd)
    return runs


def ran(executed, name: str):
    if executed[name] is None:
        pytest.skip(f"{name} needs {missing(NOTEBOOK_DIR / name)}, which is not installed")
    return executed[name]


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path, executed):
    nb, _ = ran(executed, path.name)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert [o for o in outputs if o.output_type == "error"] == []
    assert [o.text for o in outputs if o.get("name") == "stderr"] == []  # no warnings or log noise


def test_demo_files_hold_only_their_own_step(executed):
    _, cwd = ran(executed, "demo.ipynb")
    files = {int(p.parent.name[4:]): p for p in (cwd / "memsnap").glob("step*/*.pickle")}
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
    # the named run's files, one level down, beside the session's own
    fixed = sorted((cwd / "memsnap" / "fixed").glob("step*/*.pickle"))
    assert [p.parent.name for p in fixed] == ["step1", "step2", "step3"]
    assert {load_snapshot(p)["memsnap"]["run"] for p in fixed} == {"fixed"}


def test_an_html_export_without_widget_state_shows_the_still_copy(executed):
    import copy

    from nbconvert import HTMLExporter

    nb, _ = ran(executed, "demo.ipynb")
    bare = copy.deepcopy(nb)
    bare.metadata.pop("widgets", None)  # as JupyterLab saves by default
    body, _ = HTMLExporter().from_notebook_node(bare)
    first, second, last = [m.start() for m in re.finditer("still copy as of", body)]
    # each dashboard was superseded once the next was made; the second holds both runs as drawn then
    assert "superseded by a newer dashboard" in body[first : first + 300]
    assert "as of step 3 (3 steps) in run fixed, 2 runs compared" in body[second : second + 300]
    assert "superseded by a newer dashboard" in body[second : second + 300]
    assert "fixed vs this session on steps 1–3: largest peak change at step 2" in body[second : second + 3000]
    assert "data:image/png;base64,iVBOR" in body[second : second + 6000]
    table = body[body.index("cum. peak", second) - 400 :]
    assert "run" in table[:500] and "this session" in table and "fixed" in table
    # the last, the fit view: its picture and its words, where no widget shows
    assert "the live dashboard needs its kernel" in body[last : last + 300]
    assert "memsnap fit: the step" in body[last : last + 6000] and "fit over batch=2, 4, 8" in body[last : last + 3000]
    assert "the largest batch predicted to fit is" in body[last : last + 3000]


def test_demo_dashboard_survives_in_saved_widget_state(executed):
    import base64

    nb, _ = ran(executed, "demo.ipynb")
    first, second = (c for c in nb.cells if c.cell_type == "code" and c.source.strip() == "%memsnap show")
    # the first, shown after step 3, kept updating through step 10 in its still copy, then was superseded
    old = first.outputs[1]["data"]["text/plain"]
    assert "as of step 3 (3 steps) in run fixed, 2 runs compared" in old, old
    # the second, superseded before the steps after it were recorded: its picture of the two runs stays
    data, still = (o["data"] for o in second.outputs[:2])
    assert "application/vnd.jupyter.widget-view+json" in data
    assert base64.b64decode(still["image/png"])[:4] == b"\x89PNG"  # for GitHub, nbconvert, reopening
    assert "memsnap-still" in still["text/html"] and "2 runs compared" in still["text/plain"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    note = state[data["application/vnd.jupyter.widget-view+json"]["model_id"]]["state"]["children"][0]
    assert state[note.removeprefix("IPY_MODEL_")]["state"]["value"].startswith("<i>superseded by a newer dashboard")
    (last,) = (c for c in nb.cells if c.cell_type == "code" and c.source.startswith('board.view.value = "fit"'))
    data, still = (o["data"] for o in last.outputs[:2])

    def tree(model_id: str) -> list[dict]:
        model = state[model_id]
        children = [c.removeprefix("IPY_MODEL_") for c in model["state"].get("children", [])]
        return [model] + [m for c in children for m in tree(c)]

    root_id = data["application/vnd.jupyter.widget-view+json"]["model_id"]
    live = tree(root_id)
    assert "memsnap-dashboard" in state[root_id]["state"]["_dom_classes"]
    names = [m["model_name"] for m in live]
    assert "ToggleButtonsModel" in names and names.count("DropdownModel") == 3  # rank/device, run, step
    (views,) = (m["state"] for m in live if m["model_name"] == "ToggleButtonsModel")
    assert views["_options_labels"][-1] == "fit" and views["index"] == len(views["_options_labels"]) - 1
    assert [m["state"]["value"] for m in live if m["model_name"] == "TextModel"] == ["48MiB"]  # the capacity
    pngs = [base64.b64decode(m["buffers"][0]["data"]) for m in live if m["model_name"] == "ImageModel"]
    assert len(pngs) == 2 and all(p[:4] == b"\x89PNG" and len(p) > 5000 for p in pngs)
    assert pngs[0] == base64.b64decode(still["image/png"])  # the fit's picture, in the widget and its still copy
    dropdowns = {m["state"].get("description"): m["state"] for m in live if m["model_name"] == "DropdownModel"}
    assert dropdowns["run"]["_options_labels"] == ["leak", "b2", "b4", "b8"]  # after the reset
    assert dropdowns["step"]["_options_labels"] == ["1"]  # following the newest step, in its run


def test_demo_names_who_keeps_the_leak_and_predicts_a_larger_batch(executed):
    nb, cwd = ran(executed, "demo.ipynb")
    printed = {c.source: "".join(o.get("text", "") for o in c.outputs) for c in nb.cells if c.cell_type == "code"}
    listed = printed["%memsnap list"]  # the last of the cells of that source: the leak's
    assert "leak: steps 1–4 each kept +2.0 MiB" in listed
    assert "kept by `history` (list): +2.0 MiB per step, each item's autograd graph" in listed
    assert "do: keep `loss.item()` (a number) or `.detach()` in `history`" in listed
    predicted = printed["%memsnap predict batch=64 capacity=48MiB"]
    assert predicted.startswith("memsnap predict: step 1 at batch=64: peak ") and "from batch=2, 4, 8" in predicted
    assert "grows: `train_batch` (cell In[" in predicted and "65,536 × batch bytes" in predicted
    assert re.search(r"capacity 48.0 MiB \(given\): fits \(.*\); the largest batch predicted to fit: \d", predicted)
    runs = {p.relative_to(cwd / "memsnap").parts[:2] for p in (cwd / "memsnap").glob("*/step*/*.pickle")}
    assert runs >= {("leak", f"step{n}") for n in range(1, 5)} | {(f"b{b}", "step1") for b in (2, 4, 8)}


def test_ranks_notebook_writes_one_file_per_engine_and_compares_them(executed):
    nb, cwd = ran(executed, "ranks_ipyparallel.ipynb")
    files = sorted(
        p.relative_to(cwd / "ranks").as_posix().split("_pid")[0] for p in (cwd / "ranks").glob("step*/*.pickle")
    )
    assert files == [
        "step1/torch_memory_rank0",
        "step1/torch_memory_rank1",
        "step2/torch_memory_rank0",
        "step2/torch_memory_rank1",
    ]
    loaded = next(o.text for c in nb.cells for o in c.get("outputs", []) if "loaded" in o.get("text", ""))
    assert "loaded 4 snapshots into run 'ranks': steps 1–2; ranks 0, 1" in loaded


def test_a_real_kernel_loads_a_folder_over_worker_processes_and_reads_its_own_files(tmp_path):
    """In ipykernel: %memsnap load spreads a cold folder over worker processes (forkserver from
    a kernel), and a cell right after a %%memsnap cell finds that cell's file whole."""
    from memsnap_magic.files.snapshot import dump_snapshot

    for step in (1, 2):
        for rank in (0, 1):
            snap = load_snapshot(Path(__file__).parent / "data" / "cuda_step.pickle")
            snap.pop("memsnap")
            dump_snapshot(snap, tmp_path / "profile" / f"step{step}" / f"torch_memory_rank{rank}.pickle")
    cells = [
        "%load_ext memsnap_magic\nimport memsnap_magic, memsnap_magic.results.scan as scan\nscan.PARALLEL_BYTES = 0\n"
        "used = []\nreal = scan._digests\n"
        "scan._digests = lambda files, jobs, bar: (used.append(jobs), real(files, jobs, bar))[1]",
        "%memsnap load profile as=verl",
        "print(used, [(iv.step, iv.rank) for iv in memsnap_magic.session().runs['verl'].intervals])",
        "%%memsnap device=cpu step=7\nimport torch\nx = torch.ones(10**6)",
        "import glob\nfrom memsnap_magic import load_snapshot\n"
        "print(len(glob.glob('memsnap/step7/*.pickle.summary.json')), "
        "load_snapshot(glob.glob('memsnap/step7/*.pickle')[0])['memsnap']['step'])",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(tmp_path))
    text = lambda n: "".join(o.get("text", "") for o in nb.cells[n].outputs)  # noqa: E731
    assert text(2).strip() == "[2] [(1, 0), (1, 1), (2, 0), (2, 1)]"
    assert text(4).strip() == "1 7"
    assert not [o for c in nb.cells for o in c.outputs if o.output_type == "error"]


def test_a_real_kernel_numbers_recorded_cells_as_it_numbers_them(tmp_path):
    """ipykernel names a cell's file after a hash of its code: tracebacks and allocation sites of
    a %%memsnap cell still name the cell by the number beside it."""
    cells = [
        "%load_ext memsnap_magic\nimport torch\nfrom memsnap_magic import session\n"
        "from memsnap_magic.results.stacks import frame_lines",
        "def grow():\n    return torch.ones(2**20)",
        "%%memsnap device=cpu step=1\nkeep = grow()\nraise ValueError('boom')",
        "print(frame_lines(session().last.top_blocks[0]['frames']))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute(cwd=str(tmp_path))
    (error,) = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
    assert nb.cells[2].execution_count == 3 and re.search(r"Cell In\[3\], line 3|Input In \[3\]", shown), shown
    assert "run_cell_magic" not in shown and shown.count("Traceback") <= 1
    sites = "".join(o.get("text", "") for o in nb.cells[3].outputs)
    assert "grow (cell In[2]:2)" in sites and "<module> (cell In[3]:2)" in sites, sites
