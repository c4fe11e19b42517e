"""``scale=``: the sizes a step is recorded at (``scale=batch:8``), kept in its file's metadata and
summary, read back as ``iv.scale`` and shown by ``%memsnap list`` and ``memsnap summarize``.

The sizes are what ``predict`` fits against, so they must survive every route a file takes: the
recorder's own interval, a cold read of the pickle, a warm read of its summary, the CLI's JSON.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from memsnap_magic import Recorder, session, wait_for_writes
from memsnap_magic.cli import main
from memsnap_magic.core.errors import SnapshotError
from memsnap_magic.files import summaries
from memsnap_magic.files.meta import SCALE_RESERVED, Meta
from memsnap_magic.files.snapshot import load_snapshot
from memsnap_magic.recording.options import OptionError, from_keywords, parse, parse_config
from memsnap_magic.results import intervals
from memsnap_magic.results.scan import read_intervals


def _record(out: Path, scale: object, run: str | None = None) -> Path:
    import torch

    with Recorder(step=1, out=out, device="cpu", scale=scale, run=run, wait=True):
        torch.ones(1000).sum()
    wait_for_writes()
    return next(out.rglob("*.pickle"))


def test_the_line_and_the_recorder_read_the_same_sizes():
    assert parse("scale=batch:8").scale == {"batch": 8}
    assert parse("scale=batch:8,seq:128").scale == {"batch": 8, "seq": 128}
    assert parse("scale=' batch : 8 , seq:128 '").scale == {"batch": 8, "seq": 128}
    assert from_keywords(scale={"batch": 8, "seq": 128}).scale == {"batch": 8, "seq": 128}
    assert from_keywords(scale="batch:8").scale == {"batch": 8}
    assert parse("").scale is None
    # a session default, unset with scale=
    assert parse_config("scale=batch:2", {}) == {"scale": {"batch": 2}}
    assert parse_config("scale=", {"scale": {"batch": 2}}) == {}


@pytest.mark.parametrize(
    "line, words",
    [
        ("scale=batch", "'batch' is not NAME:SIZE"),
        ("scale=batch:", "batch's size '' is not an integer"),
        ("scale=batch:0", "batch's size '0' is too small"),
        ("scale=batch:-4", "too small"),
        ("scale=batch:8.5", "batch's size '8.5' is not an integer"),
        ("scale=batch:2147483648", "too large"),
        ("scale=:8", "'' is no name"),
        ("scale=2batch:8", "'2batch' is no name"),
        ("scale=bat-ch:8", "is no name"),
        ("scale=batch:8,", "'' is not NAME:SIZE"),
        ("scale=batch:8,batch:16", "'batch' given twice"),
        ("scale=a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1", "9 names; at most 8"),
        *[(f"scale={name}:2", f"'{name}' is a keyword of predict()") for name in SCALE_RESERVED],
    ],
)
def test_a_bad_scale_names_what_is_wrong_and_the_form_allowed(line, words):
    with pytest.raises(OptionError) as info:
        parse(line)
    message = str(info.value)
    assert "scale=" in message and words in message
    assert "allowed: NAME:SIZE[,NAME:SIZE]" in message and "\n" not in message


@pytest.mark.parametrize(
    "value, words",
    [
        ({"batch": 8.0}, "not an integer"),
        ({"batch": True}, "not an integer"),
        ({"batch": 0}, "too small"),
        ({"run": 2}, "keyword of predict()"),
        ({3: 8}, "is no name"),
        ({}, "empty"),
        ([("batch", 8)], "a mapping of names to sizes"),
    ],
)
def test_a_recorder_refuses_a_bad_scale_when_made(value, words):
    with pytest.raises(OptionError, match=r"Recorder: bad value for scale=.*" + re.escape(words)):
        Recorder(scale=value)


def test_the_sizes_survive_the_file_its_summary_and_the_cli(tmp_path, summary_cache, capsys):
    dump = _record(tmp_path / "out", {"batch": 8, "seq": 128}, run="b8")
    recorded = session().last
    assert recorded is not None and recorded.scale == {"batch": 8, "seq": 128}
    assert load_snapshot(dump)["memsnap"]["scale"] == {"batch": 8, "seq": 128}
    beside = json.loads(summaries.beside(dump).read_text())
    assert beside["version"] == summaries.VERSION and beside["meta"]["scale"] == {"batch": 8, "seq": 128}
    cold = intervals.interval_from_snapshot(load_snapshot(dump), dump)
    (warm,) = read_intervals([dump])
    assert cold.scale == warm.scale == {"batch": 8, "seq": 128}
    assert main(["summarize", str(dump), "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["scale"] == {"batch": 8, "seq": 128}
    assert main(["summarize", str(dump)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["step", "rank", "device", "scale"]
    assert table[1].split()[3] == "batch:8,seq:128"


def test_a_file_without_sizes_reads_as_none_and_the_table_has_no_scale_column(tmp_path, capsys):
    dump = _record(tmp_path / "out", None)
    assert "scale" not in load_snapshot(dump)["memsnap"] or load_snapshot(dump)["memsnap"]["scale"] is None
    (iv,) = read_intervals([dump])
    assert iv.scale is None
    assert main(["summarize", str(dump)]) == 0
    assert "scale" not in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(
    "scale",
    [{"batch": 0}, {"batch": "8"}, {"run": 2}, {"bad name": 2}, {}, ["batch", 8], {f"d{k}": 1 for k in range(9)}],
)
def test_a_file_whose_scale_is_broken_is_refused_by_name(tmp_path, scale):
    dump = _record(tmp_path / "out", {"batch": 8})
    snap = load_snapshot(dump)
    snap["memsnap"]["scale"] = scale
    with pytest.raises(SnapshotError, match=r"memsnap\.scale is not a dict of 1 to 8 dimension names"):
        Meta.from_snapshot(snap)
    spoiled = tmp_path / "spoiled.pickle"
    spoiled.write_bytes(pickle.dumps(snap, protocol=4))
    with pytest.raises(SnapshotError, match="scale"):
        read_intervals([spoiled])


def test_a_summary_whose_scale_is_broken_is_ignored_and_the_dump_read(tmp_path, summary_cache):
    dump = _record(tmp_path / "out", {"batch": 8})
    beside = summaries.beside(dump)
    obj = json.loads(beside.read_text())
    obj["meta"]["scale"] = {"batch": -1}
    beside.write_text(json.dumps(obj))
    with pytest.warns(RuntimeWarning, match="ignoring the summary"):
        (iv,) = read_intervals([dump])
    assert iv.scale == {"batch": 8}  # from the dump itself


def test_the_magic_records_list_shows_and_refuses_sizes(shell, capsys):
    assert shell.run_cell("%%memsnap device=cpu run=b4 scale=batch:4 wait=true\nx = [1] * 1000").success
    assert shell.run_cell("%%memsnap device=cpu run=b8 scale=batch:8 wait=true\nx = [1] * 2000").success
    assert [iv.scale for iv in session().intervals] == [{"batch": 4}, {"batch": 8}]
    lines = capsys.readouterr().out.splitlines()  # each cell's line says the size it ran at
    assert [line.split(" · ")[0] for line in lines] == [
        "memsnap step 1 (run b4) at batch=4",
        "memsnap step 1 (run b8) at batch=8",
    ]
    shell.run_line_magic("memsnap", "list")
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:5] == ["run", "step", "rank", "device", "scale"]
    assert [row.split()[4] for row in table[1:3]] == ["batch:4", "batch:8"]
    res = shell.run_cell("%%memsnap device=cpu scale=batch=8\nran = True")
    assert isinstance(res.error_in_exec, UsageError) and "ran" not in shell.user_ns
    assert "NAME:SIZE" in str(res.error_in_exec)
    shell.run_line_magic("memsnap", "config scale=seq:64")
    assert shell.run_cell("%%memsnap device=cpu run=s64 wait=true\nx = 1").success
    assert session().last is not None and session().last.scale == {"seq": 64}
    capsys.readouterr()
    assert shell.run_cell("%%memsnap device=cpu run=s64 scale=seq:64,batch:2 wait=true\nx = 1").success
    assert capsys.readouterr().out.startswith("memsnap step 2 (run s64) at seq=64, batch=2 · cpu · ")
