"""Parity: the embedded runtime and `phalanx sim` admit the same jobs, in the same order, on the same nodes.

One workload of 52 jobs (gangs of 1-2 replicas of 1, 2 or 4 GPUs, two priorities, a gate that holds every GPU
until the queue has filled, and a late higher-priority job that preempts) on the simulated two-node inventory
(``examples/inventories/two-nodes-4gpu.yaml``). The simulator runs it first, with the runtime's scheduler
settings (preemption on). The runtime then runs it with real replica processes that hold until the test
releases them: at each event of the simulated run, the test ends the jobs the simulator ended then (or submits
the late job), and waits until the runtime's running jobs are exactly the simulator's, on the same nodes.

What timing makes differ, and what the test tolerates: the runtime cannot finish two jobs at the same instant,
so the workload's durations are chosen so that no two simulated jobs end together (checked first); the
simulator's jobs all arrive at time 0 in name order while the runtime's are submitted one after another (same
order, by creation time), behind a gate that holds every GPU so that none is admitted before all are queued.
GPU indices and CPUs are not compared (the runtime pins CPUs, the simulator counts a shared pool), nodes are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import REPO, Runtime, program_role, typed_job
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.scheduling import build_snapshot
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.nodes import Node
from phalanx.sim.engine import FINISHED, SimOptions, simulate
from phalanx.sim.workloads import SimJob, SimReplica
from support.waiting import wait_until

INVENTORY = REPO / "examples" / "inventories" / "two-nodes-4gpu.yaml"
MI = 1024**2
SHAPES = [(1, 1), (2, 1), (1, 2), (4, 1), (2, 2), (1, 4), (4, 2)]  # (GPUs per replica, replicas)


def workload() -> list[tuple[str, int, int, int, float]]:
    """(name, GPUs per replica, replicas, priority, duration) of the 50 queued jobs."""
    jobs = []
    for i in range(50):
        gpus, replicas = SHAPES[(i * 3) % len(SHAPES)]
        priority = 0
        jobs.append((f"j{i:02d}", gpus, replicas, priority, 10 + i * 7.31 + i * i * 0.0137))
    return jobs


def sim_job(name: str, gpus: int, replicas: int, priority: int, duration: float, submit: float = 0) -> SimJob:
    replica = SimReplica(gpus=gpus, cpu_milli=100, memory=64 * MI)
    return SimJob(f"default/{name}", submit, duration, (replica,) * replicas, priority=priority)


def runtime_job(name: str, gpus: int, replicas: int, priority: int, hold: Path) -> dict[str, Any]:
    role = program_role(replicas, args=["--hold", str(hold / name)], cpu="100m", memory="64Mi", gpu=gpus)
    return typed_job(name, "generic", {"worker": role}, scheduling={"priority": priority})


def test_the_runtime_admits_what_the_simulator_admits_in_the_same_order_on_the_same_nodes(
    runtime: Runtime, tmp_path: Path
) -> None:
    nodes = [Node.model_validate(doc) for doc in yaml.safe_load_all(INVENTORY.read_text()) if doc]
    queued = workload()
    late_at = 45.5  # between two events of the simulated run (checked below)
    jobs = [
        sim_job("gate", 4, 2, 1000, 1),
        *(sim_job(*job) for job in queued),
        sim_job("late", 4, 1, 500, 30, submit=late_at),
    ]
    result = simulate(build_snapshot(nodes, []), jobs, SimOptions(preemption=True, explain=False))
    outcomes = {o.job.key.removeprefix("default/"): o for o in result.jobs}
    assert all(o.status == FINISHED for o in outcomes.values())
    assert result.preemptions >= 1, "the workload must exercise a preemption"
    [victim] = [name for name, o in outcomes.items() if o.preempted]
    late_start = outcomes["late"].start
    assert late_start == late_at
    ends = [o.end for o in outcomes.values()]
    assert len(set(ends)) == len(ends) and late_at not in ends, "two simulated events at one time"

    def runs(name: str) -> list[tuple[float, float]]:
        o = outcomes[name]
        assert o.start is not None and o.end is not None
        if not o.preempted:
            return [(o.start, o.end)]
        assert o.first_start is not None
        return [(o.first_start, late_start), (o.start, o.end)]

    def expected_at(t: float) -> dict[str, tuple[str, ...]]:
        return {name: outcomes[name].nodes for name in outcomes if any(start <= t < end for start, end in runs(name))}

    hold = tmp_path / "hold"
    hold.mkdir()
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    runtime.submit(runtime_job("gate", 4, 2, 1000, hold))
    runtime.wait_phase("gate", {Phase.RUNNING})
    for name, gpus, replicas, priority, _ in queued:
        runtime.submit(runtime_job(name, gpus, replicas, priority, hold))

    def holding() -> dict[str, tuple[str, ...]]:
        with runtime.client() as client:
            jobs: list[TrainingJob] = client.store.list(TrainingJob)
        return {
            job.metadata.name: tuple(sorted({p.node for p in job.status.placements.values()}))
            for job in jobs
            if Phase(job.status.phase) in HOLDING_PHASES
        }

    events = sorted({*ends, late_at})
    order: list[str] = []
    for t in events:
        for name, o in outcomes.items():
            if o.end == t:
                (hold / name).write_text("go")
                runtime.wait_phase(name, {Phase.SUCCEEDED})
        if t == late_at:
            runtime.submit(runtime_job("late", 4, 1, 500, hold))
        expected = expected_at(t)
        [current] = wait_until(
            lambda expected=expected: [now] if (now := holding()) == expected else None,
            timeout=30,
            message=f"the runtime to hold what the simulator holds at t={t:.2f}: {sorted(expected)}",
        )
        order.extend(name for name in sorted(current, key=lambda n: runs(n)[-1][0]) if name not in order)
    with runtime.client() as client:
        preempted = [e for e in client.store.list_events("TrainingJob", "default", victim) if e.reason == "Preempted"]
    assert len(preempted) == 1
    simulated_order = sorted(outcomes, key=lambda name: (outcomes[name].first_start or 0, name))
    assert order == [name for name in simulated_order if name in order]
