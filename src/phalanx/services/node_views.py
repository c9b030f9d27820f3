"""What each node has handed out, and to which job: the allocation the nodes page and ``GET nodes`` show.

Read over the port, the same on both backends: a job holds, on a node, what its placed replicas
(``status.placements``) request, while it is in a holding phase (``core.lifecycle.HOLDING_PHASES``):
``services.scheduling.placed_replicas``, the jobs' part of what the schedulers count, with who holds each GPU.
A replica still exiting after its job finished is not counted (the embedded ``phalanx get nodes`` also counts
it, from the store's replicas, for the few seconds it takes to stop): the port lists jobs, not every backend's
processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from phalanx.model.jobs import TrainingJob
from phalanx.services.scheduling import placed_replicas


@dataclass(frozen=True)
class GpuHolder:
    """One replica holding (a share of) one GPU: its job's ``namespace/name``, its name, the thousandths held."""

    job: str
    replica: str
    gpu_milli: int


@dataclass
class NodeAllocation:
    """What a node's holding jobs request: CPU (millicores), memory (bytes), GPUs, and who holds each GPU."""

    cpu_milli: int = 0
    memory: int = 0
    gpus: int = 0
    """GPUs placed, counted as ``phalanx get nodes`` counts them (one per GPU of each placement)."""
    holders: dict[int, list[GpuHolder]] = field(default_factory=dict)
    """GPU index -> the replicas holding it (several when they share it)."""


def node_allocations(jobs: Iterable[TrainingJob]) -> dict[str, NodeAllocation]:
    """Each node's allocation, by node name (a node nothing holds is absent)."""
    allocations: dict[str, NodeAllocation] = {}
    for job, name, placement, vector in placed_replicas(jobs):
        allocation = allocations.setdefault(placement.node, NodeAllocation())
        allocation.cpu_milli += vector.cpu_milli
        allocation.memory += vector.memory
        allocation.gpus += len(placement.gpus)
        share = placement.gpu_milli or 1000
        for index in placement.gpus:
            allocation.holders.setdefault(index, []).append(GpuHolder(job.key, name, share))
    return allocations
