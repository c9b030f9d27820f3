"""What the control plane does with an accepted object, done in-process: the core functions that consume it.

An object that passed the door must not make a later step raise (issue 13, defects 2 and 4: a huge quantity
overflowed the scheduler's int64 arrays, a huge duration overflowed the planner's datetime arithmetic). These
helpers feed an accepted object to the same functions the control plane calls: resource vectors, the
scheduler's inputs and one scheduling cycle on a small fixed cluster, and the reconcile planner in the phases
whose timers read the durations.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from phalanx.core.reconcile import ReconcileInput, plan
from phalanx.core.scheduling import build_snapshot, schedule
from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.types import PendingJob
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.model.validation import validate_job
from phalanx.services.scheduling import queue_quotas, replica_requests

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GiB = 2**30


def _node(name: str, cpus: int, memory: int, gpus: int) -> Node:
    return Node.model_validate(
        {
            "metadata": {"name": name},
            "status": {
                "cpus": [{"id": i, "numa": i * 2 // cpus} for i in range(cpus)],
                "memory": memory,
                "gpus": [{"index": i, "model": "A100", "numa": i * 2 // max(gpus, 1)} for i in range(gpus)],
                "source": "simulated",
            },
        }
    )


CLUSTER = (_node("cpu-node", 16, 64 * GiB, 0), _node("gpu-node", 32, 256 * GiB, 4))


def pending_job(job: TrainingJob, jobtype: JobType | None) -> PendingJob:
    """The scheduler's view of a queued job, as ``services.embedded.scheduler`` builds it."""
    return PendingJob(
        key=job.key,
        priority=job.spec.scheduling.effective_priority(),
        created=NOW,
        queue=job.spec.scheduling.queue,
        replicas=tuple(replica_requests(job, jobtype)),
        min_available=job.spec.scheduling.min_available,
        placement=str(job.spec.scheduling.placement),
        topology=job.spec.scheduling.topology,
    )


def consume_job(job: TrainingJob, jobtypes: dict[str, JobType], queues: tuple[Queue, ...] = ()) -> None:
    """Resource vectors, one scheduling cycle, and the planner in Pending, Running and Succeeded."""
    for replica in job.spec.replicas.values():
        replica.template.resources.vector().scaled(replica.count)
    jobtype = jobtypes.get(job.spec.type)
    quotas = queue_quotas(queues)
    config = SchedulerConfig(queues=quotas, fair_share=bool(quotas))
    schedule(build_snapshot(CLUSTER, []), [pending_job(job, jobtype)], NOW, config)
    created = job.model_copy(update={"metadata": job.metadata.model_copy(update={"creation_timestamp": NOW})})
    statuses: list[dict[str, Any]] = [
        {},
        {"phase": Phase.RUNNING, "start_time": NOW},
        {"phase": Phase.SUCCEEDED, "start_time": NOW, "completion_time": NOW},
    ]
    for update in statuses:
        observed = created.model_copy(update={"status": created.status.model_copy(update=update)})
        plan(ReconcileInput(job=observed, jobtype=jobtype, replicas=(), now=NOW))


def consume_jobtype(jobtype: JobType, jobtypes: dict[str, JobType]) -> None:
    """A job with every role of the type at its smallest count, validated against it, then consumed."""
    roles = {
        name: {"count": max(role.min_count, 1), "template": {"command": ["true"]}}
        for name, role in jobtype.spec.roles.items()
    }
    document = {"metadata": {"name": "probe"}, "spec": {"type": jobtype.metadata.name, "replicas": roles}}
    known = {**jobtypes, jobtype.metadata.name: jobtype}
    try:
        job = validate_job(document, known)
    except ValueError:
        return  # the type's own rules refuse this probe (a count bound, a template reference): nothing to run
    consume_job(job, known)


def consume_queue(queue: Queue, jobtypes: dict[str, JobType]) -> None:
    """A small job in the queue, scheduled with the queue's quota."""
    document = {
        "metadata": {"name": "probe", "namespace": (queue.spec.namespaces or ["default"])[0]},
        "spec": {
            "replicas": {"worker": {"template": {"command": ["true"], "resources": {"cpu": 1, "memory": "1Gi"}}}},
            "scheduling": {"queue": queue.metadata.name},
        },
    }
    consume_job(validate_job(document, jobtypes), jobtypes, (queue,))


def consume(obj: Any, jobtypes: dict[str, JobType]) -> None:
    """Feed an accepted object of any kind to the functions that consume it."""
    if isinstance(obj, TrainingJob):
        consume_job(obj, jobtypes)
    elif isinstance(obj, JobType):
        consume_jobtype(obj, jobtypes)
    elif isinstance(obj, Queue):
        consume_queue(obj, jobtypes)
    elif isinstance(obj, Dataset):
        assert obj.spec.source.kind in ("path", "url", "sql", "script", "fromJob")
