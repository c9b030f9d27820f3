"""Parity: the embedded runtime and `phalanx sim` admit the same jobs, in the same order, on the same nodes.

One workload of 52 jobs (gangs of 1-2 replicas of 1, 2 or 4 GPUs in two queues of a cohort with a 4-GPU quota
each, where a team under its quota reclaims what the other borrowed by preemption; a gate at the top priority
that holds every GPU until the queue has filled; a late higher-priority job of no queue) on the simulated
two-node inventory
(``examples/inventories/two-nodes-4gpu.yaml``). The simulator runs it first, with the runtime's scheduler
settings (preemption on, the same Queues). The runtime then runs it with real replica processes that hold until the test
releases them: at each event of the simulated run, the test ends the jobs the simulator ended then (or submits
the late job), and waits until the runtime's running jobs are exactly the simulator's, on the same nodes.

What timing makes differ, and what the test tolerates: the runtime cannot finish two jobs at the same instant,
so the workload's durations are chosen so that no two simulated jobs end together (checked first); the
simulator's jobs all arrive at time 0 in name order while the runtime's are submitted one after another (same
order, by creation time), behind a gate that holds every GPU so that none is admitted before all are queued.
GPU indices and CPUs are not compared (the runtime pins CPUs, the simulator counts a shared pool), nodes are.
The simulator is given the same Queues (``SimOptions.queues``, from the ``queue_quotas`` the runtime uses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import REPO, Runtime, program_role, typed_job
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.scheduling import build_snapshot
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import parse_queue
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.services.scheduling import queue_quotas
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


def queue_of(name: str) -> str:
    """The queue a job names: the numbered jobs alternate between the two teams; the gate and the late job none."""
    return ("team-a", "team-b")[int(name[1:]) % 2] if name.startswith("j") else "default"


def sim_job(name: str, gpus: int, replicas: int, priority: int, duration: float, submit: float = 0) -> SimJob:
    replica = SimReplica(gpus=gpus, cpu_milli=100, memory=64 * MI)
    return SimJob(f"default/{name}", submit, duration, (replica,) * replicas, priority=priority, queue=queue_of(name))


def runtime_job(name: str, gpus: int, replicas: int, priority: int, hold: Path) -> dict[str, Any]:
    role = program_role(replicas, args=["--hold", str(hold / name)], cpu="100m", memory="64Mi", gpu=gpus)
    return typed_job(name, "generic", {"worker": role}, scheduling={"priority": priority, "queue": queue_of(name)})


def queues() -> list[Queue]:
    """Two teams guaranteed 4 GPUs each, lending each other what they leave idle."""
    return [
        parse_queue(
            {
                "apiVersion": "phalanx.dev/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"quota": {"gpu": 4}, "cohort": "research"},
            }
        )
        for name in ("team-a", "team-b")
    ]


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
    quotas = queue_quotas(queues())
    result = simulate(build_snapshot(nodes, []), jobs, SimOptions(preemption=True, explain=False, queues=quotas))
    outcomes = {o.job.key.removeprefix("default/"): o for o in result.jobs}
    assert all(o.status == FINISHED for o in outcomes.values())
    victims = [name for name, o in outcomes.items() if o.preempted]
    assert victims, "the workload must exercise a preemption"
    ends = [o.end for o in outcomes.values()]
    assert len(set(ends)) == len(ends) and late_at not in ends, "two simulated events at one time"

    def expected_at(t: float) -> dict[str, tuple[str, ...]]:
        return {name: o.nodes for name, o in outcomes.items() if any(start <= t < end for start, end in o.runs)}

    hold = tmp_path / "hold"
    hold.mkdir()
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    with runtime.client() as client:
        for queue in queues():
            client.store.create(queue)
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
    first_held: dict[str, float] = {}
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
        for name in current:
            first_held.setdefault(name, t)
    # The same admission order, event by event (the gate was admitted before the first event).
    assert first_held == {name: o.runs[0][0] for name, o in outcomes.items() if name != "gate"}
    with runtime.client() as client:
        for name in victims:
            events_of = client.store.list_events("TrainingJob", "default", name)
            assert len([e for e in events_of if e.reason == "Preempted"]) == outcomes[name].preempted, name
