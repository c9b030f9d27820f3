"""The Quarantined condition: set with the step's reason, shown as the job's phase, released to False."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from phalanx.core.lifecycle import transition
from phalanx.core.lifecycle.quarantine import QUARANTINED, quarantine_condition, quarantined, released, shown_phase
from phalanx.model.jobs import Phase, TrainingJobStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_quarantined_job_keeps_its_phase_and_is_shown_as_quarantined() -> None:
    status = transition(TrainingJobStatus(), Phase.QUEUED, reason="Queued", message="waiting", now=T0)
    held = quarantined(status, reason="SchedulerError", message="scheduling it failed with X", now=T0)

    assert held.phase == Phase.QUEUED
    assert shown_phase(held) == QUARANTINED and shown_phase(status) == Phase.QUEUED
    condition = quarantine_condition(held)
    assert condition is not None
    assert (condition.reason, condition.message) == ("SchedulerError", "scheduling it failed with X")
    assert held.conditions[:-1] == status.conditions  # the phase history is untouched


def test_quarantining_again_replaces_the_condition_and_release_makes_it_false() -> None:
    once = quarantined(TrainingJobStatus(), reason="ControllerError", message="first", now=T0)
    twice = quarantined(once, reason="ControllerError", message="second", now=T0 + timedelta(minutes=5))
    assert [c.message for c in twice.conditions if c.type == QUARANTINED] == ["second"]

    later = T0 + timedelta(minutes=6)
    freed = released(twice, now=later)
    assert quarantine_condition(freed) is None and shown_phase(freed) == Phase.PENDING
    [condition] = [c for c in freed.conditions if c.type == QUARANTINED]
    assert (condition.status, condition.last_transition_time) == ("False", later)
    assert released(freed, now=later) == freed  # nothing to release twice


def test_a_later_phase_change_keeps_the_quarantine_condition() -> None:
    held = quarantined(TrainingJobStatus(), reason="ControllerError", message="m", now=T0)
    moved = transition(held, Phase.QUEUED, reason="Queued", message="", now=T0)
    assert quarantine_condition(moved) is not None
