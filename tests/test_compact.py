"""The CPU route's compact trace (block entries now, the viewer's companions at the write) is the
trace one pass would have built: entry for entry, labelled and stamped alike, with the same digest."""

from __future__ import annotations

import copy
import functools
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsnap_magic.files.compact import Compact, complete, entries, expand
from memsnap_magic.files.layout import stamp
from memsnap_magic.files.pending import Pending
from memsnap_magic.recording.backends.cpu.history import History
from memsnap_magic.results.intervals import digest
from memsnap_magic.results.labels import Roles, label, label_snapshot
from memsnap_magic.results.pairing import Actions, column

BASE = 0x7F00_0000_0000
ROLES = ("parameter", "gradient", "optimizer_state")


@st.composite
def histories(draw):
    """Events of a small allocator (a few addresses, each live or not), the blocks live before it
    began (some never mentioned, some freed, some whose address is reused unreported), what a walk
    finds at the end, when some start blocks died, and roles seen along the way."""
    slots = draw(st.integers(1, 6))
    addrs = [BASE + 4096 * i for i in range(slots)]
    live = {a: draw(st.integers(1, 3000)) for a in addrs if draw(st.booleans())}
    live_start = dict(live)
    events, t = [], 1_000_000
    for _ in range(draw(st.integers(0, 40))):
        a = draw(st.sampled_from(addrs))
        t += draw(st.integers(1, 5000))
        if a in live and draw(st.integers(0, 3)):
            events.append((t, a, -live.pop(a)))
        else:
            live.pop(a, None)  # reused unreported: the start block there died silently
            size = draw(st.integers(1, 3000))
            live[a] = size
            events.append((t, a, size))
    live_end = {a: n for a, n in live.items() if draw(st.booleans())}
    died = {a: draw(st.integers(1_000_000, t + 1)) for a in live_start if draw(st.integers(0, 3)) == 0}
    pick = st.sampled_from(sorted({*live_start, *(e[1] for e in events)}) or [BASE])
    seen = lambda: {  # noqa: E731
        a: (draw(st.integers(1, 3000)), draw(st.sampled_from(ROLES))) for a in draw(st.lists(pick, max_size=3))
    }
    roles = Roles(start=seen(), timed=[(t // 1000 // 2, seen())], end=seen())
    return live_start, events, live_end, died, roles, t


def snapshot(
    history_args, max_entries: int, segments: bool, compact: bool, mark: str | None = None, lazy: bool = False
) -> dict:
    live_start, events, live_end, died, _, t = history_args
    history = History(max_entries, dict(live_start))
    history.add_events(events)
    end_us = t // 1000 + 7
    return history.snapshot(
        dict(live_end), end_us, max_entries, segments, died=dict(died), compact=compact, mark=mark, lazy=lazy
    )


def groups(entry: dict, segments: bool) -> list[dict]:
    """What one pass wrote for each block entry: its group, spelled out."""
    fields = {k: v for k, v in entry.items() if k != "action"}
    if entry["action"] == "alloc":
        return ([{"action": "segment_alloc", **fields}] if segments else []) + [entry]
    frees = ["free_requested", "free_completed"] + (["segment_free"] if segments else [])
    return [{"action": a, **fields} for a in frees]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(1, 120), st.booleans())
def test_the_ring_keeps_the_newest_entries_of_the_whole_trace(args, max_entries, segments):
    whole = snapshot(args, 10**9, segments, compact=True)["device_traces"][0]
    # every block entry's group, as one pass writes them
    assert expand(whole) == [g for e in whole for g in groups(e, segments)]
    cut = snapshot(args, max_entries, segments, compact=True)
    trace = cut["device_traces"][0]
    assert type(trace) is Compact
    assert entries(trace) == min(entries(whole), max_entries)
    assert expand(trace) == expand(whole)[-max_entries:]
    assert snapshot(args, max_entries, segments, compact=False)["device_traces"][0] == expand(trace)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(1, 120), st.booleans(), st.booleans(), st.booleans())
def test_labels_marks_and_digest_are_those_of_the_whole_trace(args, max_entries, labelled, two_marks, lazy):
    *_, roles, t = args
    # one step's mark is given as the entries are built (the recorder's way); two, by stamp
    mark = None if two_marks else "memsnap step 1"
    compact = snapshot(args, max_entries, True, compact=True, mark=mark, lazy=lazy)
    whole = snapshot(args, max_entries, True, compact=False)
    marks = [(0, "memsnap step 1")] + ([(t // 1000 // 2, "memsnap step 2")] if two_marks else [])
    for snap in (compact, whole):
        if labelled:
            label_snapshot(snap, 0, roles, t // 1000 + 7)
        stamp(snap, 0, marks)
    d_compact, d_whole = digest(compact), digest(whole)
    if lazy and not two_marks and type(compact["device_traces"][0]) is Pending:
        assert not compact["device_traces"][0].ready  # labelled, stamped and digested by its columns
    complete(compact)
    assert compact == whole
    assert plain(d_compact) == plain(d_whole)


def plain(d: dict) -> dict:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in d.items()}


def test_a_compact_trace_is_never_pickled_as_one_and_is_written_complete(tmp_path):
    from memsnap_magic.files.snapshot import dump_snapshot, load_snapshot

    args = ({}, [(1000, BASE, 64), (2000, BASE, -64), (3000, BASE + 4096, 32)], {BASE + 4096: 32}, {}, Roles(), 3000)
    snap = snapshot(args, 100, True, compact=True)
    with pytest.raises(TypeError, match="complete"):
        pickle.dumps(snap["device_traces"][0])
    whole = copy.deepcopy(snapshot(args, 100, True, compact=False))
    dump_snapshot(snap, tmp_path / "s.pickle")
    assert type(snap["device_traces"][0]) is list
    assert load_snapshot(tmp_path / "s.pickle")["device_traces"] == whole["device_traces"]
    assert [e["action"] for e in whole["device_traces"][0]] == [
        "segment_alloc",
        "alloc",
        "free_requested",
        "free_completed",
        "segment_free",
        "segment_alloc",
        "alloc",
    ]


ACTIONS = ("alloc", "free_completed", "free_requested", "free", "segment_alloc", "segment_free", "oom", "snapshot")


def assert_same_actions(pending, listed) -> None:
    """A ``Pending`` trace's actions, asked as masks and at any entries, are its list's."""
    ours, theirs = Actions(pending), Actions(listed)
    for name in ACTIONS:
        assert ours.is_(name).tolist() == theirs.is_(name).tolist() == [e["action"] == name for e in listed]
    everywhere = np.arange(len(listed))
    for index in (everywhere, everywhere[::-1], everywhere[1::2], everywhere[:0]):
        assert ours.at(index).tolist() == theirs.at(index).tolist() == [listed[i]["action"] for i in index]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(1, 120), st.booleans(), st.sampled_from([None, "memsnap step 3"]))
def test_a_trace_left_to_build_reads_as_the_built_one_and_builds_it(args, max_entries, segments, mark):
    """What the digest reads of a ``Pending`` trace (columns, single entries) is what it would
    read of the trace built at once; it stays unbuilt through the digest; built, it is that trace."""
    eager = snapshot(args, max_entries, segments, compact=True, mark=mark)
    lazy = snapshot(args, max_entries, segments, compact=True, mark=mark, lazy=True)
    built, pending = eager["device_traces"][0], lazy["device_traces"][0]
    assert type(built) is Compact
    assert len(pending) == len(built) and entries(pending) == entries(built) and bool(pending) == bool(built)
    if type(pending) is Pending:
        for key, default, dtype in (("action", None, object), ("size", 0, np.int64), ("addr", 0, np.int64)):
            assert column(pending, key, default, dtype).tolist() == column(built, key, default, dtype).tolist()
        assert column(pending, "time_us", -1).tolist() == column(built, "time_us", -1).tolist()
        assert_same_actions(pending, built)
        for i in [*range(len(built)), -1]:
            assert dict(pending[i]) == built[i]
            with pytest.raises(TypeError):  # read-only: a change made there would be lost
                pending[i]["category"] = "x"  # type: ignore[index]
        assert plain(digest(lazy)) == plain(digest(eager))
        assert not pending.ready  # the digest read columns and single entries only
    complete(lazy)
    complete(eager)
    assert lazy == eager


def test_a_trace_left_to_build_builds_on_any_other_read_and_takes_an_entry_appended_as_it_is():
    events = [(1000 * i, BASE + 64 * (i % 5), 16 if i % 2 == 0 else -16) for i in range(1, 11)]
    args = ({}, events, {}, {}, Roles(), 11_000)
    for touch in (list, lambda t: t[1:], lambda t: t[-3:]):
        trace = snapshot(args, 100, True, compact=True, mark="memsnap step 1", lazy=True)["device_traces"][0]
        assert type(trace) is Pending and not trace.ready
        touch(trace)
        assert trace.ready
    # an entry appended (an error's oom, the labels' marker) goes after the others, the ring's cut
    # not taken again, as on a built trace; what was read of the columns before is not read again
    for max_entries in (100, 9):
        eager = snapshot(args, max_entries, True, compact=True, mark="memsnap step 1")["device_traces"][0]
        trace = snapshot(args, max_entries, True, compact=True, mark="memsnap step 1", lazy=True)["device_traces"][0]
        assert column(trace, "addr", 0).tolist() == column(eager, "addr", 0).tolist()
        oom = {"action": "oom", "size": 1, "time_us": 99}
        for t in (trace, eager):
            t.append(dict(oom))
            assert t[len(t) - 1 :] == [oom] and t[-1]["action"] == "oom"
        assert type(trace) is Pending and not trace.ready
        for key, default in (("action", None), ("addr", 0), ("size", 0), ("time_us", -1)):
            dtype = object if key == "action" else np.int64
            assert column(trace, key, default, dtype).tolist() == column(eager, key, default, dtype).tolist()
        assert_same_actions(trace, eager)
        assert list(trace) == eager and trace.companions == eager.companions


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 10**12), st.integers(0, 2**47), st.integers(-4096, 4096).filter(bool)), max_size=30
    ),
    st.lists(st.integers(0, 29), max_size=4),
    st.integers(0, 3),
    st.integers(1, 100),
    st.booleans(),
    st.booleans(),
)
def test_a_pending_trace_is_the_list_it_stands_for_frames_tail_and_cut(
    events, framed, frees, max_entries, segments, nodes
):
    """``Pending`` against the list it stands for (its entries built at once, frames given, the
    frees after them, then ``newest_entries``): same entries, same cut, same columns; its times
    given as ints, or (``nodes``) as what they are read from, as a session without the tracer
    gives them."""
    from types import SimpleNamespace

    from memsnap_magic.recording.backends.cpu.entries import freed, newest_entries
    from memsnap_magic.recording.backends.cpu.events import times_ns
    from memsnap_magic.recording.backends.cpu.history import block_entries

    times, ptrs, sizes = (list(c) for c in zip(*events)) if events else ([], [], [])
    stacks = {i: [{"filename": "x.py", "line": i, "name": "f"}] for i in framed if i < len(events)}
    tail = [freed(BASE + i, 8 * (i + 1), 10**9 + i, "memsnap step 2") for i in range(frees)]
    build = functools.partial(block_entries, mark="memsnap step 2")
    whole = build(times, ptrs, sizes)
    for i, frames in stacks.items():
        whole[i]["frames"] = frames
    expected = newest_entries(whole + [dict(e) for e in tail], max_entries, segments)
    if nodes:
        pending = Pending([SimpleNamespace(start_time_ns=t) for t in times], list(ptrs), list(sizes), build, times_ns)
    else:
        pending = Pending(list(times), list(ptrs), list(sizes), build)
    pending.frames.update(stacks)
    for e in tail:
        pending.append(dict(e))
    kept = newest_entries(pending, max_entries, segments)
    assert len(kept) == len(expected) and entries(kept) == entries(expected)
    if type(kept) is Pending:
        assert [dict(kept[i]) for i in range(len(kept))] == expected
        assert column(kept, "action", None, object).tolist() == [e["action"] for e in expected]
        assert column(kept, "size", 0).tolist() == [e["size"] for e in expected]
        assert_same_actions(kept, expected)
        every = np.arange(len(expected))
        assert kept.times_of(every[::-1]).tolist() == [e["time_us"] for e in expected][::-1]
        assert column(kept, "time_us", -1).tolist() == [e["time_us"] for e in expected]
        kept = kept.built()
    assert kept == expected and expand(kept) == expand(expected)
    assert (kept.cut_first, kept.companions, kept.segments) == (expected.cut_first, expected.companions, segments)


@st.composite
def labelled_histories(draw):
    """``histories()`` with roles seen where they label something: at the addresses and sizes of
    blocks the events allocate or the start holds, at times between their events."""
    live_start, events, live_end, died, _, t = draw(histories())
    blocks = sorted({(a, n) for a, n in live_start.items()} | {(a, abs(n)) for _, a, n in events})
    times = [e[0] // 1000 for e in events] or [t // 1000]

    def seen() -> dict:
        picked = draw(st.lists(st.sampled_from(blocks), max_size=4)) if blocks else []
        return {a: (n, draw(st.sampled_from(ROLES))) for a, n in picked}

    timed = [(draw(st.sampled_from(times)) + draw(st.integers(-1, 1)), seen()) for _ in range(draw(st.integers(0, 3)))]
    roles = Roles(start=seen(), timed=sorted(timed, key=lambda x: x[0]), end=seen())
    return live_start, events, live_end, died, roles, t


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labelled_histories(), st.integers(1, 120), st.booleans(), st.booleans())
def test_a_trace_left_to_build_is_labelled_by_its_columns_as_the_built_one(args, max_entries, segments, oom):
    """Labels given to a ``Pending`` trace (by columns: it stays unbuilt, then stamped as the
    recorder stamps one step) are those a list gets, entry for entry and block for block: the
    roles seen, a free taking its allocation's category, a start block's free its role, the
    ring's head and what was appended (an error's ``oom``) of none, the marker where none is."""
    *_, roles, t = args
    mark, end_us = "memsnap step 4", t // 1000 + 7
    eager = snapshot(args, max_entries, segments, compact=True, mark=mark)
    lazy = snapshot(args, max_entries, segments, compact=True, mark=mark, lazy=True)
    for snap in (eager, lazy):
        if oom:
            snap["device_traces"][0].append({"action": "oom", "size": 64, "stream": 0, "time_us": end_us})
        label_snapshot(snap, 0, roles, end_us)
        stamp(snap, 0, [(0, mark)])
    trace = lazy["device_traces"][0]
    if type(trace) is Pending:
        assert not trace.ready
        assert [dict(trace[i]) for i in range(len(trace))] == eager["device_traces"][0]
        assert plain(digest(lazy)) == plain(digest(eager))
    complete(lazy)
    complete(eager)
    assert lazy == eager


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.booleans()), max_size=30),
    st.lists(st.tuples(st.integers(0, 29), st.sampled_from(ROLES)), max_size=4),
    st.integers(0, 2),
    st.integers(1, 100),
)
def test_any_pending_trace_is_labelled_as_its_list(events, picked, frees, max_entries):
    """Labels of a ``Pending`` made of any events (frees of what nothing allocated, two frees or
    two allocations in a row at an address) are a list's, including the frees after them."""
    from memsnap_magic.recording.backends.cpu.entries import freed, newest_entries
    from memsnap_magic.recording.backends.cpu.history import block_entries

    times = [1000 * (i + 1) for i in range(len(events))]
    ptrs = [BASE + 64 * slot for slot, _, _ in events]
    sizes = [8 * n if alloc else -8 * n for _, n, alloc in events]
    tail = [freed(BASE + 64 * i, 8, 10**6 + i, None) for i in range(frees)]
    seen = {ptrs[i]: (abs(sizes[i]), role) for i, role in picked if i < len(events)}
    roles = Roles(start=dict(seen), timed=[(times[len(times) // 2] // 1000, dict(seen))] if times else [], end={})
    expected = newest_entries(block_entries(times, ptrs, sizes, None) + [dict(e) for e in tail], max_entries, True)
    pending = Pending(list(times), list(ptrs), list(sizes), functools.partial(block_entries, mark=None))
    for e in tail:
        pending.append(dict(e))
    kept = newest_entries(pending, max_entries, True)
    end = [(BASE + 64 * slot, {"size": 8, "state": "active_allocated"}) for slot in range(4)]
    labelled = [copy.deepcopy(end) for _ in range(2)]
    for trace, blocks in zip((kept, expected), labelled):
        label(trace, blocks, roles, 10**4)
    assert labelled[0] == labelled[1]  # the end state's blocks: by what the trace left allocated there
    if type(kept) is Pending:
        assert not kept.ready
        assert [dict(kept[i]) for i in range(len(kept))] == expected
    assert list(kept) == expected
