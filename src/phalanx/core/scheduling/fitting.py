"""The node filter: can a node take one more replica, judged by counts alone, and if not, what is short.

Filtering by counts is cheap (no device is chosen), so it runs on every node for every replica; exact device
choice (``devices.py``) then runs only on the best-scored nodes, and can still refuse a node for topology.
A refusal is a ``Shortage``: the gang placer keeps one per node for the replica that did not fit, and
``reasons.py`` turns them into the sentence a waiting job shows.

``FitMemo`` remembers, for one cycle, every answer about a node (filter result, allocation score, device
refusal) together with the node's ``version``; an answer is reused until the node changes. Gangs are mostly
identical workers and most nodes do not change between two replicas, so this turns the per-replica pass over
all nodes into dictionary lookups.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.scoring import allocation_ppm
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


class FitMemo:
    """Answers about nodes for one cycle, each valid while the node's ``version`` is unchanged."""

    __slots__ = ("_devices", "_fits", "_scores")

    def __init__(self) -> None:
        self._fits: dict[Demand, dict[str, tuple[int, Shortage | None]]] = {}
        self._scores: dict[Demand, dict[str, tuple[int, int]]] = {}
        self._devices: dict[tuple[Demand, str], dict[str, tuple[int, Shortage]]] = {}

    def filter(
        self, nodes: Sequence[WorkingNode], demand: Demand, topology: str
    ) -> tuple[list[WorkingNode], dict[str, Shortage]]:
        """Split ``nodes`` into those that may take ``demand`` and, for the others, what they lack.

        A node counts as lacking when the count filter refuses it or when device choice refused it before,
        for the same demand and topology, at the node's current version.
        """
        fits = self._fits.setdefault(demand, {})
        refusals = self._devices.get((demand, topology), {})
        fitting: list[WorkingNode] = []
        shortages: dict[str, Shortage] = {}
        for node in nodes:
            known = fits.get(node.name)
            if known is None or known[0] != node.version:
                known = fits[node.name] = (node.version, find_shortage(node, demand))
            shortage = known[1]
            if shortage is None:
                refused = refusals.get(node.name)
                if refused is not None and refused[0] == node.version:
                    shortage = refused[1]
            if shortage is None:
                fitting.append(node)
            else:
                shortages[node.name] = shortage
        return fitting, shortages

    def scores(self, nodes: Sequence[WorkingNode], demand: Demand) -> list[int]:
        """``allocation_ppm(node, demand)`` for each node, memoized."""
        known_scores = self._scores.setdefault(demand, {})
        result: list[int] = []
        for node in nodes:
            known = known_scores.get(node.name)
            if known is None or known[0] != node.version:
                known = known_scores[node.name] = (node.version, allocation_ppm(node, demand))
            result.append(known[1])
        return result

    def refuse_devices(self, node: WorkingNode, demand: Demand, topology: str, shortage: Shortage) -> None:
        """Remember that device choice refused ``node`` for this demand and topology."""
        self._devices.setdefault((demand, topology), {})[node.name] = (node.version, shortage)
