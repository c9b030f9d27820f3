"""GPU health, decided once for every backend: which GPUs are unhealthy and why, and which replicas that strands.

Discovery (NVML, a simulated inventory, the Kubernetes node agent's annotations) only *observes*; this module
says what the observations mean, so the embedded control plane, the node agent and the reconcile planner agree:

- ``unhealthy_reasons``: a GPU is unhealthy when its discoverer says so (``healthy`` false or a problem listed)
  or a fault injection names it; each unhealthy GPU gets at least one sentence saying why.
- ``with_health``: the node as the scheduler should see it, every GPU's ``healthy`` and ``problem`` set from
  those reasons. An unhealthy GPU stays listed (operators see it) but leaves the schedulable set
  (``core.scheduling`` places only healthy GPUs).
- ``health_events``: the events a change of health makes, worded once for both backends.
- ``sick_gpus`` and ``lost_replicas``: the replicas whose placement holds an unhealthy GPU. The planner stops
  them and restarts the job per its ``runPolicy``, placed afresh (``core.reconcile.planner``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from phalanx.model.jobs import ReplicaPlacement
from phalanx.model.nodes import Node

FAULT_INJECTED = "listed in the fault file"
# Node name -> unhealthy GPU index -> why.
SickGpus = Mapping[str, Mapping[int, str]]


def unhealthy_reasons(
    node: Node, problems: Mapping[int, Sequence[str]] = {}, faults: AbstractSet[int] = frozenset()
) -> dict[int, list[str]]:
    """Why each unhealthy GPU of ``node`` is unhealthy, by index; healthy GPUs are absent.

    Args:
        node: the discovered node; a GPU's ``healthy`` false (with its ``problem``, if any) counts.
        problems: the discoverer's reasons, by GPU index (an index naming no GPU is ignored).
        faults: GPU indices injected as unhealthy (a fault file); an index naming no GPU is ignored.
    """
    reasons: dict[int, list[str]] = {}
    for gpu in sorted(node.status.gpus, key=lambda gpu: gpu.index):
        found = list(problems.get(gpu.index, ()))
        if not gpu.healthy and not found:
            found = [gpu.problem or "unhealthy"]
        if gpu.index in faults:
            found.append(FAULT_INJECTED)
        if found:
            reasons[gpu.index] = found
    return reasons


def with_health(node: Node, reasons: Mapping[int, Sequence[str]]) -> Node:
    """``node`` with each GPU's ``healthy`` and ``problem`` as ``reasons`` say (a GPU absent there is healthy)."""
    gpus = [
        gpu.model_copy(update={"healthy": gpu.index not in reasons, "problem": "; ".join(reasons.get(gpu.index, ()))})
        for gpu in node.status.gpus
    ]
    return node.model_copy(update={"status": node.status.model_copy(update={"gpus": gpus})})


def gpu_health_changes(before: Node, after: Node) -> tuple[list[int], list[int]]:
    """The GPU indices that turned unhealthy and those that recovered between two views of one node."""
    was = {gpu.index: gpu.healthy for gpu in before.status.gpus}
    failed = sorted(gpu.index for gpu in after.status.gpus if not gpu.healthy and was.get(gpu.index, True))
    recovered = sorted(gpu.index for gpu in after.status.gpus if gpu.healthy and not was.get(gpu.index, True))
    return failed, recovered


def health_events(
    failed: Sequence[int], recovered: Sequence[int], problems: Mapping[int, str], healthy: int, total: int
) -> list[tuple[str, str, bool]]:
    """The events of one node's GPU health changes, as (reason, message, warning); ``problems`` says why per index."""
    left = f"{healthy} of {total} GPU(s) healthy"
    return [("GPUUnhealthy", f"GPU {index} is unhealthy: {problems[index]}; {left}", True) for index in failed] + [
        ("GPUHealthy", f"GPU {index} is healthy again; {left}", False) for index in recovered
    ]


def sick_gpus(nodes: Iterable[Node]) -> dict[str, dict[int, str]]:
    """The unhealthy GPUs of ``nodes``: node name -> index -> why (nodes without one are absent)."""
    sick: dict[str, dict[int, str]] = {}
    for node in nodes:
        for gpu in node.status.gpus:
            if not gpu.healthy:
                sick.setdefault(node.metadata.name, {})[gpu.index] = gpu.problem or "unhealthy"
    return sick


def lost_replicas(placements: Mapping[str, ReplicaPlacement], sick: SickGpus) -> dict[str, str]:
    """The replicas whose placement holds an unhealthy GPU, by name, each with a sentence saying which and why."""
    lost: dict[str, str] = {}
    for name, placement in placements.items():
        bad = sick.get(placement.node, {})
        for index in sorted(set(placement.gpus) & set(bad)):
            lost[name] = f"GPU {index} of node {placement.node} is unhealthy ({bad[index]})"
            break
    return lost
