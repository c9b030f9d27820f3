"""phalanx-scheduler: the embedded runtime's scheduling cycle on a Kubernetes cluster.

The same pure ``core.scheduling.schedule`` decides; this module feeds it from informer caches (nodes, pods,
TrainingJobs, JobTypes — one LIST each at start, then WATCH; never a LIST per cycle) and carries out its
decisions through the API:

1. **Admit whole gangs.** A Queued TrainingJob whose every replica fits (or ``minAvailable`` of them) gets its
   devices — node, GPU indices, exclusive CPUs — in ``status.placements`` and moves to Admitted in one status
   patch carrying the job's resourceVersion (exactly the embedded scheduler's write). A job that does not fit
   gets the one-sentence reason in ``status.message`` and an Event, written only when the reason changes.
2. **Bind.** The operator creates the admitted job's Pods (``schedulerName: phalanx-scheduler``, the placement
   copied into annotations); this scheduler binds each to its placement's node through ``pods/binding``, and
   only once every placed Pod of the gang exists, so a gang's Pods are bound together or not at all.

What is held on a node: every bound Pod that has not finished (a Phalanx Pod holds exactly its placement's
devices; any other Pod its CPU and memory requests and as many GPUs as it requests, counted from the highest
free index, since the API does not say which it got), and every placement of an admitted job whose Pod is
not bound yet. A binding this process requested counts as bound until the watch shows it.

Only the holder of the Lease schedules (``kube_leader``); a restarted or second scheduler rebuilds everything
from the API, so a ``kill -9`` at any point loses nothing: a job admitted but not bound is bound by the next
leader from its status.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from phalanx.adapters.clock import SystemClock
from phalanx.adapters.kubernetes.api import (
    EVENTS,
    JOBTYPES,
    NODES,
    PODS,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, wait_all_synced
from phalanx.adapters.kubernetes.objects import (
    LABEL_JOB,
    job_from_object,
    jobtype_from_object,
    node_from_object,
    pod_holds_resources,
)
from phalanx.adapters.kubernetes.rendering import ANNOTATION_JOB_UID, GPU_RESOURCE
from phalanx.core.lifecycle import HOLDING_PHASES, transition
from phalanx.core.scheduling import build_snapshot, schedule
from phalanx.core.scheduling.types import Admission, PendingJob
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.nodes import Node
from phalanx.model.resources import QuantityError, ResourceVector, parse_cpu, parse_memory
from phalanx.services.kube_apply import EventBudget
from phalanx.services.kube_leader import LeaseElector
from phalanx.services.scheduler import describe_admission, replica_requests

log = logging.getLogger(__name__)


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


@dataclass
class CycleResult:
    """What one cycle did (for logs, tests and benchmarks)."""

    admitted: list[str] = field(default_factory=list)
    bound: int = 0
    waiting: dict[str, str] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        """True when the cycle changed something (another may follow at once)."""
        return bool(self.admitted or self.bound)


def pod_requests(pod: dict[str, Any]) -> ResourceVector:
    """The Pod's summed container requests (limits where no request is given, as Kubernetes defaults them)."""
    cpu = memory = gpu = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        try:
            cpu += parse_cpu(wanted.get("cpu", 0))
            memory += parse_memory(wanted.get("memory", 0))
        except QuantityError:
            pass
        with contextlib.suppress(ValueError):
            gpu += int(str(wanted.get(GPU_RESOURCE, 0)))
    return ResourceVector(cpu_milli=cpu, memory=memory, gpu=gpu)


class KubeScheduler:
    """The scheduler's caches, cycle and loop."""

    def __init__(self, api: KubeApi, settings: SchedulerSettings, clock: SystemClock | None = None) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self.jobs = Informer(api, TRAININGJOBS, signal=self.signal)
        self.pods = Informer(api, PODS, signal=self.signal)
        self.nodes = Informer(api, NODES, signal=self.signal)
        self.jobtypes = Informer(api, JOBTYPES, signal=self.signal)
        self.elector = LeaseElector(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            duration_s=settings.lease_duration_s,
            renew_deadline_s=settings.lease_duration_s * 2 / 3,
        )
        self._pool = ThreadPoolExecutor(max(1, settings.workers), thread_name_prefix="scheduler-api")
        self._parsed_jobs: dict[tuple[str, str], TrainingJob | None] = {}
        self._parsed_nodes: dict[str, tuple[str, Node]] = {}
        self._parsed_jobtypes: dict[tuple[str, str], JobType | None] = {}
        self._explained: dict[str, tuple[str, str, str]] = {}  # job key -> (uid, version, reason) written
        self._binding: dict[str, str] = {}  # pod uid -> node, requested and not yet seen in the cache
        self._lock = threading.Lock()
        self.events = EventBudget()
        self.ready = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the informers and wait for their first lists."""
        informers = [self.jobs, self.pods, self.nodes, self.jobtypes]
        for informer in informers:
            informer.start()
        if not wait_all_synced(informers, timeout):
            raise KubeApiError(0, "NotSynced", f"the caches did not fill within {timeout:.0f}s")
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
                try:
                    result = self.cycle()
                except KubeApiError as error:
                    log.warning("scheduling cycle failed: %s", error)
                    result = CycleResult()
                if result.busy:
                    continue  # what we wrote may let more happen; look again at once
                wait = max(0.0, min(self.settings.resync_s, next_renew - self.clock.monotonic()))
                self.signal.wait(wait)
        finally:
            self.elector.release()
            self._pool.shutdown(wait=True)
            for informer in (self.jobs, self.pods, self.nodes, self.jobtypes):
                informer.stop()

    # -- one cycle ----------------------------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        """Admit what fits, explain what waits, bind the Pods of admitted gangs."""
        result = CycleResult()
        jobtypes = self._current_jobtypes()
        jobs = self._current_jobs(jobtypes)
        pods = self.pods.items()
        self._forget_seen_bindings(pods)
        nodes = self._current_nodes()
        queued = [
            (obj, job)
            for obj, job in jobs
            if Phase(job.status.phase) == Phase.QUEUED
            and job.metadata.deletion_timestamp is None
            and not job.spec.run_policy.suspend
        ]
        if queued and nodes:
            snapshot = build_snapshot(nodes, self._holdings(jobs, pods, nodes))
            now = self.clock.now()
            pending = [self._pending(job, jobtypes, now) for _, job in queued]
            decisions = schedule(snapshot, pending, now)
            by_key = {job.key: (obj, job) for obj, job in queued}
            admissions = [(by_key[a.key], a) for a in decisions.admitted]
            for key, admitted in zip(
                [a.key for _, a in admissions],
                self._pool.map(lambda item: self._admit(item[0][0], item[0][1], item[1]), admissions),
                strict=True,
            ):
                if admitted:
                    result.admitted.append(key)
            for key, reason in decisions.waiting.items():
                obj, job = by_key[key]
                result.waiting[key] = reason
                self._maybe_explain(obj, job, reason)
        elif queued:
            for obj, job in queued:
                reason = "no nodes are known to the scheduler yet"
                result.waiting[job.key] = reason
                self._maybe_explain(obj, job, reason)
        result.bound = self._bind_admitted(jobs, pods)
        return result

    # -- reading the caches -------------------------------------------------------------------------------------

    def _current_jobtypes(self) -> dict[str, JobType]:
        jobtypes = dict(builtin_jobtypes())
        for obj in self.jobtypes.items():
            meta = obj.get("metadata") or {}
            key = (str(meta.get("uid")), str(meta.get("resourceVersion")))
            if key not in self._parsed_jobtypes:
                try:
                    self._parsed_jobtypes[key] = jobtype_from_object(obj)
                except (SpecError, ValueError) as error:
                    log.warning("ignoring JobType %s: %s", meta.get("name"), error)
                    self._parsed_jobtypes[key] = None
            parsed = self._parsed_jobtypes[key]
            if parsed is not None:
                jobtypes[parsed.metadata.name] = parsed
        return jobtypes

    def _current_jobs(self, jobtypes: dict[str, JobType]) -> list[tuple[dict[str, Any], TrainingJob]]:
        """Every job the scheduler can read (an invalid one is the operator's to fail), parsed once per version."""
        jobs = []
        live = set()
        for obj in self.jobs.items():
            meta = obj.get("metadata") or {}
            key = (str(meta.get("uid")), str(meta.get("resourceVersion")))
            live.add(key)
            if key not in self._parsed_jobs:
                try:
                    self._parsed_jobs[key] = job_from_object(obj, jobtypes)
                except (SpecError, ValueError):
                    self._parsed_jobs[key] = None
            parsed = self._parsed_jobs[key]
            if parsed is not None:
                jobs.append((obj, parsed))
        for stale in set(self._parsed_jobs) - live:
            del self._parsed_jobs[stale]
        return jobs

    def _current_nodes(self) -> list[Node]:
        nodes = []
        seen = set()
        for obj in self.nodes.items():
            meta = obj.get("metadata") or {}
            name, version = str(meta.get("name")), str(meta.get("resourceVersion"))
            seen.add(name)
            cached = self._parsed_nodes.get(name)
            if cached is None or cached[0] != version:
                try:
                    cached = (version, node_from_object(obj))
                except ValueError as error:
                    log.warning("ignoring node %s: %s", name, error)
                    continue
                self._parsed_nodes[name] = cached
            nodes.append(cached[1])
        for gone in set(self._parsed_nodes) - seen:
            del self._parsed_nodes[gone]
        return nodes

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
        held: list[tuple[ReplicaPlacement, ResourceVector]] = []
        by_uid = {job.metadata.uid: job for _, job in jobs}
        covered: set[tuple[str, str]] = set()
        foreign: dict[str, list[ResourceVector]] = defaultdict(list)
        with self._lock:
            binding = dict(self._binding)
        vectors: dict[str, dict[str, ResourceVector]] = {}  # job uid -> replica -> what it requested

        def vector(job: TrainingJob, name: str) -> ResourceVector:
            uid = job.metadata.uid or ""
            if uid not in vectors:
                vectors[uid] = {request.name: request.resources for request in replica_requests(job)}
            return vectors[uid].get(name, ResourceVector())

        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid"))
            node = (pod.get("spec") or {}).get("nodeName") or binding.get(uid)
            if not node or not (pod_holds_resources(pod) or uid in binding):
                continue
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            job = by_uid.get((meta.get("annotations") or {}).get(ANNOTATION_JOB_UID, ""))
            placement = (
                job.status.placements.get(name) if job is not None and LABEL_JOB in (meta.get("labels") or {}) else None
            )
            if job is not None and placement is not None and placement.node == node:
                held.append((placement, vector(job, name)))
                covered.add((namespace, name))
            else:
                foreign[str(node)].append(pod_requests(pod))
        for _, job in jobs:
            if Phase(job.status.phase) not in HOLDING_PHASES:
                continue
            for name, placement in job.status.placements.items():
                if (job.metadata.namespace, name) not in covered:
                    held.append((placement, vector(job, name)))
        held.extend(_foreign_holdings(foreign, held, nodes))
        return held

    def _pending(self, job: TrainingJob, jobtypes: dict[str, JobType], now: datetime) -> PendingJob:
        return PendingJob(
            key=job.key,
            priority=job.spec.scheduling.effective_priority(),
            created=job.metadata.creation_timestamp or now,
            queue=job.spec.scheduling.queue,
            replicas=tuple(replica_requests(job, jobtypes.get(job.spec.type))),
            min_available=job.spec.scheduling.min_available,
            placement=str(job.spec.scheduling.placement),
            topology=job.spec.scheduling.topology,
        )

    # -- writing ------------------------------------------------------------------------------------------------

    def _patch_status(self, obj: dict[str, Any], old: TrainingJobStatus, new: TrainingJobStatus) -> dict[str, Any]:
        """A merge patch of the job's status, conditional on the resourceVersion it was decided on."""
        body = new.to_dict()
        before = old.to_dict()
        for key in before:
            body.setdefault(key, None)  # merge patches keep absent keys; remove what the new status dropped
        for name in before.get("placements", {}):
            body.setdefault("placements", {}).setdefault(name, None)
        meta = obj["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": body}
        return self.api.patch(TRAININGJOBS, meta["name"], patch, meta["namespace"], subresource="status")

    def _admit(self, obj: dict[str, Any], job: TrainingJob, admission: Admission) -> bool:
        now = self.clock.now()
        placements = {
            a.replica: ReplicaPlacement(node=a.node, cpus=list(a.cpus), gpus=list(a.gpus), gpu_milli=a.gpu_milli)
            for a in admission.assignments
        }
        message = describe_admission(admission)
        status = transition(job.status, Phase.ADMITTED, reason="Scheduled", message=message, now=now)
        status = status.model_copy(update={"placements": placements, "admitted_time": now})
        try:
            updated = self._patch_status(obj, job.status, status)
        except (ConflictError, NotFoundError):
            return False  # the job changed (halted, deleted, edited) since the cycle read it: decide again
        except KubeApiError as error:
            log.warning("admitting %s failed: %s", job.key, error)
            return False
        self.jobs.observe(updated)
        self._event(job, "Scheduled", f"{message} (by {self.settings.identity})")
        log.info("admitted %s: %s", job.key, message)
        return True

    def _maybe_explain(self, obj: dict[str, Any], job: TrainingJob, reason: str) -> None:
        """Write the reason when it changed, once per version of the job (writes are asynchronous)."""
        if job.status.message == reason and job.status.reason == "Waiting":
            return
        version = (job.metadata.uid or "", job.metadata.resource_version or "", reason)
        if self._explained.get(job.key) == version:
            return
        self._explained[job.key] = version
        self._pool.submit(self._explain, obj, job, reason)

    def _explain(self, obj: dict[str, Any], job: TrainingJob, reason: str) -> None:
        status = job.status.model_copy(update={"message": reason, "reason": "Waiting"})
        try:
            updated = self._patch_status(obj, job.status, status)
        except KubeApiError:
            return  # changed meanwhile; the next cycle explains again if it still waits
        self.jobs.observe(updated)
        self._event(job, "Waiting", reason)

    def _bind_admitted(self, jobs: list[tuple[dict[str, Any], TrainingJob]], pods: list[dict[str, Any]]) -> int:
        pods_by_name = {
            (str(p["metadata"].get("namespace")), str(p["metadata"].get("name"))): p
            for p in pods
            if LABEL_JOB in (p["metadata"].get("labels") or {})
        }
        with self._lock:
            binding = set(self._binding)
        to_bind: list[tuple[dict[str, Any], str]] = []
        for _, job in jobs:
            if Phase(job.status.phase) not in HOLDING_PHASES or not job.status.placements:
                continue
            gang = []
            complete = True
            for name, placement in job.status.placements.items():
                pod = pods_by_name.get((job.metadata.namespace, name))
                annotations = (pod or {}).get("metadata", {}).get("annotations") or {}
                if pod is None or annotations.get(ANNOTATION_JOB_UID) != job.metadata.uid:
                    complete = False
                    break
                gang.append((pod, placement))
            if not complete:
                continue  # bind a gang only once every placed Pod exists
            for pod, placement in gang:
                meta, spec = pod["metadata"], pod.get("spec") or {}
                if (
                    spec.get("nodeName")
                    or meta.get("deletionTimestamp")
                    or spec.get("schedulerName") != self.settings.scheduler_name
                    or str(meta.get("uid")) in binding
                ):
                    continue
                to_bind.append((pod, placement.node))
        if not to_bind:
            return 0
        with self._lock:
            for pod, node in to_bind:
                self._binding[str(pod["metadata"]["uid"])] = node
        results = list(self._pool.map(lambda item: self._bind(*item), to_bind))
        return sum(results)

    def _bind(self, pod: dict[str, Any], node: str) -> bool:
        meta = pod["metadata"]
        try:
            self.api.bind(meta["namespace"], meta["name"], node, uid=meta.get("uid"))
        except KubeApiError as error:
            with self._lock:
                self._binding.pop(str(meta.get("uid")), None)
            if not isinstance(error, (ConflictError, NotFoundError)):
                log.warning("binding %s/%s to %s failed: %s", meta["namespace"], meta["name"], node, error)
            return False
        log.debug("bound %s/%s to %s", meta["namespace"], meta["name"], node)
        return True

    def _event(self, job: TrainingJob, reason: str, message: str, *, warning: bool = False) -> None:
        if not self.events.allow(warning=warning):
            return  # a burst: Normal events are budgeted (the job's status says the same)
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{job.metadata.name}.", "namespace": job.metadata.namespace},
            "involvedObject": {
                "apiVersion": job.api_version,
                "kind": "TrainingJob",
                "name": job.metadata.name,
                "namespace": job.metadata.namespace,
                "uid": job.metadata.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.settings.scheduler_name},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.settings.scheduler_name,
            "reportingInstance": self.settings.identity,
        }
        try:
            self.api.create(EVENTS, body, job.metadata.namespace)
        except KubeApiError as error:
            log.debug("event for %s not recorded: %s", job.key, error)


def _foreign_holdings(
    foreign: dict[str, list[ResourceVector]],
    held: list[tuple[ReplicaPlacement, ResourceVector]],
    nodes: list[Node],
) -> list[tuple[ReplicaPlacement, ResourceVector]]:
    """Pods Phalanx did not place: their CPU and memory, and GPUs counted down from the highest free index."""
    taken: dict[str, set[int]] = defaultdict(set)
    for placement, _ in held:
        taken[placement.node].update(placement.gpus)
    gpus_of = {node.metadata.name: sorted((gpu.index for gpu in node.status.gpus), reverse=True) for node in nodes}
    extra = []
    for node, vectors in foreign.items():
        free = [index for index in gpus_of.get(node, []) if index not in taken[node]]
        for vector in vectors:
            chosen, free = free[: vector.gpu], free[vector.gpu :]
            placement = ReplicaPlacement(node=node, gpus=chosen)
            extra.append((placement, ResourceVector(cpu_milli=vector.cpu_milli, memory=vector.memory, gpu=len(chosen))))
    return extra
