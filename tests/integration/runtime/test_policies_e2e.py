"""Run policies and priorities with real processes: deadlines, TTL clean-up, exit-code restarts, jobs submitted
halted, and a high-priority job overtaking an earlier one when room frees."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Runtime, generic_job, processes_mentioning, wait_until
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.replicas import Replica


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def replicas_of(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def test_active_deadline_fails_a_running_job_and_stops_it(runtime: Runtime, tmp_path: Path) -> None:
    never = tmp_path / "never-created"
    runtime.start_control_plane()
    runtime.submit(
        generic_job("late", replicas=2, args=["--hold", str(never)], run_policy={"activeDeadlineSeconds": 2})
    )
    running = runtime.wait_phase("late", {Phase.RUNNING})
    wait_until(lambda: len(processes_mentioning(str(never))) == 2, message="both programs to start")
    final = runtime.wait_phase("late", {Phase.SUCCEEDED, Phase.FAILED}, timeout=30)
    assert final.status.phase == Phase.FAILED
    assert final.status.reason == "DeadlineExceeded"
    assert "activeDeadlineSeconds=2" in final.status.message
    assert final.status.completion_time is not None and running.status.start_time is not None
    assert (final.status.completion_time - running.status.start_time).total_seconds() >= 2
    wait_until(lambda: processes_mentioning(str(never)) == [], timeout=15, message="the replicas to be stopped")
    wait_until(lambda: replicas_of(runtime, "late") == [], message="the replicas to be removed")


def test_active_deadline_fails_a_job_still_queued(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    cpus = len(os.sched_getaffinity(0))
    runtime.start_control_plane()
    runtime.submit(
        generic_job(
            "never-fits",
            replicas=cpus + 1,
            cpu=1,
            args=["--record", str(record)],
            run_policy={"activeDeadlineSeconds": 1},
        )
    )
    final = runtime.wait_phase("never-fits", {Phase.SUCCEEDED, Phase.FAILED}, timeout=30)
    assert final.status.phase == Phase.FAILED
    assert final.status.reason == "DeadlineExceeded"
    assert "since it was created" in final.status.message
    assert "Queued" in [c.type for c in final.status.conditions]
    assert lines_of(record) == []


def test_ttl_after_finished_removes_the_job_but_not_one_without_ttl(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.submit(generic_job("kept"))
    runtime.submit(generic_job("fleeting", run_policy={"ttlSecondsAfterFinished": 1}))
    kept = runtime.wait_phase("kept", {Phase.SUCCEEDED, Phase.FAILED})
    finished = runtime.wait_phase("fleeting", {Phase.SUCCEEDED, Phase.FAILED})
    assert (kept.status.phase, finished.status.phase) == (Phase.SUCCEEDED, Phase.SUCCEEDED)
    with runtime.client() as client:
        wait_until(
            lambda: client.store.try_get(TrainingJob, "default", "fleeting") is None,
            timeout=15,
            message="the finished job to be deleted after its TTL",
        )
        names = [job.metadata.name for job in client.list()]
    assert names == ["kept"]
    result = runtime.cli("get", "jobs", "fleeting")
    assert result.returncode == 1 and "jobs in default: kept" in result.stderr


def test_exit_code_policy_retries_a_retryable_code(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(
        generic_job(
            "retried",
            args=["--record", str(record), "--crash-once", str(tmp_path / "markers"), "--exit-code", "143"],
            run_policy={"restartPolicy": "ExitCode", "backoffLimit": 2, "backoffSeconds": 0.1},
        )
    )
    final = runtime.wait_phase("retried", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert final.status.restarts == 1
    assert [line.split()[:2] for line in lines_of(record)] == [["worker-0", "0"], ["worker-0", "1"]]


def test_exit_code_policy_fails_at_once_on_a_code_that_is_not_retryable(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(
        generic_job(
            "bug",
            args=["--record", str(record), "--crash-always", "--exit-code", "4"],
            run_policy={"restartPolicy": "ExitCode", "backoffLimit": 5, "backoffSeconds": 0.1},
        )
    )
    final = runtime.wait_phase("bug", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.FAILED
    assert final.status.restarts == 0
    assert "exit code 4, which is not retryable (retryableExitCodes: 130, 137, 143)" in final.status.message
    assert len(lines_of(record)) == 1


def test_a_job_submitted_suspended_waits_halted_until_resumed(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(generic_job("later", args=["--record", str(record)], run_policy={"suspend": True}))
    halted = runtime.wait_phase("later", {Phase.HALTED, Phase.RUNNING, Phase.SUCCEEDED, Phase.FAILED})
    assert halted.status.phase == Phase.HALTED
    assert halted.status.reason == "Suspended"
    assert [c.type for c in halted.status.conditions] == ["Halted"]  # never queued, never placed
    assert halted.status.placements == {}
    # Another job runs to the end meanwhile, so the control plane had every chance to start the halted one.
    runtime.submit(generic_job("other"))
    runtime.wait_phase("other", {Phase.SUCCEEDED})
    assert replicas_of(runtime, "later") == []
    assert lines_of(record) == []

    result = runtime.cli("resume", "later", check=True)
    assert "trainingjob/later resumed" in result.stdout
    final = runtime.wait_phase("later", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert len(lines_of(record)) == 1
    assert [c.type for c in final.status.conditions][:3] == ["Halted", "Queued", "Admitted"]


def test_a_high_priority_job_submitted_later_starts_first_when_room_frees(runtime: Runtime, tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    release = tmp_path / "release"
    records = {"early-normal": tmp_path / "normal.txt", "late-high": tmp_path / "high.txt"}
    runtime.start_control_plane()
    # Every job takes every core exclusively, so only one runs at a time.
    runtime.submit(generic_job("blocker", replicas=cpus, cpu=1, args=["--hold", str(release)]))
    runtime.wait_phase("blocker", {Phase.RUNNING})
    for name, priority_class in (("early-normal", "normal"), ("late-high", "high")):
        job = generic_job(name, replicas=cpus, cpu=1, args=["--record", str(records[name])])
        job["spec"]["scheduling"] = {"priorityClass": priority_class}
        runtime.submit(job)
    early, late = (runtime.wait_waiting(name) for name in records)
    assert (early.status.phase, late.status.phase) == (Phase.QUEUED, Phase.QUEUED)
    assert early.metadata.creation_timestamp < late.metadata.creation_timestamp  # type: ignore[operator]
    assert all(lines_of(path) == [] for path in records.values())

    release.write_text("go")
    final = {name: runtime.wait_phase(name, {Phase.SUCCEEDED, Phase.FAILED}) for name in records}
    assert {job.status.phase for job in final.values()} == {Phase.SUCCEEDED}
    high_admitted, normal_admitted = final["late-high"].status.admitted_time, final["early-normal"].status.admitted_time
    assert high_admitted is not None and normal_admitted is not None
    assert high_admitted < normal_admitted
    starts = {name: [float(line.split()[3]) for line in lines_of(path)] for name, path in records.items()}
    assert [len(s) for s in starts.values()] == [cpus, cpus]
    assert max(starts["late-high"]) < min(starts["early-normal"])  # every high replica ran before any normal one
