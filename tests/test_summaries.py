"""Summary files: a folder read again gives the very figures a cold read gives, from files that
never mislead (stale, truncated, hostile, another file's), and never lands in the user's folders."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import value_paths

from memsnap_magic import wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.core.errors import SnapshotError
from memsnap_magic.files import snapshot as snapshot_module
from memsnap_magic.files import summaries
from memsnap_magic.files.snapshot import dump_snapshot, load_snapshot
from memsnap_magic.recording.backends.cpu.entries import segment as _segment
from memsnap_magic.recording.process_state import STATE
from memsnap_magic.recording.recorder import Recorder
from memsnap_magic.results import intervals, scan
from memsnap_magic.results.scan import read_intervals
from memsnap_magic.views.explain import blocks_table
from memsnap_magic.views.report import describe, interval_table

DATA = Path(__file__).parent / "data"


def same(a, b):
    """Two intervals hold the same figures, timeline, blocks and sites."""
    assert a.to_record() == b.to_record()
    assert np.array_equal(a.time_us, b.time_us) and np.array_equal(a.allocated, b.allocated)
    assert a.top_blocks == b.top_blocks and a.born == b.born


def verl_folder(root: Path, steps=(1, 2), ranks=(0, 1)) -> Path:
    """Real CUDA dumps in verl's layout, without our summaries (a foreign run)."""
    for step in steps:
        for rank in ranks:
            snap = load_snapshot(DATA / ("cuda_oom.pickle" if (step, rank) == (2, 1) else "cuda_step.pickle"))
            snap.pop("memsnap", None)  # step and rank come from the path, as in verl's files
            dump_snapshot(snap, root / "profile" / f"step{step}" / f"torch_memory_rank{rank}.pickle")
    return root / "profile"


@pytest.fixture
def recorded(tmp_path):
    """Our own dumps of a small training loop: labelled, with stacks, a summary beside each."""
    import torch

    model = torch.nn.Linear(64, 64)
    opt = torch.optim.Adam(model.parameters())
    keep = []
    for step in (1, 2, 3):
        with Recorder(step=step, out=tmp_path / "out", device="cpu", model=model, optimizer=opt):
            loss = model(torch.randn(32, 64)).square().sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            keep.append(torch.ones(1000 * step))
    wait_for_writes()
    return tmp_path / "out"


def test_recorder_writes_a_summary_beside_each_dump_and_readers_use_it(recorded, summary_cache, monkeypatch):
    dumps = sorted(recorded.rglob("*.pickle"))
    assert len(dumps) == 3 and all(summaries.beside(p).is_file() for p in dumps)
    # readable by whoever may read the dump (a shared folder), not mkstemp's 0600
    assert {p.stat().st_mode & 0o777 for p in dumps} == {summaries.beside(p).stat().st_mode & 0o777 for p in dumps}
    cold = [intervals.interval_from_snapshot(load_snapshot(p), p, file_bytes=p.stat().st_size) for p in dumps]
    monkeypatch.setattr(intervals, "load_snapshot", _no_unpickling)
    warm = read_intervals([recorded])
    for a, b in zip(cold, warm):
        same(a, b)
    assert warm[0].by_category and warm[0].kept_by_site and warm[0].top_blocks[0]["frames"]
    assert list(summary_cache.iterdir()) == []  # ours are beside their dumps, not cached again


def _no_unpickling(path, **kw):
    raise AssertionError(f"{path} was unpickled although its summary matches")


def test_a_foreign_folder_is_cached_never_written_into(tmp_path, summary_cache, monkeypatch, capsys):
    folder = verl_folder(tmp_path)
    before = sorted(p.name for p in folder.rglob("*"))
    assert main(["summarize", str(folder), "--json", "--jobs", "1"]) == 0
    cold_out = capsys.readouterr().out
    assert sorted(p.name for p in folder.rglob("*")) == before
    assert len(list(summary_cache.glob("*.json"))) == 4
    monkeypatch.setattr(intervals, "load_snapshot", _no_unpickling)
    assert main(["summarize", str(folder), "--json"]) == 0
    assert capsys.readouterr().out == cold_out  # byte-identical, the OOM report included
    records = json.loads(cold_out)
    assert [(r["step"], r["rank"]) for r in records] == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_a_rewritten_snapshot_is_read_again(tmp_path):
    (path,) = verl_folder(tmp_path, steps=(1,), ranks=(0,)).rglob("*.pickle")
    (first,) = read_intervals([path])
    snap = load_snapshot(path)
    snap["device_traces"][0] = snap["device_traces"][0][: len(snap["device_traces"][0]) // 2]
    dump_snapshot(snap, path)  # same name, new file (a new inode, a new mtime)
    (again,) = read_intervals([path])
    assert again.trace_entries == first.trace_entries // 2
    same(again, intervals.interval_from_snapshot(load_snapshot(path), path, file_bytes=path.stat().st_size))


def test_same_size_and_name_but_another_mtime_is_stale(tmp_path):
    (path,) = verl_folder(tmp_path, steps=(1,), ranks=(0,)).rglob("*.pickle")
    (first,) = read_intervals([path])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    assert summaries.read(path, path.stat()) is None
    (again,) = read_intervals([path])
    same(first, again)


def test_a_file_rewritten_in_place_with_its_old_times_is_stale(tmp_path):
    # rsync --inplace -t, a restore from a backup: same inode, size and times, other content
    (path,) = verl_folder(tmp_path, steps=(1,), ranks=(0,)).rglob("*.pickle")
    read_intervals([path])  # its summary written
    snap = load_snapshot(path)
    before = path.stat()
    entries = snap["device_traces"][0]
    entries[0] = {**entries[0], "time_us": entries[0].get("time_us", 0) ^ 1}  # same length, other bytes
    data = pickle.dumps(snap, protocol=4)
    time.sleep(0.05)  # past the file system's clock tick, as any later rewrite is
    if len(data) == before.st_size:
        with open(path, "r+b") as f:
            f.write(data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_ino == before.st_ino and path.stat().st_mtime_ns == before.st_mtime_ns
        assert summaries.read(path, path.stat()) is None
    else:  # the edit changed the pickle's length: then the size alone catches it
        pytest.skip("the rewritten pickle has another length")


def _summary_of(tmp_path) -> tuple[Path, Path, dict]:
    """A dump of ours, its summary file and that file's JSON."""
    with Recorder(step=1, out=tmp_path / "out", device="cpu", wait=True):
        import torch

        x = [torch.ones(100 * n) for n in range(1, 40)]
        del x[::2]
    (dump,) = (tmp_path / "out").rglob("*.pickle")
    beside = summaries.beside(dump)
    return dump, beside, json.loads(beside.read_text())


def _read_warning(dump: Path):
    (iv,), messages = _read_said([dump])
    return iv, messages


def _read_said(paths: list[Path], jobs: int = 1) -> tuple[list, list[str]]:
    """The intervals read from ``paths``, and what memsnap said meanwhile."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = read_intervals(paths, jobs=jobs)
    return loaded, [str(w.message) for w in caught if "memsnap" in str(w.message)]


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (lambda b: b.write_bytes(b.read_bytes()[: len(b.read_bytes()) // 2]), True),  # truncated
        (lambda b: b.write_bytes(b"\xff\xfe not json"), True),
        (lambda b: b.write_text("[1, 2, 3]"), True),
        (lambda b: b.write_text("[" * 100_000 + "]" * 100_000), True),  # nested past any recursion limit
        (lambda b: b.write_text("1" * 100_000), True),  # an int too long to convert
        (lambda b: b.write_bytes(b"x" * (summaries.MAX_BYTES + 1)), True),
        # this file's, well-typed, but no snapshot gives such figures
        (lambda b: b.write_text(json.dumps({**json.loads(b.read_text()), "peak_allocated": -12345})), True),
        # json keeps the last of a repeated key: a second figure hidden behind the first
        (lambda b: b.write_text(b.read_text()[:-1] + ',"peak_allocated":1}'), True),
        # well-formed, but not this file's: stale, read past without a word
        (lambda b: b.write_text('{"format": "memsnap-summary", "version": 1, "snapshot": []}'), False),
    ],
    ids=[
        "truncated",
        "not-utf8",
        "a-list",
        "deep",
        "huge-int",
        "too-large",
        "peak-below-end",
        "repeated-key",
        "another-files",
    ],
)
def test_a_malformed_summary_is_ignored_with_one_warning(tmp_path, spoil, said):
    dump, beside, _ = _summary_of(tmp_path)
    expected = intervals.interval_from_snapshot(load_snapshot(dump), dump, file_bytes=dump.stat().st_size)
    spoil(beside)
    STATE.warned.clear()
    iv, messages = _read_warning(dump)
    same(iv, expected)
    if said:
        assert len(messages) == 1 and "ignoring the summary" in messages[0] and str(beside) in messages[0]
    else:
        assert messages == []
    iv, messages = _read_warning(dump)  # the next read uses the cache: no second warning
    same(iv, expected)
    assert messages == []


def test_a_summary_that_is_not_a_regular_file_is_never_waited_on(tmp_path):
    dump, beside, _ = _summary_of(tmp_path)
    beside.unlink()
    os.mkfifo(beside)  # opening a FIFO for reading would block until a writer came
    STATE.warned.clear()
    iv, messages = _read_warning(dump)
    assert iv.peak_allocated > 0 and len(messages) == 1 and "not a regular file" in messages[0]


def test_another_files_summary_and_another_version_are_recomputed_silently(tmp_path, summary_cache):
    dump, beside, obj = _summary_of(tmp_path)
    expected = intervals.interval_from_snapshot(load_snapshot(dump), dump, file_bytes=dump.stat().st_size)
    for changed in (
        {**obj, "version": summaries.VERSION + 1, "peak_allocated": 1},
        {**obj, "snapshot": {**obj["snapshot"], "inode": obj["snapshot"]["inode"] + 1}, "peak_allocated": 1},
    ):
        beside.write_text(json.dumps(changed))
        for cached in summary_cache.glob("*.json"):
            cached.unlink()
        iv, messages = _read_warning(dump)
        same(iv, expected)
        assert messages == []
    # a cache entry made for another path (a hash collision, a moved cache) is not this file's
    other = tmp_path / "elsewhere.pickle"
    shutil.copy(dump, other)
    beside.unlink()
    entry = summaries.cached(dump)
    entry.write_text(json.dumps({**obj, "path": str(other), "peak_allocated": 1}))
    iv, _ = _read_warning(dump)
    same(iv, expected)


@pytest.mark.parametrize("inside", ["cache", ""], ids=["below a file", "a file"])
def test_an_unwritable_cache_is_said_once_and_changes_nothing(tmp_path, monkeypatch, inside):
    folder = verl_folder(tmp_path, steps=(1, 2, 3), ranks=(0,))
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MEMSNAP_CACHE_DIR", str(blocker / inside))
    STATE.warned.clear()
    loaded, messages = _read_said([folder])
    assert len(messages) == 1 and "cannot cache" in messages[0] and "MEMSNAP_CACHE_DIR" in messages[0]
    assert [iv.step for iv in loaded] == [1, 2, 3] and loaded[0].peak_allocated > 0


def test_a_cache_folder_that_cannot_be_read_is_said_once_not_per_file(tmp_path, monkeypatch):
    folder = verl_folder(tmp_path, steps=(1, 2, 3, 4, 5), ranks=(0,))
    monkeypatch.setenv("MEMSNAP_CACHE_DIR", str(tmp_path / ("x" * 300)))  # a name no file system takes
    STATE.warned.clear()
    loaded, messages = _read_said([folder])
    assert len(messages) == 1 and "cannot cache summaries in" in messages[0]
    assert [iv.step for iv in loaded] == [1, 2, 3, 4, 5]


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch):
    monkeypatch.delenv("MEMSNAP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert summaries.cache_dir() == Path.home() / ".cache" / "memsnap"
    monkeypatch.setenv("XDG_CACHE_HOME", "/abs/cache")
    assert summaries.cache_dir() == Path("/abs/cache/memsnap")


def test_a_relative_cache_dir_is_ignored_and_no_home_means_no_cache(tmp_path, monkeypatch):
    """A relative $MEMSNAP_CACHE_DIR put the cache into whatever folder the user was in (their
    dumps' folder among them); with no $HOME and no account for the user id, finding the home
    directory raised out of every read (a traceback from the CLI)."""
    import pwd

    folder = verl_folder(tmp_path, steps=(1, 2), ranks=(0,))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("MEMSNAP_CACHE_DIR", ".")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    STATE.warned.clear()
    _, messages = _read_said([folder])
    assert len(messages) == 1 and "not an absolute path" in messages[0]
    assert not list(folder.rglob("*.json")) and len(list((tmp_path / "xdg" / "memsnap").glob("*.json"))) == 2
    for name in ("MEMSNAP_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "relative/home")  # as unset: the account's home directory
    assert summaries.cache_dir() == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "memsnap"

    def no_account(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_account)
    assert summaries.cache_dir() is None
    STATE.warned.clear()
    loaded, messages = _read_said([folder])
    assert len(messages) == 1 and "no folder to cache summaries in" in messages[0]
    assert [iv.step for iv in loaded] == [1, 2] and not list(folder.rglob("*.json"))


# Hostile summaries: any value anywhere in a summary that matches its file is either refused
# (a warning, the snapshot read instead) or shows without an error wherever intervals are shown.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def one_summary(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    return _summary_of(tmp)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_summaries_never_crash_a_reader(one_summary, data):
    dump, _, obj = one_summary
    paths = [p for p in value_paths(obj, items=3) if p[:1] not in (("snapshot",), ("format",), ("version",))]
    spoilt = json.loads(json.dumps(obj))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths[1:]))
        target = spoilt
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(_JSON)
        except (KeyError, IndexError, TypeError):
            continue
    try:
        d = summaries.decode(spoilt, dump.stat())
    except (summaries.Malformed, SnapshotError):
        return
    iv = intervals.interval_from_digest(d, dump)
    interval_table([iv])
    describe(iv)
    blocks_table(iv)


# Parallel cold scans: the same intervals as one process gives, the same first error.
def test_parallel_scan_gives_what_a_serial_scan_gives(tmp_path, summary_cache, monkeypatch):
    folder = verl_folder(tmp_path, steps=(1, 2, 3), ranks=(0, 1))
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)  # these small files would else stay in-process
    parallel = read_intervals([folder], jobs=2)
    for cached in summary_cache.glob("*.json"):
        cached.unlink()
    serial = read_intervals([folder], jobs=1)
    assert [(iv.step, iv.rank) for iv in parallel] == [(s, r) for s in (1, 2, 3) for r in (0, 1)]
    for a, b in zip(parallel, serial):
        same(a, b)
    assert parallel[3].oom is not None  # step 2, rank 1: the real OOM dump


def test_parallel_scan_names_cells_and_warns_as_a_serial_scan_does(tmp_path, summary_cache, monkeypatch):
    """Workers knew neither the kernel's cell numbers (a site read `notebook cell <hash>:13`
    there, `cell In[4]:13` here, and whichever came first was cached) nor the CLI's one-line
    warnings (each worker printed its own, in Python's two-line form)."""
    from memsnap_magic.results import stacks as readable

    cell = "/tmp/ipykernel_4242/3196435227.py"
    for n in (1, 2, 3):
        frames = [{"filename": cell, "line": 13, "name": "train_step"}]
        alloc = {"action": "alloc", "addr": 4096 * n, "size": 4 << 20, "stream": 0, "time_us": n, "frames": frames}
        snap = {"segments": [_segment(4096 * n, 4 << 20, frames)], "device_traces": [[alloc]]}
        dump_snapshot(snap, tmp_path / f"step{n}" / "torch_memory_rank0.pickle")
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(readable, "_cell_numbers", {cell: 4})
    monkeypatch.setenv("MEMSNAP_MAX_FILE_BYTES", "10GB")  # malformed: said once, the default used
    runs = []
    for jobs in (2, 1):
        for cached in summary_cache.glob("*.json"):
            cached.unlink()
        snapshot_module._ignored_limit.cache_clear()
        STATE.warned.clear()
        loaded, said = _read_said([tmp_path], jobs=jobs)
        runs.append(([iv.kept_by_site for iv in loaded], said))
    (sites, said), (serial_sites, serial_said) = runs
    assert sites == serial_sites and sites[0][0][0] == "train_step (cell In[4]:13)"
    assert said == serial_said and len(said) == 1 and "MEMSNAP_MAX_FILE_BYTES" in said[0]


def test_parallel_scan_raises_the_first_bad_file_as_serial_does(tmp_path, summary_cache, monkeypatch):
    folder = verl_folder(tmp_path, steps=(1, 2, 3), ranks=(0,))
    for step in (2, 3):
        (folder / f"step{step}" / "torch_memory_rank0.pickle").write_bytes(b"\x80\x04 truncated")
    monkeypatch.setattr(scan, "PARALLEL_BYTES", 0)
    errors = []
    for jobs in (1, 3):
        with pytest.raises(SnapshotError) as e:
            read_intervals([folder], jobs=jobs)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "step2" in errors[0]


def test_cli_jobs_is_checked(capsys):
    with pytest.raises(SystemExit) as e:
        main(["summarize", "x", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_every_interval_fact_has_exactly_one_source():
    """A per-step fact is declared once: a digest field (its check in files.summary_fields), a
    Meta field of the same name, or one of the few the reading resolves or the session sets."""
    from dataclasses import fields

    from memsnap_magic.files.summary_fields import ENCODED, FIELDS
    from memsnap_magic.results.intervals import CONTENT, FROM_META, RESOLVED, Interval

    # where the file is and its size (the reading, or the writer's result the session applies),
    # whether the ring overflowed (meta and digest), where the start moved (the recorder, before it
    # joins), the cumulative figures (the session, as it adds one) and which recording it is
    set_later = {"path", "file_bytes", "overflowed", "moved", "moved_since", "origin"}
    set_later |= {"cumulative_peak_allocated", "cumulative_trace_entries"}
    sources = [set(CONTENT), set(FROM_META), set(RESOLVED) - {"device"}, set_later]
    names = {f.name for f in fields(Interval)}
    assert set(CONTENT) == set(FIELDS) | set(ENCODED)
    assert set().union(*sources) == names
    assert sum(len(s) for s in sources) == len(names)  # no fact comes from two places
    # kept_by is derived from holders (its rows), not a fact of its own, yet recorded as before
    assert "kept_by" not in names and isinstance(Interval.kept_by, property)
    # the session's facts are the cumulative figures (as it adds one) and the write's outcome
    from pathlib import Path

    from memsnap_magic.results.session import Session

    s, given = Session(), Interval(1, 0, "cpu", None, 0, 5, 0, 3, holders={"rows": [["x", 1, 1]]})
    s.add(given)

    def changed(a, b):
        return {f.name for f in fields(Interval) if getattr(a, f.name) != getattr(b, f.name)}

    assert changed(given, s.last) == {"cumulative_peak_allocated", "cumulative_trace_entries"}
    held = s.last
    assert changed(held, s.written(held, Path("x.pickle"), 7)) == {"path", "file_bytes"} < set_later
    assert given.kept_by == [["x", 1, 1]] and given.to_record()["kept_by"] == [["x", 1, 1]]
