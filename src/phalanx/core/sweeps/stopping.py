"""Early stopping, as pure functions of the trials' intermediate values: which running trials to stop now, and why.

Every rule takes ``history`` (trial number -> step -> value of the objective metric, as reported so far by every
trial of the sweep, finished ones included), the numbers of the trials still running (only those can be stopped)
and the direction, and returns one ``StopDecision`` per trial to stop, each with a sentence. The rules hold no
state: the same history always gives the same decisions, so a restarted controller decides as before.

- **median** (Golovin et al.'s Vizier rule, as Katib's medianstop): a running trial whose latest step ``s`` is at
  least ``startStep`` is stopped when its best value so far is strictly worse than the median of the *running
  averages up to s* of the other trials that have reached step ``s`` (finished or not), once at least
  ``minTrials`` such trials exist. Running averages up to s are robust to one noisy report, and counting trials
  still running lets a sweep with ``parallelTrials`` stop its first wave without waiting for it to finish. With
  ``medianOf: values`` the median is of the other trials' values *at* step s (their latest report at or before
  it), as Optuna's MedianPruner does (which counts completed trials only): on curves that fall from a common
  start, running averages lag the values, so the default rule lets more trials run on.
- **successiveHalving** (asynchronous, as ASHA and Optuna's SuccessiveHalvingPruner): rungs at
  ``minResource * reductionFactor**k`` (below ``maxResource`` when given). A running trial is judged at the highest
  rung it has reached, against every trial that has reached that rung: it goes on when it is among the top
  ``max(1, n // reductionFactor)`` of those ``n`` trials by its value at the rung (its latest report at or
  before the rung's step). A rung judges nobody until ``reductionFactor`` trials have reached it: Optuna's pruner
  judges from the second trial on, which stops early trials on the word of one lucky peer.
- **hyperband**: ``floor(log_rf(maxResource / minResource)) + 1`` brackets of successive halving, bracket ``b``
  starting at ``minResource * reductionFactor**b``; trial ``n`` belongs to bracket ``n mod brackets``
  (deterministic; Optuna weighs brackets by budget, a refinement for round 2) and competes within it only.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from phalanx.model.sweeps import Direction, EarlyStopping, MedianOf, StoppingRule

History = Mapping[int, Mapping[int, float]]


@dataclass(frozen=True, slots=True)
class StopDecision:
    """Stop ``trial``, judged at ``step``, for ``reason`` (a sentence)."""

    trial: int
    step: int
    reason: str


def _worse(a: float, b: float, direction: str) -> bool:
    return a > b if direction == Direction.MINIMIZE else a < b


def _best(values: Collection[float], direction: str) -> float:
    return min(values) if direction == Direction.MINIMIZE else max(values)


def median_rule(
    history: History,
    running: Collection[int],
    direction: str,
    *,
    metric: str,
    min_trials: int = 3,
    start_step: int = 4,
    of_values: bool = False,
) -> list[StopDecision]:
    """Running trials whose best value so far is worse than the median of the others' running averages.

    With ``of_values``, the median of the others' values at the step (their latest at or before it) instead.
    """
    decisions = []
    for trial in sorted(running):
        reports = history.get(trial, {})
        if not reports:
            continue
        step = max(reports)
        if step < start_step:
            continue
        averages = []
        for other, other_reports in history.items():
            if other == trial or not other_reports or max(other_reports) < step:
                continue
            upto = {at: value for at, value in other_reports.items() if at <= step}
            if upto:
                averages.append(upto[max(upto)] if of_values else statistics.fmean(upto.values()))
        if len(averages) < min_trials:
            continue
        median = statistics.median(averages)
        best = _best([value for at, value in reports.items() if at <= step], direction)
        if _worse(best, median, direction):
            decisions.append(
                StopDecision(
                    trial,
                    step,
                    f"trial {trial} stopped at step {step}: its best {metric} so far, {best:.6g}, is worse than "
                    f"{median:.6g}, the median of {len(averages)} other trials' "
                    f"{'values at' if of_values else 'running averages up to'} step {step} (median rule)",
                )
            )
    return decisions


def rungs(min_resource: int, reduction_factor: int, max_resource: int | None) -> list[int]:
    """The steps at which successive halving judges: ``min_resource * reduction_factor**k``, below the maximum."""
    steps = []
    step = min_resource
    # Without a maximum, rungs stop where no training loop reports (1e9 steps): the list stays short.
    ceiling = max_resource if max_resource is not None else 10**9 + 1
    while step < ceiling:
        steps.append(step)
        step *= reduction_factor
    return steps


def _value_at(reports: Mapping[int, float], rung: int) -> float | None:
    """The latest value at or before ``rung``, for a trial that has reported at ``rung`` or later."""
    if not reports or max(reports) < rung:
        return None
    before = [at for at in reports if at <= rung]
    return reports[max(before)] if before else None


def successive_halving(
    history: History,
    running: Collection[int],
    direction: str,
    *,
    metric: str,
    min_resource: int = 1,
    reduction_factor: int = 3,
    max_resource: int | None = None,
    rule: str = "successive halving",
) -> list[StopDecision]:
    """Running trials outside the top ``1/reduction_factor`` at the highest rung they have reached."""
    steps = rungs(min_resource, reduction_factor, max_resource)
    decisions = []
    for trial in sorted(running):
        reports = history.get(trial, {})
        reached = [rung for rung in steps if reports and max(reports) >= rung]
        if not reached:
            continue
        rung = reached[-1]
        own = _value_at(reports, rung)
        if own is None:
            continue  # nothing reported at or before the rung: nothing to judge by
        competitors = {
            other: value
            for other, other_reports in history.items()
            if (value := _value_at(other_reports, rung)) is not None
        }
        if len(competitors) < reduction_factor:
            continue
        keep = max(1, len(competitors) // reduction_factor)
        sign = 1 if direction == Direction.MINIMIZE else -1
        ranked = sorted(competitors, key=lambda number: (sign * competitors[number], number))
        if trial not in ranked[:keep]:
            cutoff = competitors[ranked[keep - 1]]
            decisions.append(
                StopDecision(
                    trial,
                    rung,
                    f"trial {trial} stopped at rung step {rung}: its {metric} there, {own:.6g}, is not in the top "
                    f"{keep} of the {len(competitors)} trials that reached it (the cut is {cutoff:.6g}; {rule}, "
                    f"keeping 1/{reduction_factor})",
                )
            )
    return decisions


def brackets(min_resource: int, reduction_factor: int, max_resource: int) -> int:
    """Hyperband's bracket count: ``floor(log_rf(max / min)) + 1``, in integers (no float rounding)."""
    count = 1
    step = min_resource * reduction_factor
    while step <= max_resource:
        count += 1
        step *= reduction_factor
    return count


def hyperband(
    history: History,
    running: Collection[int],
    direction: str,
    *,
    metric: str,
    min_resource: int = 1,
    reduction_factor: int = 3,
    max_resource: int,
) -> list[StopDecision]:
    """Successive halving within each bracket; trial ``n`` is in bracket ``n mod brackets``."""
    count = brackets(min_resource, reduction_factor, max_resource)
    decisions = []
    for bracket in range(count):
        members = {trial: reports for trial, reports in history.items() if trial % count == bracket}
        decisions += successive_halving(
            members,
            [trial for trial in running if trial % count == bracket],
            direction,
            metric=metric,
            min_resource=min_resource * reduction_factor**bracket,
            reduction_factor=reduction_factor,
            max_resource=max_resource,
            rule=f"hyperband bracket {bracket} of {count}",
        )
    return sorted(decisions, key=lambda decision: decision.trial)


def decide_stops(
    rule: EarlyStopping, history: History, running: Collection[int], direction: str, *, metric: str
) -> list[StopDecision]:
    """The decisions of the sweep's rule, with its defaults applied."""
    kind = StoppingRule(rule.rule)
    if kind is StoppingRule.MEDIAN:
        return median_rule(
            history,
            running,
            direction,
            metric=metric,
            min_trials=rule.minimum_trials,
            start_step=rule.first_step,
            of_values=rule.median_basis is MedianOf.VALUES,
        )
    if kind is StoppingRule.SUCCESSIVE_HALVING:
        return successive_halving(
            history,
            running,
            direction,
            metric=metric,
            min_resource=rule.resource_floor,
            reduction_factor=rule.factor,
            max_resource=rule.max_resource,
        )
    assert rule.max_resource is not None  # the model requires it for hyperband
    return hyperband(
        history,
        running,
        direction,
        metric=metric,
        min_resource=rule.resource_floor,
        reduction_factor=rule.factor,
        max_resource=rule.max_resource,
    )
