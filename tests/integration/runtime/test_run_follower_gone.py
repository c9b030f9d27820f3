"""`phalanx run` when the job disappears under the follower, through the real CLI and a real control plane.

A job with ``runPolicy.ttlSecondsAfterFinished: 0`` is deleted the moment it finishes, possibly before the
follower read its final state. The race is arranged deterministically: the CLI is stopped (SIGTSTP) while it
follows, the job is released, finishes and is deleted, then the CLI continues. It must report the result from
the job's events, print the replica's last log line (the file is gone by then), and exit with the job's code.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from conftest import Runtime, generic_job, processes_mentioning
from phalanx.model.jobs import TrainingJob
from support.waiting import wait_until


def gone(runtime: Runtime, name: str) -> bool:
    with runtime.client() as client:
        return client.store.try_get(TrainingJob, "default", name) is None


def lines_in(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(("outcome", "code"), [("Succeeded", 0), ("Failed", 1)])
def test_run_reports_a_job_deleted_by_ttl_before_it_saw_the_end(
    runtime: Runtime, tmp_path: Path, outcome: str, code: int
) -> None:
    gate, progress = tmp_path / "gate", tmp_path / "progress"
    runtime.start_control_plane()
    job = generic_job(
        "ephemeral",
        args=["--hold", str(gate), "--progress", str(progress)],
        run_policy={"ttlSecondsAfterFinished": 0, "restartPolicy": "Never"},
    )
    output = tmp_path / "run.out"
    cli = runtime.cli_background("run", str(runtime.write_job("ephemeral", job)), output=output)
    wait_until(lambda: "worker-0 started" in output.read_text(), timeout=60, message="the follower to show the log")

    # Ctrl-Z: it stops the command wherever it runs (the launcher passes it on to the preloaded process's child).
    cli.send_signal(signal.SIGTSTP)
    try:
        # The follower has at most one request in flight, which the API answers within its 0.1 s poll: once
        # the replica has written 20 more progress lines (1 s), it has been answered and no request waits to
        # see the job finish. From here the CLI's next request can only find the job gone.
        seen = lines_in(progress)
        wait_until(lambda: lines_in(progress) >= seen + 20, timeout=60, message="1 s of the replica's progress")
        if outcome == "Succeeded":
            gate.write_text("go\n")
        else:
            (replica,) = processes_mentioning(str(gate))
            os.kill(replica, signal.SIGKILL)  # exit code 137 under restartPolicy Never: Failed
        wait_until(lambda: gone(runtime, "ephemeral"), timeout=60, message="the job to be deleted")
    finally:
        cli.send_signal(signal.SIGCONT)
    assert cli.wait(60) == code, output.read_text()

    text = output.read_text()
    assert "Traceback" not in text and "ApiError" not in text, text
    assert f"job ephemeral {outcome}" in text, text
    if outcome == "Succeeded":
        assert "outputs stored at" in text, text  # the Succeeded event's message
        assert "worker-0 | worker-0 done" in text, text  # its log file was deleted: read through the open file
    else:
        # Why it failed (its last warning event), then what became of it.
        assert "ReplicaFailed: replica ephemeral-worker-0 failed with exit code 137" in text, text
        assert "(then deleted: ttlSecondsAfterFinished=0 passed; the job had Failed)" in text, text


def test_run_of_a_job_the_api_cannot_find_by_name_ends_in_one_sentence(runtime: Runtime) -> None:
    # A name with a trailing newline: refused at validation (exit 2), or created and then not found by the API
    # (exit 1); either way one `error:` sentence, never an ApiError traceback.
    runtime.start_control_plane()
    job = generic_job("job\n")
    result = runtime.cli("run", str(runtime.write_job("newline", job)), timeout=120)
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "ApiError" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr


def test_run_that_loses_the_control_plane_ends_in_one_sentence(runtime: Runtime, tmp_path: Path) -> None:
    plane = runtime.start_control_plane()
    job = generic_job("orphaned", args=["--hold", str(tmp_path / "never")])
    output = tmp_path / "run.out"
    cli = runtime.cli_background("run", str(runtime.write_job("orphaned", job)), output=output)
    wait_until(lambda: "worker-0 started" in output.read_text(), timeout=60, message="the follower to show the log")

    plane.kill9()
    assert cli.wait(60) == 1, output.read_text()
    text = output.read_text()
    assert "Traceback" not in text, text
    assert "error: lost the control plane while following job default/orphaned" in text, text
    assert "`phalanx logs -f orphaned`" in text, text
