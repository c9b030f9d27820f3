"""Early-stopping rules: the median rule, successive halving and hyperband, on histories written out by hand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.core.sweeps.stopping import (
    brackets,
    decide_stops,
    hyperband,
    median_rule,
    rungs,
    successive_halving,
)
from phalanx.model.sweeps import EarlyStopping


def curve(*values: float) -> dict[int, float]:
    """Reports at steps 1, 2, 3..."""
    return {step: value for step, value in enumerate(values, start=1)}


GOOD = {0: curve(1.0, 0.8, 0.6, 0.5), 1: curve(1.0, 0.7, 0.6, 0.4), 2: curve(0.9, 0.8, 0.7, 0.6)}


def test_median_stops_a_trial_worse_than_the_others_running_averages() -> None:
    history = {**GOOD, 3: curve(2.0, 1.9, 1.8, 1.7)}
    (decision,) = median_rule(history, running=[3], direction="minimize", metric="loss")
    assert (decision.trial, decision.step) == (3, 4)
    # running averages up to step 4: 0.725, 0.675, 0.75 -> median 0.725
    assert decision.reason == (
        "trial 3 stopped at step 4: its best loss so far, 1.7, is worse than 0.725, the median of 3 other trials' "
        "running averages up to step 4 (median rule)"
    )


def test_median_keeps_a_trial_whose_best_beats_the_median_even_if_its_last_does_not() -> None:
    history = {**GOOD, 3: curve(2.0, 0.5, 1.8, 1.7)}
    assert median_rule(history, running=[3], direction="minimize", metric="loss") == []


def test_median_waits_for_start_step_and_min_trials() -> None:
    history = {**GOOD, 3: curve(2.0, 1.9, 1.8)}
    assert median_rule(history, running=[3], direction="minimize", metric="loss") == []  # step 3 < 4
    assert len(median_rule(history, running=[3], direction="minimize", metric="loss", start_step=3)) == 1
    history = {0: GOOD[0], 1: GOOD[1], 3: curve(2.0, 1.9, 1.8, 1.7)}
    assert median_rule(history, running=[3], direction="minimize", metric="loss") == []  # 2 others < 3
    assert len(median_rule(history, running=[3], direction="minimize", metric="loss", min_trials=2)) == 1


def test_median_compares_only_with_trials_that_reached_the_step() -> None:
    short = {5: curve(9.0, 9.0), 6: curve(9.0), 7: {}}
    history = {**GOOD, **short, 3: curve(2.0, 1.9, 1.8, 1.7)}
    (decision,) = median_rule(history, running=[3], direction="minimize", metric="loss")
    assert "median of 3 other trials'" in decision.reason


def test_median_mirrors_for_maximize_and_judges_running_trials_only() -> None:
    flipped = {n: {s: -v for s, v in c.items()} for n, c in {**GOOD, 3: curve(2.0, 1.9, 1.8, 1.7)}.items()}
    assert [d.trial for d in median_rule(flipped, running=[0, 1, 2, 3], direction="maximize", metric="acc")] == [3]
    assert median_rule(flipped, running=[0, 1, 2], direction="maximize", metric="acc") == []


def test_rungs_and_brackets() -> None:
    assert rungs(1, 3, 27) == [1, 3, 9]
    assert rungs(2, 2, None)[:4] == [2, 4, 8, 16] and rungs(2, 2, None)[-1] < 10**9 + 1
    assert brackets(1, 3, 81) == 5 and brackets(1, 3, 80) == 4 and brackets(5, 2, 9) == 1


def test_successive_halving_keeps_the_top_third_at_a_rung() -> None:
    # Six trials at rung 3 (min 1, factor 3): keep 6 // 3 = 2.
    history = {n: {1: 1.0, 3: float(n)} for n in range(6)}
    decisions = successive_halving(history, running=range(6), direction="minimize", metric="loss")
    assert [d.trial for d in decisions] == [2, 3, 4, 5]
    assert {d.step for d in decisions} == {3}
    assert decisions[0].reason == (
        "trial 2 stopped at rung step 3: its loss there, 2, is not in the top 2 of the 6 trials that reached it "
        "(the cut is 1; successive halving, keeping 1/3)"
    )


def test_successive_halving_waits_for_reduction_factor_trials_at_a_rung() -> None:
    history = {0: {3: 0.1}, 1: {3: 0.9}}
    assert successive_halving(history, running=[1], direction="minimize", metric="loss") == []
    history[2] = {3: 0.5}
    assert [d.trial for d in successive_halving(history, running=[1, 2], direction="minimize", metric="loss")] == [1, 2]


def test_successive_halving_judges_by_the_value_at_or_before_the_rung() -> None:
    # Trial 2 reports at steps 2 and 5: its rung-3 value is its step-2 value (0.1), the best.
    history = {0: {3: 0.5, 4: 0.5}, 1: {3: 0.6, 4: 0.6}, 2: {2: 0.1, 5: 9.0}}
    decisions = successive_halving(history, running=[0, 1, 2], direction="minimize", metric="loss")
    assert [d.trial for d in decisions] == [0, 1]


def test_successive_halving_ties_favour_the_earlier_trial() -> None:
    history = {n: {1: 0.5} for n in range(3)}
    assert [d.trial for d in successive_halving(history, range(3), "minimize", metric="m")] == [1, 2]
    assert [d.trial for d in successive_halving(history, range(3), "maximize", metric="m")] == [1, 2]


def test_successive_halving_has_no_rung_at_max_resource() -> None:
    history = {n: {3: float(n), 9: float(n)} for n in range(6)}
    assert successive_halving(history, range(6), "minimize", metric="m", max_resource=9) != []  # rung 3 judged
    # A trial with no report at or before the highest rung it passed is not judged there (nothing to judge by).
    only_late = {n: {9: float(n)} for n in range(6)}
    assert successive_halving(only_late, range(6), "minimize", metric="m", max_resource=9) == []
    assert successive_halving(history, range(6), "minimize", metric="m", min_resource=9, max_resource=9) == []


def test_hyperband_brackets_compete_apart() -> None:
    # min 1, max 9, factor 3: brackets 0 (rungs 1, 3), 1 (rung 3), 2 (rung 9: none below 9). Trial n in n % 3.
    history = {n: {1: float(n), 3: float(n)} for n in range(9)}
    decisions = hyperband(history, range(9), "minimize", metric="loss", max_resource=9)
    # bracket 0: trials 0, 3, 6 at rung 3 -> keep 1 (trial 0); bracket 1: 1, 4, 7 -> keep 1; bracket 2: no rung.
    assert [d.trial for d in decisions] == [3, 4, 6, 7]
    assert "hyperband bracket 0 of 3" in decisions[0].reason and "hyperband bracket 1 of 3" in decisions[1].reason


def test_decide_stops_applies_the_rules_defaults() -> None:
    history = {**GOOD, 3: curve(2.0, 1.9, 1.8, 1.7)}
    median = EarlyStopping(rule="median")
    assert [d.trial for d in decide_stops(median, history, [3], "minimize", metric="loss")] == [3]
    halving = EarlyStopping(rule="successiveHalving", minResource=2, reductionFactor=2)
    assert [d.trial for d in decide_stops(halving, history, [0, 1, 2, 3], "minimize", metric="loss")] == [2, 3]
    band = EarlyStopping(rule="hyperband", maxResource=4, reductionFactor=2)
    assert decide_stops(band, history, [0, 1, 2, 3], "minimize", metric="loss") == hyperband(
        history, [0, 1, 2, 3], "minimize", metric="loss", min_resource=1, reduction_factor=2, max_resource=4
    )


HISTORIES = st.dictionaries(
    st.integers(0, 30),
    st.dictionaries(st.integers(1, 40), st.floats(-1e6, 1e6, allow_nan=False), max_size=8),
    max_size=12,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(history=HISTORIES, data=st.data())
def test_every_rule_stops_running_trials_only_and_is_order_independent(
    history: dict[int, dict[int, float]], data: st.DataObject
) -> None:
    running = data.draw(st.lists(st.sampled_from(sorted(history)), unique=True) if history else st.just([]))
    reordered = dict(reversed(list(history.items())))
    for rule in (
        EarlyStopping(rule="median", minTrials=2, startStep=2),
        EarlyStopping(rule="successiveHalving", reductionFactor=2),
        EarlyStopping(rule="hyperband", maxResource=27),
    ):
        for direction in ("minimize", "maximize"):
            decisions = decide_stops(rule, history, running, direction, metric="m")
            assert {d.trial for d in decisions} <= set(running)
            assert len({d.trial for d in decisions}) == len(decisions)
            assert decide_stops(rule, reordered, list(reversed(running)), direction, metric="m") == decisions


@settings(max_examples=100, deadline=None, derandomize=True)
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=3, max_size=30, unique=True))
def test_successive_halving_never_stops_the_best_at_a_rung(values: list[float]) -> None:
    history = {n: {1: value} for n, value in enumerate(values)}
    decisions = successive_halving(history, range(len(values)), "minimize", metric="m")
    best = min(range(len(values)), key=lambda n: values[n])
    assert best not in {d.trial for d in decisions}
    assert len(decisions) == len(values) - max(1, len(values) // 3)


FALLING = {0: curve(4.0, 2.0, 1.0, 0.5), 1: curve(4.0, 2.2, 1.2, 0.6), 2: curve(4.0, 2.4, 1.4, 0.7)}


def test_median_of_values_stops_on_falling_curves_a_trial_the_running_averages_keep() -> None:
    history = {**FALLING, 3: curve(4.0, 3.0, 2.0, 1.0)}
    # running averages up to step 4: 1.875, 2.0, 2.125 -> median 2.0, and 1.0 beats it: the trial runs on
    assert median_rule(history, running=[3], direction="minimize", metric="loss") == []
    (decision,) = median_rule(history, running=[3], direction="minimize", metric="loss", of_values=True)
    assert (decision.trial, decision.step) == (3, 4)
    assert decision.reason == (
        "trial 3 stopped at step 4: its best loss so far, 1, is worse than 0.6, the median of 3 other trials' "
        "values at step 4 (median rule)"
    )
    rule = EarlyStopping(rule="median", medianOf="values")
    assert [d.trial for d in decide_stops(rule, history, [3], "minimize", metric="loss")] == [3]
    assert decide_stops(EarlyStopping(rule="median"), history, [3], "minimize", metric="loss") == []


def test_median_of_values_takes_a_trials_latest_report_at_or_before_the_step() -> None:
    gappy = {0: {1: 4.0, 2: 2.0, 3: 0.5, 5: 3.0}, 1: curve(4.0, 2.2, 1.2, 0.6), 2: curve(4.0, 2.4, 1.4, 0.7)}
    history = {**gappy, 3: curve(4.0, 3.0, 2.0, 0.55)}
    # at step 4: trial 0 counts with 0.5 (step 3; its 3.0 comes later), then 0.6 and 0.7 -> median 0.6
    assert median_rule(history, running=[3], direction="minimize", metric="loss", of_values=True) == []
    history[3] = curve(4.0, 3.0, 2.0, 0.65)
    assert len(median_rule(history, running=[3], direction="minimize", metric="loss", of_values=True)) == 1
