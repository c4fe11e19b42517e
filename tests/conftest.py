from __future__ import annotations

import atexit
import functools
import inspect
import re

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """A fresh in-process IPython shell in ``tmp_path`` with memsnap_magic loaded."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(tmp_path)
    InteractiveShell.clear_instance()
    cfg = Config()
    cfg.HistoryAccessor.enabled = False
    sh = InteractiveShell.instance(config=cfg, display_pub_class=CapturingDisplayPublisher)
    sh.run_line_magic("load_ext", "memsnap_magic")
    yield sh
    sh.run_line_magic("unload_ext", "memsnap_magic")
    InteractiveShell.clear_instance()
    # Each shell registers its own exit handler, which resets it and runs a full collection at
    # interpreter exit: one per test's shell made the suite take minutes to exit after its summary.
    atexit.unregister(sh.atexit_operations)


@pytest.fixture(autouse=True)
def summary_cache(tmp_path_factory, monkeypatch):
    """Each test caches summaries of foreign files in a folder of its own, never in ~/.cache."""
    folder = tmp_path_factory.mktemp("summary-cache")
    monkeypatch.setenv("MEMSNAP_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test starts with an empty session and no recording left on, and leaves none."""
    from memsnap_magic.recording.process_state import STATE

    STATE.reset()
    yield
    STATE.reset()


@pytest.fixture
def cpu(shell):
    """The in-process shell recording on the CPU, torch imported."""
    shell.run_cell("import torch")
    shell.run_line_magic("memsnap", "config device=cpu")
    return shell


# The fast inner loop (scripts/test-fast.sh, docs/developing.md) leaves out what is marked slow:
# whole files that start kernels, browsers, benchmarks or builds; tests that start another process
# (found in their own source); and a few slow in-process ones, by name.
SLOW_FILES = {
    "test_benchmarks.py",
    "test_browser.py",
    "test_gpu_check.py",
    "test_issue_scenarios.py",
    "test_notebooks.py",
    "test_packaging.py",
}
SLOW_TESTS = {"test_the_start_moves_by_what_plain_cells_did"}
_STARTS_A_PROCESS = re.compile(r"\bsubprocess\.|\bPopen\(|\bmultiprocessing\b|\bos\.fork\(|\bProcessPool")


@functools.cache
def _starts_a_process(function: object) -> bool:
    try:
        return bool(_STARTS_A_PROCESS.search(inspect.getsource(function)))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (
            item.path.name in SLOW_FILES
            or getattr(item, "originalname", item.name) in SLOW_TESTS
            or item.get_closest_marker("kernel")
            or item.get_closest_marker("browser")
            or _starts_a_process(getattr(item, "function", None))
        ):
            item.add_marker(pytest.mark.slow)
