"""``memsnap check`` and the tolerances behind it (``gate``), on hand-built runs in verl's layout:
each step allocates a block it keeps (from a named site) and a temporary block it frees, so its
peak and what it kept are known to the byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from snapshots import alloc, free, snapshot

from memsnap_magic.cli import main
from memsnap_magic.files.snapshot import dump_snapshot
from memsnap_magic.views.gate import Tolerance, parse_bytes, parse_tolerance

KiB, MiB = 1 << 10, 1 << 20


def write_run(folder: Path, steps: dict[int, tuple[int, int]], ranks: tuple[int, ...] = (0,)) -> Path:
    """``folder/step<N>/torch_memory_rank<R>_pid7.pickle``: step N keeps ``kept`` bytes allocated at
    ``grow (/src/model.py:9)`` and frees ``temporary`` bytes allocated at ``scratch (/src/model.py:4)``."""
    for step, (kept, temporary) in steps.items():
        for rank in ranks:
            frames = {
                "kept": [{"filename": "/src/model.py", "line": 9, "name": "grow"}],
                "tmp": [{"filename": "/src/model.py", "line": 4, "name": "scratch"}],
            }
            trace = [
                dict(alloc(0x1000, kept)[0], frames=frames["kept"]),
                dict(alloc(0x9000000, temporary)[0], frames=frames["tmp"]),
                *free(0x9000000, temporary),
            ]
            snap = snapshot(trace, {0x1000: kept})
            snap["segments"][0]["blocks"][0]["frames"] = frames["kept"]  # as PyTorch's end state has them
            dump_snapshot(snap, folder / f"step{step}" / f"torch_memory_rank{rank}_pid7.pickle")
    return folder


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64 MiB", 64 * MiB),
        ("0 B", 0),
        ("0", 0),
        ("1.5GiB", 3 << 29),
        ("512", 512),
        ("2 KiB", 2 * KiB),
        ("2KB", 2000),
        ("3 mb", 3_000_000),
        (4096, 4096),
    ],
)
def test_sizes_are_read_in_binary_and_decimal_units(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1", "1 ZiB", "1e6", "MiB", 2.5, True])
def test_a_size_that_is_not_one_says_what_is_allowed(text: object) -> None:
    with pytest.raises(ValueError, match="B, KiB, MiB"):
        parse_bytes(text)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-5: a size is 0 or more"):
        parse_bytes(-5)


def test_a_tolerance_is_a_share_of_the_reference_or_bytes() -> None:
    assert parse_tolerance("2%") == Tolerance(0.02, True, "2%")
    assert parse_tolerance("2%").limit(1000 * KiB) == 20 * KiB
    assert parse_tolerance("1MiB").limit(123) == MiB
    assert str(parse_tolerance("2.5 %")) == "2.5%" and str(parse_tolerance("1MiB")) == "1.0 MiB"
    for bad in ("-2%", "x%", "nan%", "%"):
        with pytest.raises(ValueError, match="share"):
            parse_tolerance(bad)


def test_a_step_that_kept_more_fails_naming_the_step_the_growth_and_the_site(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", {1: (MiB, 4 * MiB), 2: (MiB, 4 * MiB)})
    new = write_run(tmp_path / "new", {1: (MiB, 4 * MiB), 2: (4 * MiB, MiB)})  # same peak, 3 MiB more kept
    assert main(["check", str(base), str(new)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "memsnap check: step 2: kept +3.0 MiB more (+1.0 MiB → +4.0 MiB, allowed +1.0 MiB); "
        "at grow (/src/model.py:9) (+3.0 MiB)",
        "memsnap check: 1 of 2 steps exceed the tolerances (peak +2%, kept +1.0 MiB)",
    ]
    assert main(["check", str(base), str(new), "--kept", "3MiB"]) == 0  # a growth equal to the limit is within it
    assert capsys.readouterr().out == "memsnap check: 2 steps within the tolerances (peak +2%, kept +3.0 MiB)\n"


def test_a_step_whose_peak_grew_fails_past_its_share_of_the_baseline_peak(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", {1: (MiB, 9 * MiB)})  # peak 10 MiB
    new = write_run(tmp_path / "new", {1: (MiB, 9 * MiB + 300 * KiB)})  # +300 KiB: 2.9 %
    assert main(["check", str(base), str(new)]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line == (
        "memsnap check: step 1: peak +300.0 KiB (10.0 MiB → 10.3 MiB, allowed +204.8 KiB = 2%); "
        "at scratch (/src/model.py:4) (+300.0 KiB)"
    )
    assert main(["check", str(base), str(new), "--peak", "3%"]) == 0
    assert main(["check", str(base), str(new), "--peak", "256KiB"]) == 1
    assert main(["check", str(base), str(new), "--peak", "300KiB"]) == 0
    capsys.readouterr()


def test_the_json_says_each_step_its_figures_limits_and_what_exceeded(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", {1: (MiB, MiB), 2: (MiB, MiB)})
    new = write_run(tmp_path / "new", {1: (MiB, MiB), 2: (3 * MiB, MiB)})
    assert main(["check", f"before={base}", f"after={new}", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["passed"] is False and (verdict["peak_tolerance"], verdict["kept_tolerance"]) == ("2%", "1MiB")
    one, two = verdict["steps"]
    assert (one["step"], one["exceeds"], one["kept_growth"]) == (1, [], 0)
    assert (two["step"], two["exceeds"], two["kept_growth"], two["peak_growth"]) == (
        2,
        ["peak", "kept"],
        2 * MiB,
        2 * MiB,
    )
    assert two["kept_site"] == ["grow (/src/model.py:9)", 2 * MiB] and two["kept_limit"] == MiB


def test_steps_only_one_run_holds_are_said_and_not_compared(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", {1: (MiB, MiB), 2: (MiB, MiB)})
    new = write_run(tmp_path / "new", {2: (MiB, MiB), 3: (9 * MiB, MiB)})
    assert main(["check", str(base), str(new)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "memsnap check: 1 step within the tolerances (peak +2%, kept +1.0 MiB)\n"
    assert captured.err.splitlines() == [
        "memsnap check: step 1 only in BASELINE: not compared",
        "memsnap check: step 3 only in NEW: not compared",
    ]


def test_ranks_are_compared_each_with_its_own(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", {1: (MiB, MiB)}, ranks=(0, 1))
    new = write_run(tmp_path / "new", {1: (MiB, MiB)}, ranks=(0,))
    write_run(tmp_path / "new", {1: (3 * MiB, MiB)}, ranks=(1,))
    assert main(["check", str(base), str(new)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith("memsnap check: step 1 rank 1 (device:0): "), out
    assert "kept +2.0 MiB more" in out[0] and out[0].endswith("at grow (/src/model.py:9) (+2.0 MiB)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--peak", "lots"], "argument --peak: 'lots': give bytes"),
        (["--peak=-2%"], "argument --peak: '-2%': give a share"),
        (["--kept=-1MiB"], "argument --kept: '-1MiB': give bytes"),
    ],
)
def test_a_bad_tolerance_is_one_line_and_status_2(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    run = write_run(tmp_path / "run", {1: (MiB, MiB)})
    with pytest.raises(SystemExit) as exited:
        main(["check", str(run), str(run), *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_runs_that_cannot_be_compared_are_bad_input(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", {1: (MiB, MiB)})
    other = write_run(tmp_path / "other", {2: (MiB, MiB)})
    (tmp_path / "empty").mkdir()
    both = tmp_path / "both"
    write_run(both / "a", {1: (MiB, MiB)})
    write_run(both / "b", {1: (MiB, MiB)})
    cases = [
        ([str(tmp_path / "missing"), str(run)], "no such file or folder"),
        ([str(tmp_path / "empty"), str(run)], "empty: no *.pickle snapshots in this folder"),
        ([str(run), str(other)], "share no step"),
        ([str(run), str(both)], "holds 2 runs (a, b): give the folder of one run"),
    ]
    for argv, message in cases:
        assert main(["check", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
