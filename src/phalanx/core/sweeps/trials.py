"""A trial as its TrainingJob shows it, pure: which sweep it belongs to, its number, parameters and phase.

A trial job carries everything a restarted controller needs to read it back (``substitute.trial_document`` puts
it there): the labels ``phalanx.dev/sweep`` and ``phalanx.dev/trial-number``, its assignment as JSON in
``phalanx.dev/trial-parameters``, and the uid of the Sweep that made it in ``phalanx.dev/sweep-uid``, so that a
job of an earlier sweep of the same name is never taken for one of this sweep's.

A stopped trial is a halted job (``spec.runPolicy.suspend``: its replicas end and give back what they held)
marked ``phalanx.dev/trial-stopped`` with the reason; the mark is what tells it from a job a person halted.
Phases, from the job's:

- marked stopped: Halted is **Stopped**; Succeeded and Failed stay (it ended before the halt took effect, its
  result is whole); anything else is **Running**, as it still holds its resources until it has halted.
- not marked: Pending, Queued, Admitted, Downloading, Preempted (requeued), and Halting or Halted (a person
  halted it; it counts against ``parallelTrials`` until resumed or deleted) are **Pending**; Running,
  Restarting and Storing are **Running**; Succeeded and Failed are what they say.

``results`` keeps the status's record of the trials within ``MAX_RESULTS``: the active ones, then the best by
the objective, then the latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.core.sweeps.substitute import PARAMETERS_ANNOTATION, SWEEP_LABEL, TRIAL_NUMBER_LABEL, trial_document
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.sweeps import MAX_RESULTS, Direction, ParamValue, Sweep, TrialPhase, TrialResult

SWEEP_UID_ANNOTATION = "phalanx.dev/sweep-uid"
STOPPED_ANNOTATION = "phalanx.dev/trial-stopped"

_RUNNING = frozenset({Phase.RUNNING, Phase.RESTARTING, Phase.STORING})


def trial_job_document(
    sweep: Sweep, number: int, assignment: Mapping[str, ParamValue], inherited: Mapping[str, str]
) -> dict[str, Any]:
    """The raw TrainingJob of trial ``number``, marked with the sweep's uid, with the ``inherited`` annotations."""
    document = trial_document(sweep, number, assignment)
    annotations = document["metadata"]["annotations"]
    annotations.update({key: value for key, value in inherited.items() if key not in annotations})
    annotations[SWEEP_UID_ANNOTATION] = sweep.metadata.uid or ""
    return document


def trial_number(job: TrainingJob) -> int | None:
    """The trial number on the job's label; None when it has none (or not a number)."""
    text = job.metadata.labels.get(TRIAL_NUMBER_LABEL, "")
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None


def trials_of(sweep: Sweep, jobs: Sequence[TrainingJob]) -> dict[int, TrainingJob]:
    """The sweep's trial jobs by number: labelled with its name and marked with its uid (namesakes' are not)."""
    found = {}
    for job in jobs:
        meta = job.metadata
        if (
            meta.namespace != sweep.metadata.namespace
            or meta.labels.get(SWEEP_LABEL) != sweep.metadata.name
            or meta.annotations.get(SWEEP_UID_ANNOTATION) != sweep.metadata.uid
        ):
            continue
        number = trial_number(job)
        if number is not None:
            found[number] = job
    return found


def trial_parameters(job: TrainingJob) -> dict[str, ParamValue] | None:
    """The assignment the job was made with (its annotation); None when it is missing or not a JSON mapping."""
    try:
        data = json.loads(job.metadata.annotations.get(PARAMETERS_ANNOTATION, ""))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): v for k, v in data.items() if isinstance(v, int | float | str) and not isinstance(v, bool)}


def stop_reason(job: TrainingJob) -> str | None:
    """Why the sweep stopped the trial, when it did."""
    return job.metadata.annotations.get(STOPPED_ANNOTATION)


def trial_phase(job: TrainingJob) -> TrialPhase:
    """The trial's phase from its job's (the module docstring says how)."""
    phase = Phase(job.status.phase)
    if phase is Phase.SUCCEEDED:
        return TrialPhase.SUCCEEDED
    if phase is Phase.FAILED:
        return TrialPhase.FAILED
    if stop_reason(job) is not None:
        return TrialPhase.STOPPED if phase is Phase.HALTED else TrialPhase.RUNNING
    return TrialPhase.RUNNING if phase in _RUNNING else TrialPhase.PENDING


def first_replica(job: TrainingJob) -> str:
    """The replica whose ``phalanx-metric`` lines count: the first of the job's first role (``worker-0``)."""
    role = next(iter(job.spec.replicas))
    return f"{role}-0"


def kept_results(results: Sequence[TrialResult], direction: str, limit: int = MAX_RESULTS) -> list[TrialResult]:
    """The results to record, by number: all of them within ``limit``; past it the active, the best, the latest."""
    if len(results) <= limit:
        return sorted(results, key=lambda r: r.number)
    active = [r for r in results if r.phase in (TrialPhase.PENDING, TrialPhase.RUNNING)]
    sign = 1.0 if direction == Direction.MINIMIZE else -1.0
    valued = sorted(
        (r for r in results if r.phase == TrialPhase.SUCCEEDED and r.value is not None),
        key=lambda r: (sign * (r.value or 0.0), r.number),
    )
    latest = sorted(results, key=lambda r: -r.number)
    kept: dict[int, TrialResult] = {}
    for result in [*active, *valued[: limit // 2], *latest]:
        if len(kept) >= limit:
            break
        kept.setdefault(result.number, result)
    return sorted(kept.values(), key=lambda r: r.number)


def recorded(results: Sequence[TrialResult]) -> Mapping[int, TrialResult]:
    """The recorded results by number."""
    return {result.number: result for result in results}
