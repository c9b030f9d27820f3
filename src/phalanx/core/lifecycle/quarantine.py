"""The ``Quarantined`` condition: a job set aside because a step of the control plane fails on it.

Quarantine is not a phase: the job keeps the phase it had (nothing about it was decided), and the condition
says why no step touches it any more. It becomes False again once a step succeeds on the job, so the history
stays readable, as with the phase conditions of ``transitions``.
"""

from __future__ import annotations

from datetime import datetime

from phalanx.model.jobs import Condition, TrainingJobStatus

QUARANTINED = "Quarantined"
"""The condition type, and the phase that listings show for a quarantined job."""


def quarantine_condition(status: TrainingJobStatus) -> Condition | None:
    """The job's ``Quarantined`` condition when it is True, else None."""
    for condition in status.conditions:
        if condition.type == QUARANTINED and condition.status == "True":
            return condition
    return None


def shown_phase(status: TrainingJobStatus) -> str:
    """What a listing shows as the job's phase: ``Quarantined`` while it is, else its phase."""
    return QUARANTINED if quarantine_condition(status) is not None else str(status.phase)


def quarantined(status: TrainingJobStatus, *, reason: str, message: str, now: datetime) -> TrainingJobStatus:
    """Return a copy of ``status`` with a True ``Quarantined`` condition saying which step failed and how."""
    kept = [condition for condition in status.conditions if condition.type != QUARANTINED]
    condition = Condition(type=QUARANTINED, status="True", reason=reason, message=message, last_transition_time=now)
    return status.model_copy(update={"conditions": [*kept, condition]})


def released(status: TrainingJobStatus, *, now: datetime) -> TrainingJobStatus:
    """Return a copy of ``status`` whose ``Quarantined`` condition is False (unchanged when it was not True)."""
    if quarantine_condition(status) is None:
        return status
    conditions = [
        condition.model_copy(update={"status": "False", "last_transition_time": now})
        if condition.type == QUARANTINED
        else condition
        for condition in status.conditions
    ]
    return status.model_copy(update={"conditions": conditions})
