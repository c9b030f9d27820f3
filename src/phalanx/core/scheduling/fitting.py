"""The node filter: can a node take one more replica, judged by counts alone, and if not, what is short.

Filtering by counts is cheap (no device is chosen), so it runs on every node for every replica; exact device
choice (``devices.py``) then runs only on the best-scored nodes, and can still refuse a node for topology.
A refusal is a ``Shortage``: the gang placer keeps one per node for the replica that did not fit, and
``reasons.py`` turns them into the sentence a waiting job shows.
"""

from __future__ import annotations

from enum import StrEnum

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.working import WorkingNode


class Shortage(StrEnum):
    """Why a node cannot take a replica. Declaration order is the order filters run in, scarcest first."""

    UNSCHEDULABLE = "unschedulable"
    GPU_MODEL = "gpu-model"
    GPUS = "gpus"
    GPU_SHARE = "gpu-share"
    EXCLUSIVE_CPUS = "exclusive-cpus"
    SHARED_CPU = "shared-cpu"
    MEMORY = "memory"
    GPU_TOPOLOGY = "gpu-topology"
    CPU_TOPOLOGY = "cpu-topology"


def find_shortage(node: WorkingNode, demand: Demand) -> Shortage | None:
    """Return the first resource ``node`` lacks for ``demand`` now, or None when the counts fit.

    Whole GPUs must be entirely unused; a GPU share needs one GPU whose used milli-GPU plus the share stays
    within 1000. Exclusive CPUs must leave the shared pool able to hold what it already serves.
    """
    if not node.schedulable:
        return Shortage.UNSCHEDULABLE
    if demand.gpu_model is not None and not node.usable_gpus(demand.gpu_model):
        return Shortage.GPU_MODEL
    if demand.gpus and node.free_gpu_count(demand.gpu_model) < demand.gpus:
        return Shortage.GPUS
    if demand.gpu_milli and node.largest_gpu_room(demand.gpu_model) < demand.gpu_milli:
        return Shortage.GPU_SHARE
    if demand.exclusive_cpus > node.grantable_cpus():
        return Shortage.EXCLUSIVE_CPUS
    if demand.shared_cpu_milli > node.shared_cpu_free():
        return Shortage.SHARED_CPU
    if demand.memory > node.free_memory:
        return Shortage.MEMORY
    return None


def holds_in_bulk(node: WorkingNode, demand: Demand) -> bool:
    """Whether the counts of ``demand`` (usually a sum over several replicas) fit on ``node`` at once.

    An estimate for scoring, not a guarantee: GPU shares and topology are not checked.
    """
    free_cpus_after = len(node.free_cpus) - demand.exclusive_cpus
    return (
        demand.exclusive_cpus <= node.grantable_cpus()
        and MILLI * free_cpus_after - node.shared_cpu_milli >= demand.shared_cpu_milli
        and demand.memory <= node.free_memory
        and demand.gpus <= node.free_gpu_count(demand.gpu_model)
    )
