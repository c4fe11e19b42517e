"""A profiler started inside a recorded CPU block: PyTorch allows one profiler session a thread,
and the CPU route's runs through the block. The step says why it holds less, once, everywhere
its figures are shown; the user's own profiler and its errors behave as PyTorch makes them."""

from __future__ import annotations

import warnings

import pytest

from memsnap_magic import Recorder, session
from memsnap_magic.views.report import interval_table


@pytest.mark.parametrize(
    "inside",
    [
        "with torch.profiler.profile() as p:\n    x = torch.ones(1000)\n",
        "p = torch.profiler.profile()\np.start()\nx = torch.ones(1000)\np.stop()\n",
        "with torch.autograd.profiler.profile(profile_memory=True):\n    x = torch.ones(1000)\n",
    ],
)
def test_a_profiler_taking_over_the_session_is_said_in_the_line_and_the_table(cpu, inside, capsys):
    res = cpu.run_cell(f"%%memsnap step=1\n{inside}y = torch.ones(4000)")
    assert res.success
    line = capsys.readouterr().out
    assert "incomplete: a torch.profiler started inside took over the CPU route's profiler session" in line
    assert "profile outside %%memsnap" in line
    (iv,) = session().intervals
    assert "0 incomplete" in interval_table([iv]) or f"{iv.trace_entries:,} incomplete" in interval_table([iv])


def test_a_recorder_block_with_a_profiler_inside_warns_once(tmp_path):
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(step=1, device="cpu", out=tmp_path, namespace={}), torch.profiler.profile():
            torch.ones(1000)
    said = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("memsnap: step 1 on cpu is incomplete: a torch.profiler")
    assert caught[[str(w.message) for w in caught].index(said[0])].filename == __file__  # at the block's line


def test_a_profiler_that_cannot_start_fails_as_pytorch_makes_it_and_the_line_says_why(cpu, capsys):
    res = cpu.run_cell("%%memsnap step=1\nwith torch.autograd.profiler_legacy.profile():\n    x = torch.ones(1000)")
    assert isinstance(res.error_in_exec, RuntimeError)
    assert str(res.error_in_exec) == "Profiler is already enabled on this thread"  # PyTorch's own, unchanged
    out = capsys.readouterr().out
    assert "incomplete: a profiler started inside could not start: the CPU route's profiler session" in out
    (iv,) = session().intervals
    assert iv.error == "RuntimeError" and iv.incomplete


def test_a_recording_after_a_profiler_took_over_is_whole_again(cpu, capsys):
    assert cpu.run_cell("%%memsnap step=1\nwith torch.profiler.profile():\n    x = torch.ones(1000)").success
    assert cpu.run_cell("%%memsnap step=2\nz = torch.ones(5000)").success
    first, second = session().intervals
    assert first.incomplete and not second.incomplete
    assert second.trace_entries > 0 and second.kept == 5000 * 4
