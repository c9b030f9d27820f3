"""The sweep's decision function, pure and idempotent: from what was observed, what to do now.

Inputs are everything the controller can read back after a restart: the Sweep, its trials as observed (by their
TrainingJobs: number, phase, parameters, metrics) and the suggestions the algorithm handed out that have no job
yet (``asked``: Optuna's trials in state RUNNING with no TrainingJob). The output says, each with a sentence:

- ``create``: trials to create now, from ``asked`` in number order, as many as ``parallelTrials`` and
  ``maxTrials`` leave room for. A number that has a trial is never created again; an asked suggestion is re-used
  rather than asked anew, so a crash between asking and creating neither loses nor repeats a trial.
- ``ask``: how many new suggestions to ask the algorithm for (the adapter asks, records them, and plans again).
- ``abandon``: asked suggestions that will never run (the sweep finished, or its budget is spent), to be told to
  the algorithm as failed so that its study stays consistent.
- ``stop``: running trials to stop (early stopping, or the sweep finished while they ran).
- ``finish``: the sweep's end, Succeeded (``maxTrials`` done, goal reached, search space exhausted) or Failed
  (more failed trials than ``maxFailedTrials``; or every trial done and none with an objective value).
- ``best``: the best succeeded trial (ties: the lowest number). Stopped trials are not candidates: their value is
  from an earlier step than the others' (Optuna's best_trial ignores pruned trials too).

A succeeded trial that reported no objective value (Katib's MetricsUnavailable) counts as failed: it cannot be
compared, and without this a program that never writes the metric would run the whole budget. It is failed
everywhere the sweep shows it (``counts``, and ``trial_result_phase`` for its result), not only in the budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from phalanx.core.sweeps.metrics import objective_value
from phalanx.core.sweeps.stopping import decide_stops
from phalanx.core.sweeps.substitute import render
from phalanx.model.sweeps import BestTrial, ParamValue, Sweep, SweepPhase, TrialCounts, TrialPhase, trial_name

ACTIVE = frozenset({TrialPhase.PENDING, TrialPhase.RUNNING})


@dataclass(frozen=True)
class TrialObservation:
    """One trial as its TrainingJob shows it: ``final`` from metrics.json, ``intermediate`` the objective by step."""

    number: int
    phase: TrialPhase
    parameters: Mapping[str, ParamValue]
    final: Mapping[str, float] = field(default_factory=dict)
    intermediate: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateTrial:
    """Create trial ``number`` (job ``name``) with ``parameters``."""

    number: int
    name: str
    parameters: Mapping[str, ParamValue]
    reason: str


@dataclass(frozen=True)
class StopTrial:
    """Stop the running trial ``number``."""

    number: int
    name: str
    reason: str


@dataclass(frozen=True)
class FinishSweep:
    """End the sweep in ``phase``; ``reason`` is a CamelCase word, ``message`` a sentence."""

    phase: SweepPhase
    reason: str
    message: str


@dataclass(frozen=True)
class SweepPlan:
    """What to do now; an empty plan (nothing to create, stop, ask or finish) means wait."""

    phase: SweepPhase
    counts: TrialCounts
    best: BestTrial | None
    create: list[CreateTrial] = field(default_factory=list)
    ask: int = 0
    abandon: list[int] = field(default_factory=list)
    stop: list[StopTrial] = field(default_factory=list)
    finish: FinishSweep | None = None


def _assignment(parameters: Mapping[str, ParamValue]) -> str:
    return ", ".join(f"{name}={render(value)}" for name, value in parameters.items()) or "no parameters"


def plan_sweep(
    sweep: Sweep,
    trials: Sequence[TrialObservation],
    asked: Mapping[int, Mapping[str, ParamValue]],
    *,
    exhausted: bool = False,
) -> SweepPlan:
    """Decide the sweep's next actions from its observed trials and its asked-but-not-created suggestions.

    Args:
        sweep: the Sweep (its spec; its status is not read: everything is derived from the trials).
        trials: every trial that has a TrainingJob, one per number.
        asked: suggestions handed out by the algorithm, by trial number (those with a job are ignored).
        exhausted: the algorithm has nothing more to suggest (a grid fully visited).
    """
    spec = sweep.spec
    metric = spec.objective.metric
    by_number = {trial.number: trial for trial in trials}
    name = sweep.metadata.name
    values = {number: objective_value(metric, trial.final, trial.intermediate) for number, trial in by_number.items()}
    phases = {number: TrialPhase(trial.phase) for number, trial in by_number.items()}
    active = sorted(number for number, phase in phases.items() if phase in ACTIVE)
    unmeasured = sorted(n for n, phase in phases.items() if phase is TrialPhase.SUCCEEDED and values[n] is None)
    failures = sum(phase is TrialPhase.FAILED for phase in phases.values()) + len(unmeasured)
    counts = TrialCounts(  # an unmeasured trial is a failed one in every count shown, as in maxFailedTrials'
        created=len(by_number),
        running=len(active),
        succeeded=sum(phase is TrialPhase.SUCCEEDED for phase in phases.values()) - len(unmeasured),
        failed=failures,
        stopped=sum(phase is TrialPhase.STOPPED for phase in phases.values()),
    )
    best = _best(sweep, by_number, values)
    pending_asks = sorted(number for number in asked if number not in by_number)

    finish = _finish(sweep, counts, failures, unmeasured, best, active, pending_asks, exhausted)
    if finish is not None:
        # A finished sweep keeps nothing running: its remaining trials can no longer change the outcome.
        stop = [
            StopTrial(n, trial_name(name, n), f"trial {n} stopped: the sweep ended ({finish.message})") for n in active
        ]
        return SweepPlan(finish.phase, counts, best, abandon=pending_asks, stop=stop, finish=finish)

    stop = []
    if spec.early_stopping is not None:
        running = [n for n in active if phases[n] is TrialPhase.RUNNING]
        history = {n: trial.intermediate for n, trial in by_number.items()}
        for decision in decide_stops(spec.early_stopping, history, running, spec.objective.direction, metric=metric):
            stop.append(StopTrial(decision.trial, trial_name(name, decision.trial), decision.reason))

    # Stopping frees a slot only once the trial is observed Stopped: until then its processes still hold resources.
    # The budget is negative when maxTrials was lowered below the trials already made: nothing more runs.
    budget = max(0, spec.max_trials - len(by_number))
    room = max(0, min(spec.parallel_trials - len(active), budget))
    create = [
        CreateTrial(
            number,
            trial_name(name, number),
            dict(asked[number]),
            f"trial {number} created with {_assignment(asked[number])} ({len(active) + position + 1} of "
            f"{spec.parallel_trials} parallel, {len(by_number) + position + 1} of {spec.max_trials} trials)",
        )
        for position, number in enumerate(pending_asks[:room])
    ]
    abandon = pending_asks[budget:]
    ask = 0 if exhausted else max(0, room - len(pending_asks))
    phase = SweepPhase.RUNNING if by_number or create else SweepPhase.PENDING
    return SweepPlan(phase, counts, best, create=create, ask=ask, abandon=abandon, stop=stop)


def trial_result_phase(phase: TrialPhase, value: float | None) -> TrialPhase:
    """The phase a trial's result shows: its job's, but Failed for a job that succeeded without the objective."""
    return TrialPhase.FAILED if phase is TrialPhase.SUCCEEDED and value is None else phase


def _best(sweep: Sweep, trials: Mapping[int, TrialObservation], values: Mapping[int, float | None]) -> BestTrial | None:
    objective = sweep.spec.objective
    best: tuple[int, float] | None = None
    for number in sorted(trials):
        value = values[number]
        if TrialPhase(trials[number].phase) is not TrialPhase.SUCCEEDED or value is None:
            continue
        if best is None or objective.better(value, best[1]):
            best = (number, value)
    if best is None:
        return None
    number, value = best
    return BestTrial(
        name=trial_name(sweep.metadata.name, number),
        number=number,
        parameters=dict(trials[number].parameters),
        value=value,
    )


def _finish(
    sweep: Sweep,
    counts: TrialCounts,
    failures: int,
    unmeasured: Sequence[int],
    best: BestTrial | None,
    active: Sequence[int],
    pending_asks: Sequence[int],
    exhausted: bool,
) -> FinishSweep | None:
    spec = sweep.spec
    metric = spec.objective.metric
    if failures > spec.failures_allowed:
        detail = f" ({len(unmeasured)} of them reported no {metric})" if unmeasured else ""
        return FinishSweep(
            SweepPhase.FAILED,
            "TooManyFailedTrials",
            f"{failures} trials failed{detail}, more than maxFailedTrials={spec.failures_allowed}",
        )
    if best is not None and spec.objective.reaches_goal(best.value):
        return FinishSweep(
            SweepPhase.SUCCEEDED,
            "GoalReached",
            f"trial {best.name} reached the goal: {metric}={best.value:.6g} "
            f"({spec.objective.direction} to {spec.objective.goal})",
        )
    if active:
        return None
    done = counts.created >= spec.max_trials
    spent = exhausted and not pending_asks
    if not (done or spent):
        return None
    why = (
        f"all {counts.created} trials done" if done else f"the search space is exhausted after {counts.created} trials"
    )
    if best is None and failures and not unmeasured and counts.succeeded == 0:
        # Nothing succeeded at all: the trials' failures are the news (`describe sweep` lists each one's reason).
        return FinishSweep(
            SweepPhase.FAILED,
            "NoTrialSucceeded",
            f"{why}, and none succeeded ({failures} failed; `phalanx describe sweep` says why)",
        )
    if best is None:
        return FinishSweep(SweepPhase.FAILED, "NoObjectiveValue", f"{why}, and no succeeded trial reported {metric}")
    return FinishSweep(
        SweepPhase.SUCCEEDED,
        "MaxTrialsReached" if done else "SearchSpaceExhausted",
        f"{why}; the best is {best.name} with {metric}={best.value:.6g}",
    )
