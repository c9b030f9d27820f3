"""The scheduler's inputs and outputs: lean frozen dataclasses, not API models, because cycles are hot.

``schedule(snapshot, pending, now) -> Decisions`` (see ``scheduler.py``) is a pure function of these.
Backends build a ``ClusterSnapshot`` from what they observe (the embedded store, the Kubernetes informer
cache, the simulator's state) and apply the returned ``Decisions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from phalanx.model.resources import ResourceVector


@dataclass(frozen=True, slots=True)
class CpuSlot:
    """One logical CPU of a node."""

    id: int
    core: int
    socket: int
    numa: int


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU of a node."""

    index: int
    model: str
    numa: int
    healthy: bool = True
    nvlink_peers: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A node's inventory and what is already taken on it.

    Attributes:
        name: node name.
        cpus: every allocatable logical CPU (reserved CPUs already removed).
        memory: allocatable bytes.
        gpus: every GPU.
        used_exclusive_cpus: CPU ids held exclusively by running replicas.
        used_shared_cpu_milli: millicores taken from the shared pool by fractional replicas.
        used_memory: bytes taken.
        used_gpus: GPU index -> milli-GPU in use (1000 = the whole GPU).
        schedulable: False when cordoned.
        labels: node labels (GPU model, cached datasets...).
    """

    name: str
    cpus: tuple[CpuSlot, ...]
    memory: int
    gpus: tuple[GpuSlot, ...] = ()
    used_exclusive_cpus: frozenset[int] = frozenset()
    used_shared_cpu_milli: int = 0
    used_memory: int = 0
    used_gpus: dict[int, int] = field(default_factory=dict)
    schedulable: bool = True
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Every node, as the scheduler sees it at the start of a cycle."""

    nodes: tuple[NodeSnapshot, ...]


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """One replica to place.

    Attributes:
        name: the replica's stable name (``<job>-<role>-<index>``).
        role: its role.
        resources: what it asks for; ``cpu_milli`` that is a multiple of 1000 asks for exclusive cores.
        gpu_model: required GPU model, or None for any.
        pin_cpus: whether a whole number of CPUs asks for exclusive cores (the kubelet static CPU manager
            rule). False takes every CPU request from the shared pool, as for Kubernetes pods outside the
            Guaranteed QoS class and for trace replay, where cores carry no identity.
    """

    name: str
    role: str
    resources: ResourceVector
    gpu_model: str | None = None
    pin_cpus: bool = True


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job that waits for room (or, with ``minAvailable``, for room for its remaining replicas).

    Attributes:
        key: ``namespace/name``.
        priority: higher goes first.
        created: submission time; FIFO order among equal priorities.
        queue: queue name.
        replicas: replicas still to place.
        min_available: how many of ``replicas`` must be placed together for the job to start; None means all.
        placement: ``pack``, ``spread``, ``binpack`` or ``auto``.
        topology: ``none``, ``preferred`` or ``required`` (GPUs joined by NVLink, CPUs on one NUMA node).
        duration_estimate: expected run time in seconds, when known (shortest-first ordering).
        attained_service: GPU-seconds the job has already received (least-attained-service ordering).
    """

    key: str
    priority: int
    created: datetime
    queue: str
    replicas: tuple[ReplicaRequest, ...]
    min_available: int | None = None
    placement: str = "auto"
    topology: str = "preferred"
    duration_estimate: float | None = None
    attained_service: float = 0.0


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """Where one replica goes and which devices it gets."""

    replica: str
    node: str
    cpus: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    gpu_milli: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """A job admitted this cycle with every placed replica's devices."""

    key: str
    assignments: tuple[DeviceAssignment, ...]


@dataclass(frozen=True, slots=True)
class Decisions:
    """The outcome of one cycle.

    Attributes:
        admitted: jobs whose gang (or ``minAvailable`` of it) was placed, in decision order.
        waiting: job key -> one sentence saying why the job still waits.
    """

    admitted: tuple[Admission, ...] = ()
    waiting: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TaskShape:
    """A typical request shape of the workload, for the fragmentation measure, and its share of the workload.

    Attributes:
        cpu_milli: CPU asked for, in millicores.
        gpus: GPUs asked for (0 for CPU-only work).
        gpu_milli: the share of each of those GPUs, 1..1000 (1000 = whole GPUs; below 1000 only with one GPU).
        gpu_model: the GPU model required (case-folded), or None for any.
        weight: the shape's popularity; weights are relative, they need not sum to one.
    """

    cpu_milli: int
    gpus: int
    gpu_milli: int
    weight: float
    gpu_model: str | None = None
