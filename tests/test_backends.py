"""The backend interface and registry: a new device family is one module and one registry line."""

from __future__ import annotations

import re
import sys
import types
import warnings
from typing import Any

import pytest
from IPython.core.error import UsageError

from memsnap_magic import session
from memsnap_magic.core import devices as registry
from memsnap_magic.recording.backends.base import Backend
from memsnap_magic.recording.process_state import STATE
from memsnap_magic.views.explain import why_no_frames


class FakeBackend(Backend):
    """A device family of its own: two devices, a dict for an allocator, no stacks, no peak."""

    records_stacks = False
    has_allocator_peak = False
    label = "the fake route"

    def __init__(self, device: str) -> None:
        self.device = device
        self.recording = False
        self.trace: list[dict[str, Any]] = []
        self.live: dict[int, int] = {}

    @classmethod
    def available(cls, kind: str) -> bool:
        return True

    @classmethod
    def device_count(cls, kind: str) -> int:
        return 2

    @classmethod
    def for_device(cls, device: str) -> FakeBackend:
        return cls(device)

    def begin(self, *, fresh: bool, namespace: dict[str, Any] | None = None) -> None:
        if fresh or not self.recording:
            self.trace, self.recording = [], True

    def alloc(self, addr: int, size: int) -> None:
        self.live[addr] = size
        if self.recording:
            self.trace.append({"action": "alloc", "addr": addr, "size": size, "time_us": len(self.trace)})

    def snapshot(self) -> dict[str, Any]:
        segments = [
            {
                "device": self.trace_index,
                "address": a,
                "total_size": s,
                "blocks": [{"size": s, "requested_size": s, "state": "active_allocated"}],
            }
            for a, s in self.live.items()
        ]
        traces: list[list[dict[str, Any]]] = [[] for _ in range(self.trace_index + 1)]
        traces[self.trace_index] = list(self.trace)
        return {"segments": segments, "device_traces": traces}

    def end(self, *, keep: bool) -> None:
        if not keep:
            self.trace, self.recording = [], False


@pytest.fixture
def fake_family(monkeypatch):
    # the new family's module, and its one line in the registry
    module = types.ModuleType("memsnap_magic.recording.backends.fake")
    module.FakeBackend = FakeBackend
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.KINDS, "fake", registry.Kind("fake", "FakeBackend"))


def test_a_new_family_records_through_the_magic(shell, fake_family):
    import warnings

    shell.run_cell("from memsnap_magic.recording.process_state import STATE")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a device name torch does not know takes no part's failure
        shell.run_cell("%%memsnap step=1 device=fake:1\nSTATE.devices['fake:1'].backend.alloc(0x10, 4096)")
        shell.run_cell("%%memsnap step=2 device=fake:1\nSTATE.devices['fake:1'].backend.alloc(0x20, 100)")
    assert [str(w.message) for w in caught if "memsnap" in str(w.message)] == []
    one, two = session().intervals
    assert (one.device, one.peak_allocated, one.allocator_peak_allocated) == ("fake:1", 4096, None)
    assert (two.baseline_allocated, two.peak_allocated, two.kept) == (4096, 4196, 100)
    assert one.context == "none"  # the family records no stacks, whatever context= says
    block = {"size": 100, "addr": 0x20, "before": False, "frames": []}
    assert why_no_frames(block, two) == "the fake route records no stacks"
    assert STATE.recording_devices() == []


def test_the_registry_drives_the_device_option(shell, fake_family):
    with pytest.raises(UsageError, match="only 2 fake device"):
        shell.run_cell_magic("memsnap", "device=fake:5", "pass")
    with pytest.raises(UsageError, match="fake, fake:K") as info:
        shell.run_cell_magic("memsnap", "device=faker", "pass")
    assert "auto, cpu, cuda, cuda:K" in str(info.value)
    assert session().intervals == []


def test_importing_every_module_leaves_the_process_as_it_was():
    # no environment variables set, no umask touched, no torch or matplotlib until used
    code = """
import importlib, os, pkgutil, sys
import memsnap_magic
env = dict(os.environ)
os.umask(0o027)
frameworks = []  # the integrations import the framework they serve (and it torch), and only then
for info in pkgutil.walk_packages(memsnap_magic.__path__, "memsnap_magic."):
    if info.name.startswith("memsnap_magic.integrations."):
        frameworks.append(info.name)
    elif info.name != "memsnap_magic.__main__":
        importlib.import_module(info.name)
assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
assert os.umask(0o022) == 0o027
assert "torch" not in sys.modules
for name in frameworks:  # each imports, or says in one line which extra installs what it needs
    try:
        importlib.import_module(name)
    except ImportError as e:
        assert 'pip install "memsnap_magic[' in str(e) and chr(10) not in str(e), e
print("ok")
"""
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("version", ["2.1.2+cu121", "2.4.1", "1.13.1"])
def test_cpu_route_refuses_a_torch_older_than_it_runs_on(shell, monkeypatch, version):
    import torch

    from memsnap_magic.recording.backends import BackendError
    from memsnap_magic.recording.backends.cpu.backend import CpuBackend
    from memsnap_magic.recording.backends.cpu.limits import OLDEST_TORCH

    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(
        BackendError, match=rf"torch {OLDEST_TORCH[0]}\.{OLDEST_TORCH[1]} or newer.*{re.escape(version)}"
    ):
        CpuBackend.for_device("cpu")
    with pytest.raises(UsageError, match="or newer"):
        shell.run_cell_magic("memsnap", "device=cpu", "x = 1")
    assert "x" not in shell.user_ns  # the cell did not run
    monkeypatch.setattr(torch, "__version__", "2.5.0+cpu")
    CpuBackend.for_device("cpu")


def test_cpu_route_warns_once_on_an_untested_torch(monkeypatch):
    import torch

    from memsnap_magic.recording.backends.cpu.backend import CpuBackend
    from memsnap_magic.recording.backends.cpu.limits import TESTED_TORCH

    STATE.warned.discard("untested-torch")
    monkeypatch.setattr(torch, "__version__", "2.99.0+cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CpuBackend.for_device("cpu")
        CpuBackend.for_device("cpu")
    ours = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(ours) == 1 and "2.99.0+cpu" in ours[0] and all(v in ours[0] for v in TESTED_TORCH)
    STATE.warned.discard("untested-torch")
    monkeypatch.setattr(torch, "__version__", f"{TESTED_TORCH[-1]}.1+cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CpuBackend.for_device("cpu")
    assert not [w for w in caught if "memsnap" in str(w.message)]
