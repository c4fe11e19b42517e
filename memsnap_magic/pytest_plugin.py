"""pytest plugin: ``@pytest.mark.limit_torch_memory(peak="64 MiB", kept="0 B")``.

Registered through the ``pytest11`` entry point, so installing memsnap_magic is enough; no flag
turns it on. A marked test's call (not its fixtures' setup) is recorded by a ``Recorder``, and
the test fails when its peak (the most it had allocated at once beyond what was live when it
began) or what it kept (allocated and still alive at its end, minus what it freed of what was
there before) exceeds the limit; the message names the largest allocation sites. ``device``
(default ``cpu``) is what to record: a test that runs on an accelerator says so (``device="cuda"``;
``device="auto"`` records the accelerator where there is one, and would miss a CPU test's memory
there). ``--memsnap-out DIR`` keeps the snapshot files of failing marked tests in
``DIR/<test>/step1/``; without it they are written to a temporary folder and deleted.

Unmarked tests pay one marker lookup: nothing here imports torch until a marked test runs.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

MARKER = "limit_torch_memory"
_KEYS = ("peak", "kept", "device")
_TEMP: list[Path] = []  # the session's scratch folder for dumps nobody keeps


def pytest_addoption(parser: Any) -> None:
    parser.getgroup("memsnap").addoption(
        "--memsnap-out",
        metavar="DIR",
        default=None,
        help="keep the snapshot files of failing limit_torch_memory tests in DIR (DIR/<test>/step1/...)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        f'{MARKER}(peak="64 MiB", kept="0 B", device="cpu"): fail the test when the most torch memory it '
        "had allocated at once (beyond its start), or what it kept at its end, exceeds the limit "
        "(memsnap_magic; either or both)",
    )


def pytest_unconfigure(config: Any) -> None:
    while _TEMP:
        shutil.rmtree(_TEMP.pop(), ignore_errors=True)


def _limits(marker: Any) -> dict[str, Any]:
    """The marker's keywords, read: ``peak`` and ``kept`` in bytes, ``device``; a bad one fails
    the test with one line saying what is allowed."""
    from .core.units import parse_bytes

    if marker.args:
        pytest.fail(f"{MARKER}: give the limits as keywords (peak=..., kept=...), not {marker.args!r}", pytrace=False)
    unknown = sorted(set(marker.kwargs) - set(_KEYS))
    if unknown:
        pytest.fail(f"{MARKER}: unknown keyword {unknown[0]!r} (keywords: {', '.join(_KEYS)})", pytrace=False)
    limits: dict[str, Any] = {"device": marker.kwargs.get("device", "cpu")}
    for key in ("peak", "kept"):
        if marker.kwargs.get(key) is not None:
            try:
                limits[key] = parse_bytes(marker.kwargs[key])
            except ValueError as e:
                problem = f"{MARKER}: {key}={e}"
            else:
                continue
            pytest.fail(problem, pytrace=False)  # outside the except: one line, no chained traceback
    if "peak" not in limits and "kept" not in limits:
        pytest.fail(f'{MARKER}: give peak=, kept= or both (e.g. peak="64 MiB")', pytrace=False)
    return limits


def _run_name(nodeid: str) -> str:
    """A test's id as a run name (a folder name of letters, digits, ``_.-``), unique per test."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("._-") or "test"
    if len(name) > 80 or name != nodeid:
        digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[:80]}-{digest}"
    return name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        yield
        return
    limits = _limits(marker)
    from .recording.recorder import Recorder
    from .results.session import Session

    keep = item.config.getoption("memsnap_out")
    if keep is None and not _TEMP:
        _TEMP.append(Path(tempfile.mkdtemp(prefix="memsnap-pytest-")))
    out = Path(keep) if keep is not None else _TEMP[0]
    run = _run_name(item.nodeid)
    module = getattr(item, "module", None)
    # the test's module and fixtures: what the CPU route finds live at the start, models labelled
    names = {**(vars(module) if module is not None else {}), **getattr(item, "funcargs", {})}
    problem = None
    try:
        recorder = Recorder(
            step=1, out=str(out), run=run, device=limits["device"], wait=True, namespace=names, session=Session()
        )
        recorder.start()
    except Exception as e:  # no device of that kind here, say: the limit cannot be checked
        problem = f"{MARKER}: cannot record {limits['device']}: {type(e).__name__}: {e}"
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    outcome = yield
    excinfo = outcome.excinfo
    recorder.stop(excinfo[1] if excinfo is not None else None)
    iv = recorder.intervals[-1] if recorder.intervals else None
    failure = None
    if excinfo is None:  # a test that failed already keeps its own failure
        if iv is None:
            failure = f"{MARKER}: nothing was recorded on {limits['device']} (see the warning)"
        else:
            failure = _exceeded(iv, limits, kept_file=keep is not None)
        item._memsnap_failure = failure
    skipped = excinfo is not None and issubclass(excinfo[0], pytest.skip.Exception)  # pytest.skip() inside
    if keep is None or ((excinfo is None or skipped) and failure is None):
        shutil.rmtree(out / run, ignore_errors=True)


def _exceeded(iv: Any, limits: dict[str, Any], kept_file: bool) -> str | None:
    """Why the recorded call broke its limits, naming the largest sites; None within them."""
    from .results.stacks import site_bytes
    from .views.gate import top_sites
    from .views.words import fmt_bytes

    parts = []
    peak = limits.get("peak")
    if peak is not None and iv.peak_increase > peak:
        sites = site_bytes(b for b in iv.top_blocks if not b.get("before"))
        parts.append(
            f"peak {fmt_bytes(iv.peak_increase)} over the test's start ({iv.peak_increase:,} B) exceeds "
            f"the limit of {fmt_bytes(peak)} by {fmt_bytes(iv.peak_increase - peak)}; largest sites alive "
            f"at the peak: {top_sites(sites)}"
        )
    kept = limits.get("kept")
    if kept is not None and iv.kept > kept:
        sites = {row[0]: row[1] for row in iv.kept_by_site}
        parts.append(
            f"kept {fmt_bytes(iv.kept)} at its end ({iv.kept:,} B), over the limit of {fmt_bytes(kept)}; "
            f"largest sites still holding memory: {top_sites(sites)}"
        )
    if not parts:
        return None
    where = f" (snapshot: {iv.path})" if kept_file and iv.path is not None else ""
    return f"{MARKER} on {iv.device}: " + "; ".join(parts) + where


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """A marked test that passed but broke its limit is reported failed, with the limit's message."""
    outcome = yield
    failure = getattr(item, "_memsnap_failure", None) if call.when == "call" else None
    if failure is None:
        return
    report = outcome.get_result()
    if report.passed:
        report.outcome = "failed"
        report.longrepr = failure
