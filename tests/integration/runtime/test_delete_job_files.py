"""What `phalanx delete job` leaves behind, as docs/jobs.md says: the run directory (replica logs, launch files
with the job's environment, the outputs directory) goes with the job; stored outputs and events stay."""

from __future__ import annotations

from conftest import Runtime, generic_job
from phalanx.model.jobs import Phase


def test_delete_removes_the_run_directory_and_keeps_stored_outputs_and_events(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.submit(generic_job("finished"))
    done = runtime.wait_phase("finished", {Phase.SUCCEEDED, Phase.FAILED})
    assert done.status.phase == Phase.SUCCEEDED, done.status.message
    assert done.metadata.uid is not None
    run_dir = runtime.state_dir / "runs" / "default" / "finished" / done.metadata.uid[:8]
    assert list(run_dir.glob("replicas/*/replica.log")), "the replica's log was written"
    artifacts = runtime.state_dir / "artifacts" / "default" / "finished"
    assert artifacts.is_dir()

    result = runtime.cli("delete", "job", "finished", check=True)
    assert "trainingjob/finished deleted" in result.stdout
    assert not run_dir.exists()
    assert artifacts.is_dir()
    with runtime.client() as client:
        reasons = [e.reason for e in client.store.list_events("TrainingJob", "default", "finished")]
    assert "Succeeded" in reasons
