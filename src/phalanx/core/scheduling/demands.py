"""What one replica takes from a node, in the units node accounting uses.

A ``ReplicaRequest`` says ``cpu_milli=2000``; a node cares whether that means two exclusive CPUs or 2000
millicores from the shared pool. ``Demand`` makes that split once per replica (the kubelet static CPU
manager rule: a positive whole number of CPUs is exclusive, anything else is shared; a replica with
``pin_cpus=False`` takes all of its CPU from the shared pool; ``pins_cpus`` says which replicas get
``pin_cpus``: Kubernetes' Guaranteed ones), so filters, device
choice and reasons all read the same numbers. ``Demand`` is frozen and hashable: the gang placer uses it as a
cache key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from phalanx.core.scheduling.node_fit import NodeConstraint
from phalanx.core.scheduling.types import ReplicaRequest
from phalanx.model.resources import ResourceVector

# Thousandths of a CPU or of a GPU in one whole CPU or GPU.
MILLI = 1000


@dataclass(frozen=True, slots=True)
class Demand:
    """One replica's needs, split the way a node accounts for them.

    Attributes:
        exclusive_cpus: logical CPUs the replica gets for itself (kubelet static CPU manager semantics).
        shared_cpu_milli: millicores taken from the node's shared pool (fractional CPU requests).
        memory: bytes.
        gpus: whole GPUs.
        gpu_milli: a share of one GPU in thousandths; 0 when whole GPUs are asked for.
        gpu_model: the acceptable GPU models, case-folded, sorted and joined by ``|`` (``model_key``), or None
            for any (only set when GPUs are asked for).
        node_constraint: which nodes by labels and taints (``node_fit``); None: any node without a taint.
    """

    exclusive_cpus: int = 0
    shared_cpu_milli: int = 0
    memory: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    gpu_model: str | None = None
    node_constraint: NodeConstraint | None = None

    @property
    def cpu_milli(self) -> int:
        """All CPU asked for, in millicores, exclusive or shared."""
        return self.exclusive_cpus * MILLI + self.shared_cpu_milli

    def __add__(self, other: Demand) -> Demand:
        return Demand(
            exclusive_cpus=self.exclusive_cpus + other.exclusive_cpus,
            shared_cpu_milli=self.shared_cpu_milli + other.shared_cpu_milli,
            memory=self.memory + other.memory,
            gpus=self.gpus + other.gpus,
            gpu_milli=self.gpu_milli + other.gpu_milli,
            gpu_model=_common_model(self, other),
            node_constraint=self.node_constraint if self.node_constraint == other.node_constraint else None,
        )

    @property
    def wants_gpu(self) -> bool:
        """Whether any GPU, whole or shared, is asked for."""
        return bool(self.gpus or self.gpu_milli)


def _common_model(a: Demand, b: Demand) -> str | None:
    # A side that asks for no GPU does not constrain the model; two GPU sides must agree.
    if not a.wants_gpu:
        return b.gpu_model
    if not b.wants_gpu:
        return a.gpu_model
    return a.gpu_model if a.gpu_model == b.gpu_model else None


def pins_cpus(reserved: ResourceVector, ceiling: ResourceVector) -> bool:
    """Whether a replica may have exclusive cores: only when its ceiling is its reservation.

    That is Kubernetes' Guaranteed QoS class, the only one the kubelet's static CPU manager gives exclusive
    cores to: a replica allowed to use more CPU or memory than it reserved (a ceiling above, ``Burstable``) shares
    the node's pool, on Kubernetes and on the embedded runtime alike, so both place it the same way.
    """
    return ceiling.cpu_milli <= reserved.cpu_milli and ceiling.memory <= reserved.memory


def demand_of(replica: ReplicaRequest) -> Demand:
    """Split a replica's request into exclusive and shared CPU, memory and GPUs.

    ``gpu_milli`` is read only when no whole GPU is asked for (the API forbids both at once). The GPU model is
    kept only when the replica asks for some GPU: a model wish on a CPU-only replica constrains nothing.
    """
    resources = replica.resources
    cpu_milli = max(0, resources.cpu_milli)
    exclusive = cpu_milli // MILLI if replica.pin_cpus and cpu_milli and cpu_milli % MILLI == 0 else 0
    gpus = max(0, resources.gpu)
    gpu_milli = max(0, resources.gpu_milli) if gpus == 0 else 0
    wants_gpu = bool(gpus or gpu_milli)
    overhead = replica.overhead
    return Demand(
        exclusive_cpus=exclusive,
        shared_cpu_milli=(0 if exclusive else cpu_milli) + max(0, overhead.cpu_milli),
        memory=max(0, resources.memory) + max(0, overhead.memory),
        gpus=gpus,
        gpu_milli=gpu_milli,
        gpu_model=model_key(replica.gpu_model) if wants_gpu else None,
        node_constraint=replica.node_constraint,
    )


def model_key(models: str | None) -> str | None:
    """The canonical form of a GPU model constraint, or None for any model.

    Alternatives (``V100M16|V100M32``, as in the openb traces' ``gpu_spec``) are case-folded, stripped,
    de-duplicated, sorted and joined by ``|``.
    """
    if not models:
        return None
    alternatives = sorted({part.strip().casefold() for part in models.split("|") if part.strip()})
    return "|".join(alternatives) or None


def model_alternatives(key: str) -> frozenset[str]:
    """The case-folded models a ``model_key`` accepts."""
    return frozenset(key.split("|"))


def total_demand(demands: Iterable[Demand]) -> Demand:
    """Add several demands up (the GPU model survives only if every GPU-asking one shares it)."""
    demands = list(demands)
    if not demands:
        return Demand()
    result = demands[0]
    for demand in demands[1:]:
        result = result + demand
    return result
