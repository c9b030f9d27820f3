"""The scheduler's inputs and outputs: lean frozen dataclasses, not API models, because cycles are hot.

``schedule(snapshot, pending, now) -> Decisions`` (see ``scheduler.py``) is a pure function of these.
Backends build a ``ClusterSnapshot`` from what they observe (the embedded store, the Kubernetes informer
cache, the simulator's state) and apply the returned ``Decisions``.

Running work comes in two forms that must agree: the nodes' ``used_*`` fields count everything that holds
devices, and ``ClusterSnapshot.running`` describes the jobs behind (some of) that use — priority, queue, start,
expected end — so that quotas can be charged, backfill can foresee when room frees up and preemption can pick
victims. Use that no ``RunningJob`` explains is simply taken and never given back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from phalanx.core.scheduling.node_fit import NodeConstraint, Taint
from phalanx.model.datasets import version_label
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
        taints: the node's taints (``node_fit``): a replica goes only where it tolerates the blocking ones.
        aligns_cpus: whether the node enforces exclusive, NUMA-aligned cores (``core.cpu_policy``); a replica of a
            job with ``topology: required`` that asks for exclusive cores goes only where it does.
        cpu_policy_reason: why it does not, for the sentence a waiting job shows.
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
    taints: tuple[Taint, ...] = ()
    aligns_cpus: bool = True
    cpu_policy_reason: str = ""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Every node, as the scheduler sees it at the start of a cycle.

    Attributes:
        nodes: every node, with what is already taken on it.
        running: the admitted jobs that hold devices, for quota, backfill and preemption. Their assignments
            must already be counted in the nodes' ``used_*`` fields (``build_snapshot`` does so for the
            placements it is given); a job listed here is one the cycle may charge to its queue, expect to end
            and preempt. Empty: nothing running is known, which is how ``schedule`` behaved before.
    """

    nodes: tuple[NodeSnapshot, ...]
    running: tuple[RunningJob, ...] = ()


#: The overhead of a replica without init containers or sidecars (a frozen vector: one shared instance is safe).
NO_OVERHEAD = ResourceVector()


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """One replica to place.

    Attributes:
        name: the replica's stable name (``<job>-<role>-<index>``).
        role: its role.
        resources: what it asks for; ``cpu_milli`` that is a multiple of 1000 asks for exclusive cores.
        gpu_model: required GPU model, or None for any.
        node_constraint: its nodeSelector, required node affinity and tolerations (None: none).
        pin_cpus: whether a whole number of CPUs asks for exclusive cores (the kubelet static CPU manager
            rule). False takes every CPU request from the shared pool, as for Kubernetes pods outside the
            Guaranteed QoS class and for trace replay, where cores carry no identity.
        overhead: what its Pod's init containers and sidecars add (``pod_requests.template_overhead``): CPU
            from the shared pool and memory, never exclusive cores or GPUs.
    """

    name: str
    role: str
    resources: ResourceVector
    gpu_model: str | None = None
    pin_cpus: bool = True
    node_constraint: NodeConstraint | None = None
    overhead: ResourceVector = NO_OVERHEAD

    def total(self) -> ResourceVector:
        """Everything the replica holds on its node: its own request and its overhead."""
        return self.resources + self.overhead


DATASET_LABEL_PREFIX = "dataset.phalanx.dev/"


@dataclass(frozen=True, slots=True)
class DatasetNeed:
    """A dataset a job reads: what would have to move to a node that does not cache it.

    Attributes:
        name: the Dataset's name; a node caching it carries the label ``dataset.phalanx.dev/<name>=<label>``,
            the version in label form (``phalanx.model.datasets.version_label``).
        version: the content version the job needs; None: any cached version will do.
        bytes: how much the replica placed on a node would have to fetch there without the cache (the whole
            dataset when replicated, its shard when sharded).
    """

    name: str
    version: str | None = None
    bytes: int = 0

    def cached_on(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with these labels caches the version the job needs."""
        cached = labels.get(DATASET_LABEL_PREFIX + self.name)
        return cached is not None and (self.version is None or cached == version_label(self.version))


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
        duration_estimate: expected run time in seconds, when known (shortest-first ordering, backfill).
        attained_service: GPU-seconds the job has already received (least-attained-service ordering).
        preemptible: whether the job, once admitted, may be preempted (``RunningJob.preemptible``).
        datasets: the data each replica reads (the data-locality plugin prefers nodes that cache it).
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
    preemptible: bool = True
    datasets: tuple[DatasetNeed, ...] = ()


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
class RunningJob:
    """An admitted job that holds devices: what preemption, quotas and backfill need to know about it.

    Attributes:
        key: ``namespace/name``; never also pending in the same cycle.
        priority: its priority (``PendingJob.priority`` when it was admitted).
        queue: its queue name.
        started: when it was admitted; preemption prefers to stop the most recently started work.
        replicas: its replica requests; every assignment names one of them (by ``name``), whose resources are
            what that assignment holds, counted the way ``build_snapshot`` counts a holding.
        assignments: the devices its placed replicas hold.
        expected_end: when it is expected to finish (start + duration estimate), or None when unknown; backfill
            never assumes a job without one ends.
        checkpointed: whether it has a recent checkpoint, so preempting it loses little work (preferred victim).
        preemptible: False: never preempted, whatever its priority.
        attained_service: GPU-seconds it received in earlier runs, before ``started`` (least-attained-service).
    """

    key: str
    priority: int
    queue: str
    started: datetime
    replicas: tuple[ReplicaRequest, ...]
    assignments: tuple[DeviceAssignment, ...]
    expected_end: datetime | None = None
    checkpointed: bool = False
    preemptible: bool = True
    attained_service: float = 0.0


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running job the cycle stops so that a waiting one can start.

    Attributes:
        victim: the running job to stop, whole (every replica); it goes back to Queued.
        preemptor: the job admitted this cycle on the room the victim gives back.
        reason: one sentence for the victim's status and events.
    """

    victim: str
    preemptor: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decisions:
    """The outcome of one cycle.

    Attributes:
        admitted: jobs whose gang (or ``minAvailable`` of it) was placed, in decision order.
        waiting: job key -> one sentence saying why the job still waits.
        preempted: running jobs to stop, in decision order. An admission in ``admitted`` may use devices a
            victim holds: a backend stops every victim's replicas before starting the preemptor's.
    """

    admitted: tuple[Admission, ...] = ()
    waiting: dict[str, str] = field(default_factory=dict)
    preempted: tuple[Preemption, ...] = ()


@dataclass(frozen=True, slots=True)
class QuotaAmounts:
    """An amount of each resource a queue accounts for; None: that resource is not limited.

    Attributes:
        cpu_milli: millicores (exclusive and shared CPU alike).
        memory: bytes.
        gpus: GPUs; a share of a GPU (``gpu_milli``) counts as that fraction of one.
    """

    cpu_milli: int | None = None
    memory: int | None = None
    gpus: int | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory", "gpus"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """A queue's quota, as the ``Queue`` API object states it (``phalanx.model.queues``).

    Jobs name their queue in ``PendingJob.queue``; a job whose queue has no ``QueueQuota`` is not limited.

    Attributes:
        name: the queue.
        nominal: what the queue's admitted jobs may hold at once without borrowing; a resource left None is
            not limited by this queue (and neither borrowed nor lent).
        cohort: queues of one cohort lend each other the nominal quota they leave idle; None: no borrowing.
        borrowing_limit: at most this much beyond ``nominal`` may be borrowed; None (or a None resource): no
            limit beyond what the cohort has idle.
        lending_limit: at most this much of ``nominal`` is lent to the cohort; the rest is kept for the queue
            alone. None (or a None resource): all of it may be lent.
        weight: fair-share weight; a queue's dominant share is divided by it, so weight 2 gets about twice the
            room of weight 1 when queues compete.
    """

    name: str
    nominal: QuotaAmounts = field(default_factory=QuotaAmounts)
    cohort: str | None = None
    borrowing_limit: QuotaAmounts | None = None
    lending_limit: QuotaAmounts | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"queue {self.name}: weight must be positive, got {self.weight}")


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
