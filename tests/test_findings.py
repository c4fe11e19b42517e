"""The dashboard's headline: which steps leaked, which spiked, on runs with known answers."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

import memsnap_magic
from memsnap_magic import session
from memsnap_magic.results.findings import leaks, spikes
from memsnap_magic.results.intervals import Interval
from memsnap_magic.views.headline import headline
from memsnap_magic.views.words import step_list

MiB = 1 << 20


def interval(step: int, start: int, rise: int, kept: int) -> Interval:
    return Interval(
        step=step,
        rank=0,
        device="cpu",
        path=None,
        baseline_allocated=start,
        peak_allocated=start + max(rise, kept, 0),
        end_allocated=start + kept,
        trace_entries=10,
    )


def run_of(figures: list[tuple[int, int]], start: int = 100 * MiB) -> list[Interval]:
    """Back-to-back steps 1..n from ``(rise, kept)``: each starts where the last ended."""
    out = []
    for step, (rise, kept) in enumerate(figures, start=1):
        out.append(interval(step, start, rise, kept))
        start += kept
    return out


def held_run(figures: list[tuple[int, int]], start: int = 100 * MiB) -> list[Interval]:
    """Back-to-back steps 1..n from ``(held for a while, kept)``, what each kept made before its
    peak, so the peak is its start, what it kept and what it held for a while."""
    out = []
    for step, (held, kept) in enumerate(figures, start=1):
        iv = replace(interval(step, start, kept + held, kept), transient=held)
        out.append(iv)
        start += kept
    return out


def test_a_leak_over_steps_3_to_8_and_a_spike_at_step_5_are_named():
    figures = [(32 * MiB, 0)] * 10
    for step in range(3, 9):
        figures[step - 1] = (32 * MiB, 32 * MiB)
    figures[4] = (160 * MiB, 32 * MiB)  # step 5: the step's activations and a 128 MiB temporary
    ivs = held_run(figures)
    (leak,) = leaks(ivs, [iv.step for iv in ivs])
    assert leak.steps == (3, 4, 5, 6, 7, 8) and leak.total == 192 * MiB and leak.since == 2
    (spike,) = spikes(ivs, [iv.step for iv in ivs])
    assert (spike.step, spike.held, spike.typical, spike.rise) == (5, 160 * MiB, 32 * MiB, 192 * MiB)
    assert headline(ivs) == (
        "leak: steps 3–8 each kept +32.0 MiB (+192.0 MiB held since step 2)\n"
        "spike: step 5 held +160.0 MiB only for a while (typical +32.0 MiB)"
    )


def test_the_same_story_recorded_for_real_on_the_cpu(shell, capsys):
    shell.run_cell("import torch\nhold = []\nM = 2**20")
    for step in range(1, 11):
        body = "acts = torch.empty(32 * M, dtype=torch.uint8)\n"
        if step == 5:
            body += "big = torch.empty(128 * M, dtype=torch.uint8)\ndel big\n"
        body += "del acts\n"
        if 3 <= step <= 8:
            body += "hold.append(torch.empty(32 * M, dtype=torch.uint8))\n"
        assert shell.run_cell(f"%%memsnap step={step} device=cpu\n{body}").success
    said = headline(session().intervals)
    assert said.startswith("leak: steps 3–8 each kept +32.0 MiB (+192.0 MiB held since step 2)\n")
    assert "spike: step 5 held +160.0 MiB only for a while (typical +32.0 MiB)" in said.splitlines()
    # %memsnap list and memsnap summarize (text and --json) say the same lines under their table
    capsys.readouterr()
    shell.run_line_magic("memsnap", "list")
    listed = capsys.readouterr().out
    assert listed.endswith("findings:\n" + "".join(f"  {line}\n" for line in said.splitlines()))
    from memsnap_magic.cli import main

    memsnap_magic.wait_for_writes()
    assert main(["summarize", "memsnap"]) == 0
    out = capsys.readouterr().out
    assert "findings:\n" + "".join(f"  {line}\n" for line in said.splitlines()) in out, out
    assert main(["summarize", "memsnap", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {tuple(r["findings"]) for r in records} == {tuple(said.splitlines())}


@given(
    st.lists(
        st.tuples(st.integers(0, MiB // 2), st.integers(-(MiB // 2), MiB // 2)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 8 << 30),
    st.integers(0, 512 * MiB),
)
@settings(max_examples=300, deadline=None)
def test_noise_makes_no_claim(noise, start, typical):
    # every step rises ~typical and keeps nothing, give or take 0.5 MiB
    ivs = run_of([(typical + rise, kept) for rise, kept in noise], start=start + MiB)
    assert leaks(ivs, [iv.step for iv in ivs]) == []
    assert spikes(ivs, [iv.step for iv in ivs]) == []
    assert headline(ivs).startswith("no leak or spike")


def test_runs_of_uneven_leaks_and_single_steps_are_worded_by_what_they_are():
    ivs = run_of([(4 * MiB, 0), (12 * MiB, 10 * MiB), (30 * MiB, 20 * MiB), (4 * MiB, 0), (8 * MiB, 8 * MiB)])
    assert headline(ivs).splitlines() == [
        "leak: steps 2–3 kept +10.0 MiB to +20.0 MiB (+30.0 MiB held since step 1)",
        "leak: step 5 kept +8.0 MiB (+8.0 MiB held since step 4)",
    ]
    # a leak is judged against the step's start: 1 % of 10 GiB is more than 50 MiB
    big = run_of([(0, 50 * MiB)] * 3, start=10 << 30)
    assert leaks(big, [1, 2, 3]) == []


def test_step_lists_read_runs_of_consecutive_steps_as_ranges():
    assert step_list([4]) == "step 4"
    assert step_list([3, 4, 5]) == "steps 3–5"
    assert step_list([3, 4]) == "steps 3–4"
    assert step_list([1, 5, 10]) == "steps 1, 5, 10"
    assert step_list([*range(1, 101), 200, 300, 301, 400, 401, 402]) == "steps 1–100, 200, 300, 301, 400–402"


@given(st.lists(st.integers(0, 60), min_size=1, unique=True).map(sorted))
def test_a_step_list_names_exactly_its_steps(steps):
    named = []
    for part in step_list(steps).removeprefix("steps ").removeprefix("step ").split(", "):
        low, _, high = part.partition("–")
        named += range(int(low), int(high or low) + 1)
    assert named == steps


def test_a_step_recorded_after_a_leak_is_not_what_the_leak_is_held_since():
    # step 5 recorded first (it leaks 2 MiB), then step 2: shown 2, 5, but 5 ran before 2
    two = interval(2, 101 * MiB, 0, 0)
    five = interval(5, 100 * MiB, 2 * MiB, 2 * MiB)
    five, two = replace(five, end_us=1_000), replace(two, end_us=2_000)
    (leak,) = leaks([two, five], [2, 5])
    assert leak.since is None and "held since" not in headline([two, five])
    five, two = replace(five, end_us=2_000), replace(two, end_us=1_000)  # recorded in order: held since step 2
    (leak,) = leaks([two, five], [2, 5])
    assert leak.since == 2


def test_what_a_step_made_and_kept_is_no_spike():
    """An optimizer's first step makes its state and the gradients and keeps them: its rise
    over its start is large, but its peak is the steady steps' peak (AdamW, measured on the CPU)."""
    first = interval(1, 1_159_720, 6_537_920 - 1_159_720, 3_281_032)
    steady = [interval(n, 4_440_752, 6_537_920 - 4_440_752, 0) for n in range(2, 6)]
    assert spikes([first, *steady], [1, 2, 3, 4, 5]) == []
    # the same first step with something held only for a while on top is one
    spiking = interval(1, 1_159_720, 6_537_920 - 1_159_720 + 8 * MiB, 3_281_032)
    (spike,) = spikes([spiking, *steady], [1, 2, 3, 4, 5])
    assert spike.step == 1 and spike.rise == spiking.peak_increase
