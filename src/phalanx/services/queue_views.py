"""What `phalanx get queues` and `phalanx describe queue` show: each Queue with what its jobs hold now.

Usage is computed from the jobs at the moment of asking, not read from the Queue's status (which the scheduler
writes once per cycle), so it is always current and the same on both backends: the sum of the requested
resources of the placed replicas (``status.placements``) of every job of the queue in a holding phase
(``core.lifecycle.HOLDING_PHASES``). A job names its queue by ``spec.scheduling.queue`` (``default`` unless it
says otherwise). Admitted jobs are those; pending jobs are the queue's Pending and Queued ones. Jobs being
deleted count for neither. The scheduler writes the same into each Queue's status
(``services.scheduling.queue_statuses`` is ``QueueView.current`` of these views).

A GPU share (``gpuMilli``) counts as its fraction of a GPU, as in the scheduler core's quota accounting.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.queues import Queue, QueueStatus, ResourceAmounts
from phalanx.model.replicas import replica_name


@dataclass(frozen=True)
class QueueUsage:
    """What a queue's admitted jobs request: CPU in millicores, memory in bytes, GPUs in thousandths."""

    cpu_milli: int = 0
    memory: int = 0
    gpu_milli: int = 0

    def __add__(self, other: QueueUsage) -> QueueUsage:
        return QueueUsage(
            self.cpu_milli + other.cpu_milli, self.memory + other.memory, self.gpu_milli + other.gpu_milli
        )

    def amount(self, resource: str) -> int:
        """The usage of ``resource`` in the units of ``ResourceAmounts`` (millicores, bytes, GPUs x 1000)."""
        return {"cpu": self.cpu_milli, "memory": self.memory, "gpu": self.gpu_milli}[resource]


@dataclass
class QueueView:
    """A Queue with its current usage, its admitted jobs and its pending jobs."""

    queue: Queue
    usage: QueueUsage = field(default_factory=QueueUsage)
    admitted: list[TrainingJob] = field(default_factory=list)
    pending: list[TrainingJob] = field(default_factory=list)
    from_status: bool = False  # the jobs could not be read: counts and usage are the scheduler's last status

    @property
    def name(self) -> str:
        """The queue's name."""
        return self.queue.metadata.name

    @property
    def admitted_count(self) -> int:
        """How many jobs of the queue hold resources."""
        return self.queue.status.admitted if self.from_status else len(self.admitted)

    @property
    def pending_count(self) -> int:
        """How many jobs of the queue wait to be admitted."""
        return self.queue.status.pending if self.from_status else len(self.pending)

    def current(self) -> Queue:
        """The Queue with ``status`` as computed now (what ``-o yaml`` shows)."""
        usage = ResourceAmounts.model_validate(
            {"cpu": f"{self.usage.cpu_milli}m", "memory": self.usage.memory, "gpu": self.usage.gpu_milli // 1000}
        )
        status = QueueStatus(admitted=self.admitted_count, pending=self.pending_count, usage=usage)
        return self.queue.model_copy(update={"status": status})


@dataclass
class QueueDescription:
    """`describe queue`: the queue, and the other queues of its cohort."""

    view: QueueView
    cohort: list[QueueView] = field(default_factory=list)


def job_usage(job: TrainingJob) -> QueueUsage:
    """What the job's placed replicas request (zero for a job not placed)."""
    total = QueueUsage()
    if not job.status.placements:
        return total
    for role, spec in job.spec.replicas.items():
        resources = spec.template.resources
        one = QueueUsage(
            cpu_milli=resources.cpu or 0,
            memory=resources.memory or 0,
            gpu_milli=(resources.gpu or 0) * 1000 + (resources.gpu_milli or 0),
        )
        for index in range(spec.count):
            if replica_name(job.metadata.name, role, index) in job.status.placements:
                total = total + one
    return total


#: The phases of the jobs a queue's view counts (``holds`` or ``waits``): what a caller lists for it.
QUEUE_COUNTED_PHASES = frozenset(HOLDING_PHASES | {Phase.PENDING, Phase.QUEUED})


def holds(job: TrainingJob) -> bool:
    """Whether the job counts as admitted in its queue: in a holding phase, placed, not being deleted."""
    return (
        job.metadata.deletion_timestamp is None
        and Phase(job.status.phase) in HOLDING_PHASES
        and bool(job.status.placements)
    )


def waits(job: TrainingJob) -> bool:
    """Whether the job counts as pending in its queue: Pending or Queued, not being deleted."""
    return job.metadata.deletion_timestamp is None and Phase(job.status.phase) in (Phase.PENDING, Phase.QUEUED)


def unique_queues(queues: Iterable[Queue]) -> list[Queue]:
    """One Queue per name (the first wins, as in the scheduler), sorted by name."""
    found: dict[str, Queue] = {}
    for queue in queues:
        found.setdefault(queue.metadata.name, queue)
    return [found[name] for name in sorted(found)]


def queue_views(queues: Iterable[Queue], jobs: Iterable[TrainingJob] | None) -> list[QueueView]:
    """Each queue (one per name, sorted) with its usage, admitted and pending jobs.

    Args:
        queues: the Queue objects.
        jobs: every job of every namespace; None when they cannot be read (e.g. the user may not list jobs
            cluster-wide): then the counts and usage the scheduler last wrote into each Queue's status are shown.
    """
    views = {queue.metadata.name: QueueView(queue) for queue in unique_queues(queues)}
    if jobs is None:
        for stored in views.values():
            status = stored.queue.status
            stored.usage = QueueUsage(status.usage.cpu or 0, status.usage.memory or 0, (status.usage.gpu or 0) * 1000)
            stored.from_status = True
        return list(views.values())
    for job in jobs:
        view = views.get(job.spec.scheduling.queue)
        if view is None:
            continue
        if holds(job):
            view.admitted.append(job)
            view.usage = view.usage + job_usage(job)
        elif waits(job):
            view.pending.append(job)
    return list(views.values())


def describe_queue(name: str, queues: Iterable[Queue], jobs: Iterable[TrainingJob] | None) -> QueueDescription | None:
    """The queue called ``name`` and the other queues of its cohort; None when there is no such queue."""
    views = queue_views(queues, jobs)
    mine = next((view for view in views if view.name == name), None)
    if mine is None:
        return None
    cohort = mine.queue.spec.cohort
    others = [view for view in views if cohort is not None and view.queue.spec.cohort == cohort and view is not mine]
    return QueueDescription(mine, others)
