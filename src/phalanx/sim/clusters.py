"""Simulated clusters: ``ClusterSnapshot``s built from the openb node list or from a few numbers.

The simulator hands these snapshots to ``SchedulingSession``, the very scheduler core the embedded runtime and
the Kubernetes scheduler use, so a simulated node must look like a real one to it:

- **openb nodes**: ``cpu_milli`` becomes ``cpu_milli // 1000`` logical CPUs, one core each, all on NUMA node 0
  (the trace says nothing about sockets); ``memory_mib`` becomes bytes; ``gpu`` GPUs of ``model``, on NUMA 0,
  with no NVLink (the trace does not describe links).
- **synthetic nodes**: ``nodes`` identical nodes ``node-000``… with ``gpus_per_node`` GPUs each, CPUs and memory
  (by default 8 CPUs and 64 GiB per GPU, so that GPUs, not CPUs, are what a trace replay runs out of), an
  interconnect by name: ``nvswitch`` joins every pair of GPUs of a node by NVLink (DGX-like), ``pcie`` joins
  none. Several GPU models split the nodes into equal contiguous blocks, one per model, in the order given
  (remainders go to the first models): ``K80,P100,V100`` on 6 nodes gives 2 nodes of each.

Synthetic node names are zero-padded so that name order (the scheduler's tie-break) is numeric order; openb
nodes keep their names from the trace (unique, checked by the loader). Every function
returns an empty cluster's snapshot: nothing is held at the start of a simulation.
"""

from __future__ import annotations

from collections.abc import Sequence

from phalanx.core.scheduling import ClusterSnapshot, CpuSlot, GpuSlot, NodeSnapshot
from phalanx.sim.traces import OpenbNode

MIB = 2**20
GIB = 2**30
CPUS_PER_GPU = 8
MEMORY_PER_GPU = 64 * GIB
INTERCONNECTS = ("pcie", "nvswitch")


def _cpus(count: int) -> tuple[CpuSlot, ...]:
    # One thread per core on one NUMA node: trace CPUs carry no topology, and trace replay does not pin CPUs.
    return tuple(CpuSlot(id=i, core=i, socket=0, numa=0) for i in range(count))


def _gpus(count: int, model: str, interconnect: str) -> tuple[GpuSlot, ...]:
    everyone = frozenset(range(count))
    return tuple(
        GpuSlot(
            index=i,
            model=model,
            numa=0,
            nvlink_peers=everyone - {i} if interconnect == "nvswitch" else frozenset(),
        )
        for i in range(count)
    )


def openb_cluster(nodes: Sequence[OpenbNode], count: int | None = None) -> ClusterSnapshot:
    """The first ``count`` nodes of an openb node list (all of them when None), empty.

    Raises:
        ValueError: ``count`` is not between 1 and the number of nodes in the list.
    """
    if count is None:
        count = len(nodes)
    if not 1 <= count <= len(nodes):
        raise ValueError(f"asked for {count} openb nodes but the list has {len(nodes)}; choose 1 to {len(nodes)}")
    return ClusterSnapshot(
        nodes=tuple(
            NodeSnapshot(
                name=node.name,
                cpus=_cpus(node.cpu_milli // 1000),
                memory=node.memory_mib * MIB,
                gpus=_gpus(node.gpus, node.model, "pcie"),
                labels={"gpu-model": node.model} if node.gpus else {},
            )
            for node in nodes[:count]
        )
    )


def synthetic_cluster(
    nodes: int,
    gpus_per_node: int,
    *,
    gpu_models: Sequence[str] = ("V100",),
    cpus_per_node: int | None = None,
    memory_per_node: int | None = None,
    interconnect: str = "pcie",
) -> ClusterSnapshot:
    """``nodes`` identical nodes (but for the GPU model), empty.

    Args:
        nodes: how many nodes, at least 1.
        gpus_per_node: GPUs per node, 0 or more.
        gpu_models: the GPU models; nodes are split among them in equal contiguous blocks, in this order.
        cpus_per_node: logical CPUs per node; default ``8 x gpus_per_node`` (at least 8).
        memory_per_node: bytes per node; default ``64 GiB x gpus_per_node`` (at least 64 GiB).
        interconnect: ``pcie`` (no NVLink) or ``nvswitch`` (every GPU pair of a node joined by NVLink).

    Raises:
        ValueError: a count is out of range, no GPU model is given, or the interconnect is unknown.
    """
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, got {nodes}")
    if gpus_per_node < 0:
        raise ValueError(f"GPUs per node cannot be negative, got {gpus_per_node}")
    models = [model.strip() for model in gpu_models if model.strip()]
    if not models:
        raise ValueError("name at least one GPU model, e.g. V100")
    if len(models) > nodes:
        raise ValueError(f"{len(models)} GPU models need at least {len(models)} nodes, one per model; got {nodes}")
    if interconnect not in INTERCONNECTS:
        raise ValueError(f"interconnect {interconnect!r} is not one of {', '.join(INTERCONNECTS)}")
    cpus = cpus_per_node if cpus_per_node is not None else max(1, gpus_per_node) * CPUS_PER_GPU
    memory = memory_per_node if memory_per_node is not None else max(1, gpus_per_node) * MEMORY_PER_GPU
    if cpus < 1:
        raise ValueError(f"a node needs at least one CPU, got {cpus}")
    if memory < 1:
        raise ValueError(f"a node needs some memory, got {memory} bytes")
    width = max(3, len(str(nodes - 1)))
    base, extra = divmod(nodes, len(models))
    model_of = [model for i, model in enumerate(models) for _ in range(base + (1 if i < extra else 0))]
    return ClusterSnapshot(
        nodes=tuple(
            NodeSnapshot(
                name=f"node-{i:0{width}d}",
                cpus=_cpus(cpus),
                memory=memory,
                gpus=_gpus(gpus_per_node, model_of[i], interconnect),
                labels={"gpu-model": model_of[i]} if gpus_per_node else {},
            )
            for i in range(nodes)
        )
    )


def gpu_capacity(cluster: ClusterSnapshot) -> int:
    """Healthy GPUs of the cluster's schedulable nodes: the denominator of the allocation ratio."""
    return sum(1 for node in cluster.nodes if node.schedulable for gpu in node.gpus if gpu.healthy)


def gpus_by_model(cluster: ClusterSnapshot) -> dict[str, int]:
    """Healthy GPUs of schedulable nodes per model, in first-seen order."""
    counts: dict[str, int] = {}
    for node in cluster.nodes:
        if not node.schedulable:
            continue
        for gpu in node.gpus:
            if gpu.healthy:
                counts[gpu.model] = counts.get(gpu.model, 0) + 1
    return counts
