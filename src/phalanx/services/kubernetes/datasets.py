"""Datasets on Kubernetes, the operator's side: materialise Datasets into the dataset store, gate jobs on staging.

The node agents (``services.kubernetes.node_cache``) copy a job's entries into their nodes' caches; the operator
materialises, decides when a job's data is in place, and renders what its Pods mount. They share two things:
the **dataset store**, a directory every one of them mounts (in production a ReadWriteMany volume; the
operator's ``--dataset-store`` and each agent's), laid out as the embedded one (``services.dataset_store``);
and each Node's **cache report**, the annotation ``phalanx.dev/dataset-cache`` its agent writes
(``adapters.kubernetes.cache_report``).

- **Materialise** (``KubeDatasetManager``, its own thread, and a small pool for the copies, so a long download
  never holds up the operator's reconcile loop) with the shared ``services.dataset_manager.DatasetMaterializer``
  into ``<store>/<ns>/<name>/<version label>/``: statuses and events go through the port (``KubeBackend``: the
  status subresource on the resourceVersion read, core/v1 Events), the Datasets are read from an informer. ``fromJob``
  reads where the job's outputs were stored (``dataset_manager.from_job_choice``, as on the embedded runtime):
  the artifact store on its claim (``services.kubernetes.outputs``), or the URL ``outputs.storeTo`` named.
  The operator reads sources with its own identity, on behalf of whoever may create Datasets, so what it
  reads is limited (``SourcePolicy``): local files (``path``, ``file://`` URLs, SQLite files) only under the
  directories it is started with (``--allow-path-under``), and scripts only when allowed
  (``--allow-script-sources``); a Dataset asking for more fails with a sentence naming the field and the flag.
  ``status.nodes`` lists the nodes whose cache report holds the current version. The copies of a deleted
  Dataset are removed from the store.
- **Gate** (``KubeDatasetManager.staging`` -> ``observe_staging``, pure): a job that holds placements has its
  plan (``dataset_store.resolve_staging``, the same the agents compute); it is staged when every node of the
  plan reports the job ready (its uid) and every key of the node's entries ready; a node that reports an
  error for the job, a Dataset missing or failed, or a pinned version that is not materialised, fails it
  (``staging_error``, reason StagingFailed).
- **Render**: each replica's ``PHALANX_DATASET_<NAME>_PATH`` (and shard index and count, cache policy) point
  at ``<mount path>/<entry key>`` inside the container, and each entry is a read-only hostPath volume of
  ``<the node's cache dir>/<entry key>`` (the directory the node's report names): a Pod sees the entries it
  reads and nothing else of the node's cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    NODES,
    KubeApi,
    KubeApiError,
)
from phalanx.adapters.kubernetes.cache_report import CACHE_ANNOTATION, DEFAULT_CACHE_DIR, CacheReport, cache_report
from phalanx.adapters.kubernetes.informer import Informer, Signal, object_key
from phalanx.adapters.kubernetes.objects import dataset_from_object
from phalanx.adapters.kubernetes.parsed import ParsedObjects
from phalanx.adapters.kubernetes.rendering import DatasetVolumes
from phalanx.core.data import env_name
from phalanx.model.datasets import Dataset, DatasetPhase, version_label
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.services.dataset_manager import DatasetMaterializer, SourceChoice, from_job_choice
from phalanx.services.dataset_store import (
    STAGING_PHASES,
    DatasetStore,
    StagingResolution,
    manifests_reader,
    resolve_staging,
    source_request,
)
from phalanx.services.kubernetes.operations import KubeBackend

log = logging.getLogger(__name__)

COMPONENT = "phalanx-operator"
_PROGRESS_EVERY_S = 2.0


# -- what the operator may read ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcePolicy:
    """What sources the operator reads: local paths only under ``path_roots``, scripts only if ``scripts``.

    The operator materialises with its own identity (its ServiceAccount token is a file in its container), for
    anyone who may create a Dataset; without this limit a Dataset could copy that token, or anything else the
    operator can read, into a node cache and from there into the creator's Pods.
    """

    path_roots: tuple[Path, ...] = ()
    scripts: bool = False

    def refusal(self, dataset: Dataset, base_dir: Path) -> str | None:
        """Why the operator will not read the Dataset's source (naming the field and the fix), or None."""
        source = dataset.spec.source
        if source.script is not None and not self.scripts:
            return (
                "spec.source.script: phalanx-operator runs no dataset scripts unless it is started with "
                "--allow-script-sources (a script would run with the operator's identity); materialise the data "
                "elsewhere and use spec.source.url, or spec.source.path under a directory the operator may read"
            )
        local: tuple[str, str] | None = None
        if source.path is not None:
            local = ("spec.source.path", source.path)
        elif source.url is not None and source.url.split("://", 1)[0].lower() in ("file", "local"):
            local = ("spec.source.url", source.url.split("://", 1)[1])
        elif source.sql is not None and source.sql.url.lower().startswith("sqlite"):
            database = source.sql.url.split("://", 1)[-1][1:].split("?", 1)[0]
            if database.startswith("file:"):
                return "spec.source.sql.url: SQLite URIs (file:...) are not read on Kubernetes; name the file"
            if database and database != ":memory:":
                local = ("spec.source.sql.url", database)
        if local is None:
            return None
        field_name, value = local
        path = Path(value).expanduser()
        resolved = (path if path.is_absolute() else base_dir / path).resolve()
        if any(resolved.is_relative_to(root.resolve()) for root in self.path_roots):
            return None
        allowed = ", ".join(str(root) for root in self.path_roots) or "none given"
        return (
            f"{field_name}: {value} is not under a directory phalanx-operator may read (its --allow-path-under "
            f"directories: {allowed}); put the data there (e.g. on the dataset store's volume), or use a URL"
        )


# -- the staging gate (pure) ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeStaging:
    """What the operator needs to know about a job's data on Kubernetes.

    Attributes:
        staged: every node of the job holds its entries, ready and pinned for the job.
        error: why staging cannot succeed (the job fails with it), or None.
        waiting: why it is not staged yet, for an event.
        pods: per replica, the environment and the hostPath volumes its Pod gets.
        versions: the version each mount reads, to record on the job (empty until planned).
    """

    staged: bool = True
    error: str | None = None
    waiting: str | None = None
    pods: Mapping[str, DatasetVolumes] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)


def observe_staging(
    job: TrainingJob,
    resolution: StagingResolution,
    reports: Mapping[str, CacheReport | None],
    mount_path: str = DEFAULT_CACHE_DIR,
) -> KubeStaging:
    """Whether the job's plan is in place on its nodes, as their agents report, and what each Pod mounts.

    Args:
        job: the job, with its uid and placements.
        resolution: its staging plan (``dataset_store.resolve_staging``).
        reports: the cache report of each node of the plan (None where the node has none yet).
        mount_path: where Pods see the cache entries.
    """
    if resolution.error is not None:
        return KubeStaging(staged=False, error=resolution.error)
    plan = resolution.plan
    if plan is None:
        return KubeStaging(staged=False, waiting=resolution.waiting)
    uid = job.metadata.uid or ""
    waiting: list[str] = []
    for node, entries in plan.entries.items():
        report = reports.get(node)
        if report is None:
            waiting.append(
                f"node {node} has no dataset cache report yet (is phalanx-node-agent running there with "
                "--dataset-store?)"
            )
            continue
        state = report.jobs.get(job.key)
        if state is not None and state.uid == uid and state.state == "error":
            return KubeStaging(staged=False, error=f"node {node}: {state.message or 'staging failed'}")
        missing = [entry.key for entry in entries if report.entries.get(entry.key) != "ready"]
        if state is None or state.uid != uid:
            waiting.append(f"node {node}'s agent has not taken the job up yet")
        elif missing or state.state != "ready":
            what = f"staging {len(missing)} of {len(entries)} entries" if missing else state.state
            waiting.append(f"node {node} is {what}" + (f" ({state.message})" if state.message else ""))
    node_of = {name: placement.node for name, placement in job.status.placements.items()}
    pods: dict[str, DatasetVolumes] = {}
    for replica, mounts in plan.mounts.items():
        report = reports.get(node_of.get(replica, ""))
        directory = report.directory if report is not None else DEFAULT_CACHE_DIR
        env: dict[str, str] = {}
        volumes: dict[str, str] = {}
        for mount in mounts:
            inside = f"{mount_path.rstrip('/')}/{mount.key}"
            env.update(mount.env(inside))
            policy = resolution.policies.get(mount.mount)
            if policy:
                env[f"{env_name(mount.mount)}_CACHE_POLICY"] = policy
            volumes[inside] = f"{directory.rstrip('/')}/{mount.key}"
        samples = f"{report.samples.rstrip('/')}/{job.metadata.namespace}" if report and report.samples else None
        pods[replica] = DatasetVolumes(
            env=env, mounts=tuple(sorted((host, inside) for inside, host in volumes.items())), samples=samples
        )
    return KubeStaging(
        staged=not waiting,
        waiting="; ".join(waiting) or None,
        pods=pods,
        versions=resolution.versions,
    )


def nodes_holding(version: str, reports: Mapping[str, CacheReport | None]) -> list[str]:
    """The nodes whose cache holds ``version`` ready, whole or a shard of it, sorted."""
    label = version_label(version)
    return sorted(
        node
        for node, report in reports.items()
        if report is not None and any(key == label or key.startswith(f"{label}.") for key in report.ready_keys())
    )


# -- the manager ------------------------------------------------------------------------------------------------


class KubeDatasetManager:
    """The operator's dataset manager: Datasets -> the dataset store and their status; jobs' staging gate.

    Args:
        api: the API.
        store: the dataset store's directory (the operator's ``--dataset-store``).
        mount_path: where Pods see cache entries.
        on_change: called with ``(kind, object)`` when a Dataset or a Node's cache report changes, so that the
            operator reconciles the jobs that read it (from informer threads).
        workers: materialisations at once.
        base_dir: what a relative ``spec.source.path`` is relative to (the operator's working directory).
        policy: which sources it reads.
    """

    def __init__(
        self,
        api: KubeApi,
        store: Path,
        *,
        mount_path: str = DEFAULT_CACHE_DIR,
        on_change: Callable[[str, dict[str, Any]], None] | None = None,
        clock: Clock | None = None,
        workers: int = 2,
        base_dir: Path | None = None,
        policy: SourcePolicy | None = None,
        jobs: Callable[[str, str], TrainingJob | None] | None = None,
    ) -> None:
        self.api = api
        self._jobs = jobs or (lambda namespace, name: None)
        self.store = DatasetStore(Path(store))
        self.mount_path = mount_path
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self._on_change = on_change
        self.datasets = Informer(api, DATASETS, signal=self.signal, on_change=on_change)
        self.nodes = Informer(api, NODES, on_change=self._node_changed)
        self.ready = threading.Event()
        self._base_dir = base_dir or Path.cwd()
        self.policy = policy or SourcePolicy()
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="datasets")
        self._lock = threading.Lock()
        self._parsed = ParsedObjects("Dataset", dataset_from_object)
        self._reports: dict[str, str] = {}  # node -> the cache annotation last seen
        self._manifest = manifests_reader(self.store)
        self.port = KubeBackend(api, clock=self.clock, component=COMPONENT, informers={Dataset: self.datasets})
        every = _PROGRESS_EVERY_S
        self.materializer = DatasetMaterializer(
            self.port, self, self.store, self._pool, wake=self.signal.set, clock=self.clock, progress_every_s=every
        )

    @property
    def informers(self) -> list[Informer]:
        """The caches the manager reads (the operator starts them with its own)."""
        return [self.datasets, self.nodes]

    # -- what changed -----------------------------------------------------------------------------------------

    def _node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        annotation = (
            "" if kind == "DELETED" else str(((obj["metadata"].get("annotations") or {}).get(CACHE_ANNOTATION)) or "")
        )
        with self._lock:
            if self._reports.get(name) == annotation:
                return  # a heartbeat or another component's change: nothing about the cache
            self._reports[name] = annotation
        self.signal.set()  # Dataset.status.nodes may change
        if self._on_change is not None:
            self._on_change(kind, obj)

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, idle_s: float = 5.0) -> None:
        """Materialise and write Dataset status until ``stop`` is set (set ``signal`` too, to end a wait)."""
        self.materializer.sweep_leftovers()
        try:
            while not stop.is_set():
                try:
                    self.sync()
                except Exception:
                    log.exception("dataset pass failed; retrying")
                self.ready.set()
                self.signal.wait(idle_s)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def sync(self) -> None:
        """Collect finished materialisations, start due ones, refresh ``status.nodes``, drop deleted Datasets."""
        self.materializer.collect()
        reports = {str(obj["metadata"].get("name")): cache_report(obj) for obj in self.nodes.items()}
        objects = {object_key(obj): obj for obj in self.datasets.items()}
        for key, obj in objects.items():
            try:
                dataset = self._dataset(obj)
                if dataset is not None:
                    self.materializer.materialize_if_due(dataset)
                self._refresh_nodes(key, reports)
            except KubeApiError as error:
                log.warning("dataset %s/%s: %s; retrying", *key, error)
            except Exception:
                log.exception("dataset %s/%s failed; retrying on the next pass", *key)
        if self.datasets.synced:
            self.materializer.remove_deleted(frozenset(objects))

    # -- the materialiser's sources (services.dataset_manager.DatasetSources) -----------------------------------

    def current(self, namespace: str, name: str) -> Dataset | None:
        """The Dataset as the informer holds it; None when it is gone or invalid."""
        obj = self.datasets.get(namespace, name)
        return self._dataset(obj) if obj is not None else None

    def source(self, dataset: Dataset) -> SourceChoice:
        """Its source, relative to the operator's directory, unless the operator may not read it."""
        from_job = dataset.spec.source.from_job
        if from_job is not None:
            return from_job_choice(from_job, self._jobs(dataset.metadata.namespace, from_job.job))
        refusal = self.policy.refusal(dataset, self._base_dir)
        if refusal is not None:
            return SourceChoice(refusal=refusal)
        return SourceChoice(source_request(dataset.spec.source), self._base_dir)

    def _refresh_nodes(self, key: tuple[str, str], reports: Mapping[str, CacheReport | None]) -> None:
        dataset = self.current(*key)
        if dataset is None:
            return
        version = dataset.status.version
        nodes = nodes_holding(version, reports) if version and dataset.status.phase == DatasetPhase.READY else []
        if nodes != dataset.status.nodes:
            self.port.write_status(dataset, {"nodes": nodes})

    # -- reading ----------------------------------------------------------------------------------------------

    def _dataset(self, obj: dict[str, Any]) -> Dataset | None:
        """The Dataset parsed once per resourceVersion; None (logged once) when it is invalid."""
        return self._parsed.get(obj)

    def datasets_read_by(self, job: TrainingJob) -> dict[tuple[str, str], Dataset]:
        """The Datasets the job mounts that exist, by (namespace, name)."""
        keys = {(job.metadata.namespace, mount.dataset_name) for mount in job.spec.datasets}
        return {key: dataset for key in keys if (dataset := self.current(*key)) is not None}

    def staging(self, job: TrainingJob, jobtype: JobType | None) -> KubeStaging:
        """Whether the job's data is on its nodes (as their agents report), why not, and what its Pods mount.

        Only for a job that holds placements in a staging phase; any other is staged (nothing to wait for).
        """
        if not job.spec.datasets or Phase(job.status.phase) not in STAGING_PHASES or not job.status.placements:
            return KubeStaging()
        resolution = resolve_staging(job, jobtype, self.datasets_read_by(job), self._manifest)
        nodes: Iterable[str] = resolution.plan.entries if resolution.plan is not None else ()
        reports = {node: cache_report(self.nodes.get(None, node)) for node in nodes}
        return observe_staging(job, resolution, reports, self.mount_path)

    def readers(self, obj: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
        """The jobs (namespace, name) a change to ``obj`` (a Dataset, or a Node's cache report) may concern.

        A Dataset concerns the jobs of its namespace that mount it; a Node the jobs with a placement on it.
        """
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        found = set()
        if obj.get("kind") == "Node" or "namespace" not in meta:
            for job in jobs:
                placements = ((job.get("status") or {}).get("placements") or {}).values()
                if (job.get("spec") or {}).get("datasets") and any(p.get("node") == name for p in placements):
                    found.add(object_key(dict(job)))
            return found
        namespace = str(meta.get("namespace") or "")
        for job in jobs:
            job_meta = job.get("metadata") or {}
            if job_meta.get("namespace") != namespace:
                continue
            for mount in (job.get("spec") or {}).get("datasets") or []:
                if (mount.get("dataset") or mount.get("name")) == name:
                    found.add(object_key(dict(job)))
        return found
