"""The embedded dataset manager: materialise Datasets once, stage them into node caches for jobs, label nodes.

Level-triggered like the controller, and never blocking its loop: ``sync`` looks at the store and starts work
on a small thread pool; finished work is collected on the next ``sync`` (``wake`` is called so that one comes
soon).

- **Materialise** with the shared ``services.dataset_manager.DatasetMaterializer`` into
  ``<state>/datasets/<ns>/<name>/<sha256-label>/``: statuses and events go through the port (``SqliteStatus``)
  and this module reads the sources (a relative local source is relative to the directory it was submitted
  from; ``fromJob`` waits for the job to succeed and takes its stored outputs).
- **Stage** the datasets of every job that holds a placement (from admission on, so staging overlaps the
  controller's work and a preemptor's wait for its victims): ``core.data.plan_staging`` says which entries each
  node needs; ``adapters.datacache.NodeDataCache`` copies what the node's cache lacks and pins it for the job.
  ``staging(job)`` tells the controller whether the job's data is in place, why not, and what each replica sees.
- **Pins and labels**: entries used by jobs that hold placements stay pinned; nodes carry
  ``dataset.phalanx.dev/<name>=<version label>`` for what their cache holds, which the scheduler's
  data-locality plugin reads; ``Dataset.status.nodes`` lists them.

A Dataset or job on which this raises what nobody expected is quarantined (``services.embedded.quarantine``) and the
others go on; a Dataset row that cannot be read is skipped (the store quarantines it).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import NodeDataCache, StageOutcome
from phalanx.adapters.store import (
    ConflictError,
    NotFoundError,
    SqliteStore,
    UnreadableError,
)
from phalanx.core.data import CacheEntry, StagingPlan, env_name
from phalanx.core.scheduling.types import DATASET_LABEL_PREFIX
from phalanx.model.datasets import Dataset, version_label
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.masking import mask_url
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import Node
from phalanx.services.dataset_manager import DatasetMaterializer, SourceChoice, from_job_choice
from phalanx.services.dataset_store import (
    DATASET_VERSIONS_ANNOTATION,
    STAGING_PHASES,
    DatasetStore,
    chosen_versions,
    read_manifest,
    resolve_staging,
    source_request,
    staging_ended,
)
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION, SqliteStatus
from phalanx.services.embedded.quarantine import DATASET_MANAGER_ERROR, Held, Quarantine, guarded_step
from phalanx.services.port import Written

log = logging.getLogger(__name__)

_PROGRESS_EVERY_S = 1.0
#: Per node, per cache entry: the jobs (namespace/name) that hold it pinned.
_Holders = dict[str, dict[str, set[str]]]


@dataclass(frozen=True)
class StagingObservation:
    """What the controller needs to know about a job's data.

    Attributes:
        staged: every entry of the job is ready and pinned on its nodes (True for a job without datasets).
        error: why staging cannot succeed (the job fails with it), or None.
        env: per replica name, the ``PHALANX_DATASET_*`` variables it gets.
    """

    staged: bool = True
    error: str | None = None
    env: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class _Staging:
    job: str
    node: str
    entry: CacheEntry
    future: Future[StageOutcome]
    started: float


class DatasetManager:
    """Materialises Datasets and stages them for jobs, for the embedded control plane.

    Args:
        store: the control plane's store.
        layout: its state directory's layout.
        wake: called (from a worker thread) when work finishes, to wake the control plane's loop.
        cache_capacity: each node cache's size in bytes; None keeps what the cache has recorded (half the free
            disk when new).
        cache_write_limit: test seam: node caches fail as a full disk does past this many bytes copied.
        workers: threads materialising and staging at once.
        quarantine: sets aside what makes this manager fail (default: one on ``store``).
    """

    def __init__(
        self,
        store: SqliteStore,
        layout: StateLayout,
        *,
        wake: Callable[[], None] = lambda: None,
        clock: Clock | None = None,
        cache_capacity: int | None = None,
        cache_write_limit: int | None = None,
        workers: int = 4,
        quarantine: Quarantine | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.clock = clock or SystemClock()
        self.quarantine = quarantine or Quarantine(store, self.clock)
        self._wake = wake
        self._capacity = cache_capacity
        self._write_limit = cache_write_limit
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="datasets")
        self._caches: dict[str, NodeDataCache] = {}
        self.port = SqliteStatus(store, clock=self.clock)
        store_root, every = DatasetStore(layout.datasets_root), _PROGRESS_EVERY_S
        self.materializer = DatasetMaterializer(
            self.port, self, store_root, self._pool, wake=wake, clock=self.clock, progress_every_s=every
        )
        self._stagings: dict[tuple[str, str, str], _Staging] = {}
        self._staged: set[tuple[str, str, str]] = set()  # (job uid, node, key)
        self._errors: dict[str, str] = {}  # job uid -> why staging failed
        self._said: dict[str, str] = {}  # job uid -> the last waiting sentence recorded as an event
        self._pins: dict[str, dict[str, set[str]]] = {}
        self._ledger_stamp: dict[str, float] = {}
        self._plans: dict[str, tuple[StagingPlan | None, str | None, str | None]] = {}
        self._policies: dict[str, dict[str, str]] = {}  # job uid -> mount name -> the Dataset's cache policy

    def has_results(self) -> bool:
        """Whether background work finished that the next ``sync`` would collect."""
        return self.materializer.has_results() or any(s.future.done() for s in self._stagings.values())

    def close(self) -> None:
        """Stop the workers (running copies finish; nothing new starts)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- the pass ---------------------------------------------------------------------------------------------
    def sync(self) -> bool:
        """Collect finished work, start what is due, refresh pins and node labels. Returns whether anything changed."""
        changed = self.materializer.collect()
        changed |= self._collect()
        datasets = {(d.metadata.namespace, d.metadata.name): d for d in self.store.list(Dataset)}
        held = self.quarantine.held("Dataset")
        for dataset in datasets.values():
            if not held.skips(dataset):
                materialize = partial(self.materializer.materialize_if_due, dataset)
                changed |= self._guarded(dataset, held, materialize, "materialising dataset")
        self.materializer.remove_deleted(frozenset(datasets))
        jobtypes = {jt.metadata.name: jt for jt in self.store.list(JobType)}
        self._plans = {}
        holders: _Holders = {}
        live: set[str] = set()
        held_jobs = self.quarantine.held("TrainingJob")
        for job in self.store.list(TrainingJob):
            if not job.spec.datasets or Phase(job.status.phase) not in STAGING_PHASES or not job.status.placements:
                continue
            live.add(job.metadata.uid or "")
            if not held_jobs.skips(job):
                stage = partial(self._stage_job, job, jobtypes.get(job.spec.type), datasets, holders)
                changed |= self._guarded(job, held_jobs, stage, "planning the staging of job")
        self._forget(live)
        changed |= self._refresh_pins(holders)
        changed |= self._refresh_labels(datasets)
        return changed

    def staging(self, job: TrainingJob) -> StagingObservation:
        """Whether the job's data is on its nodes, why not, and the environment of each replica."""
        if not job.spec.datasets:
            return StagingObservation()
        uid = job.metadata.uid or ""
        if uid in self._errors:
            return StagingObservation(staged=False, error=self._errors[uid])
        plan, error, _waiting = self._plans.get(uid, (None, None, None))
        if error is not None:
            return StagingObservation(staged=False, error=error)
        if plan is None:
            return StagingObservation(staged=False)
        staged = all(
            (uid, node, entry.key) in self._staged for node, entries in plan.entries.items() for entry in entries
        )
        env: dict[str, dict[str, str]] = {}
        node_of = {name: placement.node for name, placement in job.status.placements.items()}
        for replica, mounts in plan.mounts.items():
            cache = self._cache(node_of[replica])
            env[replica] = {k: v for mount in mounts for k, v in mount.env(str(cache.path(mount.key))).items()}
            for mount_name, policy in self._policies.get(uid, {}).items():
                env[replica][f"{env_name(mount_name)}_CACHE_POLICY"] = policy
        return StagingObservation(staged=staged, env=env)

    # -- the materialiser's sources (services.dataset_manager.DatasetSources) -----------------------------------
    def current(self, namespace: str, name: str) -> Dataset | None:
        """The stored Dataset; None when it is gone or its row no longer parses (the store quarantined it)."""
        try:
            return self.store.try_get(Dataset, namespace, name)
        except UnreadableError:
            return None

    def source(self, dataset: Dataset) -> SourceChoice:
        """Its source, relative to where it was submitted; ``fromJob``: the job's stored outputs, once it succeeded."""
        from_job = dataset.spec.source.from_job
        if from_job is None:
            base_dir = Path(dataset.metadata.annotations.get(SUBMIT_DIR_ANNOTATION, "."))
            return SourceChoice(source_request(dataset.spec.source), base_dir)
        try:
            job = self.store.try_get(TrainingJob, dataset.metadata.namespace, from_job.job)
        except UnreadableError:
            job = None  # quarantined by the store: as if it did not exist
        return from_job_choice(from_job, job)

    def _collect(self) -> bool:
        """Take up finished stagings."""
        changed = False
        for staging_key, staging in list(self._stagings.items()):
            if not staging.future.done():
                continue
            del self._stagings[staging_key]
            changed = True
            job_uid = staging_key[0]
            seconds = self.clock.monotonic() - staging.started
            outcome, said = staging_ended(staging.future, staging.entry, node=staging.node, seconds=seconds)
            if outcome is None:
                self._errors[job_uid] = said
            elif outcome in (StageOutcome.HIT, StageOutcome.COPIED):
                self._staged.add(staging_key)
                self._record_job(staging.job, "Staged", said)
            elif outcome == StageOutcome.WAITING:
                self._say_waiting(staging.job, job_uid, self._cache(staging.node).why_waiting(staging.entry))
        return changed

    def _guarded(self, obj: Dataset | TrainingJob, held: Held, step: Callable[[], bool], doing: str) -> bool:
        return bool(guarded_step(self.quarantine, obj, held, step, reason=DATASET_MANAGER_ERROR, doing=doing))

    # -- staging ----------------------------------------------------------------------------------------------
    def _stage_job(
        self, job: TrainingJob, jobtype: JobType | None, datasets: dict[tuple[str, str], Dataset], holders: _Holders
    ) -> bool:
        """Plan the job's staging, start the copies its nodes lack and note the entries it holds in ``holders``."""
        plan, error, waiting = self._plan(job, jobtype, datasets)
        self._plans[job.metadata.uid or ""] = (plan, error, waiting)
        for node, entries in plan.entries.items() if plan is not None else ():
            for entry in entries:
                holders.setdefault(node, {}).setdefault(entry.key, set()).add(job.key)
                self._stage_if_due(job, node, entry)
        return False

    def _plan(
        self, job: TrainingJob, jobtype: JobType | None, datasets: dict[tuple[str, str], Dataset]
    ) -> tuple[StagingPlan | None, str | None, str | None]:
        """(plan, error, why waiting): the job's staging plan once every dataset is materialised."""
        resolution = resolve_staging(
            job,
            jobtype,
            datasets,
            lambda namespace, name, version: read_manifest(self.layout.dataset_manifest(namespace, name, version)),
        )
        if resolution.waiting is not None:
            self._say_waiting(job.key, job.metadata.uid or "", resolution.waiting)
        if resolution.plan is None:
            return None, resolution.error, resolution.waiting
        self._remember_versions(job, resolution.versions)
        self._policies[job.metadata.uid or ""] = resolution.policies
        return resolution.plan, None, None

    def _remember_versions(self, job: TrainingJob, versions: dict[str, str]) -> None:
        """Record on the job the versions it reads.

        A replica restarted after its Dataset changed then reads what the others read (earlier versions stay
        materialised until the Dataset is deleted).
        """
        if chosen_versions(job) == versions:
            return
        annotations = {**job.metadata.annotations, DATASET_VERSIONS_ANNOTATION: json.dumps(versions, sort_keys=True)}
        with contextlib.suppress(ConflictError, NotFoundError):  # changed under us: the next pass records it
            self.store.update(
                job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})
            )

    def _stage_if_due(self, job: TrainingJob, node: str, entry: CacheEntry) -> None:
        uid = job.metadata.uid or ""
        key = (uid, node, entry.key)
        if key in self._staged or key in self._stagings or uid in self._errors:
            return
        namespace, name = entry.dataset.split("/", 1)
        source = self.layout.dataset_dir(namespace, name) / version_label(entry.version)
        cache = self._cache(node)
        future = self._pool.submit(cache.stage, entry, source, job.key, reader=uid)
        future.add_done_callback(lambda _f: self._wake())
        self._stagings[key] = _Staging(job.key, node, entry, future, self.clock.monotonic())

    def _forget(self, live: set[str]) -> None:
        """Drop what is remembered of jobs that no longer hold placements (they stage afresh if admitted again)."""
        self._staged = {key for key in self._staged if key[0] in live}
        for uid in list(self._errors):
            if uid not in live:
                del self._errors[uid]
        for uid in list(self._said):
            if uid not in live:
                del self._said[uid]
        for uid in list(self._policies):
            if uid not in live:
                del self._policies[uid]

    def _say_waiting(self, job_key: str, uid: str, sentence: str) -> None:
        if self._said.get(uid) == sentence:
            return
        self._said[uid] = sentence
        self._record_job(job_key, "StagingWaits", sentence)

    def _cache(self, node: str) -> NodeDataCache:
        cache = self._caches.get(node)
        if cache is None:
            cache = NodeDataCache(
                self.layout.node_cache_dir(node),
                capacity=self._capacity,
                name=f"node {node}",
                write_limit=self._write_limit,
            )
            cache.recover()
            self._caches[node] = cache
        return cache

    def _refresh_pins(self, holders: _Holders) -> bool:
        changed = False
        for node in set(holders) | set(self._pins):
            wanted = holders.get(node, {})
            if self._pins.get(node) != wanted:
                self._cache(node).set_pins(wanted)
                self._pins[node] = wanted
                changed = True
        return changed

    def _refresh_labels(self, datasets: dict[tuple[str, str], Dataset]) -> bool:
        """Node labels and Dataset.status.nodes from what each cache holds, when a ledger changed."""
        changed_any = False
        stamps: dict[str, float] = {}
        for node in self.store.list(Node):
            name = node.metadata.name
            ledger = self.layout.node_cache_dir(name) / "ledger.json"
            try:
                stamps[name] = ledger.stat().st_mtime_ns
            except FileNotFoundError:
                stamps[name] = 0
        if stamps == self._ledger_stamp:
            return False
        self._ledger_stamp = stamps
        holding: dict[tuple[str, str], set[str]] = {}
        for node in self.store.list(Node):
            name = node.metadata.name
            cached: dict[str, str] = {}
            if stamps.get(name):
                for entry in self._cache(name).entries():
                    if entry.ready:
                        namespace, dataset = entry.dataset.split("/", 1)
                        cached[DATASET_LABEL_PREFIX + dataset] = version_label(entry.version)
                        current = datasets.get((namespace, dataset))
                        if current is not None and current.status.version == entry.version:
                            holding.setdefault((namespace, dataset), set()).add(name)
            labels = {k: v for k, v in node.metadata.labels.items() if not k.startswith(DATASET_LABEL_PREFIX)}
            labels.update(cached)
            if labels != node.metadata.labels:
                try:
                    self.store.update(
                        node.model_copy(update={"metadata": node.metadata.model_copy(update={"labels": labels})})
                    )
                except (ConflictError, NotFoundError):
                    self._ledger_stamp = {}
                    continue
                changed_any = True
        for key, held_dataset in datasets.items():
            nodes = sorted(holding.get(key, set()))
            # Read again: this pass may have written its status since it was listed.
            if nodes != held_dataset.status.nodes and (fresh := self.current(*key)) is not None:
                changed_any |= self.port.write_status(fresh, {"nodes": nodes}) is not Written.UNCHANGED
        return changed_any

    # -- events -----------------------------------------------------------------------------------------------
    def _record_job(self, job_key: str, reason: str, message: str) -> None:
        namespace, name = job_key.split("/", 1)
        meta = ObjectMeta(namespace=namespace, name=name)
        # Events are shown (describe): never a datasource password.
        self.store.record_event(Event.about("TrainingJob", meta, reason, mask_url(message), self.clock.now()))
