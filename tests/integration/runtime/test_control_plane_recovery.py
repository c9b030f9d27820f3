"""The control plane survives kill -9 and a second one waits for the lease."""

from __future__ import annotations

from pathlib import Path

from conftest import Runtime, generic_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.services.embedded.daemon import current_leader


def test_kill_9_mid_job_then_restart_finishes_without_running_a_replica_twice(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    hold = tmp_path / "hold"
    plane = runtime.start_control_plane()
    runtime.submit(generic_job("survivor", replicas=3, args=["--record", str(record), "--hold", str(hold)]))
    runtime.wait_phase("survivor", {Phase.RUNNING})
    wait_until(lambda: record.exists() and len(record.read_text().splitlines()) == 3, message="3 starts")

    plane.kill9()
    # The replicas outlive the control plane (own process groups); a new control plane adopts them.
    runtime.start_control_plane()
    hold.write_text("go")
    final = runtime.wait_phase("survivor", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    lines = record.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["worker-0", "worker-1", "worker-2"]
    assert final.status.restarts == 0


def test_kill_9_while_replicas_finish_then_restart_collects_their_exit(runtime: Runtime, tmp_path: Path) -> None:
    record = tmp_path / "starts.txt"
    hold = tmp_path / "hold"
    plane = runtime.start_control_plane()
    runtime.submit(generic_job("orphaned", replicas=2, args=["--record", str(record), "--hold", str(hold)]))
    runtime.wait_phase("orphaned", {Phase.RUNNING})
    plane.kill9()
    hold.write_text("go")  # the replicas exit while nobody watches
    runtime.start_control_plane()
    final = runtime.wait_phase("orphaned", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    assert len(record.read_text().splitlines()) == 2


def test_second_control_plane_stands_by_while_the_first_holds_the_lease(runtime: Runtime) -> None:
    first = runtime.start_control_plane()
    second = runtime.start_control_plane(wait_leader=False)
    wait_until(lambda: "standing by" in second.log(), message="the second control plane to stand by")
    runtime.submit(generic_job("one"))
    runtime.wait_phase("one", {Phase.SUCCEEDED})
    with runtime.client() as client:
        scheduled = [e for e in client.describe("one").events if e.reason == "Scheduled"]
        assert len(scheduled) == 1
        assert f":{first.process.pid}:" in scheduled[0].message
        assert current_leader(client.store).pid == first.process.pid  # type: ignore[union-attr]

    first.stop()  # releases the lease; the standby takes over at once
    with runtime.client() as client:
        wait_until(
            lambda: (leader := current_leader(client.store)) is not None and leader.pid == second.process.pid,
            message="the standby to lead",
        )
    runtime.submit(generic_job("two"))
    runtime.wait_phase("two", {Phase.SUCCEEDED})
    with runtime.client() as client:
        scheduled = [e for e in client.describe("two").events if e.reason == "Scheduled"]
        assert f":{second.process.pid}:" in scheduled[0].message
