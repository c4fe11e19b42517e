from __future__ import annotations

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
