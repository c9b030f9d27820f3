"""Exclusive CPUs with real processes: each replica's affinity, read back from /proc, is its own."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Runtime, generic_job, wait_until
from phalanx.adapters.executor import read_affinity
from phalanx.model.jobs import Phase
from phalanx.model.replicas import Replica, ReplicaPhase


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


def test_exclusive_cores_are_pinned_and_never_overlap(runtime: Runtime, tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    runtime.submit(generic_job("pinned", replicas=len(cpus), cpu=1, args=["--hold", str(hold)]))
    runtime.wait_phase("pinned", {Phase.RUNNING})
    with runtime.client() as client:
        replicas = wait_until(
            lambda: [r for r in client.store.list(Replica) if r.status.phase == ReplicaPhase.RUNNING],
            message="running replicas",
        )
        job = client.get("pinned")
    affinities: dict[str, set[int]] = {}
    for replica in replicas:
        assert replica.status.pid is not None
        kids = wait_until(lambda r=replica: children(r.status.pid), message="the replica's program to start")
        program_affinity = read_affinity(kids[0])
        assert program_affinity == set(job.status.placements[replica.metadata.name].cpus)
        assert read_affinity(replica.status.pid) == program_affinity
        affinities[replica.metadata.name] = program_affinity
    assert len(affinities) == len(cpus)
    assert all(len(a) == 1 for a in affinities.values())
    union = set().union(*affinities.values())
    assert len(union) == len(cpus), f"exclusive cores overlap: {affinities}"
    hold.write_text("go")
    assert runtime.wait_phase("pinned", {Phase.SUCCEEDED, Phase.FAILED}).status.phase == Phase.SUCCEEDED


def test_fractional_replica_shares_the_cores_left_over(runtime: Runtime, tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    hold = tmp_path / "hold"
    runtime.start_control_plane()
    runtime.submit(generic_job("exclusive", replicas=1, cpu=1, args=["--hold", str(hold)]))
    runtime.wait_phase("exclusive", {Phase.RUNNING})
    runtime.submit(generic_job("shared", replicas=1, cpu="250m", args=["--hold", str(hold)]))
    runtime.wait_phase("shared", {Phase.RUNNING})
    with runtime.client() as client:
        exclusive = client.get("exclusive").status.placements["exclusive-worker-0"].cpus
        shared = client.store.get(Replica, "default", "shared-worker-0")
    assert shared.status.pid is not None
    program = wait_until(lambda: children(shared.status.pid), message="the shared replica's program")[0]
    shared_affinity = read_affinity(program)
    assert shared_affinity == set(cpus) - set(exclusive)
    hold.write_text("go")
    runtime.wait_phase("shared", {Phase.SUCCEEDED})
