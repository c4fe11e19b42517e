"""The integrations' cost around a training step: each callback against the same ``Recorder`` block.

    .venv/bin/python benchmarks/bench_integrations.py [--quick] [--repeats N] [--out-dir DIR]

The tiny models of the tests (``tests/tiny_models.py``: a 2-layer GPT-2 of width 64 under the
Hugging Face ``Trainer``, a LightningModule of similar size), trained on the CPU by the real
frameworks, one thread. The callback under test sits between two clock callbacks in the
trainer's list, so the time spent in its hooks around each step (its start before the step,
its stop after it) is measured apart from the step itself, whose noise on a shared machine
would hide a difference of a few percent; as the CPU time of the training thread (the hooks
run there; the files are written by another thread, waited for between runs), which other
processes on the machine do not lengthen.

Rows (the modes take turns, one ``train()``/``fit()`` of ``STEPS`` steps each per round, each
mode first in its turn, so drift hits them alike; medians over every step of every round):
- ``integration_hf_callback_vs_recorder``: the hooks of ``MemsnapCallback`` listing every step,
  against a bare callback that starts and stops ``Recorder(step=N, model=..., optimizer=...)``
  itself, the same options (target <= 1.10x: the callback adds nothing to what the Recorder
  costs); its details hold the whole steps' medians and their ratio too;
- ``integration_lightning_callback_vs_recorder``: the same for Lightning;
- ``integration_hf_unlisted_step`` / ``integration_lightning_unlisted_step``: seconds per step in
  the hooks of a callback that lists no step of the run, beyond those of a callback that does
  nothing (what the framework spends calling any callback; target <= 10 µs).
Run standalone (not in ``run.py``'s list: it needs the [transformers] and [lightning] extras);
results in ``benchmarks/results/integrations.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import Context, Row, ratio_row, torch_threads

NAME = "integrations"
STEPS = 6  # optimizer steps per train()/fit()
NEVER = [10**6]  # a listed step no run reaches
MODES = ("callback", "recorder", "unlisted", "empty")


Seen = dict[str, dict[str, list[float]]]  # mode -> {"hooks": seconds per step, "steps": step spans}


def recorder_block(step: int, out: str, model: Any, optimizer: Any) -> Any:
    """The Recorder a user would start by hand around a step, with the options the callbacks use."""
    from memsnap_magic import Recorder

    recorder = Recorder(step=step, out=out, device="cpu", rank=0, namespace={}, model=model, optimizer=optimizer)
    return recorder.start()


class Times:
    """What the clocks around the callback under test saw: when each step began (the clock before
    it), and how long the callback's start and stop hooks took (between the clock before it and
    the clock after it, in the trainer's list)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.begin: list[float] = []  # this thread's CPU seconds: before, after, before, after, ...
        self.end: list[float] = []

    def clear(self) -> None:
        self.starts.clear(), self.begin.clear(), self.end.clear()

    def hooks(self) -> list[float]:
        """Seconds in the callback's hooks, per step (its start and its stop)."""
        b, e = self.begin, self.end
        return [(b[i + 1] - b[i]) + (e[i + 1] - e[i]) for i in range(0, min(len(b), len(e)) - 1, 2)]

    def steps(self) -> list[float]:
        """Seconds from one step's start to the next one's: our start, the step, our stop."""
        return [b - a for a, b in zip(self.starts, self.starts[1:])]


def _hf(work: Path, rounds: int) -> Seen:
    """The Hugging Face Trainer in each mode, ``rounds`` turns each."""
    from tiny_models import hf_trainer
    from transformers import TrainerCallback

    from memsnap_magic.integrations.transformers import MemsnapCallback

    class Clock(TrainerCallback):
        def __init__(self, times: Times, first: bool) -> None:
            self.times, self.first = times, first

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.times.begin.append(time.thread_time())
            if self.first:
                self.times.starts.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.times.end.append(time.thread_time())

    class BareRecorder(TrainerCallback):
        """What a user would write by hand: the same Recorder block around every step."""

        def __init__(self, out: str) -> None:
            self.out, self.recorder = out, None

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            optimizer = kwargs["optimizer"].optimizer  # under accelerate's wrapper
            self.recorder = recorder_block(state.global_step + 1, self.out, kwargs["model"], optimizer)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder.stop()

    made: dict[str, Callable[[], Any]] = {
        "callback": lambda: MemsnapCallback(steps=range(1, STEPS + 1), out=str(work / "callback")),
        "recorder": lambda: BareRecorder(str(work / "recorder")),
        "unlisted": lambda: MemsnapCallback(steps=NEVER, out=str(work / "unlisted")),
        "empty": TrainerCallback,  # the framework's own cost of calling a callback that does nothing
    }
    times = {mode: Times() for mode in MODES}
    trainers = {
        mode: hf_trainer(work / mode, [Clock(times[mode], True), make(), Clock(times[mode], False)], steps=STEPS)
        for mode, make in made.items()
    }
    return _take_turns({mode: trainer.train for mode, trainer in trainers.items()}, times, rounds)


def _lightning(work: Path, rounds: int) -> Seen:
    """Lightning in each mode, ``rounds`` turns each."""
    import lightning.pytorch as L
    from tiny_models import lightning_fit, lightning_module

    from memsnap_magic.integrations.lightning import MemsnapCallback

    class Clock(L.Callback):
        def __init__(self, times: Times, first: bool) -> None:
            self.times, self.first = times, first

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.times.begin.append(time.thread_time())
            if self.first:
                self.times.starts.append(time.perf_counter())

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.times.end.append(time.thread_time())

    class BareRecorder(L.Callback):
        def __init__(self, out: str) -> None:
            self.out, self.recorder = out, None

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.recorder = recorder_block(trainer.global_step + 1, self.out, pl_module, trainer.optimizers[0])

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.recorder.stop()

    made: dict[str, Callable[[], Any]] = {
        "callback": lambda: MemsnapCallback(steps=range(1, STEPS + 1), out=str(work / "pl-callback")),
        "recorder": lambda: BareRecorder(str(work / "pl-recorder")),
        "unlisted": lambda: MemsnapCallback(steps=NEVER, out=str(work / "pl-unlisted")),
        "empty": L.Callback,
    }
    times = {mode: Times() for mode in MODES}
    ours = {mode: make() for mode, make in made.items()}

    def fit(mode: str) -> None:
        clocks = [Clock(times[mode], True), ours[mode], Clock(times[mode], False)]
        lightning_fit(lightning_module(), clocks, steps=STEPS)

    return _take_turns({mode: (lambda m=mode: fit(m)) for mode in MODES}, times, rounds)


def _take_turns(runs: dict[str, Callable[[], Any]], times: dict[str, Times], rounds: int) -> Seen:
    """Each mode's run in turn, ``rounds`` times after one warm-up round (first-use costs: the
    profiler's start, imports), each mode first in its turn; what the clocks saw, all rounds."""
    from memsnap_magic.files.writer import wait_for_writes

    for run in runs.values():
        run()
    wait_for_writes()
    seen: Seen = {mode: {"hooks": [], "steps": []} for mode in runs}
    order = list(runs)
    for turn in range(rounds):
        for mode in order[turn % len(order) :] + order[: turn % len(order)]:
            times[mode].clear()
            runs[mode]()
            wait_for_writes()  # untimed: the next mode does not pay for this one's files
            seen[mode]["hooks"] += times[mode].hooks()
            seen[mode]["steps"] += times[mode].steps()
    return seen


def _rows(framework: str, seen: Seen) -> list[Row]:
    what = {"hf": "Hugging Face Trainer", "lightning": "Lightning"}[framework]
    step = {mode: statistics.median(seen[mode]["steps"]) for mode in MODES}
    # what the framework spends calling any callback (a Lightning hook runs in its profiler's context) is not ours
    empty = statistics.median(seen["empty"]["hooks"])
    unlisted = statistics.median(seen["unlisted"]["hooks"]) - empty
    return [
        ratio_row(
            f"integration_{framework}_callback_vs_recorder",
            f"{what}: MemsnapCallback's start and stop around a listed step (CPU, tiny model)",
            "the same Recorder block started and stopped by a bare callback",
            {"measured": seen["callback"]["hooks"], "reference": seen["recorder"]["hooks"]},
            1.10,
            step_s=step,
            step_ratio=step["callback"] / step["recorder"],
        ),
        Row(
            f"integration_{framework}_unlisted_step",
            f"{what}: MemsnapCallback's hooks around a step it does not list",
            "a callback that does nothing (seconds per step beyond it)",
            unlisted,
            "s",
            "<= 1e-05 s",
            unlisted <= 1e-5,
            {"hooks_s": seen["unlisted"]["hooks"], "empty_callback_s": empty, "unrecorded_step_s": step["unlisted"]},
        ),
    ]


def run(ctx: Context) -> list[Row]:
    rounds = ctx.pick(2 * ctx.repeats, max(1, ctx.repeats // 2))  # a step's hooks vary ±20 %: many rounds
    with torch_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frameworks' own notices on a CPU-only run
        return [*_rows("hf", _hf(ctx.work, rounds)), *_rows("lightning", _lightning(ctx.work, rounds))]


def _frameworks() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("transformers", "accelerate", "lightning")}


def main(argv: list[str] | None = None) -> int:
    from run import machine, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--repeats", type=int, default=None, help="rounds: twice this (default 7), quick: half (3)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memsnap_bench_") as tmp:
        rows = run(Context(quick=args.quick, repeats=repeats, work=Path(tmp)))
    from dataclasses import asdict

    result = {
        "benchmark": NAME,
        "quick": args.quick,
        "repeats": repeats,
        "seconds": round(time.perf_counter() - t0, 2),
        "error": None,
        "rows": [asdict(r) for r in rows],
        "machine": {**machine(), **_frameworks()},
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{NAME}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(table([result]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
