"""Failure handling with real processes: restart policies, gangRestart, backoffLimit."""

from __future__ import annotations

from pathlib import Path

from conftest import Runtime, generic_job
from phalanx.model.jobs import Phase


def starts(record: Path) -> list[tuple[str, int]]:
    return [(line.split()[0], int(line.split()[1])) for line in record.read_text().splitlines()]


def test_crashing_worker_is_restarted_on_failure(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(
        generic_job(
            "flaky",
            replicas=2,
            args=["--record", str(record), "--crash-once", str(tmp_path / "markers"), "--sleep", "0.2"],
            run_policy={"restartPolicy": "OnFailure", "backoffLimit": 4, "backoffSeconds": 0.1},
        )
    )
    final = runtime.wait_phase("flaky", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert final.status.restarts >= 1
    per_replica: dict[str, int] = {}
    for name, _ in starts(record):
        per_replica[name] = per_replica.get(name, 0) + 1
    assert per_replica == {"worker-0": 2, "worker-1": 2}  # each crashed once, then ran to the end
    with runtime.client() as client:
        reasons = [e.reason for e in client.describe("flaky").events]
    assert "Restarting" in reasons or any("Restart" in r for r in reasons)


def test_gang_restart_restarts_every_replica(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    markers = tmp_path / "markers"
    runtime.start_control_plane()
    job = generic_job(
        "gang",
        replicas=1,
        role="worker",
        # The worker crashes only once the master has started too, so the gang restart has a master to restart.
        args=["--record", str(record), "--await-lines", str(record), "2", "--crash-once", str(markers)],
        run_policy={
            "restartPolicy": "OnFailure",
            "backoffLimit": 3,
            "backoffSeconds": 0.1,
            "gangRestart": True,
        },
        job_type="pytorch",
        extra_roles={
            "master": {
                "count": 1,
                "template": {
                    "command": [
                        "python",
                        str(Path(__file__).parent / "replica_program.py"),
                        "--record",
                        str(record),
                        "--sleep",
                        "1",
                    ],
                    "resources": {"cpu": "100m", "memory": "64Mi"},
                },
            }
        },
    )
    runtime.submit(job)
    final = runtime.wait_phase("gang", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    attempts: dict[str, set[int]] = {}
    for name, attempt in starts(record):
        attempts.setdefault(name, set()).add(attempt)
    # The worker crashed once; with gangRestart the healthy master was restarted too, in a new attempt.
    assert len(attempts["worker-0"]) == 2
    assert len(attempts["master-0"]) == 2
    assert attempts["worker-0"] == attempts["master-0"]


def test_exhausting_backoff_limit_fails_the_job_with_the_reason(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    runtime.submit(
        generic_job(
            "doomed",
            args=["--record", str(record), "--crash-always", "--exit-code", "7"],
            run_policy={"restartPolicy": "OnFailure", "backoffLimit": 2, "backoffSeconds": 0.05},
        )
    )
    final = runtime.wait_phase("doomed", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.FAILED
    assert final.status.reason == "BackoffLimitExceeded"
    assert "exit code 7" in final.status.message
    assert len(starts(record)) == 3  # the first run and two restarts


def test_never_policy_fails_at_first_crash(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    runtime.submit(
        generic_job("once", args=["--crash-always", "--exit-code", "4"], run_policy={"restartPolicy": "Never"})
    )
    final = runtime.wait_phase("once", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.FAILED
    assert final.status.restarts == 0
    assert "4" in final.status.message
