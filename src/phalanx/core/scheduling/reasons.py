"""Why a job still waits: one sentence naming the binding constraint, with numbers.

Reasons are read by people (``phalanx get``, ``explain``, the dashboard), so each says what the job needs and
what the cluster has, e.g.

- ``no schedulable node: all 3 nodes are cordoned``
- ``needs GPU model V100; no node has it (nodes have NVIDIA-A100-SXM4-80GB)``
- ``a replica needs 16 GPUs but no node has that many: the largest has 8 GPUs (node dgx-0)``
- ``needs 16 GPUs in one gang; largest free block is 8 on node dgx-0 (8 free in total)``
- ``needs 3 replicas (3 CPUs exclusive, 6Gi) as one gang; only 2 fit: node local has 2 CPUs free where 3 are
  needed``

The checks go from the most basic to the most specific: no node at all, no node with the GPU model, a single
replica larger than any empty node, then the shortage most nodes reported for the first replica that did not
fit (ties broken by ``Shortage`` order). Numbers come from the working copy as it stood before the failed
attempt, i.e. after the jobs admitted earlier in the cycle. Everything is sorted, so equal inputs give equal
sentences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from phalanx.core.scheduling.demands import MILLI, Demand, demand_of, total_demand
from phalanx.core.scheduling.fitting import Shortage
from phalanx.core.scheduling.gang import GangShortfall
from phalanx.core.scheduling.types import PendingJob
from phalanx.core.scheduling.working import WorkingCluster, WorkingNode
from phalanx.model.resources import format_memory, human_memory

_MIB = 2**20


def explain(job: PendingJob, shortfall: GangShortfall, cluster: WorkingCluster) -> str:
    """Say why a job whose gang could not be placed on ``cluster`` (already rolled back) still waits."""
    if not cluster.schedulable_nodes:
        return _no_schedulable_node(cluster)
    failing = demand_of(shortfall.failing)
    candidates = cluster.schedulable_nodes
    if failing.gpu_model is not None:
        candidates = tuple(node for node in candidates if node.usable_gpus(failing.gpu_model))
        if not candidates:
            return _missing_model(shortfall.failing.gpu_model or failing.gpu_model, failing.gpu_model, cluster)
    scope = f"no node with {shortfall.failing.gpu_model} GPUs" if failing.gpu_model else "no node"
    too_big = _larger_than_any_node(failing, candidates, scope=scope)
    if too_big is not None:
        return too_big
    need = _at_least(_needed_total([demand_of(replica) for replica in job.replicas], shortfall.needed), failing)
    binding = _binding_shortage(shortfall.shortages)
    if binding is Shortage.GPUS:
        return _gpu_blocks(job, shortfall, need, failing, candidates)
    return f"{_gang_phrase(job, shortfall, need)}: {_detail(binding, need, failing, candidates)}"


def describe_demand(demand: Demand) -> str:
    """Render a demand for people: ``4 GPUs, 8 CPUs exclusive, 64Gi``."""
    parts: list[str] = []
    if demand.gpus:
        parts.append(_count(demand.gpus, "GPU"))
    if demand.gpu_milli:
        parts.append(f"{demand.gpu_milli} milli-GPU")
    if demand.exclusive_cpus:
        parts.append(f"{_count(demand.exclusive_cpus, 'CPU')} exclusive")
    if demand.shared_cpu_milli:
        parts.append(f"{demand.shared_cpu_milli}m CPU shared")
    if demand.memory:
        parts.append(_memory(demand.memory))
    return ", ".join(parts) or "no resources"


# --- the basic cases ------------------------------------------------------------------------------------


def _no_schedulable_node(cluster: WorkingCluster) -> str:
    if not cluster.nodes:
        return "no schedulable node: the cluster has no nodes"
    if len(cluster.nodes) == 1:
        return f"no schedulable node: the only node, {cluster.nodes[0].name}, is cordoned"
    return f"no schedulable node: all {len(cluster.nodes)} nodes are cordoned"


def _missing_model(shown: str, model: str, cluster: WorkingCluster) -> str:
    cordoned = [node.name for node in cluster.nodes if not node.schedulable and node.usable_gpus(model)]
    if cordoned:
        return f"needs GPU model {shown}; only cordoned nodes have it ({', '.join(cordoned)})"
    if any(gpu.model.casefold() == model for node in cluster.schedulable_nodes for gpu in node.snapshot.gpus):
        return f"needs GPU model {shown}; every such GPU on a schedulable node is unhealthy"
    models = sorted({gpu.model for node in cluster.schedulable_nodes for gpu in node.usable_gpus(None)})
    suffix = f" (nodes have {', '.join(models)})" if models else ""
    return f"needs GPU model {shown}; no node has it{suffix}"


def _larger_than_any_node(demand: Demand, nodes: Sequence[WorkingNode], *, scope: str) -> str | None:
    """Explain a replica that would not fit even on an empty node; None when some node is large enough."""
    if demand.wants_gpu and not any(node.usable_gpus(demand.gpu_model) for node in nodes):
        return "needs a GPU; no schedulable node has a healthy one"
    capacities: list[tuple[int, str, Callable[[WorkingNode], int], Callable[[int], str]]] = [
        (
            demand.gpus,
            "GPUs",
            lambda node: len(node.usable_gpus(demand.gpu_model)),
            lambda n: _count(n, "GPU"),
        ),
        (demand.exclusive_cpus, "CPUs", lambda node: len(node.cpu_by_id), lambda n: _count(n, "CPU")),
        (
            demand.shared_cpu_milli,
            "CPU",
            lambda node: MILLI * len(node.cpu_by_id),
            lambda n: f"{n}m CPU",
        ),
        (demand.memory, "memory", lambda node: node.snapshot.memory, lambda n: f"{_memory(n)} memory"),
    ]
    for needed, noun, capacity, render in capacities:
        if not needed:
            continue
        largest = min(nodes, key=lambda node: (-capacity(node), node.name))
        if capacity(largest) < needed:
            many = "that many" if noun in ("GPUs", "CPUs") else "that much"
            return (
                f"a replica needs {render(needed)} but {scope} has {many}: "
                f"the largest has {render(capacity(largest))} (node {largest.name})"
            )
    return None


# --- the binding shortage -------------------------------------------------------------------------------


def _binding_shortage(shortages: dict[str, Shortage]) -> Shortage | None:
    counts = Counter(
        shortage for shortage in shortages.values() if shortage not in (Shortage.UNSCHEDULABLE, Shortage.GPU_MODEL)
    )
    if not counts:
        return None
    order = list(Shortage)
    return min(counts, key=lambda shortage: (-counts[shortage], order.index(shortage)))


def _needed_total(demands: Sequence[Demand], needed: int) -> Demand:
    """Add up what the ``needed`` replicas ask for (the smallest ones when only some are needed)."""
    if needed >= len(demands):
        return total_demand(demands)
    smallest = sorted(demands, key=lambda d: (d.gpus, d.gpu_milli, d.exclusive_cpus, d.shared_cpu_milli, d.memory))
    return total_demand(smallest[:needed])


def _at_least(need: Demand, failing: Demand) -> Demand:
    """``need`` raised to at least the failing replica's own demand in every field (mixed-size gangs)."""
    return Demand(
        exclusive_cpus=max(need.exclusive_cpus, failing.exclusive_cpus),
        shared_cpu_milli=max(need.shared_cpu_milli, failing.shared_cpu_milli),
        memory=max(need.memory, failing.memory),
        gpus=max(need.gpus, failing.gpus),
        gpu_milli=max(need.gpu_milli, failing.gpu_milli),
        gpu_model=failing.gpu_model,
    )


def _needed(amount: int, unit: str = "") -> str:
    """`` where 3 are needed`` / `` where 1500m is needed``: free amounts read against the need."""
    verb = "is" if amount == 1 or unit else "are"
    return f" where {amount}{unit} {verb} needed"


def _gang_phrase(job: PendingJob, shortfall: GangShortfall, need: Demand) -> str:
    summary = describe_demand(need)
    count = len(job.replicas)
    if count == 1:
        return f"needs 1 replica ({summary}); it does not fit"
    fit = f"only {shortfall.placed} fit" if shortfall.placed else "none fit"
    if shortfall.needed == count:
        return f"needs {count} replicas ({summary}) as one gang; {fit}"
    return f"needs at least {shortfall.needed} of {count} replicas ({summary}) together; {fit}"


def _gpu_blocks(
    job: PendingJob, shortfall: GangShortfall, need: Demand, failing: Demand, nodes: Sequence[WorkingNode]
) -> str:
    model = failing.gpu_model
    noun = f"{shortfall.failing.gpu_model} GPU" if shortfall.failing.gpu_model else "GPU"
    shown = _count(need.gpus, noun)
    largest, largest_free, total_free = _most(nodes, lambda node: len(node.free_gpus(model)))
    where = f"largest free block is {largest_free} on node {largest.name} ({total_free} free in total)"
    if len(job.replicas) == 1:
        return f"needs {shown} on one node; {where}"
    if shortfall.needed < len(job.replicas):
        gang = f"in one gang (at least {shortfall.needed} of {len(job.replicas)} replicas)"
        return f"needs {shown} {gang}; {where}"
    return f"needs {shown} in one gang; {where}"


def _detail(shortage: Shortage | None, need: Demand, failing: Demand, nodes: Sequence[WorkingNode]) -> str:
    if shortage is Shortage.EXCLUSIVE_CPUS:
        node, free, total = _most(nodes, lambda node: node.grantable_cpus())
        held = len(node.free_cpus) - free
        kept = f" ({held} more kept for the shared pool)" if held else ""
        return f"node {node.name} has {_count(free, 'CPU')} free{_needed(need.exclusive_cpus)}{kept}" + _across(
            nodes, str(total)
        )
    if shortage is Shortage.SHARED_CPU:
        node, free, total = _most(nodes, lambda node: node.shared_cpu_free())
        needed = _needed(need.shared_cpu_milli, "m")
        return f"node {node.name} has {free}m CPU free in the shared pool{needed}" + _across(nodes, f"{total}m")
    if shortage is Shortage.MEMORY:
        node, free, total = _most(nodes, lambda node: node.free_memory)
        return f"node {node.name} has {_memory(free)} memory free where {_memory(need.memory)} is needed" + _across(
            nodes, _memory(total)
        )
    if shortage is Shortage.GPU_SHARE:
        return _gpu_share_detail(failing, nodes)
    if shortage is Shortage.GPU_TOPOLOGY:
        node, free, _ = _most(nodes, lambda node: len(node.free_gpus(failing.gpu_model)))
        return (
            f"node {node.name} has {free} GPUs free but no {failing.gpus} of them joined by NVLink "
            f"or on one NUMA node (topology required)"
        )
    if shortage is Shortage.CPU_TOPOLOGY:
        node, free, _ = _most(nodes, lambda node: node.grantable_cpus())
        per_numa = max((len(ids) for ids in node.free_cpus_by_numa().values()), default=0)
        return (
            f"node {node.name} has {free} CPUs free but at most {per_numa} on one NUMA node, "
            f"fewer than {failing.exclusive_cpus} (topology required)"
        )
    return "no node has room"


def _gpu_share_detail(failing: Demand, nodes: Sequence[WorkingNode]) -> str:
    best: tuple[int, str, int] | None = None
    for node in nodes:
        for gpu in node.usable_gpus(failing.gpu_model):
            room = MILLI - node.gpu_used.get(gpu.index, 0)
            if best is None or (-room, node.name, gpu.index) < (-best[0], best[1], best[2]):
                best = (room, node.name, gpu.index)
    if best is None:  # pragma: no cover - nodes without usable GPUs were answered earlier
        return "no GPU can take a share"
    room, name, index = best
    return f"no GPU has {failing.gpu_milli} milli-GPU free; the most on one GPU is {room} (node {name}, GPU {index})"


# --- helpers --------------------------------------------------------------------------------------------


def _most(nodes: Sequence[WorkingNode], amount: Callable[[WorkingNode], int]) -> tuple[WorkingNode, int, int]:
    """Find the node with the most of ``amount`` (ties: name); return it, that amount and the sum."""
    amounts = [(amount(node), node) for node in nodes]
    best_amount, best = min(amounts, key=lambda pair: (-pair[0], pair[1].name))
    return best, best_amount, sum(value for value, _ in amounts)


def _across(nodes: Sequence[WorkingNode], total: str) -> str:
    return f"; {total} free on {len(nodes)} nodes in all" if len(nodes) > 1 else ""


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _memory(num_bytes: int) -> str:
    return format_memory(num_bytes) if num_bytes % _MIB == 0 else human_memory(num_bytes)
