"""phalanx-operator: the embedded runtime's job controller on a Kubernetes cluster.

For every TrainingJob it does what ``services/embedded/controller.py`` does for the embedded store — observe, call the
same pure ``core.reconcile.plan``, apply the plan — with Pods for replicas and the API server for the store:

- **Observe** from informer caches (TrainingJobs, JobTypes, and the Pods, Services and ConfigMaps labelled
  ``phalanx.dev/job``): one LIST each at start, then WATCH; never a LIST per pass. A job's Pods are the ones
  whose ``phalanx.dev/job-uid`` annotation names its uid, so a job re-created under an old name never adopts
  the old one's Pods. The job is validated and defaulted against the cluster's JobTypes
  (``objects.job_from_object``); an invalid spec fails the job (reason InvalidSpec, the field-path errors as
  message) through ``core.lifecycle.transition`` instead of stopping the loop.
- **Plan** with ``core.reconcile.plan``: phases, restarts and backoff, gang restarts, halting
  (``spec.runPolicy.suspend``), deadlines, TTL. Outputs are observed as stored: on Kubernetes v1 they stay in
  the Pods' volumes (a Warning event says so when ``outputs.storeTo`` is set).
- **Apply**: the status first (a PUT of the status subresource carrying the resourceVersion the plan was made
  from; a 409 means the job changed, so the pass drops the plan and the next pass plans again from the newer
  version), then events, then the actions. Two moves are held back instead (``kube_apply.may_hold``), in
  memory with their events, so that one write records them with the next move: Pending -> Queued for the
  scheduler, which accepts a new job in the write that admits it or says why it waits (the operator writes it
  after ``accept_hold_s`` if no scheduler did), and Admitted -> Downloading for the move to Running (written
  after ``hold_s`` if the Pods have not all started by then). A held status is dropped when the job changes
  (the next plan starts again from the stored one). The actions: Pods from ``rendering.render_pod`` with the
  scheduler's placement in annotations (``schedulerName`` names the phalanx-scheduler, which binds them), the
  headless Service (for more than one replica) and the hostfile ConfigMap alongside them, deletions with the
  Pod's uid as a precondition, and TTL deletion of the job. Every write is idempotent (409 AlreadyExists
  is success, 404 on delete is success), and each is put into the cache at once (``Informer.observe``) or
  remembered (Pods being deleted), so the next pass does not act on the state from before it.
- **Collect orphans**: a Pod whose job uid names no job (confirmed with one GET) is deleted at once;
  ownerReferences alone would leave it to kube-controller-manager's garbage collector, tens of seconds later.
- **Datasets** (with ``dataset_store``; ``services.kubernetes.datasets``): a ``KubeDatasetManager`` on its own thread
  materialises Datasets into the dataset store and writes their status; a job that reads datasets is created
  Pods only once every node agent of its plan reports its entries ready (``staged``), fails with reason
  StagingFailed when one cannot be (``staging_error``), and its Pods mount the entries they read (hostPath,
  read-only) with ``PHALANX_DATASET_*`` pointing at them. The versions a job reads are recorded on it
  (annotation ``phalanx.dev/dataset-versions``) when first planned, so that agents and later attempts read the
  same. A change to a Dataset or to a Node's cache report reconciles the jobs it concerns. Without a dataset
  store, ``spec.datasets`` is not staged and a job that has one gets a Warning event saying so.

One loop thread reconciles the jobs that changed (an informer event about the job, its Pods or any JobType), the
jobs whose plan asked to be looked at again (``requeue_after``: backoff, deadlines, TTL), and every job at the
latest ``resync_s`` after it was last reconciled (each on its own timer, so a resync is not a burst). Each
reconcile reads only the caches, so it is level-triggered: which event woke it does not matter. Nothing that
matters lives only in this process: phases, attempts and placements are in the job's status, and Pod names are
deterministic (``<job>-<role>-<index>``), so a ``kill -9`` at any point followed by a restart converges without
duplicates. (A held status is lost with the process; the next operator plans from the stored phase again, which
makes the same move and creates no Pod that exists.)
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes.api import (
    CONFIGMAPS,
    EVENTS,
    JOBTYPES,
    NODES,
    PHALANX_VERSION,
    PODS,
    SERVICES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, object_key, wait_all_synced
from phalanx.adapters.kubernetes.objects import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    job_status,
    model_metadata,
    node_from_object,
    status_body,
)
from phalanx.adapters.kubernetes.rendering import DEFAULT_SCHEDULER_NAME, RenderError
from phalanx.core.gpu_health import sick_gpus
from phalanx.core.lifecycle import can_transition, transition
from phalanx.core.reconcile import (
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    OutputsObservation,
    Plan,
    ReconcileInput,
    StoreOutputs,
    plan,
)
from phalanx.model.base import API_GROUP
from phalanx.model.jobs import TERMINAL_PHASES, Phase, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import BUILTIN_LABEL, builtin_jobtypes
from phalanx.model.meta import ObjectMeta
from phalanx.services.dataset_store import DATASET_VERSIONS_ANNOTATION, STAGING_PHASES, chosen_versions
from phalanx.services.kubernetes.apply import (
    EventBudget,
    HeldStatus,
    PodSettings,
    Timers,
    event_body,
    job_uid_of,
    may_hold,
    observe_job_pods,
    orphan_pods,
    pod_uid,
    render_children,
    render_creates,
)
from phalanx.services.kubernetes.datasets import DEFAULT_CACHE_DIR, KubeDatasetManager, KubeStaging, SourcePolicy
from phalanx.services.kubernetes.specs import SpecCache

log = logging.getLogger(__name__)
JobKey = tuple[str, str]  # (namespace, name)
# On Kubernetes v1 outputs stay in the Pods' volumes: there is nothing to store, so Storing ends at once.
_OUTPUTS_STAY = OutputsObservation(stored=True)
# Phases in which a job's Pods run or are about to, so the Service and hostfile they use must exist.
_CHILDREN_PHASES = frozenset({Phase.DOWNLOADING, Phase.RUNNING, Phase.RESTARTING})
# After a wake-up the loop waits this long before its pass, so a burst of watch events makes one pass.
_COALESCE_S = 0.05
# Orphan collection and forgetting read every Pod and job; the loop does them at most this often.
_HOUSEKEEPING_S = 1.0


@dataclass(frozen=True)
class OperatorSettings:
    """How the operator renders Pods, names itself and paces its work."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    image: str | None = None
    identity: str = "phalanx-operator"
    component: str = "phalanx-operator"
    resync_s: float = 30.0
    retry_s: float = 1.0
    workers: int = 8
    job_workers: int = 8
    seed_jobtypes: bool = True
    hold_s: float = 30.0  # how long Admitted -> Downloading may wait unwritten for the Pods to start
    accept_hold_s: float = 10.0  # how long Pending -> Queued may wait unwritten for the scheduler to write it
    dataset_store: Path | None = None  # where Datasets are materialised (shared with node agents); None: no staging
    dataset_mount_path: str = DEFAULT_CACHE_DIR  # where replicas see the cache entries they read
    dataset_sources: SourcePolicy = field(default_factory=SourcePolicy)  # what Dataset sources it reads

    @property
    def pods(self) -> PodSettings:
        """The settings Pods are rendered with."""
        return PodSettings(
            scheduler_name=self.scheduler_name, image=self.image, dataset_mount_path=self.dataset_mount_path
        )


@dataclass
class _Outcome:
    """What reconciling one job asks of the loop: look again after ``requeue_after`` seconds (None: no timer)."""

    requeue_after: float | None = None


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


class KubeOperator:
    """The operator's caches, reconcile and loop."""

    def __init__(self, api: KubeApi, settings: OperatorSettings, clock: Clock | None = None) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self.jobs = Informer(api, TRAININGJOBS, signal=self.signal, on_change=self._job_changed)
        self.pods = Informer(
            api, PODS, label_selector=LABEL_JOB, signal=self.signal, on_change=self._pod_changed, index=job_uid_of
        )
        self.jobtypes = Informer(api, JOBTYPES, signal=self.signal, on_change=self._jobtype_changed)
        self.services = Informer(api, SERVICES, label_selector=LABEL_JOB, signal=self.signal)
        self.configmaps = Informer(api, CONFIGMAPS, label_selector=LABEL_JOB, signal=self.signal)
        # GPU health as the node agents report it: a replica on an unhealthy GPU is stopped and its job placed again.
        self.nodes = Informer(api, NODES, signal=self.signal, on_change=self._node_changed)
        self._sick: dict[str, dict[int, str]] = {}  # node -> unhealthy GPU index -> why
        self.counters = OperatorCounters()
        self.ready = threading.Event()
        self._pool = ThreadPoolExecutor(max(1, settings.workers), thread_name_prefix="operator-api")
        # A separate pool: a job's reconcile submits its API writes to ``_pool`` and waits for them.
        self._jobs_pool = ThreadPoolExecutor(max(1, settings.job_workers), thread_name_prefix="operator-job")
        self._lock = threading.Lock()
        self._dirty: set[JobKey] = set()
        self._queued: set[JobKey] = set()  # submitted to the job workers, not started: it will read the newest
        self._running: set[JobKey] = set()  # being reconciled now
        self._again: set[JobKey] = set()  # changed while being reconciled: reconcile once more after
        self._everything = True  # the first pass looks at every job
        self._next_resync = 0.0
        self._next_housekeeping = 0.0
        self._timers: Timers[JobKey] = Timers()  # job -> monotonic time its plan asked to be looked at again
        self._deleting: set[str] = set()  # uids of Pods deleted by this process, until the cache drops them
        self.specs = SpecCache(api, self.jobtypes, settings.pods)  # validated jobs, parsed JobTypes
        self._held: dict[str, HeldStatus] = {}  # job uid -> a planned status not written yet (``may_hold``)
        self._warned: set[tuple[str, str]] = set()  # (job uid, warning) given once per job
        self._posting: set[Future[None]] = set()  # events being recorded in the background
        self.events = EventBudget(clock=self.clock.monotonic)
        self.data: KubeDatasetManager | None = None
        if settings.dataset_store is not None:
            self.data = KubeDatasetManager(
                api,
                settings.dataset_store,
                mount_path=settings.dataset_mount_path,
                on_change=self._data_changed,
                clock=self.clock,
                policy=settings.dataset_sources,
            )

    @property
    def informers(self) -> list[Informer]:
        """Every cache the operator reads."""
        data = self.data.informers if self.data is not None else []
        return [self.jobs, self.pods, self.jobtypes, self.services, self.configmaps, self.nodes, *data]

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, stop: threading.Event | None = None) -> None:
        """Start the informers, wait for their first lists, then create the built-in JobTypes the cluster lacks.

        Raises:
            KubeApiError: the caches did not fill within ``timeout`` (the API server is unreachable, or a
                permission is missing).
        """
        for informer in self.informers:
            informer.start()
        deadline = self.clock.monotonic() + timeout
        while not wait_all_synced(self.informers, 0.5):
            if stop is not None and stop.is_set():
                return
            if self.clock.monotonic() > deadline:
                missing = [informer.resource.plural for informer in self.informers if not informer.synced]
                raise KubeApiError(0, "NotSynced", f"the caches of {', '.join(missing)} did not fill in {timeout:.0f}s")
        if self.settings.seed_jobtypes:
            self.seed_jobtypes()
        self.ready.set()

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set (set ``signal`` too, to end the wait at once)."""
        datasets = None
        if self.data is not None:
            datasets = threading.Thread(target=self.data.run, args=(stop,), name="operator-datasets", daemon=True)
            datasets.start()
        try:
            while not stop.is_set():
                try:
                    wait = self.sync(wait=False)
                except Exception:
                    # A bug in one pass must not end the operator: the next pass starts from the caches again.
                    log.exception("reconcile pass failed; retrying")
                    wait = self.settings.retry_s
                if stop.is_set():
                    break
                if self.signal.wait(wait):
                    # Coalesce: under load every watch event sets the signal; one pass per burst is enough.
                    stop.wait(_COALESCE_S)
        finally:
            if self.data is not None and datasets is not None:
                self.data.signal.set()
                datasets.join(10)
            for informer in self.informers:
                informer.stop()
            self._jobs_pool.shutdown(wait=True)
            self._pool.shutdown(wait=True)
            log.info("operator stopped after %s", self.counters.snapshot())

    def seed_jobtypes(self) -> None:
        """Create the built-in JobTypes missing from the cluster; update built-ins an older Phalanx created.

        As ``operations.seed_builtin_jobtypes`` does for the embedded store: a JobType of the same name that a
        user made (without the ``phalanx.dev/builtin`` label) is left alone.
        """
        for name, builtin in builtin_jobtypes().items():
            body: dict[str, Any] = {
                "apiVersion": f"{API_GROUP}/{PHALANX_VERSION}",
                "kind": "JobType",
                "metadata": {"name": name, "labels": dict(builtin.metadata.labels)},
                "spec": builtin.spec.to_dict(),
            }
            existing = self.jobtypes.get(None, name)
            try:
                if existing is None:
                    self.jobtypes.observe(self.api.create(JOBTYPES, body))
                    log.info("created the built-in JobType %s", name)
                    continue
                labels = (existing.get("metadata") or {}).get("labels") or {}
                current = self.specs.jobtype(existing)
                if labels.get(BUILTIN_LABEL) == "true" and (current is None or current.spec != builtin.spec):
                    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                    self.jobtypes.observe(self.api.replace(JOBTYPES, body))
                    log.info("updated the built-in JobType %s", name)
            except ConflictError:
                continue  # created or changed by someone else meanwhile: theirs stands
            except KubeApiError as error:
                log.warning("cannot seed the built-in JobType %s: %s", name, error)

    # -- what changed -------------------------------------------------------------------------------------------

    def _job_changed(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._dirty.add(object_key(obj))

    def _pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        if job:
            with self._lock:
                self._dirty.add((str(meta.get("namespace") or ""), str(job)))

    def _node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Node changed: when its unhealthy GPUs did, every job is looked at again (GPU failures are rare)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        sick = {} if kind == "DELETED" else sick_gpus([node_from_object(obj)]).get(name, {})
        with self._lock:
            if self._sick.get(name, {}) == sick:
                return
            if sick:
                self._sick[name] = sick
            else:
                self._sick.pop(name, None)
            self._everything = True

    def _jobtype_changed(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._everything = True  # any job may use it; JobTypes change rarely

    def _data_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Dataset or a Node's cache report changed: reconcile the jobs it concerns."""
        if self.data is None:
            return
        keys = self.data.readers(obj, self.jobs.items())
        if keys:
            with self._lock:
                self._dirty |= keys
            self.signal.set()

    def mark_all(self) -> None:
        """Reconcile every job on the next pass."""
        with self._lock:
            self._everything = True
        self.signal.set()

    # -- one pass -----------------------------------------------------------------------------------------------

    def sync(self, *, wait: bool = True) -> float:
        """Reconcile the jobs that need it and collect orphans; return the seconds until a timer is due.

        With ``wait`` the pass returns once every job it picked is reconciled. Without it (the loop) the jobs are
        handed to the job workers and the pass returns at once: a slow job does not hold back the next pass,
        and a job already waiting for a worker is not queued twice (it reads the caches when it starts). A job
        that changes while a worker reconciles it is reconciled once more afterwards.
        """
        now = self.clock.monotonic()
        with self._lock:
            if self._everything:
                keys = {object_key(obj) for obj in self.jobs.items()}
                self._everything = False
                self._next_resync = now + self.settings.resync_s
            elif now >= self._next_resync:
                # Every reconciled job has a timer at most resync_s away; this catches any job never reconciled.
                keys = {object_key(obj) for obj in self.jobs.items()} - self._timers.keys() | self._dirty
                self._next_resync = now + self.settings.resync_s
            else:
                keys = set(self._dirty)
            self._dirty.clear()
            keys.update(self._timers.pop_due(now))
            self._again |= keys & self._running
            keys = {key for key in keys if key not in self._running and key not in self._queued}
            self._queued |= keys
        jobtypes = self.specs.current_jobtypes()
        # Housekeeping reads every Pod and job: each pass when waiting (tests, one-shot), else once per interval.
        housekeeping = wait or now >= self._next_housekeeping
        if housekeeping:
            self._next_housekeeping = now + _HOUSEKEEPING_S
            self._forget_deleted()
        # Jobs are independent and their reconciles wait mostly on the API server (status PUTs of tens of ms
        # each), so several are reconciled at once; one job is only ever in one worker.
        futures = [self._jobs_pool.submit(self._reconcile_key, key, jobtypes) for key in sorted(keys)]
        if wait:
            for future in futures:
                future.result()
        if housekeeping:
            self._collect_orphans()
            self._forget_parsed()
        self.counters.add("passes")
        with self._lock:
            earliest = self._timers.earliest()
            due = self._next_resync if earliest is None else min(earliest, self._next_resync)
            if not wait:
                due = min(due, self._next_housekeeping)
            if self._dirty:
                due = now  # changed while this pass ran (a job reconciled again): look again at once
        return max(0.0, due - self.clock.monotonic())

    def _reconcile_key(self, key: JobKey, jobtypes: dict[str, JobType]) -> None:
        with self._lock:
            self._queued.discard(key)
            self._running.add(key)
        try:
            self._reconcile_one(key, jobtypes)
        finally:
            with self._lock:
                self._running.discard(key)
                again = key in self._again
                self._again.discard(key)
                if again:
                    self._dirty.add(key)
            if again:
                self.signal.set()

    def _reconcile_one(self, key: JobKey, jobtypes: dict[str, JobType]) -> None:
        obj = self.jobs.get(*key)
        if obj is None:
            with self._lock:
                self._timers.cancel(key)
            return
        uid = str(obj["metadata"].get("uid") or "")
        try:
            outcome = self._reconcile(obj, jobtypes, self.pods.indexed(uid) if uid else [])
        except KubeApiError as error:
            log.warning("reconciling job %s/%s failed: %s; retrying", key[0], key[1], error)
            outcome = _Outcome(requeue_after=self.settings.retry_s)
        except Exception:
            # One job's unexpected failure must not stop the others from being reconciled.
            log.exception("reconciling job %s/%s failed; retrying", key[0], key[1])
            outcome = _Outcome(requeue_after=self.settings.retry_s)
        self.counters.add("reconciles")
        # Looked at again when its plan asks, and at the latest resync_s from now even if nothing changes (the
        # safety net of a level-triggered loop), each job on its own timer rather than all at once.
        after = self.settings.resync_s if outcome.requeue_after is None else outcome.requeue_after
        with self._lock:
            self._timers.set(key, self.clock.monotonic() + min(after, self.settings.resync_s))

    def _reconcile(self, obj: dict[str, Any], jobtypes: dict[str, JobType], pods: list[dict[str, Any]]) -> _Outcome:
        parsed = self.specs.parse(obj, jobtypes)
        if parsed.job is None:
            self._take_held(obj)
            return self._fail(obj, "InvalidSpec", parsed.error, pods)
        stored = job_status(obj)
        staging = self._staging(obj, parsed.job, jobtypes.get(parsed.job.spec.type), stored)
        if isinstance(staging, _Outcome):
            return staging  # its versions were recorded (or not, for now): plan again from the new version
        held = self._take_held(obj)
        # A held status is where the job already is, as far as this operator is concerned: plan on from it.
        job = parsed.job.model_copy(
            update={
                "metadata": ObjectMeta.model_validate(model_metadata(obj)),
                "status": held.status if held is not None else stored,
            }
        )
        jobtype = jobtypes.get(job.spec.type)
        with self._lock:
            deleting = set(self._deleting)
            sick = dict(self._sick)
        decided = plan(
            ReconcileInput(
                job=job,
                jobtype=jobtype,
                replicas=observe_job_pods(pods, deleting),
                now=self.clock.now(),
                outputs=_OUTPUTS_STAY,
                staged=staging.staged,
                staging_error=staging.error,
                unhealthy_gpus=sick,
            )
        )
        waits = Phase(decided.status.phase) == Phase.DOWNLOADING and staging.waiting
        if waits and self._first_time(obj, f"StagingWaits:{staging.waiting}"):
            self._event(obj, "StagingWaits", str(staging.waiting))
        return self._apply(obj, job, jobtype, decided, pods, stored=stored, held=held, staging=staging)

    def _staging(
        self, obj: dict[str, Any], job: TrainingJob, jobtype: JobType | None, stored: TrainingJobStatus
    ) -> KubeStaging | _Outcome:
        """The job's staging as node agents report it; an outcome instead when its versions had to be recorded.

        Without a dataset store nothing is staged: a job that reads datasets is told so once, and runs without.
        """
        if not job.spec.datasets:
            return KubeStaging()
        if self.data is None:
            if Phase(stored.phase) in STAGING_PHASES and self._first_time(obj, "DatasetsNotStaged"):
                self._event(
                    obj,
                    "DatasetsNotStaged",
                    "phalanx-operator runs without --dataset-store, so spec.datasets is not staged: the replicas get "
                    "no PHALANX_DATASET_* variables; give the operator and the node agents a dataset store "
                    "(docs/datasets.md#kubernetes)",
                    warning=True,
                )
            return KubeStaging()
        current = job.model_copy(update={"metadata": ObjectMeta.model_validate(model_metadata(obj)), "status": stored})
        staging = self.data.staging(current, jobtype)
        if staging.versions and dict(staging.versions) != chosen_versions(current):
            recorded = self._record_versions(obj, dict(staging.versions))
            return _Outcome(requeue_after=0.0 if recorded else self.settings.retry_s)
        return staging

    def _record_versions(self, obj: dict[str, Any], versions: dict[str, str]) -> bool:
        """Record on the job the dataset versions it reads (a merge patch on the version read); whether it did."""
        namespace, name = object_key(obj)
        meta = obj["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {DATASET_VERSIONS_ANNOTATION: json.dumps(versions, sort_keys=True)},
            }
        }
        try:
            written = self.api.patch(TRAININGJOBS, name, patch, namespace)
        except ConflictError:
            self.counters.add("conflicts")
            return False
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return False
        written.setdefault("kind", TRAININGJOBS.kind)
        written.setdefault("apiVersion", TRAININGJOBS.api_version)
        self.jobs.observe(written)
        return True

    def _apply(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        jobtype: JobType | None,
        decided: Plan,
        pods: list[dict[str, Any]],
        *,
        stored: TrainingJobStatus,
        held: HeldStatus | None,
        staging: KubeStaging | None = None,
    ) -> _Outcome:
        staging = staging or KubeStaging()
        creates: list[dict[str, Any]] = []
        if jobtype is not None and any(isinstance(action, CreateReplica) for action in decided.actions):
            try:
                creates = render_creates(job, jobtype, decided, self.settings.pods, staging.pods)
            except RenderError as error:
                return self._fail(obj, "InvalidSpec", str(error), pods)
        outcome = _Outcome(requeue_after=decided.requeue_after)
        events = (held.events if held is not None else ()) + decided.events
        if decided.status != stored:
            now = self.clock.monotonic()
            hold = self.settings.accept_hold_s if Phase(stored.phase) == Phase.PENDING else self.settings.hold_s
            due = held.due if held is not None else now + hold
            gated = self.data is not None and bool(job.spec.datasets)
            if may_hold(stored, decided.status, staging=gated) and now < due:
                # No write checks the resourceVersion the plan was made on, so check it before creating Pods:
                # a plan made on a stale cache (the job halted or deleted meanwhile) creates nothing.
                if creates and not self._still_current(obj):
                    return _Outcome(requeue_after=self.settings.retry_s)
                self._hold(obj, HeldStatus(_resource_version(obj), decided.status, events, due))
                events = ()  # they go out with the status
                waits = [due - now] + ([decided.requeue_after] if decided.requeue_after is not None else [])
                outcome.requeue_after = min(waits)
            else:
                written = self._write_status(obj, decided.status)
                if written is None:
                    return _Outcome(requeue_after=self.settings.retry_s)
                obj = written
        for event in events:
            self._event(obj, event.reason, event.message, warning=event.type == "Warning")
            log.info("job %s: %s: %s", job.key, event.reason, event.message)
        before, after = Phase(stored.phase), Phase(decided.status.phase)
        entered_storing = after in (Phase.STORING, Phase.SUCCEEDED) and before not in (Phase.STORING, Phase.SUCCEEDED)
        if entered_storing or any(isinstance(action, StoreOutputs) for action in decided.actions):
            self._warn_outputs_not_collected(obj, job)
        tasks: list[Callable[[], bool]] = []
        if jobtype is not None and after in _CHILDREN_PHASES:
            # The Service and hostfile are created alongside the Pods, not before: a Pod only needs them once
            # its containers start, long after its create call returns.
            tasks.extend(functools.partial(self._ensure_child, job, body) for body in render_children(job, jobtype))
        by_name = {str(pod["metadata"].get("name")): pod for pod in pods}
        tasks.extend(functools.partial(self._create_pod, obj, body) for body in creates)
        for action in decided.actions:
            if isinstance(action, DeleteReplica) and action.name in by_name:
                pod = by_name[action.name]
                if after in TERMINAL_PHASES and _exited(pod):
                    # A finished job's exited Pods hold nothing (the kubelet has freed their resources) and keep
                    # their logs readable (`phalanx logs`, `kubectl logs`); they go with the job (owner reference).
                    continue
                tasks.append(functools.partial(self._delete_pod, pod, action.reason))
        if not all(list(self._pool.map(lambda task: task(), tasks))):
            outcome.requeue_after = self.settings.retry_s * 5  # a create the API refused: try again later
        for action in decided.actions:
            if isinstance(action, DeleteJob):
                self._delete_job(obj, action.reason)
        return outcome

    # -- held statuses ------------------------------------------------------------------------------------------

    def _take_held(self, obj: dict[str, Any]) -> HeldStatus | None:
        """Remove and return the job's held status, if it was planned on this version of the job."""
        with self._lock:
            held = self._held.pop(str(obj["metadata"].get("uid") or ""), None)
        if held is None or held.resource_version != _resource_version(obj):
            return None  # the job changed since (halted, edited, written by someone): plan from what is stored
        return held

    def _still_current(self, obj: dict[str, Any]) -> bool:
        """Whether the job is still at the version the cache holds; a newer version goes into the cache.

        One GET, answered from the API server's watch cache (not older than the version cached here): a sixth of
        the API server's work for the status write it stands in for. That cache trails etcd by the time an event
        takes to reach it, milliseconds; a job changed within them is caught by the next pass, as one changed
        just after a status write and before the Pods' creation always was.
        """
        namespace, name = object_key(obj)
        self.counters.add("freshness_reads")
        try:
            current = self.api.get(TRAININGJOBS, name, namespace, not_older_than=_resource_version(obj) or None)
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return False
        if _resource_version(current) == _resource_version(obj):
            return True
        self.counters.add("conflicts")
        current.setdefault("kind", TRAININGJOBS.kind)
        current.setdefault("apiVersion", TRAININGJOBS.api_version)
        self.jobs.observe(current)
        return False

    def _hold(self, obj: dict[str, Any], held: HeldStatus) -> None:
        with self._lock:
            self._held[str(obj["metadata"].get("uid") or "")] = held
        self.counters.add("status_writes_held")

    # -- writes -------------------------------------------------------------------------------------------------

    def _write_status(self, obj: dict[str, Any], status: TrainingJobStatus) -> dict[str, Any] | None:
        """PUT the status on the resourceVersion it was planned from; None when the job changed or is gone."""
        namespace, name = object_key(obj)
        try:
            written = self.api.replace_status(TRAININGJOBS, status_body(obj, status))
        except ConflictError:
            self.counters.add("conflicts")
            log.debug("job %s/%s changed since it was read; planning again", namespace, name)
            return None
        except NotFoundError:
            self.jobs.forget(namespace, name)
            return None
        self.counters.add("status_writes")
        written.setdefault("kind", TRAININGJOBS.kind)
        written.setdefault("apiVersion", TRAININGJOBS.api_version)
        self.jobs.observe(written)
        return written

    def _fail(self, obj: dict[str, Any], reason: str, message: str, pods: list[dict[str, Any]]) -> _Outcome:
        """Fail a job the planner cannot plan (its spec is invalid) and stop its Pods, as Failed does."""
        namespace, name = object_key(obj)
        status = job_status(obj)
        phase = Phase(status.phase)
        outcome = _Outcome()
        if phase not in TERMINAL_PHASES:
            if can_transition(phase, Phase.FAILED):
                failed = transition(status, Phase.FAILED, reason=reason, message=message, now=self.clock.now())
                generation = int((obj.get("metadata") or {}).get("generation") or 0)
                written = self._write_status(obj, failed.model_copy(update={"observed_generation": generation}))
                if written is None:
                    return _Outcome(requeue_after=self.settings.retry_s)
                self._event(written, reason, message, warning=True)
                log.warning("job %s/%s failed: %s: %s", namespace, name, reason, message)
            elif self._first_time(obj, f"{reason}:{message}"):
                # Halting and Preempted only wait for Pods to stop: stop them; the job waits for a valid spec.
                log.warning("job %s/%s (%s) cannot be planned: %s", namespace, name, phase, message)
                self._event(obj, reason, f"{message}; stopping every replica", warning=True)
        with self._lock:
            deleting = set(self._deleting)
        live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp") and pod_uid(pod) not in deleting]
        list(self._pool.map(lambda pod: self._delete_pod(pod, reason), live))
        return outcome

    def _create_pod(self, job: dict[str, Any], body: dict[str, Any]) -> bool:
        meta = body["metadata"]
        try:
            created = self.api.create(PODS, body)
        except ConflictError as error:
            if error.already_exists:
                return True  # created before (a pass replayed after a restart); the cache will show it
            raise
        except KubeApiError as error:
            if error.status in (0, 500, 503, 504, 429):
                raise
            # Refused for good (invalid, forbidden, over a ResourceQuota): say so once; retried on later passes.
            if self._first_time(job, f"CreatePodFailed:{meta['name']}:{error.message}"):
                self._event(job, "CreatePodFailed", f"cannot create pod {meta['name']}: {error}", warning=True)
            log.warning("cannot create pod %s/%s: %s", meta["namespace"], meta["name"], error)
            return False
        self.pods.observe(created)
        self.counters.add("pods_created")
        log.debug("created pod %s/%s (attempt %s)", meta["namespace"], meta["name"], meta["labels"][LABEL_ATTEMPT])
        return True

    def _delete_pod(self, pod: Mapping[str, Any], reason: str) -> bool:
        meta = pod.get("metadata") or {}
        uid = pod_uid(pod)
        # 404: already gone; 409: the name now belongs to a newer Pod, which is not this deletion's to remove.
        with contextlib.suppress(NotFoundError, ConflictError):
            self.api.delete(PODS, str(meta.get("name")), str(meta.get("namespace")), uid=uid or None)
        with self._lock:
            self._deleting.add(uid)
        self.counters.add("pods_deleted")
        log.debug("deleted pod %s/%s: %s", meta.get("namespace"), meta.get("name"), reason)
        return True

    def _ensure_child(self, job: TrainingJob, body: dict[str, Any]) -> bool:
        """Create the headless Service or hostfile ConfigMap if the cache lacks it (409 is success)."""
        informer = self.services if body["kind"] == "Service" else self.configmaps
        resource = SERVICES if informer is self.services else CONFIGMAPS
        meta = body["metadata"]
        current = informer.get(meta["namespace"], meta["name"])
        if current is not None:
            owners = {ref.get("uid") for ref in (current.get("metadata") or {}).get("ownerReferences") or []}
            if job.metadata.uid in owners or current["metadata"].get("deletionTimestamp"):
                return True
            # Left by an earlier job of the same name, awaiting garbage collection: replace it now.
            with contextlib.suppress(NotFoundError, ConflictError):
                self.api.delete(resource, meta["name"], meta["namespace"], uid=current["metadata"].get("uid"))
            informer.forget(meta["namespace"], meta["name"])
        try:
            informer.observe(self.api.create(resource, body))
            self.counters.add("children_created")
        except ConflictError as error:
            if not error.already_exists:
                raise
        return True

    def _delete_job(self, obj: dict[str, Any], reason: str) -> None:
        namespace, name = object_key(obj)
        with contextlib.suppress(NotFoundError, ConflictError):
            self.api.delete(TRAININGJOBS, name, namespace, uid=obj["metadata"].get("uid"))
        self.jobs.forget(namespace, name)
        log.info("deleted job %s/%s: %s", namespace, name, reason)

    def _event(self, job: dict[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        """Record a core/v1 Event on the job, in the background: events are best effort (Normal ones budgeted)."""
        if not self.events.allow(warning=warning):
            self.counters.add("events_dropped")
            return
        body = event_body(
            job,
            reason,
            message,
            warning=warning,
            now=self.clock.now(),
            component=self.settings.component,
            instance=self.settings.identity,
        )

        def post() -> None:
            try:
                self.api.create(EVENTS, body)
            except KubeApiError as error:
                log.debug("event %s on %s not recorded: %s", reason, object_key(job), error)

        future = self._pool.submit(post)
        with self._lock:
            self._posting.add(future)
        future.add_done_callback(self._posted)

    def _posted(self, future: Future[None]) -> None:
        with self._lock:
            self._posting.discard(future)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the events recorded so far have been sent (or failed)."""
        with self._lock:
            pending = set(self._posting)
        wait(pending, timeout)

    def _warn_outputs_not_collected(self, obj: dict[str, Any], job: TrainingJob) -> None:
        store_to = job.spec.outputs.store_to
        if store_to and self._first_time(obj, "OutputsNotCollected"):
            self._event(
                obj,
                "OutputsNotCollected",
                f"outputs.storeTo ({store_to}) is not supported on Kubernetes yet: outputs stay in each pod's "
                f"{job.spec.outputs.path} volume and go away with the pod",
                warning=True,
            )

    def _first_time(self, obj: Mapping[str, Any], what: str) -> bool:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if (uid, what) in self._warned:
                return False
            self._warned.add((uid, what))
            return True

    # -- orphans ------------------------------------------------------------------------------------------------

    def _collect_orphans(self) -> None:
        """Delete Pods whose job is gone (confirmed by a GET: the job cache may lag behind the Pod cache).

        Only the Pods of job uids that name no cached job are looked at (the Pod cache is indexed by job uid).
        """
        live = {str(obj["metadata"].get("uid")) for obj in self.jobs.items()}
        suspects = [pod for uid in self.pods.index_values() - live for pod in self.pods.indexed(uid)]
        if not suspects:
            return
        with self._lock:
            deleting = set(self._deleting)
        for pod in orphan_pods(suspects, live):
            if pod_uid(pod) in deleting:
                continue
            meta = pod["metadata"]
            namespace, job_name = str(meta.get("namespace")), str(meta["labels"][LABEL_JOB])
            try:
                self.counters.add("orphan_reads")
                try:
                    current = self.api.get(TRAININGJOBS, job_name, namespace)
                except NotFoundError:
                    current = None
                if current is not None and current["metadata"].get("uid") == job_uid_of(pod):
                    self.jobs.observe(current)  # the cache was behind
                    continue
                log.info("deleting orphan pod %s/%s (its job %s is gone)", namespace, meta.get("name"), job_name)
                self._delete_pod(pod, "Orphaned")
                self.counters.add("orphans_deleted")
            except KubeApiError as error:
                log.warning("orphan pod %s/%s not deleted yet: %s", namespace, meta.get("name"), error)

    def _forget_deleted(self) -> None:
        """Stop remembering deletions the cache has caught up with (the Pod is gone)."""
        with self._lock:
            if not self._deleting:
                return
        present = {pod_uid(pod) for pod in self.pods.items()}
        with self._lock:
            self._deleting &= present

    def _forget_parsed(self) -> None:
        if len(self.specs) <= len(self.jobs) * 2 + 64:
            return
        live = {str(obj["metadata"].get("uid")) for obj in self.jobs.items()}
        self.specs.forget(live)
        with self._lock:
            self._warned = {entry for entry in self._warned if entry[0] in live}
            self._held = {uid: held for uid, held in self._held.items() if uid in live}


def _exited(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod's containers have ended for good (phase Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
