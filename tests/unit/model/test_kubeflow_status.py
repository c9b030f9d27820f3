"""A Kubeflow object's status in upstream's shape, from its TrainingJob's: conditions, replicaStatuses, times."""

from __future__ import annotations

from typing import Any

from phalanx.model.kubeflow.status import is_finished, refused_status, upstream_status

TYPES = {"master": "Master", "worker": "Worker"}
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def follow(phases: list[str], kind: str = "PyTorchJob", types: dict[str, str] = TYPES) -> list[dict[str, Any]]:
    """The statuses written as the TrainingJob goes through ``phases``, one minute apart."""
    status: dict[str, Any] = {}
    written = []
    for minute, phase in enumerate(phases):
        status = upstream_status(kind, "ddp", {"phase": phase}, types, status, f"2026-01-01T00:{minute:02d}:00Z")
        written.append(status)
    return written


def kinds(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status["conditions"]]


def test_conditions_follow_the_phases_the_current_one_last() -> None:
    statuses = follow(["Pending", "Running", "Restarting", "Running", "Succeeded"])
    assert kinds(statuses[0]) == [("Created", "True")]
    assert kinds(statuses[1]) == [("Created", "True"), ("Running", "True")]
    assert kinds(statuses[2]) == [("Created", "True"), ("Running", "False"), ("Restarting", "True")]
    assert kinds(statuses[3]) == [("Created", "True"), ("Restarting", "False"), ("Running", "True")]
    assert kinds(statuses[4]) == [
        ("Created", "True"),
        ("Restarting", "False"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert statuses[4]["conditions"][-1]["reason"] == "PyTorchJobSucceeded"
    assert is_finished("PyTorchJob", statuses[4])
    # A condition that holds keeps the time it started holding.
    assert statuses[4]["conditions"][0]["lastTransitionTime"] == T0


def test_the_same_inputs_write_the_same_status() -> None:
    job = {"phase": "Running", "replicaStatuses": {"master": {"active": 1}, "worker": {"active": 2}}}
    once = upstream_status("PyTorchJob", "ddp", job, TYPES, {}, T0)
    assert upstream_status("PyTorchJob", "ddp", job, TYPES, once, T1) == once
    assert once["replicaStatuses"] == {
        "Master": {"active": 1, "succeeded": 0, "failed": 0},
        "Worker": {"active": 2, "succeeded": 0, "failed": 0},
    }


def test_a_failed_job_says_why_and_keeps_its_times() -> None:
    job = {
        "phase": "Failed",
        "message": "ddp-worker-0 failed with exit code 1",
        "startTime": T0,
        "completionTime": T2,
    }
    status = upstream_status("MPIJob", "ddp", job, {"launcher": "Launcher"}, {}, T2)
    failed = status["conditions"][-1]
    assert (failed["type"], failed["reason"], failed["message"]) == (
        "Failed",
        "MPIJobFailed",
        "ddp-worker-0 failed with exit code 1",
    )
    assert (status["startTime"], status["completionTime"]) == (T0, T2)
    assert is_finished("MPIJob", status)


def test_a_halted_job_is_suspended() -> None:
    assert kinds(follow(["Running", "Halted"])[-1]) == [
        ("Created", "True"),
        ("Running", "False"),
        ("Suspended", "True"),
    ]


def test_a_refusal_is_failed_with_the_path_but_not_finished() -> None:
    status = refused_status("PyTorchJob", {}, "spec.x: unknown field", T0)
    assert [(c["type"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Failed", "PyTorchJobRefused", "spec.x: unknown field")
    ]
    assert not is_finished("PyTorchJob", status)  # fixed and applied again, it is converted
    assert refused_status("PyTorchJob", status, "spec.x: unknown field", T1) == status
    # Fixed and converted: the refusal goes, the job's own conditions come.
    running = upstream_status("PyTorchJob", "ddp", {"phase": "Running"}, TYPES, status, T2)
    assert kinds(running) == [("Created", "True"), ("Running", "True")]


def test_a_trainjob_has_trainer_v2s_conditions_and_jobs_status() -> None:
    types = {"node": "node"}
    running = upstream_status(
        "TrainJob", "tune", {"phase": "Running", "replicaStatuses": {"node": {"active": 3}}}, types, {}, T0
    )
    assert running["conditions"] == []
    assert running["jobsStatus"] == [{"name": "node", "active": 3, "succeeded": 0, "failed": 0}]
    done = upstream_status("TrainJob", "tune", {"phase": "Succeeded"}, types, running, T1)
    assert kinds(done) == [("Complete", "True")]
    assert is_finished("TrainJob", done)
