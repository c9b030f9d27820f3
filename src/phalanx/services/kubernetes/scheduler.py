"""phalanx-scheduler: the embedded runtime's scheduling cycle on a Kubernetes cluster.

The same pure ``core.scheduling.schedule`` decides; this module feeds it from informer caches (nodes, pods,
TrainingJobs, JobTypes, Queues — one LIST each at start, then WATCH; never a LIST per cycle) and carries out its
decisions through the API:

1. **Admit whole gangs.** A Queued TrainingJob whose every replica fits (or ``minAvailable`` of them) gets its
   devices — node, GPU indices, exclusive CPUs — in ``status.placements`` and moves to Admitted in one status
   write carrying the job's resourceVersion (exactly the embedded scheduler's write). A job that does not fit
   gets the one-sentence reason in ``status.message`` and an Event, written only when the reason changes.
   A new job the operator has not moved to Queued yet (it waits a moment for this, ``kube_apply.may_hold``) is
   a candidate too when the operator's own planner would accept it: ``core.reconcile.plan`` moves it to Queued
   and its spec renders (``kube_apply.check_renderable``). If it fits at once it is admitted on top of that
   Queued status, in the same single write: Pending -> Queued -> Admitted, both conditions and both events, and
   one status write fewer per job; if it does not, the write that says why it waits queues it.
2. **Bind.** The operator creates the admitted job's Pods (``schedulerName: phalanx-scheduler``, the placement
   copied into annotations); this scheduler binds each to its placement's node through ``pods/binding``, and
   only once every placed Pod of the gang exists, so a gang's Pods are bound together or not at all. (The Pod
   of a gang of one, a job with a single placed replica, is created on its node by the operator: there is
   nothing to wait for, and a Pod that has its node is never bound again.) A Pod that claims its GPUs through
   Dynamic Resource Allocation (the operator's ``--gpu-allocation dra``) is always bound here: first its claim
   is allocated exactly the devices of its placement and reserved for it (``_claims_resolve`` for the whole
   gang, then ``_allocate_claim``,
   ``adapters.kubernetes.dra``), as kube-scheduler does before it binds, so the DRA driver on the node prepares
   the GPUs Phalanx chose.

3. **Quotas and preemption**, decided by the scheduling pass the embedded runtime and the simulator run
   (``core.scheduling.passes``): the cycle gives it one ``QueueQuota`` per Queue object (cluster-scoped; quota,
   cohort borrowing, fair share), every job that holds placements as a ``RunningJob``, the jobs their queue does
   not take (namespace or priority class not allowed) with that reason, and whether a victim is still stopping.
   Victims are moved to Preempted by a status write; the operator's planner deletes their Pods and queues them
   again. Their preemptor waits until the victims' Pods are gone, and the room they free is nominated for it.

What is held on a node: every bound Pod that has not finished (a Phalanx Pod holds exactly its placement's
devices; any other Pod its CPU and memory requests and as many GPUs as it requests, counted from the highest
free index, since the API does not say which it got), and every placement of an admitted job whose Pod is
not bound yet. A binding this process requested counts as bound until the watch shows it.

A job the cluster's own scheduler places (``spec.scheduling.schedulerName`` or ``job_scheduler`` names another
scheduler, ``core.delegation``) is not this scheduler's: the operator admits it and kube-scheduler places its
Pods; its bound Pods hold room on their nodes like any other Pod.

Only the holder of the Lease schedules (``kube_leader``); a restarted or second scheduler rebuilds everything
from the API, so a ``kill -9`` at any point loses nothing: a job admitted but not bound is bound by the next
leader from its status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes import dra
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    DEVICECLASSES,
    JOBTYPES,
    NODES,
    PODS,
    QUEUES,
    RESOURCECLAIMS,
    RESOURCESLICES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
    Resource,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, start_synced, wait_all_synced
from phalanx.adapters.kubernetes.objects import (
    LABEL_JOB,
    dataset_from_object,
    job_from_object,
    job_status,
    jobtype_from_object,
    model_metadata,
    node_from_object,
    pod_holds_resources,
    queue_from_object,
)
from phalanx.adapters.kubernetes.parsed import ParsedCache
from phalanx.adapters.kubernetes.rendering import ANNOTATION_JOB_UID, RenderError
from phalanx.core.delegation import placing_scheduler
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.reconcile import OutputsObservation, Plan, ReconcileInput, plan
from phalanx.core.reconcile.types import EventRecord
from phalanx.core.scheduling import build_snapshot
from phalanx.core.scheduling.attained import AttainedService
from phalanx.core.scheduling.config import DEFAULT_POLICY, SchedulerConfig
from phalanx.core.scheduling.pod_requests import pod_spec_request
from phalanx.core.scheduling.types import Admission, Preemption, RunningJob
from phalanx.model.datasets import Dataset
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node
from phalanx.model.resources import ResourceVector
from phalanx.services.kubernetes.apply import Background, EventBudget, PodSettings, check_renderable
from phalanx.services.kubernetes.leader import LeaseElector
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.metrics import SchedulerMetrics
from phalanx.services.port import Written
from phalanx.services.scheduling import (
    Occupant,
    admitted_status,
    holdings_of,
    plan_cycle,
    preempted_status,
    queue_statuses,
    replica_requests,
    running_jobs,
)

log = logging.getLogger(__name__)
_UNSETTLED = frozenset({Phase.PENDING, Phase.QUEUED})  # phases in which a job may be admitted


@dataclass(frozen=True)
class SchedulerSettings:
    """How the scheduler identifies itself and paces its work."""

    scheduler_name: str = "phalanx-scheduler"
    namespace: str = "phalanx-system"
    lease_name: str = "phalanx-scheduler"
    identity: str = "phalanx-scheduler"
    lease_duration_s: float = 15.0
    renew_interval_s: float = 2.0
    resync_s: float = 5.0
    workers: int = 8
    coalesce_s: float = 0.05  # after a wake-up, wait at least this long so a burst of events makes one cycle
    coalesce_max_s: float = 0.5  # ... and at most this long, however much the last cycle computed
    cycle_share: float = 0.2  # ... so that cycles take about this share of a CPU under a burst
    policy: SchedulerConfig = DEFAULT_POLICY  # the base policy: --config's SchedulerConfiguration
    job_scheduler: str | None = None  # the cluster's scheduler for jobs naming none (None: this scheduler)


@dataclass(frozen=True)
class _Candidate:
    """A job the cycle may admit: as stored, and as it stands once accepted (Queued)."""

    job: TrainingJob  # its status Queued: stored so, or as the planner accepts a Pending job
    stored: TrainingJobStatus  # the status the write replaces
    events: tuple[EventRecord, ...] = ()  # the planner's, for a job accepted here

    @property
    def accepted_here(self) -> bool:
        return Phase(self.stored.phase) == Phase.PENDING


@dataclass
class CycleResult:
    """What one cycle did (for logs, tests and benchmarks)."""

    admitted: list[str] = field(default_factory=list)
    bound: int = 0
    waiting: dict[str, str] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """True when the cycle changed something (another may follow at once)."""
        return bool(self.admitted or self.bound or self.preempted)


def pod_requests(pod: dict[str, Any]) -> ResourceVector:
    """The Pod's effective request, init containers and sidecars included (``core.scheduling.pod_requests``)."""
    return pod_spec_request(pod.get("spec") or {})


class KubeScheduler:
    """The scheduler's caches, cycle and loop."""

    def __init__(
        self,
        api: KubeApi,
        settings: SchedulerSettings,
        clock: Clock | None = None,
        *,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.api = api
        self.metrics = metrics  # admissions, preemptions and cycle durations, served on /metrics
        self.settings = settings
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self.jobs = Informer(api, TRAININGJOBS, signal=self.signal)
        jobs, name, who = {TrainingJob: self.jobs}, settings.scheduler_name, settings.identity
        # The port: admissions, preemptions, waiting reasons and events; what it writes goes into the caches.
        self.port = KubeBackend(api, clock=self.clock, component=name, instance=who, informers=jobs)
        self.port.on_written = self._remember_parsed
        self.pods = Informer(api, PODS, signal=self.signal, index=_unbound_job_uid)
        self.nodes = Informer(api, NODES, signal=self.signal)
        self.jobtypes = Informer(api, JOBTYPES, signal=self.signal)
        self.queues = Informer(api, QUEUES, signal=self.signal)
        self.datasets = Informer(api, DATASETS)  # read when jobs are placed; a change alone needs no cycle
        self._informers = [self.jobs, self.pods, self.nodes, self.jobtypes, self.queues, self.datasets]
        self.elector = LeaseElector(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            duration_s=settings.lease_duration_s,
            renew_deadline_s=settings.lease_duration_s * 2 / 3,
        )
        self._pool = ThreadPoolExecutor(max(1, settings.workers), thread_name_prefix="scheduler-api")
        # Events go out in the background: a cycle waits for its admissions and bindings, not for their Events.
        self._events_pool = ThreadPoolExecutor(2, thread_name_prefix="scheduler-events")
        self._background = Background()  # explanations and Events under way (``flush``)
        # id(cached object) -> (the object, the job parsed from it): the informer replaces an object's dict on
        # every change, so the dict's identity stands for its version and a cycle finds its parse in one lookup.
        self._parsed_jobs: dict[int, tuple[dict[str, Any], TrainingJob | None, bool]] = {}  # ..., Pending/Queued
        self._unsettled: list[tuple[dict[str, Any], TrainingJob]] = []  # the last cycle's Pending and Queued jobs
        self._parsed_specs: dict[tuple[str, int], TrainingJob | None] = {}  # (uid, generation) -> validated spec
        self._vectors: dict[tuple[str, int], dict[str, ResourceVector]] = {}  # (uid, generation) -> requests
        self._accepted: dict[tuple[str, str], Plan | None] = {}  # (uid, resourceVersion) of a Pending job -> plan
        self._parsed_nodes = ParsedCache(self.nodes, node_from_object)
        self._parsed_jobtypes = ParsedCache(self.jobtypes, jobtype_from_object)
        self._parsed_queues = ParsedCache(self.queues, queue_from_object)
        self._parsed_datasets = ParsedCache(self.datasets, dataset_from_object)
        # Preemptors whose victims' room is theirs (``core.scheduling.passes``); a new leader starts without them.
        self._nominated: dict[str, tuple[str, ...]] = {}
        self._attained = AttainedService()  # GPU-seconds of earlier runs and the time-slicing bands, across cycles
        self._explained: dict[str, tuple[str, str, str]] = {}  # job key -> (uid, version, reason) written
        self._binding: dict[str, str] = {}  # pod uid -> node, requested and not yet seen in the cache
        self._dra: dict[str, Informer] = {}  # ResourceSlices and ResourceClaims, once a Pod claims (``_dra_cache``)
        self._claim_problems: dict[str, str] = {}  # job uid -> why its gang's claims cannot be allocated, as told
        self._lock = threading.Lock()
        self.events = EventBudget(clock=self.clock.monotonic)
        self.ready = threading.Event()
        self.counters: Counter[str] = Counter()  # cycles, admitted, bound: for logs and benchmarks

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the informers and wait for their first lists."""
        start_synced(self._informers, timeout)
        self.ready.set()

    def run(self, stop: threading.Event) -> None:
        """Lead (when the Lease allows) and schedule until ``stop`` is set; releases the Lease on the way out."""
        next_renew = 0.0
        try:
            while not stop.is_set():
                now = self.clock.monotonic()
                if now >= next_renew:
                    self.elector.try_lead()
                    next_renew = now + self.settings.renew_interval_s
                if not self.elector.leading:
                    stop.wait(min(self.settings.renew_interval_s, 1.0))
                    continue
                started = time.thread_time()  # the CPU the cycle computes, not the time it waits for its writes
                try:
                    result = self.cycle()
                except KubeApiError as error:
                    log.warning("scheduling cycle failed: %s", error)
                    result = CycleResult()
                computed = time.thread_time() - started
                self.counters.update(cycles=1, admitted=len(result.admitted), bound=result.bound)
                if not result.busy:  # (after a busy cycle, look again soon: what it wrote may let more happen)
                    wait = max(0.0, min(self.settings.resync_s, next_renew - self.clock.monotonic()))
                    if not self.signal.wait(wait):
                        continue  # the resync: nothing to coalesce
                # Coalesce: under a burst every watch event sets the signal, and a cycle reads every job, Pod and
                # Node (its snapshot of the nodes alone costs tens of ms of CPU on a hundred nodes); one cycle for
                # the events of a while admits and binds them together. Waiting in proportion to what the last
                # cycle computed keeps cycles to about ``cycle_share`` of a CPU under a burst, leaving the rest to
                # the API server and the operator, and makes batches grow with the cluster instead of cycles.
                rest = computed * (1 / self.settings.cycle_share - 1)
                stop.wait(min(max(self.settings.coalesce_s, rest), self.settings.coalesce_max_s))
        finally:
            log.info("scheduler stopped after %s", dict(self.counters))
            self.elector.release()
            self._pool.shutdown(wait=True)
            self._events_pool.shutdown(wait=True)
            for informer in self._informers:
                informer.stop()

    # -- one cycle ----------------------------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        """Preempt and admit what fits, explain what waits, bind the Pods of admitted gangs."""
        result = CycleResult()
        jobtypes = self._current_jobtypes()
        jobs = self._current_jobs(jobtypes)
        unsettled = self._unsettled
        pods = self.pods.items()
        self._forget_seen_bindings(pods)
        nodes = self._parsed_nodes.current()
        queued = self._candidates(unsettled, jobtypes)
        if queued and nodes:
            started = time.perf_counter()
            now = self.clock.now()
            by_key = {candidate.job.key: candidate for candidate in queued}
            datasets = self._current_datasets() if any(c.job.spec.datasets for c in queued) else {}
            running = self._running(jobs, pods, nodes, jobtypes, now)
            running = self._attained.observe(running, now, [job.key for _, job in jobs])
            snapshot = build_snapshot(nodes, self._holdings(jobs, pods, nodes))
            plan = plan_cycle(
                replace(snapshot, running=running),
                (c.job for c in queued),
                (job for _, job in jobs),
                queues=self._parsed_queues.current(),
                jobtypes=jobtypes,
                datasets=datasets,
                attained=self._attained,
                policy=self.settings.policy,
                nominated=self._nominated,
                now=now,
            )
            for key, error in plan.culprits.items():
                log.error("job %s makes the scheduling cycle fail; left out of it: %s", key, error)
            self._nominated = plan.nominated
            result.preempted = self._preempt(jobs, plan.preempted)
            admissions = [(by_key[admission.key], admission) for admission in plan.admitted]
            for key, admitted in zip(
                [a.key for _, a in admissions],
                self._pool.map(lambda item: self._admit(*item), admissions),
                strict=True,
            ):
                if admitted:
                    result.admitted.append(key)
            for key, reason in plan.waiting.items():
                result.waiting[key] = reason
                self._maybe_explain(by_key[key], reason)
            if self.metrics is not None:
                self.metrics.cycle_took(time.perf_counter() - started)
        elif queued:
            for candidate in queued:
                reason = "no nodes are known to the scheduler yet"
                result.waiting[candidate.job.key] = reason
                self._maybe_explain(candidate, reason)
        result.bound = self._bind_admitted(jobs)
        self._write_queue_statuses(jobs)
        return result

    def _write_queue_statuses(self, jobs: list[tuple[dict[str, Any], TrainingJob]]) -> None:
        """Record each Queue's admitted and pending jobs and usage when they changed (``kubectl get queues``)."""
        objects = {str((obj.get("metadata") or {}).get("name")): obj for obj in self.queues.items()}
        if not objects:
            return
        statuses = queue_statuses(self._parsed_queues.current(), [job for _, job in jobs])
        for name, status in statuses.items():
            obj = objects.get(name)
            body = status.to_dict()
            if obj is None or (obj.get("status") or {}) == body:
                continue
            meta = obj["metadata"]
            document = {
                "apiVersion": QUEUES.api_version,
                "kind": QUEUES.kind,
                "metadata": {"name": name, "resourceVersion": meta.get("resourceVersion")},
                "status": body,
            }
            try:
                written = self.api.replace_status(QUEUES, document)
            except KubeApiError as error:
                log.debug("queue %s status: %s", name, error)  # changed meanwhile: the next cycle counts again
                continue
            self.queues.observe(written)

    def _preempt(self, jobs: list[tuple[dict[str, Any], TrainingJob]], preempted: tuple[Preemption, ...]) -> list[str]:
        """Move each victim to Preempted (the operator stops its Pods and queues it again); the keys moved."""
        by_key = {job.key: job for _, job in jobs}
        moved = []
        for preemption in preempted:
            job = by_key[preemption.victim]
            status = preempted_status(job, preemption, self.clock.now())
            if status is None:
                continue
            try:
                wrote = self.port.write_status(job, dict(status)) is Written.WROTE
            except KubeApiError as error:
                log.info("preempting %s: %s", job.key, error)
                wrote = False
            if not wrote:
                # The victim changed since the cycle read it (finished, halted, deleted): its room is being given
                # back anyway, or the next cycle decides again.
                continue
            if self.metrics is not None:
                self.metrics.preempted(job)
            self._event(job, "Preempted", f"{preemption.reason} (by {self.settings.identity})", warning=True)
            log.info("preempted %s: %s", job.key, preemption.reason)
            moved.append(job.key)
        return moved

    def _candidates(
        self, jobs: list[tuple[dict[str, Any], TrainingJob]], jobtypes: dict[str, JobType]
    ) -> list[_Candidate]:
        """The Queued jobs, and the Pending ones the operator's planner accepts, not halted or being deleted.

        Args:
            jobs: the jobs to look at: those Pending or Queued (``_current_jobs`` sets them aside).
            jobtypes: the JobTypes by name.

        """
        candidates = []
        live = set()
        for _, job in jobs:
            if job.metadata.deletion_timestamp is not None or job.spec.run_policy.suspend:
                continue
            phase = job.status.phase
            if phase == Phase.QUEUED:
                candidates.append(_Candidate(job, job.status))
            elif phase == Phase.PENDING:
                key = (job.metadata.uid or "", job.metadata.resource_version or "")
                live.add(key)
                if key not in self._accepted:
                    self._accepted[key] = self._accept(job, jobtypes.get(job.spec.type))
                accepted = self._accepted[key]
                if accepted is not None:
                    queued = job.model_copy(update={"status": accepted.status})
                    candidates.append(_Candidate(queued, job.status, accepted.events))
        for stale in set(self._accepted) - live:
            del self._accepted[stale]
        return candidates

    def _accept(self, job: TrainingJob, jobtype: JobType | None) -> Plan | None:
        """The operator's planner on a Pending job, if it moves it to Queued and its Pods render; else None.

        The operator validates jobs the same way (the spec against the JobType, then one Pod per role rendered);
        it may know a default image this scheduler does not, so a job without one is left for it to accept.
        """
        if jobtype is None:
            return None
        try:
            check_renderable(job, jobtype, PodSettings(scheduler_name=self.settings.scheduler_name))
        except RenderError:
            return None
        decided = plan(
            ReconcileInput(
                job=job,
                jobtype=jobtype,
                replicas=(),
                now=self.clock.now(),
                outputs=OutputsObservation(stored=True),
            )
        )
        if Phase(decided.status.phase) != Phase.QUEUED or decided.actions:
            return None
        return decided

    # -- reading the caches -------------------------------------------------------------------------------------

    def _current_jobtypes(self) -> dict[str, JobType]:
        jobtypes = dict(builtin_jobtypes())
        jobtypes.update((parsed.metadata.name, parsed) for parsed in self._parsed_jobtypes.current())
        return jobtypes

    def _current_jobs(self, jobtypes: dict[str, JobType]) -> list[tuple[dict[str, Any], TrainingJob]]:
        """Every job the scheduler can read (an invalid one is the operator's to fail), parsed once per version.

        The spec is validated once per generation: the status writes that move a job along (Queued, Admitted,
        Running...) change its resourceVersion but not its spec, so only its metadata and status are read again.
        A cycle looks at every job, so an unchanged one costs one dictionary lookup.
        """
        jobs = []
        unsettled = []  # Pending or Queued: what a cycle may admit
        previous, current = self._parsed_jobs, {}
        for obj in self.jobs.items():
            entry = previous.get(id(obj))
            if entry is None or entry[0] is not obj:
                job = self._parse_job(obj, jobtypes)
                entry = (obj, job, job is not None and job.status.phase in _UNSETTLED)
            current[id(obj)] = entry
            if entry[1] is not None and not self._placed_elsewhere(entry[1]):
                jobs.append((obj, entry[1]))
                if entry[2]:
                    unsettled.append((obj, entry[1]))
        self._parsed_jobs = current
        self._unsettled = unsettled
        if len(self._parsed_specs) > 2 * len(current) + 64:
            live = {(job.metadata.uid or "", job.metadata.generation) for _, job in jobs}
            self._parsed_specs = {key: spec for key, spec in self._parsed_specs.items() if key in live}
            self._vectors = {key: vector for key, vector in self._vectors.items() if key in live}
        return jobs

    def _placed_elsewhere(self, job: TrainingJob) -> bool:
        """Whether the cluster's scheduler places the job (``core.delegation``): the operator admits it, not us."""
        return placing_scheduler(job, own=self.settings.scheduler_name, default=self.settings.job_scheduler) is not None

    def _parse_job(self, obj: dict[str, Any], jobtypes: dict[str, JobType]) -> TrainingJob | None:
        meta = obj.get("metadata") or {}
        spec_key = (str(meta.get("uid")), int(meta.get("generation") or 0))
        if spec_key not in self._parsed_specs:
            try:
                self._parsed_specs[spec_key] = job_from_object(obj, jobtypes)
            except (SpecError, ValueError):
                self._parsed_specs[spec_key] = None
            return self._parsed_specs[spec_key]
        spec = self._parsed_specs[spec_key]
        if spec is None:
            return None
        try:
            metadata = ObjectMeta.model_validate(model_metadata(obj))
        except ValueError:
            return None
        return spec.model_copy(update={"metadata": metadata, "status": job_status(obj)})

    def _forget_seen_bindings(self, pods: list[dict[str, Any]]) -> None:
        """Drop requested bindings the cache now shows (or whose Pod is gone)."""
        with self._lock:
            if not self._binding:
                return
            present = {}
            for pod in pods:
                uid = str((pod.get("metadata") or {}).get("uid"))
                if uid in self._binding:
                    present[uid] = bool((pod.get("spec") or {}).get("nodeName"))
            for uid in list(self._binding):
                if present.get(uid, True):
                    del self._binding[uid]

    def _holdings(
        self, jobs: list[tuple[dict[str, Any], TrainingJob]], pods: list[dict[str, Any]], nodes: list[Node]
    ) -> list[tuple[ReplicaPlacement, ResourceVector]]:
        """``holdings_of`` over the Pods on nodes or being bound.

        A job's Pod on its placement holds the placement; any other Pod holds its requests without named devices,
        and the GPUs its DRA claims were allocated, by name (``_foreign_occupant``).
        """
        by_uid = {job.metadata.uid: job for _, job in jobs}
        by_name = {node.metadata.name: node for node in nodes}
        with self._lock:
            binding = dict(self._binding)
        occupants = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid"))
            node = str((pod.get("spec") or {}).get("nodeName") or binding.get(uid) or "")
            if not node or not (pod_holds_resources(pod) or uid in binding):
                continue
            name = str(meta.get("name"))
            job = by_uid.get((meta.get("annotations") or {}).get(ANNOTATION_JOB_UID, ""))
            placement = (
                job.status.placements.get(name) if job is not None and LABEL_JOB in (meta.get("labels") or {}) else None
            )
            if job is not None and placement is not None and placement.node == node:
                held = self._requests(job).get(name, ResourceVector())
                occupants.append(Occupant(node, held, placement, (job.metadata.uid or "", name)))
            else:
                occupants.append(self._foreign_occupant(pod, node, by_name.get(node)))
        return holdings_of((job for _, job in jobs), occupants, nodes, self._requests)

    def _foreign_occupant(self, pod: dict[str, Any], node: str, known: Node | None) -> Occupant:
        """What a Pod Phalanx did not place holds: its requests, and the GPUs its DRA claims were allocated.

        A claim allocated by kube-scheduler (or any other) names its devices; they are held by index, so no
        placement is given one of them. The claims and slices are cached from the first such Pod on.
        """
        requested = pod_requests(pod)
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return Occupant(node, requested)
        names = dra.pod_claim_names(pod)
        claims = self._dra_cache(RESOURCECLAIMS)
        namespace = str(pod["metadata"].get("namespace"))
        refs = [ref for name in names for ref in dra.allocated_devices(claims.get(namespace, name) or {})]
        gpus = {gpu.index: gpu for gpu in known.status.gpus} if known is not None else {}
        indices = dra.gpu_indices(self._dra_cache(RESOURCESLICES).items(), node, gpus, refs) if refs else []
        if not indices:
            return Occupant(node, requested)
        held = replace(requested, gpu=max(requested.gpu, len(indices)))
        placement = ReplicaPlacement(node=node, gpus=indices)
        return Occupant(node, held, placement, ("", str(pod["metadata"].get("uid"))))

    def _requests(self, job: TrainingJob) -> dict[str, ResourceVector]:
        """The job's replicas' requests by name, kept across cycles per (job uid, generation)."""
        key = (job.metadata.uid or "", job.metadata.generation)
        found = self._vectors.get(key)
        if found is None:
            found = self._vectors[key] = {request.name: request.total() for request in replica_requests(job)}
        return found

    def _running(
        self,
        jobs: list[tuple[dict[str, Any], TrainingJob]],
        pods: list[dict[str, Any]],
        nodes: list[Node],
        jobtypes: dict[str, JobType],
        now: datetime,
    ) -> tuple[RunningJob, ...]:
        """The jobs in holding phases, with the placements ``_holdings`` counts for them, as ``RunningJob``s.

        A placement counts when its Pod does not exist yet or exists on the placement's node; a Pod of the job
        somewhere else holds what it holds without a job behind it (taken, never given back by preemption).
        """
        pod_nodes: dict[tuple[str, str], str] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str((meta.get("annotations") or {}).get(ANNOTATION_JOB_UID, ""))
            if uid:
                pod_nodes[(uid, str(meta.get("name")))] = str((pod.get("spec") or {}).get("nodeName") or "")

        def counted(job: TrainingJob, name: str, placement: ReplicaPlacement) -> bool:
            return pod_nodes.get((job.metadata.uid or "", name)) in (None, "", placement.node)

        return running_jobs(
            (job for _, job in jobs),
            jobtypes=jobtypes,
            nodes=(node.metadata.name for node in nodes),
            now=now,
            counted=counted,
        )

    def _current_datasets(self) -> dict[tuple[str, str], Dataset]:
        """The Dataset objects by (namespace, name), parsed once per version; an invalid one is ignored."""
        return {(d.metadata.namespace, d.metadata.name): d for d in self._parsed_datasets.current()}

    # -- writing ------------------------------------------------------------------------------------------------

    def _admit(self, candidate: _Candidate, admission: Admission) -> bool:
        """Place the job and move it to Admitted in one status write, on the version the cycle read."""
        job = candidate.job
        now = self.clock.now()
        status, message = admitted_status(job, admission, now)
        as_stored = job.model_copy(update={"status": candidate.stored})  # what the write replaces
        try:
            if self.port.write_status(as_stored, dict(status)) is not Written.WROTE:
                return False  # changed since the cycle read it (queued by the operator, halted, deleted, edited)
        except KubeApiError as error:
            log.warning("admitting %s failed: %s", job.key, error)
            return False
        if self.metrics is not None:
            self.metrics.admitted(job, now)
        for event in candidate.events:  # accepted here: the operator's planner's events (Accepted)
            self._event(job, event.reason, event.message, warning=event.type == "Warning")
        self._event(job, "Scheduled", f"{message} (by {self.settings.identity})")
        log.info("admitted %s: %s", job.key, message)
        return True

    def _remember_parsed(self, job: TrainingJob, status: TrainingJobStatus, written: dict[str, Any]) -> None:
        """Put a job as the port wrote it into the parse cache: the next cycle need not parse it again."""
        try:
            metadata = ObjectMeta.model_validate(model_metadata(written))
        except ValueError:
            return
        parsed = job.model_copy(update={"metadata": metadata, "status": status})
        self._parsed_jobs[id(written)] = (written, parsed, status.phase in _UNSETTLED)

    def _maybe_explain(self, candidate: _Candidate, reason: str) -> None:
        """Write the reason when it changed, once per version of the job (writes are asynchronous).

        A Pending job accepted here is queued by the same write: Pending -> Queued, with the reason it waits.
        """
        job = candidate.job
        if job.status.message == reason and job.status.reason == "Waiting" and not candidate.accepted_here:
            return
        version = (job.metadata.uid or "", job.metadata.resource_version or "", reason)
        if self._explained.get(job.key) == version:
            return
        self._explained[job.key] = version
        self._background.track(self._pool.submit(self._explain, candidate, reason))

    def _explain(self, candidate: _Candidate, reason: str) -> None:
        job = candidate.job
        status = job.status.model_copy(update={"message": reason, "reason": "Waiting"})
        as_stored = job.model_copy(update={"status": candidate.stored})  # what the write replaces
        try:
            if self.port.write_status(as_stored, dict(status)) is not Written.WROTE:
                return  # changed meanwhile; the next cycle explains again if it still waits
        except KubeApiError:
            return  # likewise
        for event in candidate.events:  # accepted here: the operator's planner's events (Accepted)
            self._event(job, event.reason, event.message, warning=event.type == "Warning")
        self._event(job, "Waiting", reason)

    def _bind_admitted(self, jobs: list[tuple[dict[str, Any], TrainingJob]]) -> int:
        """Bind the Pods of every gang whose placed Pods all exist.

        Only jobs with an unbound Pod are looked at (the Pod cache's index, ``_unbound_job_uid``), not every job.
        """
        waiting = self.pods.index_values()
        waiting.discard("")
        if not waiting:
            return 0
        with self._lock:
            binding = set(self._binding)
        to_bind: list[tuple[dict[str, Any], ReplicaPlacement, list[dra.DeviceRef] | None]] = []
        for _, job in jobs:
            if job.metadata.uid not in waiting:
                continue
            if job.status.phase not in HOLDING_PHASES or not job.status.placements:
                continue
            gang = []
            complete = True
            for name, placement in job.status.placements.items():
                pod = self.pods.get(job.metadata.namespace, name)
                labels = (pod or {}).get("metadata", {}).get("labels") or {}
                annotations = (pod or {}).get("metadata", {}).get("annotations") or {}
                if pod is None or LABEL_JOB not in labels or annotations.get(ANNOTATION_JOB_UID) != job.metadata.uid:
                    complete = False
                    break
                gang.append((pod, placement))
            if not complete:
                continue  # bind a gang only once every placed Pod exists
            if any(dra.pod_gets_claim(pod) and dra.pod_claim_name(pod) is None for pod, _ in gang):
                continue  # kube-controller-manager has not made every GPU claim yet: its Pod update wakes a cycle
            todo = []
            for pod, placement in gang:
                meta, spec = pod["metadata"], pod.get("spec") or {}
                if (
                    spec.get("nodeName")
                    or meta.get("deletionTimestamp")
                    or spec.get("schedulerName") != self.settings.scheduler_name
                    or str(meta.get("uid")) in binding
                ):
                    continue
                todo.append((pod, placement))
            devices = self._claims_resolve(job, todo)
            if devices is None:
                continue  # a claim that cannot get its devices holds the whole gang back, not just its own Pod
            to_bind.extend((pod, placement, devices.get(str(pod["metadata"].get("uid")))) for pod, placement in todo)
        if not to_bind:
            return 0
        with self._lock:
            for pod, placement, _ in to_bind:
                self._binding[str(pod["metadata"]["uid"])] = placement.node
        results = list(self._pool.map(lambda item: self._bind(*item), to_bind))
        return sum(results)

    def _claims_resolve(
        self, job: TrainingJob, todo: list[tuple[dict[str, Any], ReplicaPlacement]]
    ) -> dict[str, list[dra.DeviceRef]] | None:
        """The devices each GPU claim of the gang's Pods to bind gets, by Pod uid; None when one cannot get them.

        It cannot when the DeviceClass the claim asks for does not exist (kube-scheduler would not allocate it
        either), or the node's slices of the Pod's driver lack one of the placement's GPUs. Then none of the
        gang is bound, and the job gets a Warning Event saying why (once per reason), as a job that waits gets
        its reason.
        """
        claiming = [(pod, placement) for pod, placement in todo if dra.pod_gets_claim(pod)]
        if not claiming:
            return {}
        nodes = {node.metadata.name: node for node in self._parsed_nodes.current()}
        devices: dict[str, list[dra.DeviceRef]] = {}
        problem = None
        for pod, placement in claiming:
            found = self._claim_devices(pod, placement, nodes.get(placement.node))
            if isinstance(found, str):
                problem = found
                break
            devices[str(pod["metadata"].get("uid"))] = found
        uid = str(job.metadata.uid)
        if problem is None:
            self._claim_problems.pop(uid, None)
            return devices
        if self._claim_problems.get(uid) != problem:
            self._claim_problems[uid] = problem
            log.warning("job %s not bound: %s", job.key, problem)
            self._event(job, "GPUClaimsNotAllocated", f"no replica is bound: {problem}", warning=True)
        return None

    def _claim_devices(
        self, pod: dict[str, Any], placement: ReplicaPlacement, node: Node | None
    ) -> list[dra.DeviceRef] | str:
        """The devices the Pod's GPU claim gets on its placement's ``node``, or why it cannot get them."""
        annotations = pod["metadata"].get("annotations") or {}
        driver = str(annotations.get(dra.ANNOTATION_DRIVER) or dra.DEFAULT_DRIVER)
        device_class = dra.pod_device_class(pod)
        if device_class is not None and self._dra_cache(DEVICECLASSES).get(None, device_class) is None:
            return (
                f"the DeviceClass {device_class} the GPU claims ask for does not exist: install the DRA driver "
                "(NVIDIA's creates it) or create it (docs/kubernetes.md#gpus-through-dynamic-resource-allocation)"
            )
        gpus = {gpu.index: gpu for gpu in node.status.gpus} if node is not None else {}
        try:
            return dra.devices_for(self._resource_slices(), placement.node, driver, gpus, placement.gpus)
        except dra.AllocationError as error:
            return str(error)

    def _bind(self, pod: dict[str, Any], placement: ReplicaPlacement, devices: list[dra.DeviceRef] | None) -> bool:
        meta, node = pod["metadata"], placement.node
        try:
            if devices is not None:
                self._allocate_claim(pod, placement, devices)
            self.api.bind(meta["namespace"], meta["name"], node, uid=meta.get("uid"))
        except KubeApiError as error:
            with self._lock:
                self._binding.pop(str(meta.get("uid")), None)
            if not isinstance(error, (ConflictError, NotFoundError)):
                log.warning("binding %s/%s to %s failed: %s", meta["namespace"], meta["name"], node, error)
            return False
        log.debug("bound %s/%s to %s", meta["namespace"], meta["name"], node)
        return True

    def _allocate_claim(self, pod: dict[str, Any], placement: ReplicaPlacement, devices: list[dra.DeviceRef]) -> None:
        """Allocate the Pod's GPU claim ``devices`` (its placement's, ``_claims_resolve``) and reserve it for the Pod.

        As kube-scheduler does before it binds: the delete-protection finalizer, then the allocation and the
        reservation in one status write.

        A claim already allocated for this Pod (a bind that failed after it, or a scheduler killed in between) is
        left as it is.

        Raises:
            KubeApiError: a read or write failed.

        """
        meta = pod["metadata"]
        namespace, uid = str(meta["namespace"]), str(meta.get("uid"))
        claim_name = dra.pod_claim_name(pod)
        claim = self.api.get(RESOURCECLAIMS, str(claim_name), namespace)
        if dra.allocated_devices(claim) and dra.reserved_for(claim, uid):
            return
        protect = dra.finalizer_patch(claim)
        if protect is not None:
            self.api.patch(RESOURCECLAIMS, str(claim_name), protect, namespace)
        body = dra.allocation_patch(devices, placement.node, str(meta["name"]), uid)
        self.api.patch(RESOURCECLAIMS, str(claim_name), body, namespace, subresource="status")
        log.debug("claim %s/%s allocated %s", namespace, claim_name, [ref.device for ref in devices])

    def _resource_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice (``_dra_cache``)."""
        return self._dra_cache(RESOURCESLICES).items()

    def _dra_cache(self, resource: Resource) -> Informer:
        """The cache of ResourceSlices, ResourceClaims or DeviceClasses, started the first time a Pod claims devices.

        A cluster without DRA never needs them. A slice or claim that changes wakes a cycle.

        Raises:
            KubeApiError: the cache did not fill in 30 s (the API server does not serve ``resource.k8s.io/v1``,
                or a permission is missing).

        """
        with self._lock:
            informer = self._dra.get(resource.plural)
            if informer is None:
                informer = self._dra[resource.plural] = Informer(self.api, resource, signal=self.signal)
                self._informers.append(informer)
                informer.start()
        if not wait_all_synced([informer], 30.0):
            raise KubeApiError(0, "NotSynced", f"the cache of {resource.plural} did not fill in 30s")
        return informer

    def _event(self, job: TrainingJob, reason: str, message: str, *, warning: bool = False) -> None:
        if not self.events.allow(warning=warning):
            return  # a burst: Normal events are budgeted (the job's status says the same)
        self._background.track(self._events_pool.submit(self.port.record, job, reason, message, warning=warning))

    def flush(self) -> None:
        """Wait until the explanations and Events under way have been written (or failed)."""
        self._background.flush()


def _unbound_job_uid(pod: dict[str, Any]) -> str:
    """The index of the scheduler's Pod cache: the job uid of a Phalanx Pod not bound yet, else ''."""
    meta = pod.get("metadata") or {}
    if LABEL_JOB not in (meta.get("labels") or {}) or (pod.get("spec") or {}).get("nodeName"):
        return ""
    return str((meta.get("annotations") or {}).get(ANNOTATION_JOB_UID) or "")
