"""Builders for the queue, backfill and preemption tests: GPU nodes, running jobs, snapshots that count them.

``gpu_node("n0")`` is an 8-GPU node with 32 CPUs; ``running("a", on("n0", 0, 1))`` a job holding GPUs 0 and 1
of n0; ``cluster([...nodes], [...running])`` the snapshot whose ``used_*`` fields count those jobs exactly as
``build_snapshot`` would; ``pending(make_job(...), estimate=600)`` a ``PendingJob`` with a duration estimate.
Times are seconds after the test epoch ``T0``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import timedelta

from scheduling_builders import GI, T0, JobBuilder

from phalanx.core.scheduling import (
    ClusterSnapshot,
    CpuSlot,
    Decisions,
    DeviceAssignment,
    GpuSlot,
    NodeSnapshot,
    PendingJob,
    QueueQuota,
    QuotaAmounts,
    ReplicaRequest,
    RunningJob,
)
from phalanx.model.resources import ResourceVector

Placement = tuple[str, tuple[int, ...]]


def gpu_node(name: str, *, gpus: int = 8, cpus: int = 32, memory: int = 512 * GI, model: str = "A100") -> NodeSnapshot:
    """An empty node: ``cpus`` CPUs on one NUMA node, ``gpus`` GPUs all joined by NVLink."""
    everyone = frozenset(range(gpus))
    return NodeSnapshot(
        name=name,
        cpus=tuple(CpuSlot(id=i, core=i, socket=0, numa=0) for i in range(cpus)),
        memory=memory,
        gpus=tuple(GpuSlot(index=i, model=model, numa=0, nvlink_peers=everyone - {i}) for i in range(gpus)),
    )


def on(node: str, *gpus: int) -> Placement:
    """One replica of a running job on ``node`` holding ``gpus`` whole."""
    return (node, tuple(gpus))


def running(
    name: str,
    *placements: Placement,
    priority: int = 0,
    queue: str = "default",
    started: float = 0.0,
    ends: float | None = None,
    checkpointed: bool = False,
    preemptible: bool = True,
    memory: int = GI,
) -> RunningJob:
    """A running job ``default/<name>``, one replica per placement (whole GPUs, ``memory`` each, no CPU)."""
    replicas = []
    assignments = []
    for index, (node, gpus) in enumerate(placements):
        replica = f"{name}-worker-{index}"
        replicas.append(
            ReplicaRequest(name=replica, role="worker", resources=ResourceVector(memory=memory, gpu=len(gpus)))
        )
        assignments.append(DeviceAssignment(replica=replica, node=node, gpus=gpus))
    return RunningJob(
        key=f"default/{name}",
        priority=priority,
        queue=queue,
        started=T0 + timedelta(seconds=started),
        replicas=tuple(replicas),
        assignments=tuple(assignments),
        expected_end=None if ends is None else T0 + timedelta(seconds=ends),
        checkpointed=checkpointed,
        preemptible=preemptible,
    )


def cluster(nodes: Iterable[NodeSnapshot], jobs: Sequence[RunningJob] = ()) -> ClusterSnapshot:
    """The snapshot of ``nodes`` with ``jobs`` running: their use counted in each node's ``used_*`` fields."""
    listed = {node.name: node for node in nodes}
    for job in jobs:
        requests = {replica.name: replica for replica in job.replicas}
        for assignment in job.assignments:
            node = listed[assignment.node]
            resources = requests[assignment.replica].resources
            used_gpus = dict(node.used_gpus)
            milli = assignment.gpu_milli if assignment.gpu_milli else 1000
            for index in assignment.gpus:
                used_gpus[index] = used_gpus.get(index, 0) + milli
            listed[node.name] = replace(
                node,
                used_exclusive_cpus=node.used_exclusive_cpus | set(assignment.cpus),
                used_shared_cpu_milli=node.used_shared_cpu_milli + (0 if assignment.cpus else resources.cpu_milli),
                used_memory=node.used_memory + resources.memory,
                used_gpus=used_gpus,
            )
    return ClusterSnapshot(nodes=tuple(listed.values()), running=tuple(jobs))


def pending(
    builder: JobBuilder, *, estimate: float | None = None, preemptible: bool = True, queue: str | None = None
) -> PendingJob:
    """The builder's job with a duration estimate (seconds), preemptibility and queue."""
    job = builder.obj()
    return replace(
        job, duration_estimate=estimate, preemptible=preemptible, queue=job.queue if queue is None else queue
    )


def quota(
    name: str,
    *,
    gpus: int | None = None,
    cpu: int | None = None,
    memory: int | None = None,
    cohort: str | None = None,
    borrow: int | None = None,
    lend: int | None = None,
    weight: float = 1.0,
) -> QueueQuota:
    """A queue's quota in GPUs (and CPU millicores, memory bytes); ``borrow``/``lend``: GPU limits."""
    return QueueQuota(
        name=name,
        nominal=QuotaAmounts(cpu_milli=cpu, memory=memory, gpus=gpus),
        cohort=cohort,
        borrowing_limit=None if borrow is None else QuotaAmounts(gpus=borrow),
        lending_limit=None if lend is None else QuotaAmounts(gpus=lend),
        weight=weight,
    )


def keys(decisions: Decisions) -> list[str]:
    """Admitted job names, in decision order."""
    return [admission.key.removeprefix("default/") for admission in decisions.admitted]


def victims(decisions: Decisions) -> list[str]:
    """Preempted job names, in decision order."""
    return [preemption.victim.removeprefix("default/") for preemption in decisions.preempted]


def gpus_of(decisions: Decisions, name: str) -> dict[str, set[int]]:
    """Node -> GPU indices the admitted job ``name`` got."""
    for admission in decisions.admitted:
        if admission.key == f"default/{name}":
            found: dict[str, set[int]] = {}
            for assignment in admission.assignments:
                found.setdefault(assignment.node, set()).update(assignment.gpus)
            return found
    raise AssertionError(f"default/{name} was not admitted")
