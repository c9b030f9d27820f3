"""A trial read back from its job: phase (stopped vs halted by hand), parameters, owner; the status's bounded record."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.core.sweeps.trials import STOPPED_ANNOTATION, first_replica, kept_results, trial_parameters, trial_phase
from phalanx.model.jobs import TrainingJob
from phalanx.model.sweeps import TrialPhase, TrialResult


def job(phase: str, annotations: dict[str, str] | None = None, roles: tuple[str, ...] = ("worker",)) -> TrainingJob:
    document: dict[str, Any] = {
        "metadata": {"name": "s-0", "annotations": annotations or {}},
        "spec": {"type": "generic", "replicas": {role: {"template": {"command": ["x"]}} for role in roles}},
        "status": {"phase": phase},
    }
    return TrainingJob.model_validate(document)


@pytest.mark.parametrize(
    ("phase", "stopped", "expected"),
    [
        ("Queued", False, TrialPhase.PENDING),
        ("Preempted", False, TrialPhase.PENDING),
        ("Halted", False, TrialPhase.PENDING),  # halted by a person: it waits for a resume
        ("Running", False, TrialPhase.RUNNING),
        ("Storing", False, TrialPhase.RUNNING),
        ("Succeeded", False, TrialPhase.SUCCEEDED),
        ("Failed", False, TrialPhase.FAILED),
        ("Running", True, TrialPhase.RUNNING),  # stopping: it holds its resources until it has halted
        ("Halting", True, TrialPhase.RUNNING),
        ("Halted", True, TrialPhase.STOPPED),
        ("Succeeded", True, TrialPhase.SUCCEEDED),  # it ended before the halt took effect: its result is whole
    ],
)
def test_a_trial_s_phase_follows_its_job_s_and_the_stop_mark(phase: str, stopped: bool, expected: TrialPhase) -> None:
    assert trial_phase(job(phase, {STOPPED_ANNOTATION: "why"} if stopped else None)) is expected


def test_parameters_are_read_from_the_annotation_and_nothing_else_passes_for_them() -> None:
    assert trial_parameters(job("Running", {"phalanx.dev/trial-parameters": '{"lr": 0.1, "opt": "sgd"}'})) == {
        "lr": 0.1,
        "opt": "sgd",
    }
    assert trial_parameters(job("Running", {"phalanx.dev/trial-parameters": "[1]"})) is None
    assert trial_parameters(job("Running", {"phalanx.dev/trial-parameters": "{"})) is None
    assert trial_parameters(job("Running")) is None


def test_the_metrics_replica_is_the_first_of_the_first_role_written() -> None:
    assert first_replica(job("Running", roles=("master", "worker"))) == "master-0"


def result(number: int, phase: TrialPhase, value: float | None = None) -> TrialResult:
    return TrialResult(number=number, name=f"s-{number}", phase=phase, value=value)


def test_past_the_bound_the_record_keeps_the_active_the_best_and_the_latest() -> None:
    results = [result(n, TrialPhase.SUCCEEDED, float(n)) for n in range(20)] + [result(20, TrialPhase.RUNNING)]
    kept = kept_results(results, "minimize", limit=6)
    assert [r.number for r in kept] == [0, 1, 2, 18, 19, 20]
    assert [r.number for r in kept_results(results, "maximize", limit=6)] == [15, 16, 17, 18, 19, 20]
    assert len(kept_results(results, "minimize", limit=100)) == 21
