"""The pytest plugin (``limit_torch_memory``), run as a user's suite would run it: pytest in
another process, finding the plugin through the installed package's ``pytest11`` entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsnap_magic.results.scan import read_run

pytest_plugins = ["pytester"]

SUITE = """
import pytest
import torch

KEPT = []

def make_big():
    return torch.ones(4 << 20)  # 16 MiB

@pytest.mark.limit_torch_memory(peak="8 MiB")
def test_over_its_peak():
    x = make_big()
    assert x.sum() > 0

@pytest.mark.limit_torch_memory(peak="64 MiB", kept="0 B")
def test_within_its_limits():
    x = make_big()
    assert x.sum() > 0

@pytest.mark.limit_torch_memory(kept="1 MiB")
def test_keeps_too_much():
    KEPT.append(torch.zeros(1 << 20))  # 4 MiB, alive after the test

@pytest.mark.limit_torch_memory(peak="1 KiB")
def test_fails_on_its_own():
    x = make_big()
    assert x.sum() < 0, "its own failure"

@pytest.mark.limit_torch_memory(peak="1 KiB")
def test_skips_itself():
    x = make_big()
    pytest.skip("not here")
"""


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Test name -> PASSED/FAILED, from ``-rA``'s short summary."""
    found = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            found[rest.split("::")[1].split(" ")[0]] = word
    return found


def test_marked_tests_fail_past_their_limits_naming_the_sites(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-rA", "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3, skipped=1)
    assert outcomes(result) == {
        "test_over_its_peak": "FAILED",
        "test_within_its_limits": "PASSED",
        "test_keeps_too_much": "FAILED",
        "test_fails_on_its_own": "FAILED",
    }, result.stdout.str()
    text = result.stdout.str()
    # the suite's lines as pytester writes them (its leading blank line dropped): make_big's
    # torch.ones on line 7, the list append on line 21; a few bytes beside the 16 MiB (the sum)
    result.stdout.fnmatch_lines(
        [
            "limit_torch_memory on cpu: peak 16.0 MiB over the test's start (16,777,2?? B) exceeds the limit of "
            "8.0 MiB by 8.0 MiB; largest sites alive at the peak: "
            "16.0 MiB test_over_its_peak (test_suite.py:11) → make_big (test_suite.py:7)",
            "limit_torch_memory on cpu: kept 4.0 MiB at its end (4,194,304 B), over the limit of 1.0 MiB; "
            "largest sites still holding memory: 4.0 MiB test_keeps_too_much (test_suite.py:21)",
        ]
    )
    assert "AssertionError: its own failure" in text  # a test that fails keeps its own failure


def test_memsnap_out_keeps_the_dumps_of_failing_tests_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    out = pytester.path / "dumps"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--memsnap-out={out}")
    result.assert_outcomes(passed=1, failed=3, skipped=1)
    kept = sorted(p.name for p in out.iterdir())  # neither the passing test's nor the skipped one's
    assert len(kept) == 3 and not any("within" in name or "skips" in name for name in kept), kept
    over = read_run([next(out.glob("test_suite.py_test_over_its_peak*"))])
    assert [(iv.step, iv.device, iv.error) for iv in over] == [(1, "cpu", None)]
    assert 16 << 20 <= over[0].peak_increase < (16 << 20) + 1024
    (own,) = read_run([next(out.glob("test_suite.py_test_fails_on_its_own*"))])
    assert own.error == "AssertionError"
    assert f"(snapshot: {over[0].path})" in result.stdout.str()


def test_unmarked_tests_import_no_torch_and_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_no_torch_here():
            assert "torch" not in sys.modules
            assert "memsnap_magic.pytest_plugin" in sys.modules  # the plugin is loaded, and idle
        """
    )
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    markers = pytester.runpytest_subprocess("--markers", "-p", "no:cacheprovider")
    markers.stdout.fnmatch_lines(["@pytest.mark.limit_torch_memory(peak=*"])


def test_a_marker_that_cannot_be_read_fails_its_test_with_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.limit_torch_memory(peak="lots")
        def test_bad_size():
            pass

        @pytest.mark.limit_torch_memory(peek="1 MiB")
        def test_bad_key():
            pass

        @pytest.mark.limit_torch_memory()
        def test_no_limit():
            pass

        @pytest.mark.limit_torch_memory(peak="1 MiB", device="tpu")
        def test_bad_device():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            "limit_torch_memory: peak='lots': give bytes*",
            "limit_torch_memory: unknown keyword 'peek' (keywords: peak, kept, device)",
            "limit_torch_memory: give peak=, kept= or both*",
            "limit_torch_memory: cannot record tpu: OptionError: *",
        ],
        consecutive=False,
    )
    assert "Traceback" not in result.stdout.str() and "During handling" not in result.stdout.str()


def test_the_plugin_is_an_entry_point_of_the_installed_package() -> None:
    from importlib.metadata import entry_points

    found = [e.value for e in entry_points(group="pytest11") if e.name == "memsnap_magic"]
    assert found == ["memsnap_magic.pytest_plugin"]
    assert Path(__file__).parent.parent.joinpath("memsnap_magic", "pytest_plugin.py").is_file()
