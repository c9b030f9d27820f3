"""phalanx-operator: the embedded runtime's job controller on a Kubernetes cluster.

For every TrainingJob it does what ``services/embedded/controller.py`` does for the embedded store — observe, call the
same pure ``core.reconcile.plan``, apply the plan — with Pods for replicas and the API server for the store. This
module runs the loop and owns the caches; ``workqueue`` picks the jobs, ``reconcile`` plans and applies one job,
``status_writer`` writes what it decided, ``gc`` collects orphan Pods, and ``datasets`` runs on its own thread,
as do the sweep and pipeline controllers (``flows``, with ``OperatorSettings.flows``), whose trials and steps are
TrainingJobs this loop then reconciles. With ``OperatorSettings.history_url`` the job history recorder runs on a
thread too (``history``), reading this loop's TrainingJob cache.

The caches are informers (TrainingJobs, JobTypes, and the Pods, Services and ConfigMaps labelled
``phalanx.dev/job``): one LIST each at start, then WATCH; never a LIST per pass. One loop thread hands the jobs
that need it to the job workers; each reconcile reads only the caches, so it is level-triggered: which event
woke it does not matter. A change to a Dataset or to a Node's cache report reconciles the jobs it concerns.
Nothing that matters lives only in this process: phases, attempts and placements are in the job's status, and
Pod names are deterministic (``<job>-<role>-<index>``), so a ``kill -9`` at any point followed by a restart
converges without duplicates.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes.api import (
    CONFIGMAPS,
    JOBTYPES,
    NODES,
    PERSISTENTVOLUMECLAIMS,
    PHALANX_VERSION,
    PODS,
    SERVICES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, object_key, start_synced
from phalanx.adapters.kubernetes.objects import LABEL_JOB, job_from_object, node_from_object
from phalanx.core.gpu_health import sick_gpus
from phalanx.model.base import API_GROUP
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import BUILTIN_LABEL, builtin_jobtypes
from phalanx.services.kubernetes.apply import OperatorCounters, Wiring, job_uid_of
from phalanx.services.kubernetes.datasets import KubeDatasetManager
from phalanx.services.kubernetes.flows import KubeFlows
from phalanx.services.kubernetes.gc import PodDeletions, collect_orphans
from phalanx.services.kubernetes.history import OperatorHistory, open_history
from phalanx.services.kubernetes.kubeflow import KubeflowBridge
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.kubernetes.outputs import KubeOutputs
from phalanx.services.kubernetes.reconcile import Caches, JobReconciler, OperatorSettings, Outcome
from phalanx.services.kubernetes.specs import SpecCache
from phalanx.services.kubernetes.status_writer import StatusWriter
from phalanx.services.kubernetes.workqueue import WorkQueue

log = logging.getLogger(__name__)
JobKey = tuple[str, str]  # (namespace, name)
# After a wake-up the loop waits this long before its pass, so a burst of watch events makes one pass.
_COALESCE_S = 0.05
# Orphan collection and forgetting read every Pod and job; the loop does them at most this often.
_HOUSEKEEPING_S = 1.0


class KubeOperator:
    """The operator's caches and loop."""

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
        self._sick_lock = threading.Lock()
        self._sick: dict[str, dict[int, str]] = {}  # node -> unhealthy GPU index -> why
        self.counters = OperatorCounters()
        self.ready = threading.Event()
        self._pool = ThreadPoolExecutor(max(1, settings.workers), thread_name_prefix="operator-api")
        # A separate pool: a job's reconcile submits its API writes to ``_pool`` and waits for them.
        self._jobs_pool = ThreadPoolExecutor(max(1, settings.job_workers), thread_name_prefix="operator-job")
        self.queue: WorkQueue[JobKey] = WorkQueue(settings.resync_s)
        self._next_housekeeping = 0.0
        self.specs = SpecCache(api, self.jobtypes, settings.pods)  # validated jobs, parsed JobTypes
        wiring = Wiring(api, self._pool, self.counters, self.clock)
        self.writer = StatusWriter(wiring, self.jobs, component=settings.component, identity=settings.identity)
        self.deletions = PodDeletions()
        self.data: KubeDatasetManager | None = None
        if settings.dataset_store is not None:
            self.data = KubeDatasetManager(
                api,
                settings.dataset_store,
                mount_path=settings.dataset_mount_path,
                on_change=self._data_changed,
                clock=self.clock,
                policy=settings.dataset_sources,
                jobs=self._job_named,
            )
        self.kubeflow: KubeflowBridge | None = None
        if settings.kubeflow_kinds:
            self.kubeflow = KubeflowBridge(
                api,
                self.jobs,
                self.specs.current_jobtypes,
                self.clock,
                component=settings.component,
                identity=settings.identity,
                own_scheduler=settings.scheduler_name,
            )
        self.flows: KubeFlows | None = None
        if settings.flows is not None:
            if KubeFlows.served(KubeBackend(api)):
                self.flows = KubeFlows(
                    api,
                    settings.flows,
                    jobs=self.jobs,
                    jobtypes=self.jobtypes,
                    current_jobtypes=self.specs.current_jobtypes,
                    clock=self.clock,
                    component=settings.component,
                    identity=settings.identity,
                )
            else:
                log.warning(
                    "sweeps and pipeline runs are not run: this cluster does not serve their kinds (an install older "
                    "than this operator); apply the current install: phalanx install --print | kubectl apply -f -"
                )
        self.history: OperatorHistory | None = None
        if settings.history_url is not None:
            url = settings.history_url
            self.history = OperatorHistory(
                api, self.jobs, self.specs.current_jobtypes, lambda: open_history(url), clock=self.clock
            )
        caches = Caches(jobs=self.jobs, pods=self.pods, services=self.services, configmaps=self.configmaps)
        store, claim = settings.outputs_store, settings.outputs_claim
        self.outputs: KubeOutputs | None = None
        if store is not None and claim is not None:
            claims = Informer(api, PERSISTENTVOLUMECLAIMS, field_selector=f"metadata.name={claim}", signal=self.signal)
            self.outputs = KubeOutputs(store, claim, claims)
        self.reconciler = JobReconciler(
            wiring,
            settings,
            caches,
            self.specs,
            self.data,
            self.writer,
            self.deletions,
            self._unhealthy_gpus,
            self.outputs,
        )

    @property
    def informers(self) -> list[Informer]:
        """Every cache the operator reads."""
        data = self.data.informers if self.data is not None else []
        flows = self.flows.informers if self.flows is not None else []
        claims = [self.outputs.claims] if self.outputs is not None and self.outputs.claims is not None else []
        own = [self.jobs, self.pods, self.jobtypes, self.services, self.configmaps, self.nodes]
        return [*own, *data, *flows, *claims]

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, stop: threading.Event | None = None) -> None:
        """Start the informers, wait for their first lists, then create the built-in JobTypes the cluster lacks.

        Raises:
            KubeApiError: the caches did not fill within ``timeout`` (the API server is unreachable, or a
                permission is missing).
        """
        if not start_synced(self.informers, timeout, stop):
            return
        if self.settings.seed_jobtypes:
            self.seed_jobtypes()
        if self.kubeflow is not None and not self.kubeflow.start(timeout, stop):
            return
        self.ready.set()

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set (set ``signal`` too, to end the wait at once)."""
        datasets = None
        if self.data is not None:
            datasets = threading.Thread(target=self.data.run, args=(stop,), name="operator-datasets", daemon=True)
            datasets.start()
        kubeflow = None
        if self.kubeflow is not None:
            kubeflow = threading.Thread(target=self.kubeflow.run, args=(stop,), name="operator-kubeflow", daemon=True)
            kubeflow.start()
        if self.flows is not None:
            self.flows.start(stop)
        if self.history is not None:
            self.history.start(stop)
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
            if self.kubeflow is not None and kubeflow is not None:
                self.kubeflow.signal.set()
                kubeflow.join(10)
            if self.flows is not None:
                self.flows.wake()
                self.flows.join(10)
            if self.history is not None:
                self.history.join(10)
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

    def _job_named(self, namespace: str, name: str) -> TrainingJob | None:
        """The job as cached, parsed (None: no such job, or one whose spec does not parse)."""
        obj = self.jobs.get(namespace, name)
        if obj is None:
            return None
        try:
            return job_from_object(obj, self.specs.current_jobtypes())
        except SpecError:
            return None

    def _job_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self.queue.mark({object_key(obj)})
        if self.data is not None and (obj.get("status") or {}).get("phase") == Phase.SUCCEEDED.value:
            self.data.signal.set()  # a Dataset fromJob may be waiting for it
        if self.history is not None:
            self.history.job_changed(kind, obj)
        if self.kubeflow is not None:
            self.kubeflow.job_changed(obj)  # its Kubeflow owner's status follows it
        if self.flows is not None:
            self.flows.job_changed(obj)  # a trial's or a step's sweep or run looks at it again

    def _pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        if job:
            self.queue.mark({(str(meta.get("namespace") or ""), str(job))})

    def _node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Node changed: when its unhealthy GPUs did, every job is looked at again (GPU failures are rare)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        sick = {} if kind == "DELETED" else sick_gpus([node_from_object(obj)]).get(name, {})
        with self._sick_lock:
            if self._sick.get(name, {}) == sick:
                return
            if sick:
                self._sick[name] = sick
            else:
                self._sick.pop(name, None)
        self.queue.mark_all()

    def _unhealthy_gpus(self) -> dict[str, dict[int, str]]:
        """Node -> unhealthy GPU index -> why, as the node agents report it now."""
        with self._sick_lock:
            return dict(self._sick)

    def _jobtype_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self.queue.mark_all()  # any job may use it; JobTypes change rarely

    def _data_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Dataset or a Node's cache report changed: reconcile the jobs it concerns."""
        if self.data is None:
            return
        keys = self.data.readers(obj, self.jobs.items())
        if keys:
            self.queue.mark(keys)
            self.signal.set()

    def mark_all(self) -> None:
        """Reconcile every job on the next pass."""
        self.queue.mark_all()
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
        keys = self.queue.take(now, lambda: {object_key(obj) for obj in self.jobs.items()})
        jobtypes = self.specs.current_jobtypes()
        # Housekeeping reads every Pod and job: each pass when waiting (tests, one-shot), else once per interval.
        housekeeping = wait or now >= self._next_housekeeping
        if housekeeping:
            self._next_housekeeping = now + _HOUSEKEEPING_S
            self.deletions.forget_gone(self.pods)
        # Jobs are independent and their reconciles wait mostly on the API server (status PUTs of tens of ms
        # each), so several are reconciled at once; one job is only ever in one worker.
        futures = [self._jobs_pool.submit(self._reconcile_key, key, jobtypes) for key in sorted(keys)]
        if wait:
            for future in futures:
                future.result()
        if housekeeping:
            collect_orphans(
                self.reconciler.wiring,
                jobs=self.jobs,
                pods=self.pods,
                deletions=self.deletions,
                delete_pod=self.reconciler.delete_pod,
            )
            self._forget_parsed()
        self.counters.add("passes")
        due = self.queue.next_due(now)
        if not wait:
            due = min(due, self._next_housekeeping)
        return max(0.0, due - self.clock.monotonic())

    def _reconcile_key(self, key: JobKey, jobtypes: dict[str, JobType]) -> None:
        self.queue.start(key)
        try:
            self._reconcile_one(key, jobtypes)
        finally:
            if self.queue.finish(key):
                self.signal.set()

    def _reconcile_one(self, key: JobKey, jobtypes: dict[str, JobType]) -> None:
        obj = self.jobs.get(*key)
        if obj is None:
            self.queue.cancel(key)
            return
        uid = str(obj["metadata"].get("uid") or "")
        try:
            outcome = self.reconciler.reconcile(obj, jobtypes, self.pods.indexed(uid) if uid else [])
        except KubeApiError as error:
            log.warning("reconciling job %s/%s failed: %s; retrying", key[0], key[1], error)
            outcome = Outcome(requeue_after=self.settings.retry_s)
        except Exception:
            # One job's unexpected failure must not stop the others from being reconciled.
            log.exception("reconciling job %s/%s failed; retrying", key[0], key[1])
            outcome = Outcome(requeue_after=self.settings.retry_s)
        self.counters.add("reconciles")
        # Looked at again when its plan asks, and at the latest resync_s from now even if nothing changes (the
        # safety net of a level-triggered loop), each job on its own timer rather than all at once.
        after = self.settings.resync_s if outcome.requeue_after is None else outcome.requeue_after
        self.queue.requeue(key, self.clock.monotonic() + min(after, self.settings.resync_s))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the events recorded so far have been sent (or failed)."""
        self.writer.flush(timeout)

    def _forget_parsed(self) -> None:
        if len(self.specs) <= len(self.jobs) * 2 + 64:
            return
        live = {str(obj["metadata"].get("uid")) for obj in self.jobs.items()}
        self.specs.forget(live)
        self.writer.forget(live)
