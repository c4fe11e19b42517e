"""Files made to hurt: small files that stand for huge ones, messages that amplify, things that are
not files, values just past every limit. Only ``SnapshotError`` may come out, quickly; what is
accepted can be summarised, printed and drawn.

Attacks that took hours or all memory before run in a child process with a time limit, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from snapshots import alloc, free, snapshot, value_paths

from memsnap_magic import SnapshotError, load_snapshot, session
from memsnap_magic.cli import main
from memsnap_magic.files.snapshot import dump_snapshot

ENTRY = {"action": "alloc", "addr": 16, "size": 64, "stream": 0, "time_us": 1}
CHILD_TIMEOUT = 120  # a hang guard, far above the ~1 s these take: never a speed assertion


def load_in_child(path: Path) -> tuple[str, str]:
    """``load_snapshot(path)`` in a child process: ("ok" | "SnapshotError", message)."""
    code = textwrap.dedent(f"""
        import sys
        from memsnap_magic import SnapshotError, load_snapshot
        try:
            load_snapshot({str(path)!r})
            print("ok")
        except SnapshotError as e:
            print("SnapshotError"); print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    kind, _, message = out.stdout.partition("\n")
    return kind, message.strip()


def write(tmp_path: Path, obj, name: str = "attack.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: {"segments": [], "device_traces": [[ENTRY] * 10**5] * 10**4}, id="shared traces"),
        pytest.param(
            lambda: {
                "segments": [{"device": 0, "address": 0, "blocks": [{"size": 1, "state": "active_allocated"}] * 10**5}]
                * 10**4,
                "device_traces": [],
            },
            id="shared segments and blocks",
        ),
    ],
)
def test_a_small_file_that_stands_for_a_billion_entries_is_refused(tmp_path, build):
    path = write(tmp_path, build())
    assert path.stat().st_size < 4 << 20
    kind, message = load_in_child(path)
    assert kind == "SnapshotError" and "more than its size allows" in message


def test_shared_frames_as_pytorch_writes_them_are_accepted(tmp_path):
    frames = [{"filename": "/src/model.py", "line": n, "name": "forward"} for n in range(30)]
    trace = [dict(ENTRY, addr=16 * n, frames=frames) for n in range(20_000)]  # one list, shared by all
    snap = load_snapshot(write(tmp_path, {"segments": [], "device_traces": [trace]}))
    assert snap["device_traces"][0][-1]["frames"] is snap["device_traces"][0][0]["frames"]


def test_error_messages_quote_short_excerpts(tmp_path):
    bad = dict(ENTRY, size=-1, blob=["x" * 2**20] * 2500)
    kind, message = load_in_child(write(tmp_path, {"segments": [], "device_traces": [[bad]]}))
    assert kind == "SnapshotError" and "device_traces[0][0]" in message
    assert len(message) < 600 and "\n" not in message


class Deep:
    """A list nested ``levels`` deep, pickled without recursion (pickle.dumps would need it)."""

    def __init__(self, levels: int) -> None:
        self.levels = levels

    def __reduce__(self):
        return (list, ())

    @staticmethod
    def opcodes(levels: int) -> bytes:
        return b"]" * levels + b"a" * (levels - 1)  # EMPTY_LIST n times, then APPEND each into the one below


def entry_pickle(size_opcodes: bytes) -> bytes:
    """A whole snapshot pickle whose one entry's size is the object ``size_opcodes`` push."""

    def text(t: str) -> bytes:
        return b"X" + len(t).to_bytes(4, "little") + t.encode()

    entry = b"}" + text("action") + text("alloc") + b"s" + text("addr") + b"K\x10s" + text("size") + size_opcodes + b"s"
    return b"\x80\x04}" + text("segments") + b"]s" + text("device_traces") + b"]]" + entry + b"aas."


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: 10**5000, "device_traces[0][0]"),  # an int with no decimal str
        (lambda: Deep(100_000), "device_traces[0][0]"),  # nesting deeper than any repr
        (lambda: float("nan"), "device_traces[0][0]"),
        (lambda: 2**62 - 1, "device_traces[0][0]"),  # past 2**48: sums would wrap int64
        (lambda: -5, "device_traces[0][0]"),
    ],
    ids=["5000 digits", "deep", "nan", "2**62-1", "negative"],
)
def test_values_past_the_limits_are_refused_by_name(tmp_path, make, words):
    value = make()
    if isinstance(value, Deep):
        path = tmp_path / "attack.pickle"
        path.write_bytes(entry_pickle(Deep.opcodes(value.levels)))
        assert pickle.loads(path.read_bytes())["device_traces"][0][0]["action"] == "alloc"
    else:
        path = write(tmp_path, {"segments": [], "device_traces": [[dict(ENTRY, size=value)]]})
    kind, message = load_in_child(path)
    assert kind == "SnapshotError" and words in message and len(message) < 600


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda s: s["device_traces"][0][0].update(addr=2**64 + 5), "device_traces[0][0]"),
        (lambda s: s["device_traces"][0][0].update(addr=None), "device_traces[0][0]"),
        (lambda s: s["segments"][0]["blocks"][0].update(requested_size=float("nan")), "segments[0].blocks[0]"),
        (lambda s: s["segments"][0]["blocks"][0].update(size=2**62 - 1), "segments[0].blocks[0]"),
        (lambda s: s["segments"][0].update(address=2**64 - 8), "past address 2**64"),
        (lambda s: s["segments"][0].update(device=-1), "segments[0]"),
        (
            lambda s: (
                s["segments"].extend([s["segments"][0]] * 40_000)
                or s["segments"][0].update(requested_size=2**48, allocated_size=2**48, active_size=2**48)
            ),
            "add up",
        ),
        (lambda s: s.update(memsnap={"step": 10**5000}), "memsnap.step"),
        (lambda s: s.update(memsnap={"rank": -1}), "memsnap.rank"),
        (lambda s: s.update(memsnap={"device": "cuda:0\x1b[2J"}), "memsnap.device"),
        (lambda s: s.update(memsnap={"tag": "../x"}), "memsnap.tag"),
        (lambda s: s.update(memsnap=[1]), "'memsnap' block"),
    ],
)
def test_fields_the_analysis_reads_are_checked(tmp_path, mutate, words):
    snap = snapshot([*alloc(0x100, 64), *alloc(0x200, 32), *free(0x200, 32)], {0x100: 64})
    mutate(snap)
    path = write(tmp_path, snap)
    with pytest.raises(SnapshotError, match=r"attack\.pickle") as info:
        from memsnap_magic.results.scan import read_interval

        read_interval(path, 1)
    assert words in str(info.value) and "\n" not in str(info.value) and "\x1b" not in str(info.value)


@pytest.mark.parametrize(
    "frames, time_us",
    [([1, 2], "now"), ("abc", float("nan")), ([{"line": "7", "name": 5, "filename": [1]}], 2**70), (5, -3)],
    ids=["ints", "a string", "odd fields", "an int"],
)
def test_stacks_and_times_are_read_as_data(tmp_path, frames, time_us):
    # only the rows people see read frames, only the plot reads times: there, not at load, a
    # file's odd values become "?" (frames) or missing (times)
    from memsnap_magic.results.scan import read_interval
    from memsnap_magic.results.stacks import site_bytes
    from memsnap_magic.views.charts import png
    from memsnap_magic.views.explain import blocks_table
    from memsnap_magic.views.timeline import detail_figure

    snap = snapshot([*alloc(0x100, 64), *alloc(0x200, 32), *free(0x200, 32)], {0x100: 64})
    snap["device_traces"][0][0].update(frames=frames, time_us=time_us)
    snap["segments"][0]["blocks"][0]["frames"] = frames
    iv = read_interval(write(tmp_path, snap), 1)
    assert iv.peak_allocated == 96
    assert "Largest allocations" in blocks_table(iv)
    assert sum(site_bytes(iv.top_blocks).values()) == iv.peak_allocated
    assert png(detail_figure(iv))[:4] == b"\x89PNG"


def test_sums_written_as_none_are_read_as_absent(tmp_path):
    from memsnap_magic.results.scan import read_interval

    snap = snapshot([*alloc(0x100, 64), *alloc(0x200, 32), *free(0x200, 32)], {0x100: 64})
    seg = snap["segments"][0]
    seg.update(requested_size=None, total_size=None, allocated_size=64, active_size=64)
    iv = read_interval(write(tmp_path, snap), 1)
    assert (iv.peak_allocated, iv.end_allocated) == (96, 64)
    assert sorted(b["size"] for b in iv.top_blocks) == [32, 64]  # alive at the peak


def test_things_that_are_not_regular_files_are_refused_unread(tmp_path):
    fifo = tmp_path / "pipe.pickle"
    os.mkfifo(fifo)
    assert load_in_child(fifo) == (
        "SnapshotError",
        f"{fifo}: not a regular file (a device, pipe or socket is never read)",
    )
    kind, message = load_in_child(Path("/dev/zero"))
    assert kind == "SnapshotError" and "not a regular file" in message
    for named in (fifo, Path("/dev/zero")):  # named to the CLI: said what it is, not that it is missing
        out = _cli("summarize", str(named))
        assert out.returncode == 2 and "not a regular file or folder" in out.stderr, out.stderr


def test_a_file_over_the_limit_is_refused_before_reading(tmp_path, monkeypatch):
    sparse = tmp_path / "huge.pickle"
    with open(sparse, "wb") as f:
        f.truncate(64 << 30)  # 64 GiB of nothing: reading it would exhaust memory
    with pytest.raises(SnapshotError, match="over the 4,294,967,296-byte limit"):
        load_snapshot(sparse)
    small = dump_snapshot(snapshot(alloc(1, 8), {1: 8}), tmp_path / "small.pickle")
    with pytest.raises(SnapshotError, match="MEMSNAP_MAX_FILE_BYTES"):
        load_snapshot(small, max_bytes=10)
    monkeypatch.setenv("MEMSNAP_MAX_FILE_BYTES", "10")
    with pytest.raises(SnapshotError, match="over the 10-byte limit"):
        load_snapshot(small)
    monkeypatch.setenv("MEMSNAP_MAX_FILE_BYTES", "4G")  # a typo is said, and the default applies
    with pytest.warns(RuntimeWarning, match="ignoring MEMSNAP_MAX_FILE_BYTES='4G'"):
        assert load_snapshot(small)["segments"]


def test_paths_that_name_no_file_are_one_line(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    for path, words in [
        (tmp_path, "a directory, not a snapshot file"),
        (tmp_path / "missing.pickle", "cannot read: No such file"),
        ("bad\x00name.pickle", "not a usable path"),
        ("", "an empty path"),  # not the working directory
    ]:
        with pytest.raises(SnapshotError, match=words):
            load_snapshot(path)
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor left open


@pytest.mark.parametrize(
    "content",
    [
        b"\x80\x04P" + b"x" * 20,  # PERSID
        b"PK\x03\x04" + b"\x00" * 40,  # a zip file (torch.save)
    ],
    ids=["persistent id", "zip"],
)
def test_other_pickles_and_archives_are_one_line(tmp_path, content):
    path = tmp_path / "other.pickle"
    path.write_bytes(content)
    proc = subprocess.run(
        [sys.executable, "-m", "memsnap_magic", "summarize", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("memsnap: ")


def test_text_from_a_file_is_printed_as_data(tmp_path, capsys):
    evil = "\x1b]0;pwned\x07\x1b[2J\nforged line"
    frames = [{"filename": f"/src/{evil}.py", "line": 1, "name": f"f{evil}"}]
    trace = [{"action": "alloc", "addr": 16, "size": 64, "frames": frames}]
    a = write(tmp_path, snapshot([], {16: 32}), "step1_rank0.pickle")
    b = tmp_path / f"step2{evil}.pickle"
    b.write_bytes(pickle.dumps(snapshot(trace, {16: 64}), protocol=4))
    assert main(["summarize", str(a), str(b)]) == 0
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "forged line" in out
    assert not any(line.startswith("forged line") for line in out.splitlines())


def test_a_bad_file_leaves_the_session_untouched(shell, tmp_path):
    good = dump_snapshot(snapshot(alloc(1, 8), {1: 8}), tmp_path / "step1" / "a_rank0.pickle")
    bad = snapshot(alloc(1, 8), {1: 8})
    bad["memsnap"] = {"step": 10**5000}
    write(tmp_path / "step1", bad, "b_rank1.pickle")
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"memsnap\.step"):
        shell.run_line_magic("memsnap", f"load {tmp_path}")
    assert session().intervals == []
    shell.run_line_magic("memsnap", f"load {good}")
    assert [iv.step for iv in session().intervals] == [1]
    assert shell.run_cell("%%memsnap\npass").success  # the next step is computable
    # in this session's own run: the loaded file is a run of its own
    assert [(iv.run == "", iv.step) for iv in session().intervals] == [(False, 1), (True, 1)]


def test_json_is_strict_and_figures_are_ints(tmp_path, capsys):
    path = dump_snapshot(snapshot([*alloc(1, 2**48), *free(1, 2**48)], {}), tmp_path / "s.pickle")
    assert main(["summarize", "--json", str(path)]) == 0
    records = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert records[0]["peak_allocated"] == 2**48


# A valid snapshot, then hypothesis changes any field to any value, or shares containers.
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.just([]),
    st.just({}),
    st.just([1, 2]),
    st.just([{"line": 1}]),
)


def _base() -> dict:
    frames = [{"filename": "<ipython-input-3-x>", "line": 2, "name": "step"}]
    trace = [
        *alloc(0x100, 64),
        *alloc(0x200, 4096),
        *free(0x100, 64),
        *alloc(0x300, 1 << 20),
        *free(0x50, 128),
    ]
    for e in trace:
        e["frames"] = frames
        e["category"] = "activation"
    snap = snapshot(trace, {0x200: 4096, 0x300: 1 << 20, 0x400: 512})
    for seg in snap["segments"]:
        seg["blocks"][0]["category"] = "parameter"
    snap["memsnap"] = {"step": 3, "rank": 0, "device": "cpu", "tag": "t", "error": None}
    return snap


_BASE_PATHS = [p for p in value_paths(_base()) if p]


def _get(obj, path):
    for key in path:
        obj = obj[key]
    return obj


# a value is a leaf, or ("ref", path): the object at another place of the same snapshot (shared)
_VALUES = st.one_of(_LEAVES, st.tuples(st.just("ref"), st.sampled_from(_BASE_PATHS)))


@given(st.lists(st.tuples(st.sampled_from(_BASE_PATHS), _VALUES), min_size=1, max_size=4))
@example([(("device_traces", 0, 2, "frames", 0), []), (("device_traces", 0, 2, "frames"), [])])  # a list, two roles
@example([(("device_traces", 0, 0, "frames", 0), ("ref", ("device_traces", 0, 1, "frames")))])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_whatever_loads_is_summarised_printed_and_drawn(tmp_path, edits):
    from memsnap_magic.results.scan import read_interval
    from memsnap_magic.results.session import Session
    from memsnap_magic.views.explain import blocks_table
    from memsnap_magic.views.report import describe, interval_table

    snap = _base()
    shared: list = []
    for path, value in edits:
        try:
            if isinstance(value, tuple):
                value = _get(snap, value[1])
            elif value == []:
                value = shared  # one object wherever it lands
            _get(snap, path[:-1])[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    file = write(tmp_path, snap)
    try:
        iv = read_interval(file, 1)
    except SnapshotError:
        return
    with warnings.catch_warnings(record=True) as warned:  # its summary, cached on the first read, is taken
        warnings.simplefilter("always")
        again = read_interval(file, 1)
    assert [str(w.message) for w in warned] == []
    assert again.to_record() == iv.to_record() and again.top_blocks == iv.top_blocks
    s = Session()
    s.add(iv)
    for text in (interval_table(s.intervals), describe(iv), blocks_table(iv)):
        assert "\x1b" not in text
    record = json.loads(json.dumps(s.to_records()[0], allow_nan=False, default=str))
    assert all(isinstance(record[k], int) for k in ("baseline_allocated", "peak_allocated", "end_allocated"))
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in record.values())


def _cli(*args: str, timeout: int = CHILD_TIMEOUT, **env: str) -> subprocess.CompletedProcess[str]:
    """``memsnap ARGS`` in a child process, stdout strict UTF-8 as in a usual terminal."""
    environ = {**os.environ, "PYTHONIOENCODING": "utf-8", **env}
    return subprocess.run(
        [sys.executable, "-m", "memsnap_magic", *args], capture_output=True, text=True, timeout=timeout, env=environ
    )


def _blocks_with(frames_of, n: int, category=None, unit: int = 1024) -> dict:
    """``n`` kept blocks of growing size, each allocated in the trace; ``frames_of(i)`` their stacks."""
    trace, segments = [], []
    for i in range(n):
        size = unit * (i + 1)
        e = {"action": "alloc", "addr": 4096 * (i + 1), "size": size, "stream": 0, "time_us": i, "frames": frames_of(i)}
        block = {"size": size, "requested_size": size, "state": "active_allocated", "frames": frames_of(i)}
        if category is not None:
            e["category"] = block["category"] = category(i)
        trace.append(e)
        segments.append({"device": 0, "address": 4096 * (i + 1), "total_size": size, "stream": 0, "blocks": [block]})
    return {"segments": segments, "device_traces": [trace]}


@pytest.mark.parametrize(
    "category",
    [b"x", ("a",), float("nan"), 7, r"$\foo{$", "\x1b[2Jwipe\nforged", "a" * 10_000],
    ids=["bytes", "tuple", "nan", "int", "mathtext", "escapes", "long"],
)
def test_categories_of_any_kind_are_summarised_drawn_and_cached(tmp_path, category):
    folder = tmp_path / "run" / "step1"
    folder.mkdir(parents=True)
    write(folder, _blocks_with(lambda i: [], 3, lambda i: category), "x_rank0.pickle")
    for args in (["summarize", str(tmp_path / "run")], ["summarize", "--json", str(tmp_path / "run")]):
        out = _cli(*args)
        assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
        assert "\x1b" not in out.stdout
    records = json.loads(_cli("summarize", "--json", str(tmp_path / "run")).stdout)
    names = set(records[0]["by_category"])
    assert all(type(n) is str and len(n) <= 64 for n in names)
    assert sum(records[0]["by_category"].values()) == records[0]["end_allocated"]
    out = _cli("plot", str(tmp_path / "run"), "-o", str(tmp_path / "c.png"), "--view", "categories")
    assert out.returncode == 0, out.stderr[-2000:]


def test_many_categories_are_named_up_to_a_limit(tmp_path):
    from memsnap_magic.results.labels import OTHER_NAMES
    from memsnap_magic.results.scan import read_interval

    file = write(tmp_path, _blocks_with(lambda i: [], 1500, lambda i: f"kind{i}"))
    iv = read_interval(file, 1)
    assert len(iv.by_category) == OTHER_NAMES + 1  # the largest names, the rest as unknown
    assert sum(iv.by_category.values()) == iv.end_allocated
    assert iv.by_category["kind1499"] == 1500 * 1024  # the largest is named


def _repeated_frame(blocks: int):
    # one list of 100,000 references to one frame, shared by every entry and block (~200 KB)
    shared = [{"filename": "/x.py", "line": 1, "name": "f"}] * 100_000
    return _blocks_with(lambda i: shared, blocks)


def _huge_filename(blocks: int):
    # one frame with a 1 MB filename, each block holding its own one-item list
    frame = {"filename": "/" + "a" * (1 << 20), "line": 1, "name": "f"}
    return _blocks_with(lambda i: [frame], blocks)


def _deep_recursion(blocks: int):
    # a recursion 1,100 frames deep: read back from its summary too
    return _blocks_with(
        lambda i: [{"filename": "/src/deep.py", "line": d, "name": "recurse"} for d in range(1100)], blocks
    )


@pytest.mark.parametrize(
    "build, blocks",
    [(_repeated_frame, 40), (_huge_filename, 2000), (_deep_recursion, 2)],
    ids=["a frame repeated", "a huge filename", "deep recursion"],
)
def test_stacks_that_amplify_are_read_within_bounds(tmp_path, build, blocks):
    from memsnap_magic.results.scan import read_interval
    from memsnap_magic.results.stacks import FRAMES_LIMIT, TEXT_LIMIT

    file = write(tmp_path, build(blocks))
    assert file.stat().st_size < 4 << 20
    t0 = time.perf_counter()
    iv = read_interval(file, 1)
    seconds = time.perf_counter() - t0
    assert seconds < 60, seconds  # a hang guard (minutes before the fix), not a speed assertion
    assert all(len(b["frames"]) <= FRAMES_LIMIT for b in iv.top_blocks)
    assert all(len(f["filename"]) <= TEXT_LIMIT for b in iv.top_blocks for f in b["frames"])
    cache = list(Path(os.environ["MEMSNAP_CACHE_DIR"]).rglob("*.json"))
    assert len(cache) == 1 and cache[0].stat().st_size < 4 << 20
    with warnings.catch_warnings(record=True) as warned:  # the summary we wrote is taken when read back
        warnings.simplefilter("always")
        assert read_interval(file, 1).top_blocks == iv.top_blocks
    assert [str(w.message) for w in warned] == []


def test_text_nothing_can_encode_is_printed_as_data(tmp_path):
    bad = [{"filename": "/src/x\udcff.py", "line": 3, "name": "f\ud800"}]
    for name, n in (("a", 1), ("b", 2)):  # b keeps 2 and 4 MiB more: a leak, and sites that changed
        (tmp_path / name).mkdir()
        write(tmp_path / name, _blocks_with(lambda i: bad, n, unit=2 << 20), "x.pickle")
    for args in (
        ["summarize", str(tmp_path / "a")],
        ["diff", str(tmp_path / "a" / "x.pickle"), str(tmp_path / "b" / "x.pickle")],
    ):
        out = _cli(*args)
        assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
        assert "f? (" in out.stdout, out.stdout  # the site, its unencodable character replaced


def test_file_names_with_any_digits_are_ordered(tmp_path):
    for name in ("x_rank0_1\u00b21.pickle", "x_rank0_\u0663.pickle", "x_rank0_2.pickle"):
        write(tmp_path, _blocks_with(lambda i: [], 1), name)
    out = _cli("summarize", str(tmp_path))
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]


def test_a_summary_that_is_not_ours_to_print_is_ignored(tmp_path):
    from memsnap_magic.files import summaries
    from memsnap_magic.results.scan import read_interval

    snap = _blocks_with(lambda i: [{"filename": "/src/train.py", "line": 9, "name": "step"}], 1)
    snap["memsnap"] = {"step": 1, "rank": 0, "device": "cpu", "tag": "t", "error": None}
    file = write(tmp_path, snap, "x\x1b]0;pwned\x07\nforged_rank0.pickle")
    read_interval(file, 1)  # writes a true summary to the cache
    (cached,) = Path(os.environ["MEMSNAP_CACHE_DIR"]).rglob("*.json")
    doc = json.loads(cached.read_text())
    doc["kept_by_site"] = [["\x1b]0;pwned\x07\x1b[2J\nforged", 1024, 1]]
    beside = summaries.beside(file)
    beside.write_text(json.dumps(dict(doc, path=None) if "path" in doc else doc))
    cached.write_text(json.dumps(doc))
    out = _cli("summarize", str(file))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr
    assert "ignoring the summary" in out.stderr and out.stderr.count("\n") <= 2


def test_a_folder_in_place_of_a_summary_holds_no_file_open(tmp_path):
    from memsnap_magic.files import summaries

    file = write(tmp_path, _blocks_with(lambda i: [], 1), "x_rank0.pickle")
    summaries.beside(file).mkdir()
    before = len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(50):
            assert summaries.read(file, os.stat(file)) is None
    assert len(os.listdir("/proc/self/fd")) == before


def test_sums_up_to_what_a_file_may_hold_are_cached_and_read_back(tmp_path):
    from memsnap_magic.results.scan import read_interval

    big = 1 << 48  # the largest block; 8,192 frees of them sum to the schema's limit
    trace = [
        {"action": "free_completed", "addr": (1 << 50) + big * n, "size": big, "stream": 0, "time_us": n}
        for n in range(8192)
    ]
    end = [{"size": big, "requested_size": big, "state": "active_allocated"}] * 8192  # the end state's limit
    snap = {"segments": [{"device": 0, "address": 0, "total_size": 1 << 61, "stream": 0, "blocks": end}]}
    snap["device_traces"] = [trace]
    file = write(tmp_path, snap)
    iv = read_interval(file, 1)
    assert iv.baseline_allocated == 1 << 62
    assert len(list(Path(os.environ["MEMSNAP_CACHE_DIR"]).rglob("*.json"))) == 1  # its summary, cached
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert read_interval(file, 1).baseline_allocated == 1 << 62
    assert [str(w.message) for w in warned] == []


@pytest.mark.parametrize("name", ["fifo", "x.jpg", "folder", "missing/x.png"])
def test_a_picture_goes_only_to_a_png_file(tmp_path, name):
    file = write(tmp_path, _blocks_with(lambda i: [], 1), "x_rank0.pickle")
    target = tmp_path / name
    if name == "fifo":
        os.mkfifo(target)
    elif name == "folder":
        target = tmp_path / "folder.png"
        target.mkdir()
    out = _cli("plot", str(file), "-o", str(target), timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"memsnap: -o {target}: ")  # said before the snapshots are read


def _raw(tmp_path: Path, data: bytes, name: str = "raw.pickle") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _with_key(key_ops: bytes) -> bytes:
    """A pickle of a snapshot whose top-level dict also maps the object ``key_ops`` builds to None."""
    return (
        pickle.PROTO + b"\x04" + pickle.EMPTY_DICT + pickle.MARK
        + pickle.SHORT_BINUNICODE + b"\x08segments" + pickle.EMPTY_LIST
        + pickle.SHORT_BINUNICODE + b"\x0ddevice_traces" + pickle.EMPTY_LIST
        + key_ops + pickle.NONE + pickle.SETITEMS + pickle.STOP
    )  # fmt: skip


@pytest.mark.parametrize("index", [1 << 27, 1 << 30, (1 << 32) - 1])
def test_a_memo_index_far_past_the_file_is_refused_without_the_memory(tmp_path, index):
    # nine bytes: the unpickler sizes its memo table to twice the index (2-64 GB) and zero-fills it
    path = _raw(
        tmp_path,
        pickle.PROTO + b"\x04" + pickle.EMPTY_DICT + pickle.LONG_BINPUT + index.to_bytes(4, "little") + pickle.STOP,
    )
    # VmHWM: this process's own peak (ru_maxrss would carry over the pytest parent's across exec)
    code = textwrap.dedent(f"""
        from memsnap_magic import SnapshotError, load_snapshot
        try:
            load_snapshot({str(path)!r})
            print("ok")
        except SnapshotError as e:
            print(e)
        with open("/proc/self/status") as status:
            print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    message, peak_kib = out.stdout.strip().rsplit("\n", 1)
    assert "needed more memory than a file of 9 bytes stands for" in message
    assert int(peak_kib) < 1 << 20  # under 1 GiB peak (the unbounded table: 2-64 GB)


@pytest.mark.parametrize("depth", [300_000, 1_000_000])
def test_a_key_nested_deeper_than_a_thread_stack_does_not_kill_the_process(tmp_path, depth):
    path = _raw(tmp_path, _with_key(pickle.EMPTY_TUPLE + pickle.TUPLE1 * depth))
    kind, message = load_in_child(path)  # hashing the key recursed past the C stack: SIGSEGV
    assert kind == "ok", message
    # a category nested as deep is never hashed by the analysis

    def text(word: str) -> bytes:
        return pickle.SHORT_BINUNICODE + bytes([len(word)]) + word.encode()

    entry = pickle.EMPTY_DICT + pickle.MARK + text("action") + text("alloc") + text("addr") + pickle.BININT1 + b"\x10"
    entry += text("size") + pickle.BININT1 + b"\x40" + text("stream") + pickle.BININT1 + b"\x00"
    entry += text("category") + pickle.EMPTY_TUPLE + pickle.TUPLE1 * 200_000 + pickle.SETITEMS
    data = pickle.PROTO + b"\x04" + pickle.EMPTY_DICT + pickle.MARK + text("segments") + pickle.EMPTY_LIST
    data += text("device_traces") + pickle.EMPTY_LIST + pickle.EMPTY_LIST + entry + pickle.APPEND + pickle.APPEND
    file = _raw(tmp_path, data + pickle.SETITEMS + pickle.STOP, "deep_category.pickle")
    out = _cli("summarize", str(file))
    assert out.returncode == 0, out.stderr[-2000:]


def test_categories_that_are_not_text_are_never_hashed():
    # as dict keys, values that hash alike cost quadratic time (40k ints: 30 s), deep ones a crash
    from memsnap_magic.results.labels import totals

    hashed = []

    class Colliding:
        def __hash__(self) -> int:
            hashed.append(1)
            return 0

    sums = totals([(Colliding(), 10), (Colliding(), 20), ("param", 5), (None, 1)])
    assert hashed == [] and sums == {"unknown": 31, "param": 5}


@pytest.mark.parametrize(
    "edit, words",
    [
        (
            lambda s: s["segments"].append(
                {
                    "device": 0,
                    "address": (1 << 64) - 4096,
                    "blocks": [{"size": 4096, "state": "inactive"}, {"size": 0, "state": "active_allocated"}],
                }
            ),
            "run past address 2**64",
        ),
        (lambda s: s.update(memsnap=5), "'memsnap' block is int"),
        (lambda s: s.update(memsnap={"device": "cuda:\u0663"}), "memsnap.device"),
    ],
    ids=["an empty block at 2**64", "a memsnap block that is no dict", "a device of other digits"],
)
def test_what_every_reader_would_refuse_is_refused_on_loading(tmp_path, edit, words):
    snap = snapshot(alloc(0x1000, 64), {0x1000: 64})
    edit(snap)
    with pytest.raises(SnapshotError, match=re.escape(words)):
        load_snapshot(write(tmp_path, snap))


def test_a_snapshot_error_is_one_short_printable_line_whatever_the_path(tmp_path):
    path = _raw(tmp_path, b"junk", "x\nforged line\x1b[2J" + "y" * 200 + ".pickle")
    with pytest.raises(SnapshotError) as caught:
        load_snapshot(path)
    text = str(caught.value)
    assert "\n" not in text and "\x1b" not in text and len(text) <= 1000


def test_a_frame_shared_by_many_stacks_is_read_once(tmp_path, monkeypatch):
    # 2,000 blocks, each its own 128-item list of one frame with a 1 MB filename: read per
    # reference, this was 47 s for a 4 MB file
    from memsnap_magic.results import stacks as readable
    from memsnap_magic.results.scan import read_interval

    frame = {"filename": "/" * (1 << 20), "line": 1, "name": "n"}
    file = write(tmp_path, _blocks_with(lambda i: [frame] * 128, 2000))
    reads = []
    real = readable._runs_cells
    monkeypatch.setattr(readable, "_runs_cells", lambda f: reads.append(1) or real(f))
    iv = read_interval(file, 1)
    # the site passes read the frame once each; the table's top rows read their own stacks (32 x 128)
    assert iv.kept_by_site and len(reads) < 2000 * 128 // 10
