"""Datasets on Kubernetes, the operator's side: materialise Datasets into the dataset store, gate jobs on staging.

The node agents (``services.kubernetes.node_cache``) copy a job's entries into their nodes' caches; the operator
materialises, decides when a job's data is in place, and renders what its Pods mount. They share two things:
the **dataset store**, a directory every one of them mounts (in production a ReadWriteMany volume; the
operator's ``--dataset-store`` and each agent's), laid out as the embedded one (``services.dataset_store``);
and each Node's **cache report**, the annotation ``phalanx.dev/dataset-cache`` its agent writes (``CacheReport``).

- **Materialise** (``KubeDatasetManager``, its own thread, and a small pool for the copies, so a long download
  never holds up the operator's reconcile loop): a Dataset whose spec generation has no final status yet is
  read from its source once into ``<store>/<ns>/<name>/<version label>/`` with its manifest beside it; its
  status goes ``Materializing`` (with progress) -> ``Ready`` (version, bytes, files, lineage,
  observedGeneration) or ``Failed`` (the source's error, naming the field and the fix), written through the
  status subresource. ``fromJob`` fails with a sentence: outputs are not collected on Kubernetes yet.
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

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datasources import Materialized
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    EVENTS,
    NODES,
    ConflictError,
    KubeApi,
    KubeApiError,
    NotFoundError,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, object_key
from phalanx.adapters.kubernetes.objects import dataset_from_object
from phalanx.adapters.kubernetes.parsed import ParsedObjects
from phalanx.adapters.kubernetes.rendering import DATASET_MOUNT_PATH, DatasetVolumes
from phalanx.core.data import DatasetCounters, env_name
from phalanx.model.datasets import Dataset, DatasetPhase, DatasetStatus, version_label
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.masking import mask_url
from phalanx.services.dataset_store import (
    STAGING_PHASES,
    DatasetStore,
    StagingResolution,
    manifests_reader,
    materialize_outcome,
    materialize_version,
    progress_reporter,
    remove_unknown_datasets,
    resolve_staging,
    source_request,
    sweep_leftovers,
)
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView
from phalanx.services.kubernetes.apply import event_body

log = logging.getLogger(__name__)

#: On a Node: what its agent's dataset cache holds and how each job placed there stands (``CacheReport``).
CACHE_ANNOTATION = "phalanx.dev/dataset-cache"
#: On a Node: cache entries someone asked its agent to evict (``phalanx cache evict``), a JSON list of keys; the
#: agent evicts those no job uses, says in its report which it kept and why, and removes the request.
EVICT_ANNOTATION = "phalanx.dev/dataset-cache-evict"
#: Where node agents keep their cache on the host, and where Pods see its entries, unless told otherwise.
DEFAULT_CACHE_DIR = DATASET_MOUNT_PATH
COMPONENT = "phalanx-operator"
_PROGRESS_EVERY_S = 2.0
_FROM_JOB_UNSUPPORTED = (
    "spec.source.fromJob: a Dataset made from a job's outputs is not supported on Kubernetes yet: outputs are "
    "not collected there (outputs.storeTo is not implemented; they stay in each Pod's volume); copy the outputs "
    "to storage the operator can read and use spec.source.path or spec.source.url"
)


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


# -- the cache report a node agent publishes --------------------------------------------------------------------


@dataclass(frozen=True)
class JobCacheState:
    """How one job's entries stand on one node: ``ready``, ``staging``, ``waiting`` or ``error``, and why."""

    uid: str
    state: str
    message: str | None = None


@dataclass(frozen=True)
class HeldEntry:
    """What a node's cache holds under one key: whose data, how many bytes, and the jobs it is pinned for."""

    dataset: str
    bytes: int
    pinned_by: tuple[str, ...] = ()


_COUNTER_FIELDS = {
    "hits": "hits",
    "misses": "misses",
    "bytesFromCache": "bytes_from_cache",
    "bytesFetched": "bytes_fetched",
    "evictions": "evictions",
}


@dataclass(frozen=True)
class CacheReport:
    """What a node agent says about its dataset cache, in the Node's ``phalanx.dev/dataset-cache`` annotation.

    Attributes:
        directory: the cache's directory on the host (what Pods mount entries from).
        entries: per entry key: ``ready``, ``staging`` or ``waiting`` (what the operator's gate reads).
        jobs: per job (``namespace/name``) placed on the node with datasets: its uid and state.
        capacity: the cache's size limit in bytes.
        used: bytes held or reserved.
        held: per entry key the cache holds: its dataset, bytes and pins (what ``phalanx cache ls`` shows).
        counters: per dataset (``namespace/name``): hits, misses, bytes served and fetched, evictions.
        refused: the entries of the last eviction request the agent kept, and why (in use by a job).
        samples: the host directory of the node's sample caches (``<samples>/<namespace>`` per namespace,
            made by the agent for the jobs placed there), or None when the agent keeps none.
    """

    directory: str
    entries: Mapping[str, str] = field(default_factory=dict)
    jobs: Mapping[str, JobCacheState] = field(default_factory=dict)
    capacity: int | None = None
    used: int | None = None
    held: Mapping[str, HeldEntry] = field(default_factory=dict)
    counters: Mapping[str, DatasetCounters] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    samples: str | None = None

    def to_annotation(self) -> str:
        """The annotation's value: compact JSON with sorted keys (so an unchanged report is an unchanged value)."""
        jobs = {
            key: {"uid": state.uid, "state": state.state, **({"message": state.message} if state.message else {})}
            for key, state in self.jobs.items()
        }
        document: dict[str, Any] = {"dir": self.directory, "entries": dict(self.entries), "jobs": jobs}
        if self.capacity is not None:
            document["capacity"] = self.capacity
        if self.used is not None:
            document["used"] = self.used
        if self.held:
            document["held"] = {
                key: {"dataset": e.dataset, "bytes": e.bytes, **({"pins": list(e.pinned_by)} if e.pinned_by else {})}
                for key, e in self.held.items()
            }
        if self.counters:
            document["counters"] = {
                dataset: {name: getattr(c, attribute) for name, attribute in _COUNTER_FIELDS.items()}
                for dataset, c in self.counters.items()
            }
        if self.refused:
            document["refused"] = dict(self.refused)
        if self.samples is not None:
            document["samples"] = self.samples
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> CacheReport | None:
        """The report in an annotation's value; None when there is none or it cannot be read."""
        if not text:
            return None
        try:
            document = json.loads(text)
            jobs = {
                str(key): JobCacheState(str(value["uid"]), str(value["state"]), value.get("message"))
                for key, value in (document.get("jobs") or {}).items()
            }
            held = {
                str(key): HeldEntry(str(value["dataset"]), int(value["bytes"]), tuple(map(str, value.get("pins", ()))))
                for key, value in (document.get("held") or {}).items()
            }
            counters = {
                str(dataset): DatasetCounters(
                    **{attribute: int(values.get(name, 0)) for name, attribute in _COUNTER_FIELDS.items()}
                )
                for dataset, values in (document.get("counters") or {}).items()
            }
            return cls(
                directory=str(document.get("dir") or DEFAULT_CACHE_DIR),
                entries={str(k): str(v) for k, v in (document.get("entries") or {}).items()},
                jobs=jobs,
                capacity=document.get("capacity"),
                used=document.get("used"),
                held=held,
                counters=counters,
                refused={str(k): str(v) for k, v in (document.get("refused") or {}).items()},
                samples=str(document["samples"]) if document.get("samples") else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def ready_keys(self) -> set[str]:
        """The keys of the entries held completely."""
        return {key for key, state in self.entries.items() if state == "ready"}

    def view(self, node: str) -> NodeCacheView:
        """What ``phalanx cache ls`` shows of this report."""
        entries = [
            CacheEntryView(key, e.dataset, e.bytes, self.entries.get(key, "ready"), e.pinned_by)
            for key, e in sorted(self.held.items())
        ]
        return NodeCacheView(node, self.capacity, self.used, entries, dict(self.counters))


def eviction_request(node: Mapping[str, Any] | None) -> list[str] | None:
    """The keys a Node's ``EVICT_ANNOTATION`` asks its agent to evict; None when it asks nothing (or garbage)."""
    annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
    text = annotations.get(EVICT_ANNOTATION)
    if not text:
        return None
    try:
        keys = json.loads(text)
    except ValueError:
        return []
    return [str(key) for key in keys] if isinstance(keys, list) else []


def cache_report(node: Mapping[str, Any] | None) -> CacheReport | None:
    """The cache report on a Node object (None when the Node or the report is missing)."""
    if node is None:
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return CacheReport.from_annotation(annotations.get(CACHE_ANNOTATION))


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


@dataclass
class _Materialization:
    generation: int
    uid: str
    future: Future[Materialized]


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
    ) -> None:
        self.api = api
        self.store = DatasetStore(Path(store))
        self.mount_path = mount_path
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self._on_change = on_change
        self.datasets = Informer(api, DATASETS, signal=self.signal, on_change=self._dataset_changed)
        self.nodes = Informer(api, NODES, on_change=self._node_changed)
        self.ready = threading.Event()
        self._base_dir = base_dir or Path.cwd()
        self.policy = policy or SourcePolicy()
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="datasets")
        self._lock = threading.Lock()
        self._materializing: dict[tuple[str, str], _Materialization] = {}
        self._progress: dict[tuple[str, str], str] = {}
        self._parsed = ParsedObjects("Dataset", dataset_from_object)
        self._reports: dict[str, str] = {}  # node -> the cache annotation last seen
        self._known: frozenset[tuple[str, str]] | None = None
        self._manifest = manifests_reader(self.store)

    @property
    def informers(self) -> list[Informer]:
        """The caches the manager reads (the operator starts them with its own)."""
        return [self.datasets, self.nodes]

    # -- what changed -----------------------------------------------------------------------------------------

    def _dataset_changed(self, kind: str, obj: dict[str, Any]) -> None:
        if self._on_change is not None:
            self._on_change(kind, obj)

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
        self.sweep_leftovers()
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

    def sweep_leftovers(self) -> list[Path]:
        """Remove what materialisations interrupted by a crash left (dot-named files and directories)."""
        return sweep_leftovers(self.store.root)

    def sync(self) -> None:
        """Collect finished materialisations, start due ones, refresh ``status.nodes``, drop deleted Datasets."""
        self._collect()
        reports = {str(obj["metadata"].get("name")): cache_report(obj) for obj in self.nodes.items()}
        objects = {object_key(obj): obj for obj in self.datasets.items()}
        for key, obj in objects.items():
            try:
                self._materialize_if_due(obj)
                self._refresh_nodes(key, reports)
            except KubeApiError as error:
                log.warning("dataset %s/%s: %s; retrying", *key, error)
            except Exception:
                log.exception("dataset %s/%s failed; retrying on the next pass", *key)
        if self.datasets.synced:
            self._remove_deleted(frozenset(objects))

    # -- materialisation --------------------------------------------------------------------------------------

    def _materialize_if_due(self, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        dataset = self._dataset(obj)
        if dataset is None:
            return
        generation = dataset.metadata.generation or 0
        with self._lock:
            running = self._materializing.get(key)
            progress = self._progress.get(key)
        if running is not None:
            if progress and progress != dataset.status.message:
                self._write_status(obj, dataset.status.model_copy(update={"message": progress}))
            return
        status = dataset.status
        if status.observed_generation == generation and status.phase in (DatasetPhase.READY, DatasetPhase.FAILED):
            return
        source = dataset.spec.source
        refusal = _FROM_JOB_UNSUPPORTED if source.from_job is not None else self.policy.refusal(dataset, self._base_dir)
        if refusal is not None:
            failed = status.model_copy(
                update={"phase": DatasetPhase.FAILED, "message": refusal, "observed_generation": generation}
            )
            if self._write_status(obj, failed):
                self._event(obj, "MaterializeFailed", refusal, warning=True)
                log.warning("dataset %s/%s refused: %s", *key, refusal)
            return
        request = source_request(source)
        target = self.store.dataset_dir(*key)
        target.mkdir(parents=True, exist_ok=True)
        incoming = target / f".incoming-{uuid.uuid4().hex[:12]}"
        message = f"materialising from {source.kind}"
        written = self._write_status(
            obj, status.model_copy(update={"phase": DatasetPhase.MATERIALIZING, "message": message})
        )
        if written is None:
            return  # changed meanwhile: the next pass looks again
        future = self._pool.submit(materialize_version, request, incoming, self._base_dir, self._reporter(key))
        future.add_done_callback(lambda _f: self.signal.set())
        with self._lock:
            self._materializing[key] = _Materialization(generation, str(obj["metadata"].get("uid") or ""), future)
        self._event(written, "Materializing", message)

    def _reporter(self, key: tuple[str, str]) -> Callable[[int, int | None], None]:
        def say(message: str) -> None:
            with self._lock:
                self._progress[key] = message
            self.signal.set()

        return progress_reporter(say, _PROGRESS_EVERY_S, clock=self.clock)

    def _collect(self) -> None:
        with self._lock:
            finished = {key: work for key, work in self._materializing.items() if work.future.done()}
            for key in finished:
                del self._materializing[key]
                self._progress.pop(key, None)
        for key, work in finished.items():
            obj = self.datasets.get(*key)
            if obj is None or str(obj["metadata"].get("uid") or "") != work.uid:
                continue  # deleted (or deleted and created again) meanwhile
            dataset = self._dataset(obj)
            if dataset is None:
                continue
            outcome = materialize_outcome(work.future, work.generation, self.clock.now())
            written = self._write_status(obj, dataset.status.model_copy(update=outcome.changes))
            if written is not None:
                self._event(written, outcome.reason, outcome.message, warning=outcome.warning)
                level = logging.WARNING if outcome.warning else logging.INFO
                log.log(level, "dataset %s/%s: %s", *key, outcome.message)

    def _refresh_nodes(self, key: tuple[str, str], reports: Mapping[str, CacheReport | None]) -> None:
        obj = self.datasets.get(*key)
        dataset = self._dataset(obj) if obj is not None else None
        if obj is None or dataset is None:
            return
        version = dataset.status.version
        nodes = nodes_holding(version, reports) if version and dataset.status.phase == DatasetPhase.READY else []
        if nodes != dataset.status.nodes:
            self._write_status(obj, dataset.status.model_copy(update={"nodes": nodes}))

    def _remove_deleted(self, live: frozenset[tuple[str, str]]) -> None:
        """Delete the materialised copies of Datasets that are gone (node caches keep theirs, evictable)."""
        with self._lock:
            known = live | frozenset(self._materializing)
        if known == self._known:
            return
        self._known = known
        remove_unknown_datasets(self.store.root, known)

    def _write_status(self, obj: dict[str, Any], status: DatasetStatus) -> dict[str, Any] | None:
        """PUT the Dataset's status on the version read; the written object, or None when it changed or went."""
        body = {
            "apiVersion": obj.get("apiVersion", DATASETS.api_version),
            "kind": "Dataset",
            "metadata": {k: obj["metadata"][k] for k in ("name", "namespace", "resourceVersion")},
            "status": status.to_dict(),
        }
        try:
            written = self.api.replace_status(DATASETS, body)
        except ConflictError:
            return None
        except NotFoundError:
            self.datasets.forget(*object_key(obj))
            return None
        written.setdefault("kind", "Dataset")
        written.setdefault("apiVersion", DATASETS.api_version)
        self.datasets.observe(written)
        return written

    def _event(self, obj: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        meta = obj.get("metadata") or {}
        body = event_body(
            {**obj, "apiVersion": obj.get("apiVersion", DATASETS.api_version)},
            reason,
            mask_url(message),  # events are shown (kubectl describe): never a datasource password
            warning=warning,
            now=self.clock.now(),
            component=COMPONENT,
            instance=COMPONENT,
            kind="Dataset",
        )
        try:
            self.api.create(EVENTS, body, str(meta.get("namespace")))
        except KubeApiError as error:
            log.debug("event %s on dataset %s not recorded: %s", reason, meta.get("name"), error)

    # -- reading ----------------------------------------------------------------------------------------------

    def _dataset(self, obj: dict[str, Any]) -> Dataset | None:
        """The Dataset parsed once per resourceVersion; None (logged once) when it is invalid."""
        return self._parsed.get(obj)

    def datasets_read_by(self, job: TrainingJob) -> dict[tuple[str, str], Dataset]:
        """The Datasets the job mounts that exist, by (namespace, name)."""
        found = {}
        for mount in job.spec.datasets:
            key = (job.metadata.namespace, mount.dataset_name)
            obj = self.datasets.get(*key)
            parsed = self._dataset(obj) if obj is not None else None
            if parsed is not None:
                found[key] = parsed
        return found

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
