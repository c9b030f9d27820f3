"""Halt and resume with real processes: nothing left running while halted, nothing lost, then success."""

from __future__ import annotations

from pathlib import Path

from conftest import Runtime, generic_job, processes_mentioning, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica


def test_halt_stops_everything_and_resume_finishes(runtime: Runtime, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    progress = tmp_path / "progress.txt"
    runtime.start_control_plane()
    runtime.submit(generic_job("long", replicas=2, args=["--hold", str(hold), "--progress", str(progress)]))
    runtime.wait_phase("long", {Phase.RUNNING})
    wait_until(lambda: progress.exists() and len(progress.read_text().splitlines()) >= 4, message="progress")

    result = runtime.cli("halt", "long")
    assert result.returncode == 0, result.stderr
    assert "Halted" in result.stdout
    with runtime.client() as client:
        job = client.get("long")
        assert job.status.phase == Phase.HALTED
        assert job.status.placements == {}
        assert [r for r in client.store.list(Replica) if r.spec.job_name == "long"] == []
    assert processes_mentioning(str(hold)) == []  # neither shims nor programs are left
    lines_at_halt = progress.read_text()
    assert lines_at_halt  # what the job wrote before the halt is still there

    result = runtime.cli("resume", "long")
    assert result.returncode == 0, result.stderr
    runtime.wait_phase("long", {Phase.RUNNING})
    hold.write_text("go")
    final = runtime.wait_phase("long", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert progress.read_text().startswith(lines_at_halt)
    phases = [c.type for c in final.status.conditions]
    assert {"Halting", "Halted", "Queued", "Running", "Succeeded"} <= set(phases)
