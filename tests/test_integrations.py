"""The Hugging Face and Lightning callbacks, with the real frameworks training tiny models on the
CPU (``tiny_models``): a leak planted in steps 3–5 is found in the files as the dashboard and the
CLI read them, the healthy twin claims nothing, accumulated micro-batches are one step, a step
that raises leaves its file with the error and recording off, ``memsnap check`` tells the runs
apart, and the training ends exactly as it would without us."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import (
    LEAK,
    PlantedFailure,
    hf_model,
    hf_trainer,
    lightning_fit,
    lightning_module,
    two_optimizer_module,
)

from memsnap_magic import cli
from memsnap_magic.recording.process_state import STATE
from memsnap_magic.results.scan import read_run
from memsnap_magic.views.headline import headline

pytest.importorskip("transformers", reason="the [transformers] extra is not installed (scripts/setup.sh installs it)")
pytest.importorskip("accelerate", reason="the [transformers] extra is not installed (scripts/setup.sh installs it)")
pytest.importorskip("lightning", reason="the [lightning] extra is not installed (scripts/setup.sh installs it)")

from memsnap_magic.integrations import lightning as pl_memsnap
from memsnap_magic.integrations import transformers as hf_memsnap

ALL = range(1, 7)


def files(out: Path) -> dict[int, list[Path]]:
    """Snapshot files per step folder."""
    return {int(d.name[4:]): sorted(d.glob("*.pickle")) for d in sorted(out.glob("step*"))}


def hf_run(out: Path, steps: Any = ALL, **planted: Any) -> Any:
    trainer = hf_trainer(out.parent, [hf_memsnap.MemsnapCallback(steps=steps, out=str(out), wait=True)], **planted)
    trainer.train()
    return trainer


def pl_run(out: Path, steps: Any = ALL, accumulate: int = 1, **planted: Any) -> Any:
    module = lightning_module(accumulate=accumulate, **planted)
    callback = pl_memsnap.MemsnapCallback(steps=steps, out=str(out), wait=True)
    return lightning_fit(module, [callback], accumulate=accumulate), module


def assert_two_leaks_a_step(out: Path) -> None:
    """One file per optimizer step, and each leaking step kept both of its micro-batches' leaks:
    the two were recorded as one step."""
    intervals = read_run([out])
    assert [iv.step for iv in intervals] == list(ALL)
    kept = [iv.kept for iv in intervals]
    assert all(abs(k - 2 * LEAK) < 256 << 10 for k in kept[2:5]), kept  # two leaks, not one
    assert headline(intervals).startswith("leak: steps 3–5 each kept +4.0 MiB"), headline(intervals)


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three recordings of 6 steps: the leaking model, and two of the healthy twin."""
    root = tmp_path_factory.mktemp("hf")
    runs = {"leaking": root / "leaking", "healthy": root / "healthy", "healthy_again": root / "healthy_again"}
    hf_run(runs["leaking"], leak_steps={3, 4, 5})
    hf_run(runs["healthy"])
    hf_run(runs["healthy_again"])
    return runs


@pytest.fixture(scope="module")
def pl_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lightning")
    runs = {"leaking": root / "leaking", "healthy": root / "healthy"}
    pl_run(runs["leaking"], leak_steps={3, 4, 5})
    pl_run(runs["healthy"])
    return runs


# ---- Hugging Face Trainer --------------------------------------------------------------------


def test_hf_a_leak_in_steps_3_to_5_is_found_in_a_file_per_step(hf_runs: dict[str, Path]) -> None:
    found = files(hf_runs["leaking"])
    assert sorted(found) == list(ALL) and all(len(f) == 1 for f in found.values())
    assert all("_rank0_" in f[0].name for f in found.values())  # the trainer's process index
    intervals = read_run([hf_runs["leaking"]])
    line = headline(intervals)
    assert line.startswith("leak: steps 3–5 each kept +2.0 MiB"), line
    assert "leak site: " in line and " → keep_activation (tiny_models.py:" in line  # the call chain, briefly
    assert [iv.kept >= LEAK for iv in intervals] == [False, False, True, True, True, False]
    # parameters and optimizer state labelled from the trainer's model and (unwrapped) optimizer
    first = intervals[0].by_category or {}
    params = sum(p.numel() * p.element_size() for p in hf_model().parameters())
    assert first.get("parameter") == params and first.get("optimizer_state", 0) >= 2 * params


def test_hf_the_healthy_twin_claims_nothing(hf_runs: dict[str, Path]) -> None:
    intervals = read_run([hf_runs["healthy"]])
    assert [iv.step for iv in intervals] == list(ALL)
    assert headline(intervals).startswith("no leak or spike"), headline(intervals)


def test_hf_memsnap_check_fails_the_leaking_run_and_passes_a_second_healthy_one(
    hf_runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(hf_runs["healthy"]), str(hf_runs["leaking"])]) == 1
    out = capsys.readouterr().out.splitlines()
    failing = [line for line in out if line.startswith("memsnap check: step ")]
    assert [line.split(":")[1].strip() for line in failing] == ["step 3", "step 4", "step 5", "step 6"]
    assert "kept +2.0 MiB more" in failing[0] and "keep_activation (tiny_models.py:" in failing[0], failing[0]
    assert "held as activation" in failing[0]
    assert out[-1].startswith("memsnap check: 4 of 6 steps exceed the tolerances")
    assert cli.main(["check", str(hf_runs["healthy"]), str(hf_runs["healthy_again"])]) == 0
    assert capsys.readouterr().out.startswith("memsnap check: 6 steps within the tolerances")


def test_hf_accumulated_micro_batches_are_one_step(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    trainer = hf_run(out, accumulate=2, leak_steps={3, 4, 5})
    assert trainer.state.global_step == 6 and trainer.model.transformer.passes == 12
    assert_two_leaks_a_step(out)


def test_hf_only_the_listed_steps_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    hf_run(out, steps=[2, 5])
    assert sorted(files(out)) == [2, 5]
    assert STATE.recording_devices() == []


def test_hf_a_step_that_raises_inside_recording_leaves_its_file_with_the_error(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    trainer = hf_trainer(tmp_path, fail_steps={3})
    with pytest.raises(PlantedFailure) as raised, hf_memsnap.recording(trainer, steps=ALL, out=str(out), wait=True):
        trainer.train()
    assert str(raised.value) == "planted failure in step 3"  # the exception reaches the user unchanged
    assert raised.traceback[-1].name == "_planted_hook"
    assert STATE.recording_devices() == []  # recording is off
    intervals = read_run([out])
    assert [(iv.step, iv.error) for iv in intervals] == [(1, None), (2, None), (3, "PlantedFailure")]
    assert not any(isinstance(c, hf_memsnap.MemsnapCallback) for c in trainer.callback_handler.callbacks)


def test_hf_recording_takes_the_callbacks_a_trainer_already_has(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    callback = hf_memsnap.MemsnapCallback(steps=[2], out=str(out), wait=True)
    trainer = hf_trainer(tmp_path, [callback], fail_steps={2})
    with pytest.raises(PlantedFailure), hf_memsnap.recording(trainer) as used:
        trainer.train()
    assert used is callback and callback in trainer.callback_handler.callbacks
    assert [(iv.step, iv.error) for iv in read_run([out])] == [(2, "PlantedFailure")]
    assert STATE.recording_devices() == []


def test_hf_a_step_that_raised_unseen_is_stopped_by_the_next_training(tmp_path: Path) -> None:
    """A TrainerCallback sees no exception: the step's recording stays on until the next
    train() starts, and its file says the step never reached its end."""
    out = tmp_path / "memsnap"
    trainer = hf_trainer(tmp_path, [hf_memsnap.MemsnapCallback(steps=[2], out=str(out), wait=True)], fail_steps={2})
    with pytest.raises(PlantedFailure):
        trainer.train()
    assert STATE.recording_devices() == ["cpu"]  # nothing could see the exception yet
    trainer.model.transformer.fail_steps.clear()
    trainer.args.max_steps = 1  # the retry stops before step 2, which would replace the file
    trainer.train()
    assert STATE.recording_devices() == []
    assert [(iv.step, iv.error) for iv in read_run([out])] == [(2, "UnfinishedStep")]


def test_hf_a_step_that_raised_unseen_is_written_at_exit_with_the_error(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from pathlib import Path\n"
        "from tiny_models import hf_trainer\n"
        "from memsnap_magic.integrations.transformers import MemsnapCallback\n"
        "here = Path(sys.argv[1])\n"
        "cb = MemsnapCallback(steps=[1, 2], out=str(here / 'memsnap'))\n"
        "hf_trainer(here, [cb], fail_steps={2}).train()\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 1 and "PlantedFailure: planted failure in step 2" in proc.stderr, proc.stderr[-3000:]
    assert [(iv.step, iv.error) for iv in read_run([tmp_path / "memsnap"])] == [(1, None), (2, "PlantedFailure")]


def test_hf_a_notebook_cell_that_raised_mid_step_ends_its_recording(shell: Any, tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    shell.user_ns.update(
        trainer=hf_trainer(tmp_path, [hf_memsnap.MemsnapCallback(steps=[2], out=str(out), wait=True)], fail_steps={2})
    )
    # IPython's default tracebacks read every frame's source, here under the CPU route's Python
    # tracer still on (75 s instead of 4 s on this machine): plain ones keep the test short
    shell.run_line_magic("xmode", "plain")
    result = shell.run_cell("trainer.train()")
    assert isinstance(result.error_in_exec, PlantedFailure)
    assert STATE.recording_devices() == []
    assert [(iv.step, iv.error) for iv in read_run([out])] == [(2, "PlantedFailure")]


def test_hf_training_ends_exactly_as_without_the_callback(tmp_path: Path) -> None:
    plain = hf_trainer(tmp_path / "plain")
    plain.train()
    recorded = hf_run(tmp_path / "memsnap")
    ours, theirs = recorded.model.state_dict(), plain.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_hf_our_failure_is_a_warning_and_the_training_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    callback = hf_memsnap.MemsnapCallback(steps=[1, 2], out=str(blocker / "memsnap"), wait=True)
    trainer = hf_trainer(tmp_path, [callback], steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.state.global_step == 2
    said = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(said) == 2 and all("could not write" in s for s in said), said


def test_callback_options_are_checked_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="device="):
        hf_memsnap.MemsnapCallback(steps=[1], device="tpu")
    with pytest.raises(ValueError, match="steps="):
        pl_memsnap.MemsnapCallback(steps=[])
    with pytest.raises(TypeError, match="step= is not an option of a callback"):
        hf_memsnap.MemsnapCallback(steps=[1], step=3)
    with pytest.raises(TypeError):
        hf_memsnap.MemsnapCallback()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("transformers", ["transformers"], "transformers"),
        ("lightning", ["lightning", "pytorch_lightning"], "lightning"),
    ],
)
def test_a_missing_framework_is_one_import_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, hidden: list[str], extra: str
) -> None:
    for name in [m for m in sys.modules if m.partition(".")[0] in hidden]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed (its submodules too)
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, f"memsnap_magic.integrations.{module}")
    with pytest.raises(ImportError) as raised:
        importlib.import_module(f"memsnap_magic.integrations.{module}")
    assert str(raised.value) == (
        f"memsnap_magic.integrations.{module} needs {hidden[0]}, which is not installed: "
        f'pip install "memsnap_magic[{extra}]"'
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_importing_the_integrations_package_imports_no_framework() -> None:
    frameworks = "{'transformers', 'accelerate', 'lightning', 'torch'}"
    code = f"import sys, memsnap_magic.integrations; print(sorted({frameworks} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr


# ---- Lightning -------------------------------------------------------------------------------


def test_lightning_a_leak_in_steps_3_to_5_is_found_in_a_file_per_step(pl_runs: dict[str, Path]) -> None:
    found = files(pl_runs["leaking"])
    assert sorted(found) == list(ALL) and all(len(f) == 1 for f in found.values())
    intervals = read_run([pl_runs["leaking"]])
    line = headline(intervals)
    assert line.startswith("leak: steps 3–5 each kept +2.0 MiB"), line
    assert "leak site: " in line and " → keep_activation (tiny_models.py:" in line  # the call chain, briefly
    assert (intervals[0].by_category or {}).get("optimizer_state", 0) > 0


def test_lightning_the_healthy_twin_claims_nothing(pl_runs: dict[str, Path]) -> None:
    intervals = read_run([pl_runs["healthy"]])
    assert [iv.step for iv in intervals] == list(ALL)
    assert headline(intervals).startswith("no leak or spike"), headline(intervals)


def test_lightning_memsnap_check_names_the_leaking_site(
    pl_runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", f"before={pl_runs['healthy']}", f"after={pl_runs['leaking']}"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("memsnap check: step 3: ") and "keep_activation (tiny_models.py:" in first, first


def test_lightning_accumulated_batches_are_one_step(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    trainer, module = pl_run(out, accumulate=2, leak_steps={3, 4, 5})
    assert trainer.global_step == 6 and module.passes == 12
    assert_two_leaks_a_step(out)


def test_lightning_a_step_that_raises_leaves_its_file_with_the_error(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    with pytest.raises(PlantedFailure, match="planted failure in step 3"):
        pl_run(out, fail_steps={3})
    assert STATE.recording_devices() == []
    assert [(iv.step, iv.error) for iv in read_run([out])] == [(1, None), (2, None), (3, "PlantedFailure")]


def test_lightning_ctrl_c_in_a_step_leaves_its_file(tmp_path: Path) -> None:
    out = tmp_path / "memsnap"
    module = lightning_module()
    module.interrupt_steps = {2}
    callback = pl_memsnap.MemsnapCallback(steps=ALL, out=str(out), wait=True)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):  # Lightning's graceful shutdown after Ctrl-C
            lightning_fit(module, [callback])
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further Ctrl-C from then on
    assert STATE.recording_devices() == []
    assert [(iv.step, iv.error) for iv in read_run([out])] == [(1, None), (2, "KeyboardInterrupt")]


def test_lightning_training_ends_exactly_as_without_the_callback(tmp_path: Path) -> None:
    plain = lightning_module()
    lightning_fit(plain)
    _, recorded = pl_run(tmp_path / "memsnap")
    ours, theirs = recorded.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_lightning_two_optimizers_are_both_labelled_and_a_batch_is_one_file(tmp_path: Path) -> None:
    """Manual optimization stepping two optimizers per batch: trainer.global_step counts two steps
    per batch; each batch is recorded whole, as the step it began, and a listed step inside it is
    said once."""
    out = tmp_path / "memsnap"
    module = two_optimizer_module()
    callback = pl_memsnap.MemsnapCallback(steps=[1, 2, 3], out=str(out), wait=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lightning_fit(module, [callback], steps=6)
    said = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert said == [
        "memsnap: MemsnapCallback: the batch of step 1 also made optimizer step 2: a batch is recorded whole, "
        "in the file of the step it began"
    ]
    intervals = read_run([out])
    assert [iv.step for iv in intervals] == [1, 3]
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    for iv in intervals:  # AdamW's two moments of every parameter, of both optimizers, and 4 step counters
        assert iv.by_category is not None and iv.by_category["optimizer_state"] == 2 * params + 4 * 4
