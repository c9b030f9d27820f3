"""The embedded scheduler loop: snapshot the store, run the scheduling pass (``core.scheduling.passes``), apply it.

Each cycle gives the pass the running jobs (every job in a holding phase, with the placements the snapshot counts
as held), one ``QueueQuota`` per ``Queue`` object in the store, the base ``policy`` (the SchedulerConfiguration of
``phalanx up --scheduler-config``), the jobs their queue refuses
(``spec.namespaces``, ``spec.priorityClasses``) with that reason, and whether a victim is still stopping. The
pass decides what the simulator and phalanx-scheduler decide: preemptions, admissions (a preemptor waits until
its victims' replicas are gone, and the room they free is nominated for it), and a reason for every waiting job.

Admission writes the chosen devices into ``status.placements`` and moves the job Queued → Admitted in one
status write, so a job is never half-admitted. A job left waiting gets the pass's one-sentence reason in
``status.message`` (written only when it changes, and recorded as an event). A victim is moved to Preempted;
the controller then stops its replicas and queues it again.

One job cannot stop every other from being scheduled: a job whose own inputs fail to convert is quarantined
(``services.embedded.quarantine``) before the cycle, and the jobs the pass finds make the cycle fail
(``PassPlan.culprits``) are quarantined and the cycle runs without them. Quarantined jobs are left out of later
cycles until they change or their retry time comes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.store import ConflictError, NotFoundError, SqliteStore, StoreError
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.scheduling import build_snapshot
from phalanx.core.scheduling.attained import AttainedService
from phalanx.core.scheduling.config import DEFAULT_POLICY, SchedulerConfig
from phalanx.core.scheduling.types import Admission, Preemption, ReplicaRequest
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.services.embedded.operations import SqliteStatus
from phalanx.services.embedded.quarantine import SCHEDULER_ERROR, Held, Quarantine, guarded_hold
from phalanx.services.metrics import SchedulerMetrics
from phalanx.services.port import Written
from phalanx.services.scheduling import (
    admitted_status,
    holdings_of,
    plan_cycle,
    preempted_status,
    queue_quotas,
    queue_statuses,
    replica_occupant,
    replica_requests,
    running_jobs,
)

log = logging.getLogger(__name__)


# The cycle counts resources in int64 arrays: a request past this cannot be scheduled (validation bounds requests
# far below it; a row written by hand or by an older version may not be).
_COUNTABLE_MAX = 2**62


def _check_countable(request: ReplicaRequest) -> None:
    vector = request.resources
    for field_name, value in (("cpu", vector.cpu_milli), ("memory", vector.memory), ("gpu", vector.gpu)):
        if not 0 <= value <= _COUNTABLE_MAX:
            raise OverflowError(f"replica {request.name} asks for {field_name} {value}, more than any node can count")


@dataclass
class SchedulerService:
    """One scheduling cycle per call, over the whole store."""

    store: SqliteStore
    clock: Clock = field(default_factory=SystemClock)
    identity: str = "scheduler"
    quarantine: Quarantine = field(init=False)
    port: SqliteStatus = field(init=False)  # statuses and events of the jobs it decides on
    policy: SchedulerConfig = DEFAULT_POLICY  # the base settings (a SchedulerConfiguration file)
    metrics: SchedulerMetrics | None = (
        None  # where admissions, preemptions and cycles are counted (phalanx up --listen)
    )
    # Preemptors whose victims' room is theirs (``core.scheduling.passes``); kept in memory: after a restart, a
    # victim still stopping keeps preemption off, and the preemptor is tried in the usual order again.
    _nominated: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False, repr=False)
    # GPU-seconds each job attained in earlier runs and the time-slicing bands, carried from cycle to cycle.
    _attained: AttainedService = field(default_factory=AttainedService, init=False, repr=False)
    _failure: str | None = field(default=None, init=False, repr=False)
    _queue_failure: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.quarantine = Quarantine(self.store, self.clock)
        self.port = SqliteStatus(self.store, clock=self.clock)

    def sync(self) -> bool:
        """Run one cycle; True when a job was admitted, preempted or quarantined, or its waiting reason changed."""
        try:
            changed = self._cycle()
        except StoreError:
            raise
        except Exception as err:
            # Not one pending job's doing (those are quarantined): the nodes, running jobs or queues as stored.
            # Said once, not on every pass; the next pass tries again.
            said = f"{type(err).__name__}: {err}"
            if said != self._failure:
                log.exception("a scheduling cycle failed; no job is scheduled until it succeeds")
            self._failure = said
            return False
        self._failure = None
        return changed

    def _cycle(self) -> bool:
        jobs = self.store.list(TrainingJob)
        try:
            self._write_queue_statuses(jobs)
        except StoreError:
            raise
        except Exception as err:  # a report: it must not keep jobs from being scheduled, nor fill the log
            if repr(err) != self._queue_failure:
                log.exception("cannot count the queues' usage; scheduling without updating it")
            self._queue_failure = repr(err)
        else:
            self._queue_failure = None
        # A quarantined job still holds what it was given (it is not scheduled again, but keeps its room).
        held = self.quarantine.held("TrainingJob")
        queued = [
            job
            for job in jobs
            if Phase(job.status.phase) == Phase.QUEUED
            and job.metadata.deletion_timestamp is None
            and not job.spec.run_policy.suspend
            and not held.skips(job)
        ]
        if not queued:
            return False
        started = time.perf_counter()
        try:
            return self._schedule(jobs, queued, held)
        finally:
            if self.metrics is not None:
                self.metrics.cycle_took(time.perf_counter() - started)

    def _schedule(self, jobs: list[TrainingJob], queued: list[TrainingJob], held: Held) -> bool:
        """Decide on the queued jobs: quarantine culprits, preempt, admit, and say why the rest wait."""
        now = self.clock.now()
        nodes = self.store.list(Node)
        replicas = self.store.list(Replica)
        jobtypes = {jobtype.metadata.name: jobtype for jobtype in self.store.list(JobType)}
        bad = self._unconvertible(jobs, jobtypes, held)
        changed = any(not held.skips(job) for job in jobs if job.key in bad)
        jobs = [job for job in jobs if job.key not in bad]
        queued = [job for job in queued if job.key not in bad]
        replicas, changed_replicas = self._countable(replicas)
        changed |= changed_replicas
        snapshot = build_snapshot(nodes, holdings_of(jobs, map(replica_occupant, replicas)))
        running = running_jobs(jobs, replicas, jobtypes=jobtypes, nodes=(node.metadata.name for node in nodes), now=now)
        running = self._attained.observe(running, now, (job.key for job in jobs))
        datasets = {(d.metadata.namespace, d.metadata.name): d for d in self.store.list(Dataset)}
        stored_queues, changed_queues = self._usable_queues(self.store.list(Queue))
        changed |= changed_queues
        unconvertible: list[tuple[TrainingJob, Exception]] = []  # queued jobs that make no PendingJob
        by_key = {job.key: job for job in queued}
        plan = plan_cycle(
            replace(snapshot, running=running),
            queued,
            jobs,
            queues=stored_queues,
            jobtypes=jobtypes,
            datasets=datasets,
            attained=self._attained,
            policy=self.policy,
            nominated=self._nominated,
            now=now,
            unconvertible=lambda job, err: unconvertible.append((job, err)),
        )
        for job, error in [*unconvertible, *((by_key[key], error) for key, error in plan.culprits.items())]:
            guarded_hold(self.quarantine, job, reason=SCHEDULER_ERROR, error=error)
            changed = True
        if not plan.decided:
            return changed
        self._nominated = plan.nominated
        for job in queued:
            if held.has(job) and job.key not in plan.culprits:
                self.quarantine.clear(job, held, reason=SCHEDULER_ERROR)  # its retry went through
        changed |= self._preempt(jobs, plan.preempted)
        for admission in plan.admitted:
            changed = True  # admitted, or the job changed (halted, deleted) since the snapshot: decided again
            if not self._admit(by_key[admission.key], admission):
                break  # later admissions in this cycle assumed this one's devices were taken
        for key, reason in plan.waiting.items():
            job = by_key[key]
            if job.status.message == reason:
                continue
            if self.port.write_status(job, {"message": reason, "reason": "Waiting"}) is Written.WROTE:
                self.port.record(job, "Waiting", reason)
            changed = True  # written, or the job changed since the snapshot: the next cycle decides again
        return changed

    def _unconvertible(self, jobs: list[TrainingJob], jobtypes: Mapping[str, JobType], held: Held) -> set[str]:
        """Keys of the jobs holding room whose replicas cannot be counted; those not quarantined yet are.

        Such jobs are part of the snapshot every cycle starts from, so the pass's search among pending jobs
        could not find them: they are checked here instead.
        """
        bad = set()
        for job in jobs:
            if Phase(job.status.phase) not in HOLDING_PHASES:
                continue
            try:
                for request in replica_requests(job, jobtypes.get(job.spec.type)):
                    _check_countable(request)
            except Exception as err:
                bad.add(job.key)
                if not held.skips(job):
                    guarded_hold(self.quarantine, job, reason=SCHEDULER_ERROR, error=err)
        return bad

    def _usable_queues(self, queues: list[Queue]) -> tuple[list[Queue], bool]:
        """The Queues the cycle can take as quotas; the others are quarantined (True when one was now)."""
        held = self.quarantine.held("Queue")
        usable, changed = [], False
        for queue in queues:
            try:
                queue_quotas([queue])
            except Exception as err:
                if not held.skips(queue):
                    guarded_hold(self.quarantine, queue, reason=SCHEDULER_ERROR, error=err)
                    changed = True
                continue
            usable.append(queue)
        return usable, changed

    def _countable(self, replicas: list[Replica]) -> tuple[list[Replica], bool]:
        """The replicas whose holdings the cycle can count; the others are quarantined (True when one was now)."""
        held = self.quarantine.held("Replica")
        kept, changed = [], False
        for replica in replicas:
            spec = replica.spec
            try:
                for field_name, value in (("cpu", spec.cpu_milli), ("memory", spec.memory)):
                    if not 0 <= value <= _COUNTABLE_MAX:
                        raise OverflowError(f"it holds {field_name} {value}, more than any node can count")
            except OverflowError as err:
                if not held.skips(replica):
                    guarded_hold(self.quarantine, replica, reason=SCHEDULER_ERROR, error=err)
                    changed = True
                continue
            kept.append(replica)
        return kept, changed

    def _write_queue_statuses(self, jobs: list[TrainingJob]) -> None:
        """Record each Queue's admitted and pending jobs and usage, when they changed (``phalanx get queues``)."""
        queues = self.store.list(Queue)
        if not queues:
            return
        statuses = queue_statuses(queues, jobs)
        for queue in queues:
            status = statuses[queue.metadata.name]
            if queue.status == status:
                continue
            try:
                self.store.update_status(queue.model_copy(update={"status": status}))
            except (ConflictError, NotFoundError):
                continue  # changed or deleted meanwhile; the next pass counts again

    def _preempt(self, jobs: list[TrainingJob], preempted: Iterable[Preemption]) -> bool:
        """Move each victim to Preempted; the controller stops its replicas and queues it again."""
        by_key = {job.key: job for job in jobs}
        changed = False
        for preemption in preempted:
            job = by_key[preemption.victim]
            status = preempted_status(job, preemption, self.clock.now())
            if status is None:
                continue
            changed = True
            if self.port.write_status(job, dict(status)) is not Written.WROTE:
                # The victim changed since the snapshot (it finished, was halted or deleted); its room is being
                # given back anyway or the next cycle decides again.
                continue
            if self.metrics is not None:
                self.metrics.preempted(job)
            self._event(job, "Preempted", f"{preemption.reason} (by {self.identity})", warning=True)
            log.info("preempted %s: %s", job.key, preemption.reason)
        return changed

    def _admit(self, job: TrainingJob, admission: Admission) -> bool:
        """Place the job and move it Queued -> Admitted in one status write; False when the write was lost."""
        now = self.clock.now()
        status, message = admitted_status(job, admission, now)
        if self.port.write_status(job, dict(status)) is not Written.WROTE:
            return False
        if self.metrics is not None:
            self.metrics.admitted(job, now)
        self._event(job, "Scheduled", f"{message} (by {self.identity})")
        log.info("admitted %s: %s", job.key, message)
        return True

    def _event(self, job: TrainingJob, reason: str, message: str, *, warning: bool = False) -> None:
        self.port.record(job, reason, message, warning=warning)
