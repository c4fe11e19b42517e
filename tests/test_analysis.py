import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from snapshots import alloc, entry, free, reference, snapshot

from memsnap_magic.results.analysis import decimate, pick_device, summarize
from memsnap_magic.results.pairing import sorted_contains

MiB = 1 << 20


def test_window_from_empty_start():
    trace = alloc(0x10, 4 * MiB, 1) + alloc(0x20, 2 * MiB, 2) + free(0x10, 4 * MiB, 3)
    s = summarize(snapshot(trace, {0x20: 2 * MiB}))
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == (0, 6 * MiB, 2 * MiB)
    assert s.peak_increase == 6 * MiB and s.kept == 2 * MiB and s.trace_entries == 4
    assert s.allocated.tolist() == [4 * MiB, 6 * MiB, 2 * MiB]
    assert s.time_us.tolist() == [1, 2, 3] and s.peak_index == 1


def test_window_starting_mid_run():
    # 0xA (3 MiB) lived before the window and is freed inside it; 0xB (5 MiB) lived before and
    # survives untouched; the window allocates 1 MiB at 0xC and keeps it.
    trace = alloc(0xC, 1 * MiB) + free(0xA, 3 * MiB)
    s = summarize(snapshot(trace, {0xB: 5 * MiB, 0xC: 1 * MiB}))
    assert s.baseline_allocated == 8 * MiB
    assert s.peak_allocated == 9 * MiB
    assert s.end_allocated == 6 * MiB
    assert s.kept == -2 * MiB


def test_address_reused_after_a_pre_window_free():
    trace = free(0xA, 2 * MiB) + alloc(0xA, 1 * MiB)
    s = summarize(snapshot(trace, {0xA: 1 * MiB}))
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == (2 * MiB, 2 * MiB, 1 * MiB)


def test_pending_free_counts_when_completed_and_other_actions_are_ignored():
    trace = [
        *alloc(1, 100),
        entry("free_requested", 1, 100),
        *alloc(2, 50),
        entry("free_completed", 1, 100),
        entry("segment_alloc", 256, 1 << 21),
        entry("snapshot", 0, 150),
        {"action": "oom", "size": 1 << 30, "device_free": 0},
        entry("future_action_we_do_not_know", 3, 999),
    ]
    s = summarize(snapshot(trace, {0x2: 50}))
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == (0, 150, 50)


def test_trace_with_free_requested_only_uses_it():
    trace = [*alloc(1, 10), entry("free_requested", 1, 10)]
    s = summarize(snapshot(trace, {}))
    assert (s.peak_allocated, s.end_allocated) == (10, 0)


def test_blocks_addresses_follow_segment_layout():
    # one segment with an inactive block before the live one: the live block's address is
    # segment address + size of the blocks before it, and it was allocated in the trace.
    snap = {
        "device_traces": [alloc(0x1000 + 512, 256)],
        "segments": [
            {
                "device": 0,
                "address": 0x1000,
                "total_size": 2048,
                "blocks": [
                    {"size": 512, "state": "inactive"},
                    {"size": 512, "requested_size": 256, "state": "active_allocated"},
                    {"size": 1024, "requested_size": 1000, "state": "active_allocated"},
                ],
            }
        ],
    }
    s = summarize(snap)
    assert s.baseline_allocated == 1000 and s.end_allocated == 1256


def test_device_choice():
    snap = snapshot(alloc(0x1, 64), {0x1: 64}, device=1, n_devices=2)
    assert pick_device(snap) == 1
    assert summarize(snap).peak_allocated == 64
    assert summarize(snap, device=0).trace_entries == 0
    assert summarize({"segments": [], "device_traces": []}).peak_allocated == 0


@st.composite
def windows(draw):
    """A random allocation history cut at a random point: the window starts mid-run."""
    n = draw(st.integers(1, 60))
    live: dict[int, int] = {}
    events = []
    next_addr = 1
    for _ in range(n):
        if live and draw(st.booleans()):
            a = draw(st.sampled_from(sorted(live)))
            events.append(("free", a, live.pop(a)))
        else:
            a = draw(st.sampled_from(sorted(set(range(1, next_addr + 1)) - set(live))))
            next_addr = max(next_addr, a + 1)
            size = draw(st.integers(1, 1 << 24))
            live[a] = size
            events.append(("alloc", a, size))
    cut = draw(st.integers(0, len(events)))
    trace = []
    for action, a, size in events[cut:]:
        trace += alloc(a, size) if action == "alloc" else free(a, size)
    return snapshot(trace, live)


@given(windows())
@settings(max_examples=300, deadline=None)
def test_summary_equals_brute_force_reference(snap):
    s = summarize(snap)
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == reference(snap, 0)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_sorted_contains_equals_isin(values, query):
    values = np.unique(np.asarray(values, dtype=np.uint64))  # ascending, as summarize passes it
    query = np.asarray(query + values[::3].tolist(), dtype=np.uint64)  # some hits, some misses
    assert sorted_contains(values, query).tolist() == np.isin(query, values).tolist()


@st.composite
def busy_windows(draw):
    """Several devices; frees requested long before they complete (record_stream); the window
    cut mid-run and truncated like a full ring buffer (only the newest entries kept)."""
    devices = draw(st.integers(1, 3))
    sums = draw(st.booleans())  # segments carry their own byte sums, as PyTorch writes them
    traces, segments = [], []
    for d in range(devices):
        live: dict[int, int] = {}
        pending: list[tuple[int, int]] = []
        trace = []
        base = (d + 1) << 40
        for _ in range(draw(st.integers(0, 50))):
            choice = draw(st.integers(0, 2))
            if choice == 0 and live:
                a = draw(st.sampled_from(sorted(live)))
                trace.append(entry("free_requested", a, live[a]))
                pending.append((a, live.pop(a)))
            elif choice == 1 and pending:
                a, size = pending.pop(draw(st.integers(0, len(pending) - 1)))
                trace.append(entry("free_completed", a, size))
            else:
                free_addrs = [
                    base + k for k in range(64) if base + k not in live and all(base + k != p for p, _ in pending)
                ]
                a = draw(st.sampled_from(free_addrs))
                live[a] = draw(st.integers(1, 1 << 30))
                trace.append(entry("alloc", a, live[a]))
        keep = draw(st.integers(0, len(trace)))
        traces.append(trace[len(trace) - keep :])
        segments += [
            {
                "device": d,
                "address": a,
                "total_size": s,
                "stream": 0,
                **({"allocated_size": s, "active_size": s, "requested_size": s} if sums else {}),
                "blocks": [{"size": s, "requested_size": s, "state": "active_allocated"}],
            }
            for a, s in live.items()
        ]
        segments += [
            {
                "device": d,
                "address": a,
                "total_size": s,
                "stream": 0,
                **({"allocated_size": 0, "active_size": s, "requested_size": s} if sums else {}),
                "blocks": [{"size": s, "requested_size": s, "state": "active_pending_free"}],
            }
            for a, s in pending
        ]
    return {"segments": segments, "device_traces": traces}


@given(busy_windows())
@settings(max_examples=300, deadline=None)
def test_summary_equals_reference_on_every_device(snap):
    for d in range(len(snap["device_traces"])):
        s = summarize(snap, device=d)
        assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == reference(snap, d)


def test_decimate_keeps_extremes_and_order():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 1000, 100_000)
    y[54_321] = 5000
    x = np.arange(len(y))
    dx, dy = decimate(x, y, 2000)
    assert len(dy) <= 2000 and dy.max() == 5000 and dy.min() == y.min()
    assert np.all(np.diff(dx) > 0)
    assert decimate(x[:10], y[:10], 2000)[1].tolist() == y[:10].tolist()


@given(windows(), st.integers(-1, 200))
@settings(max_examples=200, deadline=None)
def test_blocks_alive_at_any_event_add_up_to_the_timeline(snap, at):
    from memsnap_magic.results.alive import alive_at

    s = summarize(snap)
    at = min(at, len(s.allocated) - 1)
    alive = alive_at(s, index=at, top=0)
    expected = s.allocated[at] if at >= 0 else s.baseline_allocated
    assert sum(b["size"] for b in alive) == expected


def test_alive_at_peak_names_frames_and_origin():
    from memsnap_magic.results.alive import alive_at

    frames = [{"filename": "train.py", "line": 7, "name": "forward"}]
    trace = [dict(alloc(16, 300)[0], frames=frames), *alloc(32, 100), *free(16, 300), *free(10, 50)]
    snap = snapshot(trace, {0x20: 100, 0xB: 1000})
    s = summarize(snap)
    got = alive_at(s)
    assert [(b["size"], b["before"]) for b in got] == [(1000, True), (300, False), (100, False), (50, True)]
    assert got[1]["frames"] == frames and got[2]["frames"] == []


def long_window(seed: int, events: int = 4000) -> dict:
    """A consistent history of ``events`` allocs and frees over a few repeated sizes (layers of
    one shape), addresses reused, cut mid-run; some blocks stay live throughout."""
    rng = random.Random(seed)
    sizes = [rng.choice([512, 4096, 1 << 20, 3 << 20, 8 << 20]) + rng.randrange(8) for _ in range(40)]
    live = {a: rng.choice(sizes) for a in range(1, 40)}
    history = []
    for _ in range(events):
        if live and rng.random() < (0.45 if len(live) < 300 else 0.6):
            a = rng.choice(list(live))
            history.append(("free", a, live.pop(a)))
        else:
            a = rng.choice([a for a in range(1, 600) if a not in live])
            live[a] = rng.choice(sizes)
            history.append(("alloc", a, live[a]))
    trace = []
    for action, a, size in history[events // 3 :]:
        trace += alloc(a, size) if action == "alloc" else free(a, size)
    return snapshot(trace, live)


@pytest.mark.parametrize("seed", range(6))
def test_top_blocks_pair_only_the_largest_sizes_and_match_pairing_everything(seed, monkeypatch):
    from memsnap_magic.results import alive, pairing

    s = summarize(long_window(seed))
    read = []
    addresses = pairing.addresses
    monkeypatch.setattr(
        pairing, "addresses", lambda trace, entries: read.append(len(entries)) or addresses(trace, entries)
    )
    for at in (s.peak_index, -1, len(s.allocated) // 2):
        everything = alive.alive_at(s, index=at, top=0)
        assert sum(b["size"] for b in everything) == (s.allocated[at] if at >= 0 else s.baseline_allocated)
        for top in (1, 3, 10):
            read.clear()
            assert alive.alive_at(s, index=at, top=top) == everything[:top]
            if top < 10:
                assert sum(read) < len(s.allocated)  # not every event's address was read


def test_top_blocks_widen_past_larger_blocks_freed_before_the_index():
    from memsnap_magic.results.alive import alive_at

    trace = alloc(0x1, 10) + alloc(0x2, 20) + alloc(0x3, 30)
    for i in range(1000):  # temporaries, each larger than the last, freed right away
        trace += alloc(0x1000 + i, MiB + i) + free(0x1000 + i, MiB + i)
    s = summarize(snapshot(trace, {0x1: 10, 0x2: 20, 0x3: 30}))
    assert s.peak_allocated == 60 + MiB + 999
    assert [b["size"] for b in alive_at(s, top=3)] == [MiB + 999, 30, 20]


def test_top_blocks_of_an_old_file_without_requested_sizes_match_pairing_everything():
    # the end state's 512 B block is the trace's 500 B alloc: pairing by size would miss them
    from memsnap_magic.results.alive import alive_at

    trace = alloc(0x1, 500)
    for i in range(32):
        trace += alloc(0x1000 + i, 510) + free(0x1000 + i, 510)
    for i in range(300):
        trace += alloc(0x9000 + i, 10) + free(0x9000 + i, 10)
    snap = snapshot(trace, {0x1: 512})
    del snap["segments"][0]["blocks"][0]["requested_size"]
    s = summarize(snap)
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == reference(snap, 0)
    for at in (-1, len(s.allocated) - 1):
        assert alive_at(s, index=at, top=1) == alive_at(s, index=at, top=0)[:1]
    assert alive_at(s, index=-1, top=1) == []
    with pytest.raises(ValueError, match="top must be 0"):
        alive_at(s, top=-1)


def test_an_end_state_that_contradicts_the_trace_pairs_every_event():
    # recording paused: the block the trace allocated was freed unseen, so the end state lacks it
    trace = alloc(0x1, 100) + free(0xA, 30) + alloc(0x2, 50)
    snap = snapshot(trace, {0x2: 50})
    s = summarize(snap)
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == reference(snap, 0) == (30, 150, 150)


def test_old_files_without_requested_sizes_pair_every_event():
    # the end state gives rounded sizes only; the trace's requested ones must not leak into the baseline
    trace = alloc(0x1, 300) + free(0xA, 1000) + alloc(0x2, 700)
    snap = snapshot(trace, {0x1: 512, 0x2: 1024, 0xB: 2048})
    for seg in snap["segments"]:
        del seg["blocks"][0]["requested_size"]
    s = summarize(snap)
    assert (s.baseline_allocated, s.peak_allocated, s.end_allocated) == reference(snap, 0) == (3048, 3348, 3048)


def test_entries_without_time_us_carry_the_last_time_forward():
    trace = [
        {"action": "alloc", "addr": 1, "size": 5, "stream": 0},
        {"action": "alloc", "addr": 2, "size": 5, "stream": 0, "time_us": 70},
        {"action": "alloc", "addr": 3, "size": 5, "stream": 0},
    ]
    s = summarize(snapshot(trace, {1: 5, 2: 5, 3: 5}))
    assert s.time_us.tolist() == [0, 70, 70] and s.peak_allocated == 15


@settings(max_examples=200, deadline=None)
@given(windows())
def test_kept_blocks_are_those_alive_at_the_end_that_the_window_allocated(snap):
    """``kept`` (one pass over the allocations' addresses) agrees with pairing every event."""
    from memsnap_magic.results.alive import alive_at, kept

    s = summarize(snap)
    last = len(s.events[1]) - 1
    paired = [b for b in alive_at(s, index=last, top=0) if not b["before"]] if last >= 0 else []
    assert sorted((b["addr"], b["size"]) for b in kept(s)) == sorted((b["addr"], b["size"]) for b in paired)
    assert [b["size"] for b in kept(s)] == sorted((b["size"] for b in kept(s)), reverse=True)
