"""The embedded scheduler loop: snapshot the store, call ``core.scheduling.schedule``, apply the decisions.

Admission writes the chosen devices into ``status.placements`` and moves the job Queued → Admitted in one
status write, so a job is never half-admitted. A job left waiting gets the scheduler's one-sentence reason in
``status.message`` (written only when it changes, and recorded as an event).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from phalanx.adapters.clock import SystemClock
from phalanx.adapters.store import ConflictError, NotFoundError, SqliteStore
from phalanx.core.lifecycle import HOLDING_PHASES, transition
from phalanx.core.rendezvous import replica_names
from phalanx.core.scheduling import build_snapshot, schedule
from phalanx.core.scheduling.types import Admission, PendingJob, ReplicaRequest
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.nodes import Node
from phalanx.model.replicas import Replica
from phalanx.model.resources import ResourceVector

log = logging.getLogger(__name__)


def replica_requests(job: TrainingJob, jobtype: JobType | None = None) -> list[ReplicaRequest]:
    """Every replica of the job as the scheduler sees it, in rank order (unranked roles last).

    The order matters with ``minAvailable``: the scheduler places replicas in this order and leaves out the
    last ones when not all fit, so rank 0 (the coordinator) is never the one left out.
    """
    requests = []
    for role, _, name in replica_names(job, jobtype):
        resources = job.spec.replicas[role].template.resources
        requests.append(
            ReplicaRequest(name=name, role=role, resources=resources.vector(), gpu_model=resources.gpu_model)
        )
    return requests


def holdings_of(jobs: list[TrainingJob], replicas: list[Replica]) -> list[tuple[ReplicaPlacement, ResourceVector]]:
    """What work holds on nodes.

    That is every replica that still exists (even one still exiting after its job finished), and every replica
    placed for a job in a holding phase that has not been created yet.
    """
    held = []
    existing: set[tuple[str, str]] = set()
    for replica in replicas:
        spec = replica.spec
        existing.add((spec.job_uid, replica.metadata.name))
        vector = ResourceVector(
            cpu_milli=spec.cpu_milli,
            memory=spec.memory,
            gpu=len(spec.placement.gpus) if not spec.placement.gpu_milli else 0,
            gpu_milli=spec.placement.gpu_milli,
        )
        held.append((spec.placement, vector))
    for job in jobs:
        if Phase(job.status.phase) not in HOLDING_PHASES:
            continue
        vectors = {r.name: r.resources for r in replica_requests(job)}
        for name, placement in job.status.placements.items():
            if name in vectors and (job.metadata.uid or "", name) not in existing:
                held.append((placement, vectors[name]))
    return held


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


@dataclass
class SchedulerService:
    """One scheduling cycle per call, over the whole store."""

    store: SqliteStore
    clock: SystemClock = field(default_factory=SystemClock)
    identity: str = "scheduler"

    def sync(self) -> bool:
        """Run one cycle; True when a job was admitted or its waiting reason changed."""
        jobs = self.store.list(TrainingJob)
        queued = [
            job
            for job in jobs
            if Phase(job.status.phase) == Phase.QUEUED
            and job.metadata.deletion_timestamp is None
            and not job.spec.run_policy.suspend
        ]
        if not queued:
            return False
        nodes = self.store.list(Node)
        jobtypes = {jobtype.metadata.name: jobtype for jobtype in self.store.list(JobType)}
        snapshot = build_snapshot(nodes, holdings_of(jobs, self.store.list(Replica)))
        pending = [
            PendingJob(
                key=job.key,
                priority=job.spec.scheduling.effective_priority(),
                created=job.metadata.creation_timestamp or self.clock.now(),
                queue=job.spec.scheduling.queue,
                replicas=tuple(replica_requests(job, jobtypes.get(job.spec.type))),
                min_available=job.spec.scheduling.min_available,
                placement=str(job.spec.scheduling.placement),
                topology=job.spec.scheduling.topology,
            )
            for job in queued
        ]
        decisions = schedule(snapshot, pending, self.clock.now())
        by_key = {job.key: job for job in queued}
        changed = False
        for admission in decisions.admitted:
            try:
                self._admit(by_key[admission.key], admission)
                changed = True
            except (ConflictError, NotFoundError):
                # The job changed (halted, deleted) since the snapshot; the next cycle decides again.
                changed = True
                break  # later admissions in this cycle assumed this one's devices were taken
        for key, reason in decisions.waiting.items():
            job = by_key[key]
            if job.status.message == reason:
                continue
            try:
                self.store.update_status(
                    job.model_copy(
                        update={"status": job.status.model_copy(update={"message": reason, "reason": "Waiting"})}
                    )
                )
                self._event(job, "Waiting", reason)
                changed = True
            except (ConflictError, NotFoundError):
                changed = True
        return changed

    def _admit(self, job: TrainingJob, admission: Admission) -> None:
        now = self.clock.now()
        placements = {
            a.replica: ReplicaPlacement(node=a.node, cpus=list(a.cpus), gpus=list(a.gpus), gpu_milli=a.gpu_milli)
            for a in admission.assignments
        }
        message = describe_admission(admission)
        status = transition(job.status, Phase.ADMITTED, reason="Scheduled", message=message, now=now)
        status = status.model_copy(update={"placements": placements, "admitted_time": now})
        self.store.update_status(job.model_copy(update={"status": status}))
        self._event(job, "Scheduled", f"{message} (by {self.identity})")
        log.info("admitted %s: %s", job.key, message)

    def _event(self, job: TrainingJob, reason: str, message: str) -> None:
        self.store.record_event(
            Event(
                object_kind="TrainingJob",
                object_name=job.metadata.name,
                namespace=job.metadata.namespace,
                reason=reason,
                message=message,
                time=self.clock.now(),
            )
        )
