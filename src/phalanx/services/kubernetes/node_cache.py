"""The node agent's dataset cache: stage the entries of the jobs placed on this node, pin them, say so on the Node.

Run by ``phalanx-node-agent`` when it is given a dataset store (``--dataset-store``, the volume the operator
materialises Datasets into) beside its GPU checks, on its own thread so that a long copy never delays them:

1. **Plan.** From its caches of TrainingJobs, Datasets and JobTypes (one LIST each, then WATCH), the jobs in a
   staging phase (Admitted to Storing) with a placement on this node get the same plan the operator computes
   (``dataset_store.resolve_staging``: the versions recorded on the job, else the Datasets' current ones; the
   manifests from the store). This node's entries of each plan are what it must hold.
2. **Pin** every such entry for the jobs using it (``NodeDataCache.set_pins``); the rest become evictable.
3. **Stage** the entries the cache lacks (``NodeDataCache.stage``) on a small thread pool: a copy from the
   store's ``<ns>/<name>/<version label>/`` into ``<cache dir>/<key>``, evicting unpinned entries least
   recently used first when the cache is full. A copy that cannot fit until pinned entries are released
   waits (``why_waiting``); one that fails (the data is larger than the whole cache, the disk filled up, a file
   is missing from the store) fails the job's staging on this node with the cache's sentence.
4. **Publish** on the Node (a merge patch, only what changed): labels ``dataset.phalanx.dev/<dataset name>=<version
   label>`` for every dataset version it holds ready (stale ones removed), which phalanx-scheduler's
   data-locality plugin reads, and the annotation ``phalanx.dev/dataset-cache`` (``kube_datasets.CacheReport``):
   the cache's host directory, capacity and use, each entry's state, and each job's state (ready, staging,
   waiting, error) with its uid, which the operator reads to start the job's Pods or fail the job.

Level-triggered: a restarted agent drops what a copy interrupted by its death left (``recover``), plans from
the caches again, and republishes. A Normal event ``Staged`` on the job says what each copy (or cache hit) did.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import CacheError, NodeDataCache, StageOutcome
from phalanx.adapters.kubernetes.api import (
    DATASETS,
    EVENTS,
    JOBTYPES,
    NODES,
    TRAININGJOBS,
    ConflictError,
    KubeApi,
    KubeApiError,
)
from phalanx.adapters.kubernetes.cache_report import (
    CACHE_ANNOTATION,
    EVICT_ANNOTATION,
    CacheReport,
    HeldEntry,
    JobCacheState,
    eviction_request,
)
from phalanx.adapters.kubernetes.informer import Informer, Signal, wait_all_synced
from phalanx.adapters.kubernetes.objects import dataset_from_object, job_from_object, jobtype_from_object
from phalanx.adapters.kubernetes.parsed import ParsedCache, ParsedObjects
from phalanx.core.data import CacheEntry
from phalanx.core.scheduling.types import DATASET_LABEL_PREFIX
from phalanx.model.datasets import Dataset, version_label
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.services.dataset_store import (
    STAGING_PHASES,
    DatasetStore,
    dataset_of,
    human_bytes,
    manifests_reader,
    resolve_staging,
    staging_ended,
)
from phalanx.services.kubernetes.apply import event_body

log = logging.getLogger(__name__)
COMPONENT = "phalanx-node-agent"


@dataclass(frozen=True)
class CacheSettings:
    """Where the node's cache and the dataset store are.

    Attributes:
        node_name: this node.
        cache_dir: the cache directory as the agent sees it.
        dataset_store: the dataset store as the agent sees it.
        capacity: the cache's size limit in bytes (None: what the cache recorded, half the free disk when new).
        host_dir: the cache directory on the host, which Pods mount entries from (default: ``cache_dir``).
        sample_dir: where the node's in-job sample caches live, as the agent sees it (None: no sample caches).
        sample_host_dir: that directory on the host, which Pods mount (default: ``sample_dir``).
        identity: this process's name, in events.
        interval_s: the longest wait between two passes when nothing changes.
        workers: copies at once.
    """

    node_name: str
    cache_dir: Path
    dataset_store: Path
    capacity: int | None = None
    host_dir: str | None = None
    sample_dir: Path | None = None
    sample_host_dir: str | None = None
    identity: str = COMPONENT
    interval_s: float = 5.0
    workers: int = 2


@dataclass
class _Staging:
    job: str  # namespace/name
    uid: str
    entry: CacheEntry
    future: Future[StageOutcome]
    started: float


def node_patch(observed: Mapping[str, Any], labels: Mapping[str, str], annotation: str) -> dict[str, Any]:
    """The merge patch that makes the Node's dataset labels ``labels`` (others removed) and its report ``annotation``.

    Returns {} when the Node already says so.
    """
    meta = observed.get("metadata") or {}
    current = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(DATASET_LABEL_PREFIX)}
    label_changes: dict[str, str | None] = {k: None for k in current if k not in labels}
    label_changes.update({k: v for k, v in labels.items() if current.get(k) != v})
    patch: dict[str, Any] = {}
    if label_changes:
        patch["labels"] = label_changes
    if (meta.get("annotations") or {}).get(CACHE_ANNOTATION) != annotation:
        patch["annotations"] = {CACHE_ANNOTATION: annotation}
    return {"metadata": patch} if patch else {}


def dataset_labels(cache: NodeDataCache) -> dict[str, str]:
    """``dataset.phalanx.dev/<name>: <version label>`` for every dataset version the cache holds ready.

    When several versions of one dataset are held, the most recently used one is named.
    """
    labels = {}
    for entry in cache.entries():  # least recently used first: the last one of a dataset wins
        if entry.ready:
            _, name = dataset_of(entry.dataset)
            labels[DATASET_LABEL_PREFIX + name] = version_label(entry.version)
    return labels


class NodeCacheKeeper:
    """Keeps one node's dataset cache in step with the jobs placed on it, and reports it on the Node."""

    def __init__(self, api: KubeApi, settings: CacheSettings, clock: Clock | None = None) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock or SystemClock()
        self.signal = Signal()
        self.jobs = Informer(api, TRAININGJOBS, signal=self.signal)
        self.datasets = Informer(api, DATASETS, signal=self.signal)
        self.jobtypes = Informer(api, JOBTYPES, signal=self.signal)
        # Its own Node only, for eviction requests (``phalanx cache evict``).
        self.node = Informer(api, NODES, field_selector=f"metadata.name={settings.node_name}", signal=self.signal)
        self.ready = threading.Event()
        self.cache = NodeDataCache(settings.cache_dir, capacity=settings.capacity, name=f"node {settings.node_name}")
        self.store = DatasetStore(settings.dataset_store)
        self._manifest = manifests_reader(self.store)
        self._pool = ThreadPoolExecutor(max(1, settings.workers), thread_name_prefix="cache")
        self._stagings: dict[tuple[str, str], _Staging] = {}  # (job uid, key) -> copy in flight
        self._errors: dict[str, str] = {}  # job uid -> why its staging failed here
        self._waiting: dict[tuple[str, str], str] = {}  # (job uid, key) -> why it waits for room
        self._retry_at: dict[tuple[str, str], float] = {}  # (job uid, key) -> when to try a waiting copy again
        self._served: set[tuple[str, str]] = set()  # (job uid, key) staged for the job (copied or a cache hit)
        self._pins: dict[str, set[str]] | None = None
        self._jobtypes_now: Mapping[str, JobType] = {}  # what the jobs of this pass are validated against
        self._parsed_jobs = ParsedObjects("TrainingJob", lambda obj: job_from_object(obj, self._jobtypes_now))
        self._parsed_datasets = ParsedCache(self.datasets, dataset_from_object)
        self._parsed_jobtypes = ParsedCache(self.jobtypes, jobtype_from_object)
        self._observed: dict[str, Any] | None = None
        self._next_read = 0.0
        self._refused: dict[str, str] = {}  # entry key -> why the last eviction request left it
        self._answered: str | None = None  # the Node's resourceVersion whose eviction request was carried out
        dropped = self.cache.recover()
        if dropped:
            log.info("dropped %d unfinished cache entries left by an earlier agent: %s", len(dropped), dropped)

    @property
    def informers(self) -> list[Informer]:
        """The caches the keeper reads."""
        return [self.jobs, self.datasets, self.jobtypes, self.node]

    def start(self) -> None:
        """Start the informers."""
        for informer in self.informers:
            informer.start()

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until ``stop`` is set: on any change, and every ``interval_s`` at the latest."""
        try:
            while not stop.is_set():
                if not wait_all_synced(self.informers, 0.5):
                    continue
                try:
                    self.cycle()
                    self.ready.set()
                except KubeApiError as error:
                    log.error("node %s: dataset cache not reported: %s", self.settings.node_name, error)
                    self._observed = None
                except Exception:
                    log.exception("node %s: the dataset cache pass failed", self.settings.node_name)
                    self._observed = None
                if self.signal.wait(self.settings.interval_s):
                    stop.wait(0.05)  # coalesce a burst of watch events into one pass
        finally:
            for informer in self.informers:
                informer.stop()
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- one pass ---------------------------------------------------------------------------------------------

    def cycle(self) -> CacheReport:
        """Collect finished copies, plan, pin, start copies, publish; return the report published.

        Raises:
            KubeApiError: the Node could not be read or written.
        """
        ended = self._collect()
        node = self.settings.node_name
        jobtypes = self._jobtypes()
        datasets = self._datasets()
        holders: dict[str, set[str]] = {}
        wanted: list[tuple[TrainingJob, list[CacheEntry], str | None, str | None]] = []
        for job in self._placed_jobs(jobtypes):
            resolution = resolve_staging(job, jobtypes.get(job.spec.type), datasets, self._manifest)
            entries = list(resolution.plan.entries.get(node, ())) if resolution.plan is not None else []
            for entry in entries:
                holders.setdefault(entry.key, set()).add(job.key)
            wanted.append((job, entries, resolution.error, resolution.waiting))
        live = {job.metadata.uid or "" for job, _, _, _ in wanted}
        self._errors = {uid: text for uid, text in self._errors.items() if uid in live}
        self._waiting = {key: text for key, text in self._waiting.items() if key[0] in live}
        if ended or holders != self._pins:
            # A copy that ended pinned its job, which may have left meanwhile: pins are set afresh after one.
            self.cache.set_pins(holders)
            if holders != self._pins:
                self._retry_at.clear()  # pins released may make room: try waiting copies again
            self._pins = holders
        self._retry_at = {key: at for key, at in self._retry_at.items() if key[0] in live}
        self._served = {key for key in self._served if key[0] in live}
        self._evict_requested()
        held = self.cache.entries()
        ready = {entry.key for entry in held if entry.ready and self.cache.path(entry.key).is_dir()}
        jobs: dict[str, JobCacheState] = {}
        extra_entries: dict[str, str] = {}
        for job, entries, error, waiting in wanted:
            uid = job.metadata.uid or ""
            if error is not None or uid in self._errors:
                jobs[job.key] = JobCacheState(uid, "error", error or self._errors[uid])
                continue
            if waiting is not None:
                jobs[job.key] = JobCacheState(uid, "waiting", waiting)
                continue
            unwritable = self._sample_dir_for(job.metadata.namespace)
            if unwritable is not None:
                jobs[job.key] = JobCacheState(uid, "error", unwritable)
                continue
            pending = [entry for entry in entries if entry.key not in ready]
            for entry in entries:
                # A ready entry is staged once per job too: the cache counts the hit and pins it for the job.
                if entry.key not in ready or (uid, entry.key) not in self._served:
                    self._stage_if_due(job, entry)
            if not pending:
                jobs[job.key] = JobCacheState(uid, "ready")
                continue
            why = [self._waiting[(uid, e.key)] for e in pending if (uid, e.key) in self._waiting]
            for entry in pending:
                if (uid, entry.key) in self._waiting:
                    extra_entries.setdefault(entry.key, "waiting")
            state = "waiting" if why and len(why) == len(pending) else "staging"
            jobs[job.key] = JobCacheState(uid, state, why[0] if why else None)
        entries_state = {entry.key: entry.state for entry in held}
        for key, state in extra_entries.items():
            entries_state.setdefault(key, state)
        report = CacheReport(
            directory=self.settings.host_dir or str(self.settings.cache_dir),
            entries=entries_state,
            jobs=jobs,
            capacity=self.cache.capacity,
            used=self.cache.used(),
            held={entry.key: HeldEntry(entry.dataset, entry.bytes, entry.pinned_by) for entry in held},
            counters=self.cache.counters(),
            refused=self._refused,
            samples=self._sample_host_dir(),
        )
        self._publish(report)
        return report

    def _sample_host_dir(self) -> str | None:
        settings = self.settings
        return None if settings.sample_dir is None else settings.sample_host_dir or str(settings.sample_dir)

    def _sample_dir_for(self, namespace: str) -> str | None:
        """Make the namespace's sample directory; why it cannot be made, or None when it is there.

        Writable by any user (replicas need not run as root), with the sticky bit so that they cannot remove each
        other's files.
        """
        if self.settings.sample_dir is None:
            return None
        directory = self.settings.sample_dir / namespace
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if directory.stat().st_mode & 0o1777 != 0o1777:
                directory.chmod(0o1777)
        except OSError as error:
            return (
                f"cannot make the sample cache directory {directory} on node {self.settings.node_name}: "
                f"{error.strerror or error}; check phalanx-node-agent's --sample-dir"
            )
        return None

    def _placed_jobs(self, jobtypes: Mapping[str, JobType]) -> list[TrainingJob]:
        """The jobs with datasets in a staging phase with a replica placed on this node, validated."""
        node = self.settings.node_name
        placed = []
        for obj in self.jobs.items():
            spec, status = obj.get("spec") or {}, obj.get("status") or {}
            if not spec.get("datasets") or status.get("phase") not in {str(p) for p in STAGING_PHASES}:
                continue
            if any((p or {}).get("node") == node for p in (status.get("placements") or {}).values()):
                placed.append(obj)
        self._jobtypes_now = jobtypes
        return [job for job in self._parsed_jobs.all(placed) if Phase(job.status.phase) in STAGING_PHASES]

    def _datasets(self) -> dict[tuple[str, str], Dataset]:
        return {(d.metadata.namespace, d.metadata.name): d for d in self._parsed_datasets.current()}

    def _jobtypes(self) -> dict[str, JobType]:
        return {jobtype.metadata.name: jobtype for jobtype in self._parsed_jobtypes.current()}

    # -- copies -----------------------------------------------------------------------------------------------

    def _stage_if_due(self, job: TrainingJob, entry: CacheEntry) -> None:
        uid = job.metadata.uid or ""
        key = (uid, entry.key)
        if key in self._stagings or self._retry_at.get(key, 0.0) > self.clock.monotonic():
            return
        namespace, name = dataset_of(entry.dataset)
        source = self.store.version_dir(namespace, name, entry.version)
        future = self._pool.submit(self.cache.stage, entry, source, job.key, reader=uid)
        future.add_done_callback(lambda _f: self.signal.set())
        self._stagings[key] = _Staging(job.key, uid, entry, future, self.clock.monotonic())

    def _collect(self) -> bool:
        """Take in the copies that ended; whether any did."""
        ended = False
        for key, staging in list(self._stagings.items()):
            if not staging.future.done():
                continue
            del self._stagings[key]
            ended = True
            seconds = self.clock.monotonic() - staging.started
            outcome, said = staging_ended(staging.future, staging.entry, node=self.settings.node_name, seconds=seconds)
            if outcome is None:
                log.warning("job %s: %s", staging.job, said)
                self._errors[staging.uid] = said
                self._event(staging, "StagingFailed", said, warning=True)
            elif outcome in (StageOutcome.HIT, StageOutcome.COPIED):
                self._waiting.pop(key, None)
                self._served.add(key)
                # Another job waiting for this entry's copy (IN_PROGRESS) finds it now.
                self._retry_at = {k: at for k, at in self._retry_at.items() if k[1] != staging.entry.key}
                log.info("job %s: staged %s", staging.job, said)
                self._event(staging, "Staged", said)
            elif outcome == StageOutcome.WAITING:
                self._waiting[key] = self.cache.why_waiting(staging.entry)
                self._retry_at[key] = self.clock.monotonic() + self.settings.interval_s
            else:  # IN_PROGRESS: another job's copy of the same entry; its end wakes the next pass
                self._retry_at[key] = self.clock.monotonic() + self.settings.interval_s
        return ended

    # -- the Node ---------------------------------------------------------------------------------------------

    def _evict_requested(self) -> None:
        """Carry out the eviction request on the Node, if any: evict what no job uses, remember what was kept.

        Pins are current (set just before), so an entry a job placed here reads is never evicted. The request is
        removed when the report is published; an entry already gone counts as evicted (a request seen twice).
        """
        observed = self.node.get(None, self.settings.node_name)
        keys = eviction_request(observed)
        if keys is None or observed is None:
            return
        held = {entry.key for entry in self.cache.entries()}
        refused = {}
        for key in keys:
            if key not in held:
                continue
            try:
                entry = self.cache.evict(key)
            except CacheError as error:
                refused[key] = str(error)
                continue
            log.info("evicted %s of %s (%s) on request", key, entry.dataset, human_bytes(entry.bytes))
        self._refused = refused
        self._answered = str(observed["metadata"].get("resourceVersion") or "")

    def _publish(self, report: CacheReport) -> None:
        name = self.settings.node_name
        now = self.clock.monotonic()
        if self._observed is None or now >= self._next_read:
            self._observed = self.api.get(NODES, name)  # someone else's change is repaired within a minute
            self._next_read = now + 60.0
        patch = node_patch(self._observed, dataset_labels(self.cache), report.to_annotation())
        answered, self._answered = self._answered, None
        if answered is not None:
            # Removed only if no new request came meanwhile (the resourceVersion it was read on is current).
            metadata = patch.setdefault("metadata", {})
            metadata.setdefault("annotations", {})[EVICT_ANNOTATION] = None
            metadata["resourceVersion"] = answered
        if not patch:
            return
        try:
            self._observed = self.api.patch(NODES, name, patch)
        except ConflictError:
            self._observed = None  # a new request (or another change): the next pass reads it and answers again
            self.signal.set()
            return
        self.node.observe(self._observed)

    def _event(self, staging: _Staging, reason: str, message: str, *, warning: bool = False) -> None:
        namespace, name = staging.job.split("/", 1)
        job = {
            "apiVersion": TRAININGJOBS.api_version,
            "metadata": {"name": name, "namespace": namespace, "uid": staging.uid},
        }
        body = event_body(
            job,
            reason,
            message,
            warning=warning,
            now=self.clock.now(),
            component=COMPONENT,
            instance=self.settings.identity,
        )
        try:
            self.api.create(EVENTS, body, namespace)
        except KubeApiError as error:
            log.debug("event %s on job %s not recorded: %s", reason, staging.job, error)
