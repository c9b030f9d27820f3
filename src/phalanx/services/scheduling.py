"""What every scheduler of Phalanx observes the same way: the core's view of jobs, replicas, queues and datasets.

The embedded scheduler (``services.embedded.scheduler``) and phalanx-scheduler (``services.kubernetes.scheduler``)
turn the objects they read into the core's ``PendingJob``, ``RunningJob`` and ``QueueQuota`` with these
functions, and word an admission and a preemptor's wait with them, so both say and count the same.

A job's ``activeDeadlineSeconds`` is its duration estimate (shortest-first, backfill): the controller stops it
by then, so backfill never counts on an end that may not come.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from phalanx.core.lifecycle import HOLDING_PHASES, can_transition, transition
from phalanx.core.reconcile.policies import keeps_running_replicas
from phalanx.core.rendezvous import replica_names
from phalanx.core.scheduling.attained import AttainedService
from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.node_fit import constraint_of
from phalanx.core.scheduling.passes import PassPlan, plan_pass
from phalanx.core.scheduling.pod_requests import is_guaranteed, template_overhead
from phalanx.core.scheduling.types import (
    Admission,
    ClusterSnapshot,
    DatasetNeed,
    DeviceAssignment,
    PendingJob,
    Preemption,
    QueueQuota,
    QuotaAmounts,
    ReplicaRequest,
    RunningJob,
)
from phalanx.model.datasets import Dataset, Distribution
from phalanx.model.jobs import TERMINAL_PHASES, Phase, ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue, QueueStatus, ResourceAmounts
from phalanx.model.replicas import Replica
from phalanx.model.resources import ResourceVector
from phalanx.services.queue_views import queue_views

log = logging.getLogger(__name__)


def replica_requests(job: TrainingJob, jobtype: JobType | None = None) -> list[ReplicaRequest]:
    """Every replica of the job as the scheduler sees it, in rank order (unranked roles last).

    The order matters with ``minAvailable``: the scheduler places replicas in this order and leaves out the
    last ones when not all fit, so rank 0 (the coordinator) is never the one left out.
    """
    requests = []
    for role, _, name in replica_names(job, jobtype):
        template = job.spec.replicas[role].template
        resources = template.resources
        requests.append(
            ReplicaRequest(
                name=name,
                role=role,
                resources=resources.vector(),
                gpu_model=resources.gpu_model,
                pin_cpus=is_guaranteed(template),
                node_constraint=constraint_of(template),
                overhead=template_overhead(template),
            )
        )
    return requests


@dataclass(frozen=True)
class Occupant:
    """What one observed replica (a process, a Pod) holds on its node.

    ``placement`` is None for work Phalanx did not place (a foreign Pod, or one of a job's Pods away from its
    placement): it holds ``held`` without named devices. ``replica`` is the (job uid, replica name) whose
    placement the occupant accounts for, so that placement is not counted a second time.
    """

    node: str
    held: ResourceVector
    placement: ReplicaPlacement | None = None
    replica: tuple[str, str] = ("", "")


def replica_occupant(replica: Replica) -> Occupant:
    """A replica of the embedded runtime: it holds its placement, and what its spec says."""
    spec = replica.spec
    held = ResourceVector(
        cpu_milli=spec.cpu_milli,
        memory=spec.memory,
        gpu=len(spec.placement.gpus) if not spec.placement.gpu_milli else 0,
        gpu_milli=spec.placement.gpu_milli,
    )
    return Occupant(spec.placement.node, held, spec.placement, (spec.job_uid, replica.metadata.name))


def holdings_of(
    jobs: Iterable[TrainingJob],
    occupants: Iterable[Occupant],
    nodes: Iterable[Node] = (),
    requests: Callable[[TrainingJob], Mapping[str, ResourceVector]] | None = None,
) -> list[tuple[ReplicaPlacement, ResourceVector]]:
    """What work holds on nodes, as ``build_snapshot`` takes it.

    That is every occupant (even a replica still exiting after its job finished), and every placement of a job
    in a holding phase that no occupant accounts for (its replica is not created yet, or is away from it). A
    placement the job's spec no longer names is left out: no replica will be started for it. An occupant without
    a placement takes its GPUs from the highest indexes of ``nodes`` no placement holds (the device plugin's
    choice is not visible). ``requests`` gives a job's replicas' requests by name (default: ``replica_requests``;
    phalanx-scheduler passes its cache).
    """
    held: list[tuple[ReplicaPlacement, ResourceVector]] = []
    covered: set[tuple[str, str]] = set()
    foreign: list[Occupant] = []
    for occupant in occupants:
        if occupant.placement is None:
            foreign.append(occupant)
        else:
            held.append((occupant.placement, occupant.held))
            covered.add(occupant.replica)
    for job, name, placement, vector in placed_replicas(jobs, requests):
        if (job.metadata.uid or "", name) not in covered:
            held.append((placement, vector))
    if foreign:
        held.extend(_without_placement(foreign, held, nodes))
    return held


def placed_replicas(
    jobs: Iterable[TrainingJob], requests: Callable[[TrainingJob], Mapping[str, ResourceVector]] | None = None
) -> Iterator[tuple[TrainingJob, str, ReplicaPlacement, ResourceVector]]:
    """Each placement of a job in a holding phase that its spec still names: (job, replica, placement, request).

    What jobs hold by their placements, for ``holdings_of`` (the schedulers) and ``services.node_views`` (who
    holds what, for the nodes views). ``requests`` as in ``holdings_of``.
    """
    requested = requests or (lambda job: {r.name: r.total() for r in replica_requests(job)})
    for job in jobs:
        if Phase(job.status.phase) not in HOLDING_PHASES:
            continue
        vectors = requested(job)
        for name, placement in job.status.placements.items():
            if name in vectors:
                yield job, name, placement, vectors[name]


def _without_placement(
    occupants: list[Occupant], held: list[tuple[ReplicaPlacement, ResourceVector]], nodes: Iterable[Node]
) -> list[tuple[ReplicaPlacement, ResourceVector]]:
    """Occupants without a placement: their CPU and memory, and GPUs counted down from the highest free index."""
    taken: dict[str, set[int]] = defaultdict(set)
    for placement, _ in held:
        taken[placement.node].update(placement.gpus)
    free = {node.metadata.name: [g.index for g in sorted(node.status.gpus, key=lambda g: -g.index)] for node in nodes}
    extra = []
    for occupant in occupants:
        left = [index for index in free.get(occupant.node, []) if index not in taken[occupant.node]]
        chosen = left[: occupant.held.gpu]
        taken[occupant.node].update(chosen)
        vector = ResourceVector(cpu_milli=occupant.held.cpu_milli, memory=occupant.held.memory, gpu=len(chosen))
        extra.append((ReplicaPlacement(node=occupant.node, gpus=chosen), vector))
    return extra


def running_job(
    job: TrainingJob,
    requests: tuple[ReplicaRequest, ...],
    placements: Iterable[tuple[str, ReplicaPlacement]],
    now: datetime,
) -> RunningJob | None:
    """The core's ``RunningJob`` for a job holding ``placements`` (replica name, placement); None for none."""
    assignments = tuple(
        DeviceAssignment(
            replica=name,
            node=placement.node,
            cpus=tuple(placement.cpus),
            gpus=tuple(placement.gpus),
            gpu_milli=placement.gpu_milli,
        )
        for name, placement in placements
    )
    if not assignments:
        return None
    return RunningJob(
        key=job.key,
        priority=job.spec.scheduling.effective_priority(),
        queue=job.spec.scheduling.queue,
        started=job.status.admitted_time or job.metadata.creation_timestamp or now,
        replicas=requests,
        assignments=assignments,
        checkpointed=False,
        expected_end=_deadline(job),
        # Storing and Halting jobs are about to give their room back; the lifecycle cannot preempt them.
        preemptible=can_transition(Phase(job.status.phase), Phase.PREEMPTED),
    )


def _deadline(job: TrainingJob) -> datetime | None:
    """When the controller stops the job for ``activeDeadlineSeconds`` (as ``core.reconcile`` anchors it)."""
    seconds = job.spec.run_policy.active_deadline_seconds
    anchor = job.status.start_time or job.metadata.creation_timestamp
    return None if seconds is None or anchor is None else anchor + timedelta(seconds=seconds)


def running_jobs(
    jobs: Iterable[TrainingJob],
    replicas: Iterable[Replica] = (),
    *,
    jobtypes: Mapping[str, JobType],
    nodes: Iterable[str],
    now: datetime,
    counted: Callable[[TrainingJob, str, ReplicaPlacement], bool] | None = None,
) -> tuple[RunningJob, ...]:
    """The jobs in holding phases that hold placements, as the core's ``RunningJob``s.

    Only placements the holdings count are assigned: on a node the snapshot lists, and ``counted`` (by default: a
    replica the job still asks for whose Replica object has not been created, or exists with that very
    placement; phalanx-scheduler asks the same of the job's Pods). Whatever else a job's replicas hold stays
    counted in the nodes' use without a job behind it (taken, never given back).

    A finished job whose replicas (``replicas``) are still exiting is running too, ending now and not preemptible:
    backfill must see that room come back, or the first waiting job would get no reservation and any job could
    pass it. Replicas a finished job leaves running (``cleanPodPolicy: None``) are running too, with no known end.
    """
    existing = {(r.spec.job_uid, r.metadata.name): r.spec.placement for r in replicas}
    exiting: dict[str, list[tuple[str, ReplicaPlacement]]] = {}
    for (uid, name), placement in existing.items():
        exiting.setdefault(uid, []).append((name, placement))
    if counted is None:

        def counted(job: TrainingJob, name: str, placement: ReplicaPlacement) -> bool:
            return existing.get((job.metadata.uid or "", name), placement) == placement

    known = set(nodes)
    running = []
    for job in jobs:
        if Phase(job.status.phase) in TERMINAL_PHASES and (job.metadata.uid or "") in exiting:
            running.extend(_exiting_job(job, jobtypes.get(job.spec.type), exiting[job.metadata.uid or ""], known, now))
            continue
        if Phase(job.status.phase) not in HOLDING_PHASES or not job.status.placements:
            continue
        requests = tuple(replica_requests(job, jobtypes.get(job.spec.type)))
        names = {request.name for request in requests}
        kept = [
            (name, placement)
            for name, placement in job.status.placements.items()
            if name in names and placement.node in known and counted(job, name, placement)
        ]
        found = running_job(job, requests, kept, now)
        if found is not None:
            running.append(found)
    return tuple(running)


def _exiting_job(
    job: TrainingJob,
    jobtype: JobType | None,
    replicas: list[tuple[str, ReplicaPlacement]],
    known: set[str],
    now: datetime,
) -> list[RunningJob]:
    """A finished job's replicas still exiting, as a ``RunningJob`` that ends now (none if they cannot be)."""
    try:
        requests = tuple(replica_requests(job, jobtype))
    except Exception:  # a spec the scheduler cannot read: its room stays taken until the replicas are gone
        return []
    names = {request.name for request in requests}
    found = running_job(job, requests, [(n, p) for n, p in replicas if n in names and p.node in known], now)
    # Replicas a finished job leaves running (cleanPodPolicy None) end when they will: backfill may not count
    # on their room coming back.
    kept = keeps_running_replicas(job.spec.run_policy, Phase(job.status.phase), job.status.reason)
    return [] if found is None else [replace(found, expected_end=None if kept else now, preemptible=False)]


def _amounts(amounts: ResourceAmounts) -> QuotaAmounts:
    return QuotaAmounts(cpu_milli=amounts.cpu, memory=amounts.memory, gpus=amounts.gpu)


def queue_quotas(queues: Iterable[Queue]) -> tuple[QueueQuota, ...]:
    """One ``QueueQuota`` per queue name; a name repeated in another namespace is ignored (the first wins).

    Queues are cluster-scoped: the embedded store keeps them in a namespace, but jobs name a queue by name.
    """
    quotas: dict[str, QueueQuota] = {}
    for queue in queues:
        name = queue.metadata.name
        if name in quotas:
            log.warning("Queue %s/%s: a Queue named %s already exists; ignored", queue.metadata.namespace, name, name)
            continue
        spec = queue.spec
        quotas[name] = QueueQuota(
            name=name,
            nominal=_amounts(spec.quota),
            cohort=spec.cohort,
            borrowing_limit=_amounts(spec.borrowing_limit) if spec.borrowing_limit is not None else None,
            weight=spec.weight,
        )
    return tuple(quotas.values())


def dataset_needs(job: TrainingJob, datasets: Mapping[tuple[str, str], Dataset]) -> tuple[DatasetNeed, ...]:
    """What each replica of the job would fetch of its datasets, for the data-locality plugin.

    ``datasets`` by (namespace, name). A mount pins a version or takes the Dataset's materialised one; a replica
    fetches the whole dataset when it is replicated, its share of the bytes when sharded. A Dataset not known
    or not materialised yet weighs nothing (there is nothing to prefer a node for).
    """
    needs = []
    replicas = max(1, job.spec.total_replicas())
    for mount in job.spec.datasets:
        dataset = datasets.get((job.metadata.namespace, mount.dataset_name))
        if dataset is None:
            continue
        distribution = mount.distribution or dataset.spec.distribution
        size = dataset.status.bytes if distribution == Distribution.REPLICATE else -(-dataset.status.bytes // replicas)
        needs.append(DatasetNeed(name=mount.dataset_name, version=mount.version or dataset.status.version, bytes=size))
    return tuple(needs)


def queue_refusal(job: TrainingJob, queues: Mapping[str, Queue]) -> str | None:
    """Why the job's queue does not take it (its namespace or priority class is not allowed), or None.

    Such a job waits, as in Kueue, until the queue's spec or the job's changes; a job naming a queue that does not
    exist is not limited by any queue.
    """
    name = job.spec.scheduling.queue
    queue = queues.get(name)
    if queue is None:
        return None
    namespaces, classes = queue.spec.namespaces, queue.spec.priority_classes
    namespace = job.metadata.namespace
    if namespaces and namespace not in namespaces:
        return (
            f"queue {name} takes jobs of namespace {', '.join(namespaces)} only, not {namespace}: set "
            f"spec.scheduling.queue to a queue that takes {namespace}, or add {namespace} to the queue's "
            "spec.namespaces"
        )
    priority_class = job.spec.scheduling.priority_class
    if classes and priority_class not in classes:
        named = f"priority class {priority_class}" if priority_class else "no priority class"
        return (
            f"queue {name} takes priority classes {', '.join(classes)} only, and the job has {named}: set "
            f"spec.scheduling.priorityClass to one of them"
        )
    return None


def queue_statuses(queues: Iterable[Queue], jobs: Iterable[TrainingJob]) -> dict[str, QueueStatus]:
    """What each queue's jobs hold and how many of them wait, as ``phalanx get queues`` computes it.

    Admitted: jobs in holding phases with placements; usage: their placed replicas' requests summed (cpu,
    memory, GPUs, a share counting as its fraction); pending: the Pending and Queued jobs. A queue with no job
    has a zero status; every name in ``queues`` gets a status, whatever its namespace.
    """
    return {view.name: view.current().status for view in queue_views(queues, jobs)}


def pending_job(
    job: TrainingJob,
    jobtype: JobType | None,
    datasets: Mapping[tuple[str, str], Dataset],
    now: datetime,
    attained: float = 0.0,
) -> PendingJob:
    """The core's ``PendingJob`` for a queued job that attained ``attained`` GPU-seconds in earlier runs."""
    deadline = job.spec.run_policy.active_deadline_seconds
    return PendingJob(
        key=job.key,
        priority=job.spec.scheduling.effective_priority(),
        created=job.metadata.creation_timestamp or now,
        queue=job.spec.scheduling.queue,
        replicas=tuple(replica_requests(job, jobtype)),
        min_available=job.spec.scheduling.min_available,
        placement=str(job.spec.scheduling.placement),
        topology=job.spec.scheduling.topology,
        datasets=dataset_needs(job, datasets),
        duration_estimate=float(deadline) if deadline is not None else None,
        attained_service=attained,
    )


def plan_cycle(
    snapshot: ClusterSnapshot,
    queued: Iterable[TrainingJob],
    jobs: Iterable[TrainingJob],
    *,
    queues: Iterable[Queue],
    jobtypes: Mapping[str, JobType],
    datasets: Mapping[tuple[str, str], Dataset],
    attained: AttainedService,
    policy: SchedulerConfig,
    nominated: Mapping[str, tuple[str, ...]],
    now: datetime,
    unconvertible: Callable[[TrainingJob, Exception], None] | None = None,
) -> PassPlan:
    """One scheduling cycle of either backend: the ``queued`` jobs their queues take, planned by ``plan_pass``.

    ``snapshot`` carries the running jobs; ``jobs`` are every job (a Preempted one still stopping keeps
    preemption off); of ``queues`` sharing a name, the first counts. A queued job that cannot be turned into a
    ``PendingJob`` goes to ``unconvertible`` (the embedded runtime quarantines it); without it, the error rises.
    """
    queued = list(queued)
    by_name: dict[str, Queue] = {}
    for queue in queues:
        by_name.setdefault(queue.metadata.name, queue)
    refused = {job.key: queue_refusal(job, by_name) for job in queued}
    pending = []
    for job in queued:
        if refused[job.key] is not None:
            continue
        try:
            pending.append(pending_job(job, jobtypes.get(job.spec.type), datasets, now, attained.before(job.key)))
        except Exception as err:
            if unconvertible is None:
                raise
            unconvertible(job, err)
    plan = plan_pass(
        snapshot,
        pending,
        policy=policy,
        bands=attained.bands(policy),
        now=now,
        queues=queue_quotas(by_name.values()),
        # Victims still stopping free room for their preemptors (the pass turns preemption off meanwhile).
        stopping=any(Phase(job.status.phase) == Phase.PREEMPTED for job in jobs),
        nominated=nominated,
        refusals={key: reason for key, reason in refused.items() if reason is not None},
    )
    for error in plan.errors:
        log.error("a scheduling cycle failed: %s: %s", type(error).__name__, error, exc_info=error)
    return plan


def admitted_status(job: TrainingJob, admission: Admission, now: datetime) -> tuple[TrainingJobStatus, str]:
    """The job's status once admitted (Admitted, with its placements), and the sentence that says where."""
    placements = {
        a.replica: ReplicaPlacement(node=a.node, cpus=list(a.cpus), gpus=list(a.gpus), gpu_milli=a.gpu_milli)
        for a in admission.assignments
    }
    message = describe_admission(admission)
    status = transition(job.status, Phase.ADMITTED, reason="Scheduled", message=message, now=now)
    return status.model_copy(update={"placements": placements, "admitted_time": now}), message


def preempted_status(job: TrainingJob, preemption: Preemption, now: datetime) -> TrainingJobStatus | None:
    """The victim's status once preempted; None when its phase cannot be (never with a consistent snapshot)."""
    if not can_transition(Phase(job.status.phase), Phase.PREEMPTED):
        return None
    return transition(job.status, Phase.PREEMPTED, reason="Preempted", message=preemption.reason, now=now)


def describe_admission(admission: Admission) -> str:
    """'placed 2 replicas on local: quickstart-master-0 CPUs 0; quickstart-worker-0 CPUs 1'."""
    nodes = sorted({a.node for a in admission.assignments})
    parts = []
    for a in admission.assignments:
        devices = []
        if a.cpus:
            devices.append("CPUs " + ",".join(map(str, a.cpus)))
        if a.gpus:
            devices.append("GPUs " + ",".join(map(str, a.gpus)))
        if a.gpu_milli:
            devices.append(f"{a.gpu_milli} milli-GPU")
        parts.append(f"{a.replica} {' '.join(devices) or 'shared CPUs'}")
    return f"placed {len(admission.assignments)} replica(s) on {', '.join(nodes)}: " + "; ".join(parts)
