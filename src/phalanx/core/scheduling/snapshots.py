"""Building a ``ClusterSnapshot`` from observed ``Node`` objects and the placements running work holds.

This is the one bridge from the API models (pydantic, validated at the edges) to the scheduler's lean frozen
dataclasses, so every backend — the embedded store, the Kubernetes informer cache, the simulator — accounts
for used capacity the same way:

- allocatable CPUs are the node's CPUs minus ``spec.reservedCpus``; unhealthy GPUs stay listed but unusable;
  a cordoned node (``spec.unschedulable``) is kept, marked unschedulable, so reasons can say so;
- NVLink peers are symmetric: a link listed on either GPU joins both;
- a holding whose placement lists CPUs holds those CPUs exclusively; one that lists none takes its
  requested ``cpu_milli`` from the shared pool; every holding takes its requested memory;
- a holding's GPUs are taken whole (1000 milli-GPU each) unless its placement has ``gpu_milli``, which is then
  taken on each listed GPU (normally one).

Holdings on nodes the snapshot does not list (a node that went away) are ignored: nothing can be placed there.
Nodes are sorted by name so equal inputs give equal snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from phalanx.core.scheduling.demands import MILLI
from phalanx.core.scheduling.node_fit import taints_of
from phalanx.core.scheduling.types import ClusterSnapshot, CpuSlot, GpuSlot, NodeSnapshot
from phalanx.model.jobs import ReplicaPlacement
from phalanx.model.nodes import Node
from phalanx.model.resources import ResourceVector


@dataclass(slots=True)
class _Usage:
    exclusive_cpus: set[int] = field(default_factory=set)
    shared_cpu_milli: int = 0
    memory: int = 0
    gpus: dict[int, int] = field(default_factory=dict)


def build_snapshot(
    nodes: Sequence[Node], holdings: Iterable[tuple[ReplicaPlacement, ResourceVector]]
) -> ClusterSnapshot:
    """Convert observed nodes and held placements into the snapshot a scheduling cycle starts from.

    Args:
        nodes: every known node.
        holdings: for each replica that holds its placement (its job is in a holding phase), the placement
            and the resources the replica requested.

    Raises:
        ValueError: two nodes share a name.
    """
    names = [node.metadata.name for node in nodes]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"nodes listed more than once: {', '.join(duplicates)}")
    usage: dict[str, _Usage] = {name: _Usage() for name in names}
    for placement, requested in holdings:
        used = usage.get(placement.node)
        if used is None:
            continue
        if placement.cpus:
            used.exclusive_cpus.update(placement.cpus)
            # Beyond its exclusive cores (its init containers and sidecars, ``pod_requests``): the shared pool.
            used.shared_cpu_milli += max(0, requested.cpu_milli - len(placement.cpus) * MILLI)
        else:
            used.shared_cpu_milli += requested.cpu_milli
        used.memory += requested.memory
        per_gpu = placement.gpu_milli if placement.gpu_milli > 0 else MILLI
        for index in placement.gpus:
            used.gpus[index] = used.gpus.get(index, 0) + per_gpu
    return ClusterSnapshot(
        nodes=tuple(
            _node_snapshot(node, usage[node.metadata.name])
            for node in sorted(nodes, key=lambda node: node.metadata.name)
        )
    )


def _node_snapshot(node: Node, used: _Usage) -> NodeSnapshot:
    reserved = set(node.spec.reserved_cpus)
    cpus = tuple(
        CpuSlot(id=cpu.id, core=cpu.core, socket=cpu.socket, numa=cpu.numa)
        for cpu in sorted(node.status.cpus, key=lambda cpu: cpu.id)
        if cpu.id not in reserved
    )
    indices = {gpu.index for gpu in node.status.gpus}
    peers: dict[int, set[int]] = {index: set() for index in indices}
    for gpu in node.status.gpus:
        for peer, links in gpu.nvlinks.items():
            if links > 0 and peer in indices and peer != gpu.index:
                peers[gpu.index].add(peer)
                peers[peer].add(gpu.index)
    gpus = tuple(
        GpuSlot(
            index=gpu.index,
            model=gpu.model,
            numa=gpu.numa,
            healthy=gpu.healthy,
            nvlink_peers=frozenset(peers[gpu.index]),
        )
        for gpu in sorted(node.status.gpus, key=lambda gpu: gpu.index)
    )
    return NodeSnapshot(
        name=node.metadata.name,
        cpus=cpus,
        memory=node.status.memory,
        gpus=gpus,
        used_exclusive_cpus=frozenset(used.exclusive_cpus),
        used_shared_cpu_milli=used.shared_cpu_milli,
        used_memory=used.memory,
        used_gpus=dict(sorted(used.gpus.items())),
        schedulable=not node.spec.unschedulable,
        labels=dict(node.metadata.labels),
        taints=taints_of(node.spec.taints),
        aligns_cpus=node.status.cpu_policy.enforced,
        cpu_policy_reason=node.status.cpu_policy.reason,
    )
