import pickle
import pickletools

import pytest
from snapshots import alloc, snapshot

from memsnap_magic import SnapshotError, load_snapshot
from memsnap_magic.files.snapshot import dump_snapshot


def test_round_trip_protocol_4_builtins_only(tmp_path):
    snap = snapshot(alloc(0x10, 64), {0x10: 64})
    snap["segments"][0]["segment_pool_id"] = (0, 0)
    path = dump_snapshot(snap, tmp_path / "a" / "s.pickle")
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"  # protocol 4: memory_viz reads 2-4 only
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "INST", "OBJ", "NEWOBJ"}
    assert load_snapshot(path) == snap
    assert [p.name for p in path.parent.iterdir()] == ["s.pickle"]  # no temporary left
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_failed_dump_leaves_no_file(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        dump_snapshot({"segments": [Unpicklable()], "device_traces": []}, tmp_path / "s.pickle")
    assert list(tmp_path.iterdir()) == []


class Payload:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_refuses_globals_without_running_them(tmp_path):
    target = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Payload(str(target))}))
    with pytest.raises(SnapshotError, match=r"evil\.pickle.*refused pickle global"):
        load_snapshot(path)
    assert not target.exists()


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "empty file"),
        (b"not a pickle at all", "not a"),
        (pickle.dumps({"segments": [], "device_traces": []})[:-5], "not a"),
        (pickle.dumps([1, 2]), "top level is list"),
        (pickle.dumps({"segments": []}), "missing key 'device_traces'"),
        (
            pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": "0x1", "size": 3}]]}),
            "device_traces[0][0]",
        ),
        (
            pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": None}]]}),
            "device_traces[0][0]",
        ),
        (
            pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": -5}]]}),
            "device_traces[0][0]",
        ),
        (
            pickle.dumps({"segments": [{"device": 0, "address": 0, "blocks": [{"size": 1}]}], "device_traces": []}),
            "segments[0].blocks[0]",
        ),
    ],
)
def test_malformed_files_raise_snapshot_error_naming_the_file(tmp_path, content, words):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(path)
    assert str(path) in str(info.value) and words in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "nope.pickle")


def test_unknown_fields_and_actions_are_tolerated(tmp_path):
    snap = snapshot([*alloc(1, 2), {"action": "from_the_future", "size": 0, "new": [1]}], {1: 2})
    snap["brand_new_key"] = {"x": 1}
    path = dump_snapshot(snap, tmp_path / "s.pickle")
    assert load_snapshot(path)["brand_new_key"] == {"x": 1}


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from snapshots import free  # noqa: E402

from memsnap_magic import summarize  # noqa: E402

_VALID = pickle.dumps(
    snapshot(alloc(0x10, 64) + free(0x8, 32) + alloc(0x20, 1 << 20), {0x10: 64, 0x20: 1 << 20}), protocol=4
)


@given(
    st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, len(_VALID)),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_corrupted_files_raise_only_snapshot_error(tmp_path, flips, cut):
    data = bytearray(_VALID)
    for pos, byte in flips:
        data[pos] = byte
    path = tmp_path / "corrupt.pickle"
    path.write_bytes(bytes(data[:cut]))
    try:
        snap = load_snapshot(path)
    except SnapshotError:
        return
    summarize(snap)  # whatever loads must also summarise without error


@pytest.mark.parametrize(
    "path, step, rank, tag",
    [
        ("step3/model_rank2_pid7-abc123.pickle", 3, 2, "model"),
        ("step3/rank0_rank3_pid7-abc123.pickle", 3, 3, "rank0"),  # a tag that says rank itself
        ("step12/memory_snapshot_rank5.pickle", 12, 5, "memory_snapshot"),
        ("out/rank4.pkl", None, 4, None),
        ("step1/cranky7.pickle", 1, None, None),  # "rank" inside a word is no rank
        ("stepX/a_rank99999999999.pickle", None, None, None),  # beyond any rank: not read as one
        ("step2147483647/x_rank0.pickle", 2147483647, 0, "x"),  # the highest step a file holds
        ("step2147483648/x_rank0.pickle", None, 0, "x"),  # past it: no step
    ],
)
def test_the_path_names_step_rank_and_tag_as_verl_writes_them(path, step, rank, tag):
    from memsnap_magic.files.layout import PathInfo, parse_path

    assert parse_path(path) == PathInfo(step=step, rank=rank, tag=tag)


def test_meta_block_holds_every_field_and_copies_what_can_change():
    """The ``memsnap`` block written into a file is every field of ``Meta`` (read back equal),
    and changing the block never changes the ``Meta`` it came from."""
    import dataclasses

    from memsnap_magic.files.meta import _RULES, META_KEY, Meta

    meta = Meta(
        step=3,
        rank=1,
        device="cpu",
        tag="t",
        pid=7,
        end_us=5,
        error="ValueError",
        clear=False,
        allocator_peak_allocated=9,
        context="all",
        max_entries=100,
        incomplete="why",
        run="r",
        usage_start={"rss": 1},
        usage_end={"rss": 2},
        freed_unseen=4,
    )
    assert {f.name for f in dataclasses.fields(Meta)} == set(_RULES)  # a new field needs a rule
    block = meta.to_dict()
    assert block == dataclasses.asdict(meta)
    assert Meta.from_snapshot({META_KEY: block}) == meta
    block["usage_start"]["rss"] = 99
    assert meta.usage_start == {"rss": 1}
