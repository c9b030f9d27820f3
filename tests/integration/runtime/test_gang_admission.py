"""Gang admission with real processes: a gang starts whole or not at all."""

from __future__ import annotations

from pathlib import Path

from conftest import Runtime, generic_job, wait_until
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica


def replicas_of(runtime: Runtime, job: str) -> list[Replica]:
    with runtime.client() as client:
        return [r for r in client.store.list(Replica) if r.spec.job_name == job]


def test_three_replica_job_starts_none_until_all_three_fit(runtime: Runtime, tmp_path: Path) -> None:
    release = tmp_path / "release-blocker"
    record = tmp_path / "starts.txt"
    runtime.start_control_plane()
    # The blocker takes one whole core exclusively; the gang then needs 1500m of the 1000m left.
    runtime.submit(generic_job("blocker", cpu=1, args=["--hold", str(release), "--record", str(record)]))
    runtime.wait_phase("blocker", {Phase.RUNNING})
    wait_until(lambda: record.exists() and record.read_text().count("\n") == 1, message="the blocker to start")
    runtime.submit(generic_job("gang", replicas=3, cpu="500m", args=["--record", str(record)]))
    with runtime.client() as client:
        waiting = wait_until(
            lambda: (job := client.get("gang")).status.reason == "Waiting" and job,
            message="the gang to get a waiting reason",
        )
    assert waiting.status.phase == Phase.QUEUED
    assert "3 replicas" in waiting.status.message or "gang" in waiting.status.message
    assert replicas_of(runtime, "gang") == []
    assert len(record.read_text().splitlines()) == 1  # only the blocker has started

    release.write_text("go")
    final = runtime.wait_phase("gang", {Phase.SUCCEEDED, Phase.FAILED})
    assert final.status.phase == Phase.SUCCEEDED, final.status.message
    lines = record.read_text().splitlines()
    assert len(lines) == 4  # the blocker and the three gang members, each started once
    blocker_start = float(lines[0].split()[3])
    gang_starts = [float(line.split()[3]) for line in lines[1:]]
    assert all(start > blocker_start for start in gang_starts)


def test_two_jobs_competing_for_room_for_one_never_half_start(runtime: Runtime, tmp_path: Path) -> None:
    # A hold file per job: each runs until it has been seen Running whole. With one file for both, the second job
    # ran unheld and could start and finish between two looks (a gate saw only "left" run).
    holds = {name: tmp_path / f"hold-{name}" for name in ("left", "right")}
    runtime.start_control_plane()
    # Each job needs both CPUs of this machine as exclusive cores: only one can run at a time.
    for name in ("left", "right"):
        runtime.submit(generic_job(name, replicas=2, cpu=1, args=["--hold", str(holds[name])]))
    seen_partial: list[str] = []
    observed_running: set[str] = set()

    def both_done() -> bool:
        # Jobs, then replicas, then jobs again: an observation counts only when no job changed in between, so a
        # job read as Queued just before its admission is not taken for one with replicas while Queued (a gate
        # saw that with a single read of each).
        with runtime.client() as client:
            before = {j.metadata.name: j for j in client.list()}
            replicas = client.store.list(Replica)
            jobs = {j.metadata.name: j for j in client.list()}
        versions = {name: job.metadata.resource_version for name, job in jobs.items()}
        if versions != {name: job.metadata.resource_version for name, job in before.items()}:
            return False
        for name, job in jobs.items():
            mine = [r for r in replicas if r.spec.job_name == name and r.metadata.deletion_timestamp is None]
            if Phase(job.status.phase) in (Phase.RUNNING,):
                observed_running.add(name)
                if len(mine) != 2:
                    seen_partial.append(f"{name}: {len(mine)} replicas while Running")
            if Phase(job.status.phase) == Phase.QUEUED and mine:
                seen_partial.append(f"{name}: {len(mine)} replicas while Queued")
        running = [n for n, j in jobs.items() if j.status.phase == Phase.RUNNING]
        if len(running) > 1:
            seen_partial.append(f"both running at once: {running}")
        for name in observed_running:
            if not holds[name].exists():
                holds[name].write_text("go")  # let it finish once we saw it run whole
        return all(Phase(j.status.phase) in (Phase.SUCCEEDED, Phase.FAILED) for j in jobs.values())

    wait_until(both_done, timeout=90, message="both jobs to finish")
    assert seen_partial == []
    assert observed_running == {"left", "right"}
    with runtime.client() as client:
        assert {j.status.phase for j in client.list()} == {Phase.SUCCEEDED}
