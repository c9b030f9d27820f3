"""The sweep's decision function: creation within budgets, re-use of asked suggestions, finishing, best trial."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.core.sweeps.plan import TrialObservation, plan_sweep
from phalanx.model.sweeps import Sweep, SweepPhase, TrialPhase, parse_sweep

P = TrialPhase


def sweep_of(doc: dict[str, Any], **spec: Any) -> Sweep:
    doc["spec"].update(spec)
    return parse_sweep(doc)


def trial(number: int, phase: TrialPhase, value: float | None = None, **intermediate: float) -> TrialObservation:
    final = {"val_loss": value} if value is not None else {}
    steps = {int(step.removeprefix("s")): v for step, v in intermediate.items()}
    return TrialObservation(number, phase, {"lr": 0.01 * (number + 1)}, final, steps)


def params(number: int) -> dict[str, Any]:
    return {"lr": 0.01 * (number + 1)}


def test_a_new_sweep_asks_for_as_many_suggestions_as_it_may_run(doc: dict[str, Any]) -> None:
    plan = plan_sweep(sweep_of(doc), [], {})
    assert (plan.phase, plan.ask, plan.create, plan.finish) == (SweepPhase.PENDING, 2, [], None)


def test_asked_suggestions_become_trials_within_parallel_trials(doc: dict[str, Any]) -> None:
    plan = plan_sweep(sweep_of(doc), [], {0: params(0), 1: params(1), 2: params(2)})
    assert [(c.number, c.name) for c in plan.create] == [(0, "lr-search-0"), (1, "lr-search-1")]
    assert plan.ask == 0 and plan.abandon == []
    assert plan.create[0].reason == "trial 0 created with lr=0.01 (1 of 2 parallel, 1 of 20 trials)"
    assert plan.phase is SweepPhase.RUNNING


def test_a_number_that_has_a_trial_is_never_created_again(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, parallelTrials=4)
    asked = {0: params(0), 1: params(1)}
    first = plan_sweep(sweep, [], asked)
    assert [c.number for c in first.create] == [0, 1] and first.ask == 2
    # The controller created trial 0, then crashed before creating 1: after the restart only 1 is created.
    again = plan_sweep(sweep, [trial(0, P.PENDING)], asked)
    assert [c.number for c in again.create] == [1]
    assert plan_sweep(sweep, [trial(0, P.PENDING), trial(1, P.RUNNING)], asked).create == []


def test_the_same_inputs_give_the_same_plan(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc)
    trials = [trial(0, P.SUCCEEDED, 0.3), trial(1, P.RUNNING, s1=0.5)]
    assert plan_sweep(sweep, trials, {2: params(2)}) == plan_sweep(sweep, list(reversed(trials)), {2: params(2)})


def test_max_trials_bounds_creation_and_the_rest_of_asked_is_abandoned(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxTrials=3, parallelTrials=5)
    plan = plan_sweep(sweep, [trial(0, P.SUCCEEDED, 0.3)], {n: params(n) for n in range(1, 5)})
    assert [c.number for c in plan.create] == [1, 2]
    assert plan.abandon == [3, 4] and plan.ask == 0


def test_a_lowered_max_trials_abandons_every_asked_suggestion(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxTrials=1, parallelTrials=3)
    plan = plan_sweep(sweep, [trial(0, P.RUNNING), trial(1, P.RUNNING)], {2: params(2), 3: params(3)})
    assert (plan.create, plan.ask, plan.abandon, plan.finish) == ([], 0, [2, 3], None)


def test_the_sweep_succeeds_when_max_trials_are_done_with_the_best_trial(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxTrials=3, objective={"metric": "val_loss"})
    trials = [trial(0, P.SUCCEEDED, 0.3), trial(1, P.SUCCEEDED, 0.2), trial(2, P.FAILED)]
    plan = plan_sweep(sweep, trials, {})
    assert plan.finish is not None and plan.phase is SweepPhase.SUCCEEDED
    assert plan.finish.reason == "MaxTrialsReached"
    assert plan.finish.message == "all 3 trials done; the best is lr-search-1 with val_loss=0.2"
    assert plan.best is not None and (plan.best.number, plan.best.value, plan.best.parameters) == (1, 0.2, params(1))
    assert (plan.counts.created, plan.counts.succeeded, plan.counts.failed) == (3, 2, 1)


def test_the_sweep_waits_for_running_trials_before_it_succeeds(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxTrials=2, objective={"metric": "val_loss"})
    plan = plan_sweep(sweep, [trial(0, P.SUCCEEDED, 0.3), trial(1, P.RUNNING)], {})
    assert (plan.finish, plan.ask, plan.create, plan.phase) == (None, 0, [], SweepPhase.RUNNING)


def test_reaching_the_goal_succeeds_and_stops_what_still_runs(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, parallelTrials=3)  # goal: val_loss <= 0.05
    trials = [trial(0, P.SUCCEEDED, 0.04), trial(1, P.RUNNING), trial(2, P.PENDING)]
    plan = plan_sweep(sweep, trials, {3: params(3)})
    assert plan.finish is not None and plan.finish.reason == "GoalReached"
    assert plan.finish.message == "trial lr-search-0 reached the goal: val_loss=0.04 (minimize to 0.05)"
    assert [s.number for s in plan.stop] == [1, 2] and plan.abandon == [3] and plan.create == []


def test_a_maximized_goal_is_reached_from_below(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, objective={"metric": "acc", "direction": "maximize", "goal": 0.9})
    ok = TrialObservation(0, P.SUCCEEDED, {}, {"acc": 0.89})
    assert plan_sweep(sweep, [ok], {}).finish is None
    best = TrialObservation(1, P.SUCCEEDED, {}, {"acc": 0.95})
    plan = plan_sweep(sweep, [ok, best], {})
    assert plan.finish is not None and plan.finish.reason == "GoalReached"
    assert plan.best is not None and plan.best.number == 1


def test_more_failures_than_allowed_fail_the_sweep(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxFailedTrials=1)
    one = [trial(0, P.FAILED), trial(1, P.RUNNING)]
    assert plan_sweep(sweep, one, {}).finish is None
    plan = plan_sweep(sweep, [*one, trial(2, P.SUCCEEDED)], {})  # succeeded without val_loss: unmeasured
    assert plan.finish is not None and plan.phase is SweepPhase.FAILED
    assert plan.finish.message == "2 trials failed (1 of them reported no val_loss), more than maxFailedTrials=1"
    assert [s.number for s in plan.stop] == [1]
    # The unmeasured trial is a failed one in the counts shown too, not a succeeded one (a new user's trial).
    assert (plan.counts.succeeded, plan.counts.failed) == (0, 2)


def test_a_sweep_whose_trials_report_nothing_fails_at_the_end(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, maxTrials=2, maxFailedTrials=None)
    plan = plan_sweep(sweep, [trial(0, P.SUCCEEDED), trial(1, P.STOPPED, s1=0.1)], {})
    assert plan.finish is not None and plan.finish.reason == "NoObjectiveValue"
    assert plan.best is None  # a stopped trial is no candidate


def test_an_exhausted_search_space_ends_the_sweep(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc)
    done = [trial(0, P.SUCCEEDED, 0.5)]
    assert plan_sweep(sweep, done, {1: params(1)}, exhausted=True).create != []  # asked ones still run
    plan = plan_sweep(sweep, done, {}, exhausted=True)
    assert plan.finish is not None and plan.finish.reason == "SearchSpaceExhausted" and plan.ask == 0


def test_early_stopping_stops_running_trials_with_the_rules_sentence(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, parallelTrials=4)
    good = {"s1": 1.0, "s2": 0.8, "s3": 0.6, "s4": 0.5}
    trials = [trial(n, P.SUCCEEDED, 0.5, **good) for n in range(3)]
    trials.append(trial(3, P.RUNNING, s1=2.0, s2=1.9, s3=1.8, s4=1.7))
    plan = plan_sweep(sweep, trials, {})
    assert [(s.number, s.name) for s in plan.stop] == [(3, "lr-search-3")]
    assert plan.stop[0].reason.startswith("trial 3 stopped at step 4: its best val_loss so far, 1.7")
    assert plan.ask == 3  # the stopped trial's slot is free only once it is observed Stopped


def test_the_best_trial_ties_go_to_the_lowest_number(doc: dict[str, Any]) -> None:
    sweep = sweep_of(doc, objective={"metric": "val_loss"})
    plan = plan_sweep(sweep, [trial(2, P.SUCCEEDED, 0.1), trial(1, P.SUCCEEDED, 0.1)], {})
    assert plan.best is not None and plan.best.number == 1


OUTCOMES = st.lists(
    st.tuples(st.sampled_from([P.SUCCEEDED, P.FAILED, P.STOPPED]), st.floats(0, 1), st.booleans()),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    max_trials=st.integers(1, 12),
    parallel=st.integers(1, 4),
    max_failed=st.integers(0, 12),
    outcomes=OUTCOMES,
    crashes=st.lists(st.booleans(), min_size=1, max_size=40),
)
def test_a_simulated_controller_never_repeats_or_exceeds_and_always_ends(
    max_trials: int, parallel: int, max_failed: int, outcomes: list[Any], crashes: list[bool]
) -> None:
    """Drive plan_sweep like a controller that crashes between asking and creating; check the invariants."""
    doc: dict[str, Any] = {
        "metadata": {"name": "s"},
        "spec": {
            "parameters": [{"name": "x", "type": "double", "min": 0, "max": 1}],
            "algorithm": {"name": "random"},
            "objective": {"metric": "m"},
            "parallelTrials": parallel,
            "maxTrials": max_trials,
            "maxFailedTrials": max_failed,
            "trial": {"spec": {"replicas": {"worker": {"template": {"command": ["x", "${params.x}"]}}}}},
        },
    }
    sweep = parse_sweep(doc)
    trials: dict[int, TrialObservation] = {}
    asked: dict[int, dict[str, Any]] = {}
    created: list[int] = []
    next_number = 0
    for step in range(200):
        plan = plan_sweep(sweep, list(trials.values()), asked)
        active = [n for n, t in trials.items() if t.phase in (P.PENDING, P.RUNNING)]
        assert len(active) + len(plan.create) <= parallel
        assert len(trials) + len(plan.create) <= max_trials
        if plan.finish is not None:
            assert plan.create == [] and plan.ask == 0
            assert {s.number for s in plan.stop} == set(active)
            assert plan.finish.phase in (SweepPhase.SUCCEEDED, SweepPhase.FAILED)
            break
        for number in range(next_number, next_number + plan.ask):
            asked[number] = {"x": outcomes[number % len(outcomes)][1]}
        next_number += plan.ask
        crash = crashes[step % len(crashes)] and step % 2 == 0  # a controller that crashes every round never runs
        for action in plan.create[: len(plan.create) // 2] if crash else plan.create:
            assert action.number not in trials
            trials[action.number] = TrialObservation(action.number, P.RUNNING, action.parameters)
            created.append(action.number)
        # One running trial ends per round, as its outcome says.
        running = sorted(n for n, t in trials.items() if t.phase is P.RUNNING)
        if running and not plan.create:
            number = running[0]
            phase, value, reports = outcomes[number % len(outcomes)]
            final = {"m": value} if reports and phase is P.SUCCEEDED else {}
            trials[number] = TrialObservation(number, phase, trials[number].parameters, final, {1: value})
    else:
        raise AssertionError("the sweep never finished")
    assert len(created) == len(set(created)) <= max_trials
    assert sorted(created) == list(range(len(created)))  # asked numbers are used in order, none skipped


def test_a_sweep_none_of_whose_trials_succeeded_says_so_not_that_none_reported_the_metric(
    doc: dict[str, Any],
) -> None:
    # A new user's sweep whose trial program path was wrong: every trial exited 2, and the sweep said "no
    # succeeded trial reported val_loss", which sent them looking at their metrics.
    sweep = sweep_of(doc, maxTrials=2, maxFailedTrials=None)
    plan = plan_sweep(sweep, [trial(0, P.FAILED), trial(1, P.FAILED)], {})
    assert plan.finish is not None and plan.finish.reason == "NoTrialSucceeded"
    assert plan.finish.message == "all 2 trials done, and none succeeded (2 failed; `phalanx describe sweep` says why)"
