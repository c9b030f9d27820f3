"""What the operator writes to the cluster for one job, decided without I/O: Pods, children, events, orphans.

``operator`` runs the loop, and ``reconcile``, ``status_writer`` and ``gc`` talk to the API; this module holds
the pure pieces they are made of, so unit tests can check them without a cluster:

- ``observe_job_pods``: the planner's view of a job's Pods (``objects.observe_pod``), with the Pods this
  process has asked to delete counted as deleting before the watch says so;
- ``render_creates``: the Pod for every ``CreateReplica`` of a plan (its placement in annotations);
- ``render_children``: the headless Service (for a job of more than one replica) and the hostfile ConfigMap
  the Pods need;
- ``orphan_pods``: Pods of jobs that no longer exist;
- ``event_body``: a core/v1 Event about a TrainingJob;
- ``invalid_spec_message``: a spec error as one line of field-path errors;
- ``EventBudget``: how many Normal events may be posted under a burst (Warnings always are);
- ``may_hold`` and ``HeldStatus``: which planned status may wait to be written together with the next one;
- ``Timers``: when each job asked to be looked at again;
- ``Wiring`` and ``OperatorCounters``: what the operator's parts (reconcile, status writer, GC) share;
- ``Background``: writes made in the background (Events, explanations) that ``flush`` waits for.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, KeysView, Mapping
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from phalanx.adapters.clock import Clock
from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.adapters.kubernetes.dra import DEFAULT_DEVICE_CLASS
from phalanx.adapters.kubernetes.objects import LABEL_JOB, observe_pod
from phalanx.adapters.kubernetes.rendering import (
    ANNOTATION_JOB_UID,
    DATASET_MOUNT_PATH,
    DEFAULT_SCHEDULER_NAME,
    DatasetVolumes,
    RenderError,
    claims_gpus,
    needs_service,
    pod_group_name,
    render_headless_service,
    render_hostfile_configmap,
    render_pod,
)
from phalanx.core.delegation import conflicts, placing_scheduler
from phalanx.core.reconcile.types import CreateReplica, EventRecord, ObservedReplica, Plan
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.replicas import replica_name

MAX_MESSAGE = 1024  # an Event's message is capped by the API server; keep ours well under
# Phase moves a status write may wait with, (stored phase, planned phase): see ``may_hold``.
_HOLDABLE_MOVES = frozenset({(Phase.PENDING, Phase.QUEUED), (Phase.ADMITTED, Phase.DOWNLOADING)})


@dataclass(frozen=True, slots=True)
class PodSettings:
    """How the operator renders Pods."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    image: str | None = None
    dataset_mount_path: str = DATASET_MOUNT_PATH  # where replicas see their datasets' cache entries
    job_scheduler: str | None = None  # the cluster's scheduler for jobs that name none (None: scheduler_name)
    outputs_claim: str | None = None  # the artifact store's claim replicas write outputs to; None: an emptyDir
    dra_driver: str | None = None  # GPUs claimed through DRA from this driver's devices; None: nvidia.com/gpu
    dra_device_class: str = DEFAULT_DEVICE_CLASS  # ... in claims of this DeviceClass

    def placing_scheduler(self, job: TrainingJob) -> str | None:
        """The cluster's scheduler that places the job's Pods, or None when phalanx-scheduler does."""
        return placing_scheduler(job, own=self.scheduler_name, default=self.job_scheduler)


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The Pod's ``metadata.uid`` ('' when it has none)."""
    return str((pod.get("metadata") or {}).get("uid") or "")


def job_uid_of(pod: Mapping[str, Any]) -> str:
    """The uid of the job a Pod was rendered for (annotation ``phalanx.dev/job-uid``), '' if none."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_JOB_UID) or "")


def observe_job_pods(pods: Iterable[Mapping[str, Any]], deleting: Collection[str]) -> tuple[ObservedReplica, ...]:
    """The planner's view of one job's Pods.

    Args:
        pods: the job's Pods as cached.
        deleting: uids of Pods this process deleted whose deletion the cache does not show yet; they count as
            deleting, so a pass before the watch event neither deletes them again nor believes them running.

    """
    observed = []
    for pod in pods:
        replica = observe_pod(pod)
        if replica is None:
            continue  # not rendered by the operator (labels missing): not a replica
        if not replica.deleting and pod_uid(pod) in deleting:
            replica = replace(replica, deleting=True)
        observed.append(replica)
    return tuple(sorted(observed, key=lambda replica: replica.name))


def render_creates(
    job: TrainingJob,
    jobtype: JobType,
    decided: Plan,
    settings: PodSettings,
    datasets: Mapping[str, DatasetVolumes] | None = None,
) -> list[dict[str, Any]]:
    """The Pods to create for the plan's ``CreateReplica`` actions, in the plan's order.

    Each Pod carries the action's attempt, its placement in annotations, and its staged datasets (``datasets``,
    by replica name: environment and hostPath volumes). The Pods of a gang are left for
    the phalanx-scheduler to bind once they all exist; a job with a single placed replica is a gang of one, with
    nothing to wait for, so its Pod is created on its placement's node and needs no binding, unless it claims
    GPUs through DRA (``PodSettings.dra_driver``): its claim is allocated when it is bound. The Pods of a job
    the cluster's scheduler places (``PodSettings.placing_scheduler``) name it and the job's PodGroup instead.

    Raises:
        RenderError: a Pod cannot be rendered (no image, a name too long...); the message names the field.

    """
    pods = []
    cluster = settings.placing_scheduler(job)
    alone = len(job.status.placements) == 1 and cluster is None
    for action in decided.actions:
        if not isinstance(action, CreateReplica):
            continue
        pods.append(
            render_pod(
                job,
                jobtype,
                action.role,
                action.index,
                action.attempt,
                scheduler_name=cluster or settings.scheduler_name,
                image=settings.image,
                placement=action.placement,
                bind=alone and not claims_gpus(job, action.role, settings.dra_driver),
                datasets=(datasets or {}).get(replica_name(job.metadata.name, action.role, action.index)),
                pod_group=pod_group_name(job) if cluster is not None else None,
                outputs_claim=settings.outputs_claim,
                dra_driver=settings.dra_driver,
                dra_device_class=settings.dra_device_class,
            )
        )
    return pods


def render_children(job: TrainingJob, jobtype: JobType) -> list[dict[str, Any]]:
    """What the job's Pods need before they start: the headless Service, and the hostfile ConfigMap for MPI.

    A job of one replica has no peer to find, so no Service (``rendering.needs_service``).
    """
    children = [render_headless_service(job, jobtype)] if needs_service(job) else []
    hostfile = render_hostfile_configmap(job, jobtype)
    if hostfile is not None:
        children.append(hostfile)
    return children


def may_hold(stored: TrainingJobStatus, planned: TrainingJobStatus, *, staging: bool = False) -> bool:
    """Whether the planned status may stay unwritten for a while, to be written with the next move.

    Two moves are followed at once by another one, made in the next write, and each written alone would cost the
    API server a status write per job (a status write of a TrainingJob costs it more than creating a Pod):

    - **Pending -> Queued** (accepting a new job): the phalanx-scheduler accepts a Pending job itself when the
      same planner would, in the write it makes anyway: the admission (Queued and Admitted at once) or, for a
      job that must wait, the reason why (Queued with it). The operator writes Queued after its hold time only
      if no scheduler has (none runs, or it cannot accept the job, e.g. for want of the operator's image).
    - **Admitted -> Downloading**, made as the operator creates the Pods. For a job without staged datasets,
      Downloading lasts from the Pods' creation to their start (seconds). Held, it goes out with the move to
      Running (one write with both conditions, their times and their events), or after the operator's hold time
      if the Pods have not started by then. A job whose datasets are being staged (``staging``) is not held:
      its Downloading lasts until node agents have copied its data, and says so.

    Nothing reads the difference in between: a Pending job accepted by either component is validated alike, the
    scheduler binds the Pods of an Admitted job as of a Downloading one, and a restarted operator plans from the
    stored phase again, which makes the same move and creates no Pod that exists.
    """
    moves = (Phase(stored.phase), Phase(planned.phase))
    if staging and moves == (Phase.ADMITTED, Phase.DOWNLOADING):
        return False
    return moves in _HOLDABLE_MOVES


@dataclass(frozen=True, slots=True)
class HeldStatus:
    """A planned status the operator has not written yet (``may_hold``), with the events that go out with it.

    Attributes:
        resource_version: the job's resourceVersion it was planned on; once the job changes, it is dropped and
            the job planned again from its stored status.
        status: the status to write.
        events: the events of the plans that led to it, recorded once it is written.
        due: the monotonic time by which it is written even if nothing else happens.

    """

    resource_version: str
    status: TrainingJobStatus
    events: tuple[EventRecord, ...]
    due: float


K = TypeVar("K", bound=Hashable)


class Timers(Generic[K]):
    """A deadline per key: set, cancel, take the due ones, the earliest; each in O(log n), not a scan of all.

    A heap with lazy deletion: a cancelled or replaced deadline stays in the heap until it reaches the top, and
    the heap is rebuilt when such leftovers outnumber the live deadlines. Not thread-safe: the caller locks.
    """

    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._pushed = 0  # tie-breaker, so keys never need to compare

    def __len__(self) -> int:
        return len(self._due)

    def keys(self) -> KeysView[K]:
        """The keys that have a deadline."""
        return self._due.keys()

    def set(self, key: K, due: float) -> None:
        """Look at ``key`` again at ``due`` (replacing its earlier deadline)."""
        self._due[key] = due
        self._pushed += 1
        heapq.heappush(self._heap, (due, self._pushed, key))
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(due, n, key) for due, n, key in self._heap if self._due.get(key) == due]
            heapq.heapify(self._heap)

    def cancel(self, key: K) -> None:
        """Forget ``key``'s deadline, if any."""
        self._due.pop(key, None)

    def pop_due(self, now: float) -> list[K]:
        """The keys whose deadline is at or before ``now``, forgotten."""
        due_keys = []
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._due.get(key) == due:
                del self._due[key]
                due_keys.append(key)
        return due_keys

    def earliest(self) -> float | None:
        """The earliest deadline, or None."""
        while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


def orphan_pods(pods: Iterable[Mapping[str, Any]], live_job_uids: Collection[str]) -> list[Mapping[str, Any]]:
    """Pods labelled ``phalanx.dev/job`` whose ``phalanx.dev/job-uid`` names no live job, not already going.

    A Pod without the uid annotation was not made by the operator and is left alone.
    """
    orphans = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if LABEL_JOB not in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
            continue
        uid = job_uid_of(pod)
        if uid and uid not in live_job_uids:
            orphans.append(pod)
    return orphans


def invalid_spec_message(error: SpecError) -> str:
    """Every problem of a spec on one line: ``spec.replicas.worker.count: must be >= 1, got 0; ...``."""
    return "; ".join(str(problem) for problem in error.errors) or str(error)


class EventBudget:
    """A token bucket for Normal events, as client-go's event spam filter keeps bursts from flooding the API.

    Every Event is a write the API server stores (with a lease), so a burst of thousands of jobs would spend as
    many writes on Normal events as on the jobs themselves. ``burst`` Normal events pass at once, then
    ``per_s`` a second; the rest are dropped (the job's status says the same thing). Warning events always
    pass: they are what ``kubectl describe`` must show.
    """

    def __init__(self, burst: int = 50, per_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = float(burst)
        self.per_s = per_s
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def allow(self, *, warning: bool) -> bool:
        """True when an event may be posted now (always for a Warning; a Normal one takes a token)."""
        if warning:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True


def event_body(
    job: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool,
    now: datetime,
    component: str,
    instance: str,
    kind: str = "TrainingJob",
) -> dict[str, Any]:
    """A core/v1 Event about ``job`` as read from the API, as ``kubectl describe`` shows them.

    ``kind`` names what ``job`` is when it is not a TrainingJob (a Dataset).
    """
    meta = job.get("metadata") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": job.get("apiVersion", "phalanx.dev/v1alpha1"),
            "kind": kind,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": instance,
    }


def check_renderable(job: TrainingJob, jobtype: JobType, settings: PodSettings) -> None:
    """Render one Pod per role (its highest index: the longest name) to find what cannot run, before admission.

    Every Pod of a role shares its image and template, so one render per role finds a missing image, a Pod name
    that is not a DNS label, or a rendezvous template that fails, while the job is still Pending. A job the
    cluster's scheduler places is refused the fields only phalanx-scheduler honours (``core.delegation``).

    Raises:
        RenderError: with the field to fix.

    """
    cluster = settings.placing_scheduler(job)
    if cluster is not None:
        refused = conflicts(job, cluster)
        if refused:
            raise RenderError("; ".join(str(error) for error in refused))
    for role, replica in job.spec.replicas.items():
        render_pod(
            job,
            jobtype,
            role,
            replica.count - 1,
            0,
            scheduler_name=cluster or settings.scheduler_name,
            image=settings.image,
            pod_group=pod_group_name(job) if cluster is not None else None,
        )


@dataclass
class OperatorCounters:
    """What the operator did, for logs, tests and benchmarks."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, amount: int = 1) -> None:
        """Count ``amount`` more of ``what`` (thread-safe: actions run in a pool)."""
        with self.lock:
            self.counts[what] += amount

    def snapshot(self) -> dict[str, int]:
        """The counts so far."""
        with self.lock:
            return dict(self.counts)


@dataclass(frozen=True)
class Wiring:
    """What the operator's parts share: the API client, the pool their API calls run in, counters and clock."""

    api: KubeApi
    pool: Executor
    counters: OperatorCounters
    clock: Clock


class Background:
    """Writes made in the background (Events, explanations): best effort, waited for only by ``flush``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[Future[Any]] = set()

    def track(self, future: Future[Any]) -> None:
        """Count ``future`` among the writes under way until it is done."""
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the writes under way, and those they started, are done (or ``timeout`` has passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = set(self._pending)
            left = None if deadline is None else deadline - time.monotonic()
            if not pending or (left is not None and left <= 0):
                return
            wait(pending, left)
