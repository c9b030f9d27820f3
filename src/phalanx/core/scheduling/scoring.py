"""Node scoring: which of the nodes that fit a replica it should go to, by the job's placement policy.

- ``pack`` and ``auto``: keep a gang together, then most-allocated. The node that already hosts most of the
  gang's replicas comes first, then a node that could hold the whole rest of the gang, then the fullest
  node. Filling busy nodes keeps whole nodes free for big gangs; a gang on few nodes keeps its traffic local.
- ``binpack``: most-allocated alone (best fit, no gang affinity).
- ``spread``: the node with fewest of the gang's replicas, then least-allocated.

Ties go to the node name, ascending. Allocation is the mean, over the node's resources (CPU, memory and GPUs
when it has any), of the share in use once the replica is added, in parts per million: integers, so equal
nodes tie exactly. Counting GPUs in the mean also steers CPU-only work under ``pack`` away from nodes whose
GPUs are idle.
"""

from __future__ import annotations

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.policies import BINPACK, SPREAD
from phalanx.core.scheduling.working import WorkingNode

_PPM = 1_000_000

# A sort key: smaller sorts first.
OrderKey = tuple[int, int, int, str]


def allocation_ppm(node: WorkingNode, demand: Demand) -> int:
    """How full ``node`` would be with ``demand`` on it: the mean used share of its resources, in ppm."""
    shares: list[int] = []
    cpu_capacity = MILLI * len(node.cpu_by_id)
    if cpu_capacity:
        cpu_used = cpu_capacity - MILLI * len(node.free_cpus) + node.shared_cpu_milli + demand.cpu_milli
        shares.append(cpu_used * _PPM // cpu_capacity)
    if node.snapshot.memory > 0:
        memory_used = node.snapshot.memory - node.free_memory + demand.memory
        shares.append(memory_used * _PPM // node.snapshot.memory)
    usable = len(node.usable_gpus(None))
    if usable:
        gpu_used = node.gpu_used_total() + demand.gpus * MILLI + demand.gpu_milli
        shares.append(gpu_used * _PPM // (MILLI * usable))
    return sum(shares) // len(shares) if shares else 0


def order_key(name: str, *, score: int, placement: str, gang_members: int, holds_rest: bool) -> OrderKey:
    """Sort key of a node for one replica; the smallest key is the best node.

    Args:
        name: the node's name (the last tie-break).
        score: ``allocation_ppm`` of the node with the replica on it.
        placement: the job's placement policy.
        gang_members: replicas of the same gang already placed on the node in this attempt.
        holds_rest: whether the node could hold this replica and every later one of the gang (pack only).
    """
    if placement == SPREAD:
        return (gang_members, score, 0, name)
    if placement == BINPACK:
        return (0, 0, -score, name)
    return (-gang_members, 0 if holds_rest else 1, -score, name)
