"""The embedded dataset manager: materialise Datasets once, stage them into node caches for jobs, label nodes.

Level-triggered like the controller, and never blocking its loop: ``sync`` looks at the store and starts work
on a small thread pool; finished work is collected on the next ``sync`` (``wake`` is called so that one comes
soon).

- **Materialise** a Dataset when its spec generation has no status yet: from its source, once, into
  ``<state>/datasets/<ns>/<name>/<sha256-label>/`` with a manifest of its files beside it
  (``<label>.json``), then write ``status`` (Ready with version, bytes, files, lineage; or Failed with the
  source's error naming the field and the fix). ``fromJob`` waits for the job to succeed and takes its stored
  outputs.
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
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import CacheError, NodeDataCache, StageOutcome
from phalanx.adapters.datasources import Materialized, SourceRequest
from phalanx.adapters.store import (
    ConflictError,
    NotFoundError,
    SqliteStore,
    StoreError,
    StoreUnavailableError,
    UnreadableError,
)
from phalanx.core.data import CacheEntry, StagingPlan, env_name
from phalanx.core.scheduling.types import DATASET_LABEL_PREFIX
from phalanx.model.datasets import Dataset, DatasetPhase, version_label
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.masking import mask_url
from phalanx.model.nodes import Node
from phalanx.services.dataset_store import (
    DATASET_VERSIONS_ANNOTATION,
    STAGING_PHASES,
    chosen_versions,
    human_bytes,
    materialize_outcome,
    materialize_version,
    progress_reporter,
    read_manifest,
    remove_unknown_datasets,
    resolve_staging,
    source_request,
    sweep_leftovers,
)
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SUBMIT_DIR_ANNOTATION
from phalanx.services.embedded.quarantine import DATASET_MANAGER_ERROR, Quarantine, guarded_hold
from phalanx.services.embedded.storing import destination

log = logging.getLogger(__name__)

_PROGRESS_EVERY_S = 1.0


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
class _Materialization:
    key: tuple[str, str]
    generation: int
    future: Future[Materialized]


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
        self._materializing: dict[tuple[str, str], _Materialization] = {}
        self._progress: dict[tuple[str, str], str] = {}
        self._stagings: dict[tuple[str, str, str], _Staging] = {}
        self._staged: set[tuple[str, str, str]] = set()  # (job uid, node, key)
        self._errors: dict[str, str] = {}  # job uid -> why staging failed
        self._said: dict[str, str] = {}  # job uid -> the last waiting sentence recorded as an event
        self._pins: dict[str, dict[str, set[str]]] = {}
        self._ledger_stamp: dict[str, float] = {}
        self._plans: dict[str, tuple[StagingPlan | None, str | None, str | None]] = {}
        self._policies: dict[str, dict[str, str]] = {}  # job uid -> mount name -> the Dataset's cache policy
        self._known_datasets: frozenset[tuple[str, str]] | None = None

    def sweep_leftovers(self) -> list[Path]:
        """Remove what materialisations interrupted by a crash left (dot-named temp files and directories).

        Call once before the first ``sync``: nothing of this manager's is in flight then. Returns what went.
        """
        return sweep_leftovers(self.layout.datasets_root)

    def has_results(self) -> bool:
        """Whether background work finished that the next ``sync`` would collect."""
        return any(w.future.done() for w in self._materializing.values()) or any(
            s.future.done() for s in self._stagings.values()
        )

    def close(self) -> None:
        """Stop the workers (running copies finish; nothing new starts)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- the pass ---------------------------------------------------------------------------------------------
    def sync(self) -> bool:
        """Collect finished work, start what is due, refresh pins and node labels. Returns whether anything changed."""
        changed = self._collect()
        datasets = {(d.metadata.namespace, d.metadata.name): d for d in self.store.list(Dataset)}
        jobs = self.store.list(TrainingJob)
        held = self.quarantine.held("Dataset")
        for dataset in datasets.values():
            if held.skips(dataset):
                continue
            try:
                changed |= self._materialize_if_due(dataset, jobs)
            except StoreUnavailableError:
                raise  # the whole pass waits for the store (see store_faults)
            except StoreError:
                # The store failed (busy, full): not the dataset's fault, so it is simply tried again.
                log.exception(
                    "materialising dataset %s/%s failed on the store; retrying on the next pass",
                    dataset.metadata.namespace,
                    dataset.metadata.name,
                )
            except Exception as err:
                # One dataset's unexpected failure must not stop the others (nor the control plane's loop).
                guarded_hold(self.quarantine, dataset, reason=DATASET_MANAGER_ERROR, error=err)
                changed = True
            else:
                if held.has(dataset):
                    self.quarantine.clear(dataset, held, reason=DATASET_MANAGER_ERROR)
        self._remove_orphan_versions(datasets)
        jobtypes = {jt.metadata.name: jt for jt in self.store.list(JobType)}
        self._plans = {}
        holders: dict[str, dict[str, set[str]]] = {}
        live: set[str] = set()
        held_jobs = self.quarantine.held("TrainingJob")
        for job in jobs:
            if not job.spec.datasets or Phase(job.status.phase) not in STAGING_PHASES or not job.status.placements:
                continue
            uid = job.metadata.uid or ""
            live.add(uid)
            if held_jobs.skips(job):
                continue
            try:
                plan, error, waiting = self._plan(job, jobtypes.get(job.spec.type), datasets)
            except StoreUnavailableError:
                raise  # the whole pass waits for the store (see store_faults)
            except StoreError:
                log.exception("planning the staging of job %s failed on the store; retrying on the next pass", job.key)
                continue
            except Exception as err:
                guarded_hold(self.quarantine, job, reason=DATASET_MANAGER_ERROR, error=err)
                changed = True
                continue
            if held_jobs.has(job):
                self.quarantine.clear(job, held_jobs, reason=DATASET_MANAGER_ERROR)
            self._plans[uid] = (plan, error, waiting)
            if plan is None:
                continue
            for node, entries in plan.entries.items():
                for entry in entries:
                    holders.setdefault(node, {}).setdefault(entry.key, set()).add(job.key)
                    self._stage_if_due(job, node, entry)
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

    # -- materialisation --------------------------------------------------------------------------------------
    def _materialize_if_due(self, dataset: Dataset, jobs: list[TrainingJob]) -> bool:
        key = (dataset.metadata.namespace, dataset.metadata.name)
        generation = dataset.metadata.generation
        status = dataset.status
        if key in self._materializing:
            return self._report_progress(dataset)
        if status.observed_generation == generation and status.phase in (DatasetPhase.READY, DatasetPhase.FAILED):
            return False
        source = dataset.spec.source
        base_dir = Path(dataset.metadata.annotations.get(SUBMIT_DIR_ANNOTATION, "."))
        if source.from_job is not None:
            request, waiting, failed = self._from_job(dataset, jobs)
            if failed is not None:
                self._record(dataset, "MaterializeFailed", failed, warning=True)
                return self._set_status(
                    dataset, phase=DatasetPhase.FAILED, message=failed, observed_generation=generation
                )
            if request is None:
                return self._set_status(dataset, phase=DatasetPhase.PENDING, message=waiting)
            base_dir = Path(".")
        else:
            request = source_request(source)
        target_dir = self.layout.dataset_dir(*key)
        target_dir.mkdir(parents=True, exist_ok=True)
        incoming = target_dir / f".incoming-{uuid.uuid4().hex[:12]}"
        progress = self._progress_reporter(key)
        future = self._pool.submit(self._materialize, request, incoming, base_dir, progress)
        future.add_done_callback(lambda _f: self._wake())
        self._materializing[key] = _Materialization(key, generation, future)
        self._record(dataset, "Materializing", f"materialising from {source.kind}")
        return self._set_status(dataset, phase=DatasetPhase.MATERIALIZING, message=f"materialising from {source.kind}")

    def _from_job(
        self, dataset: Dataset, jobs: list[TrainingJob]
    ) -> tuple[SourceRequest | None, str | None, str | None]:
        """For a fromJob source: (the path request, why it waits, why it failed), one of them set."""
        from_job = dataset.spec.source.from_job
        assert from_job is not None
        job = next(
            (j for j in jobs if j.metadata.namespace == dataset.metadata.namespace and j.metadata.name == from_job.job),
            None,
        )
        if job is None:
            return None, f"waiting for job {from_job.job} (spec.source.fromJob.job) to exist and succeed", None
        phase = Phase(job.status.phase)
        if phase == Phase.FAILED:
            return (
                None,
                None,
                (
                    f"spec.source.fromJob.job: job {from_job.job} failed ({job.status.message}); rerun it, or point "
                    "fromJob at a job that succeeded"
                ),
            )
        if phase != Phase.SUCCEEDED:
            return None, f"waiting for job {from_job.job} to succeed (it is {phase.value})", None
        outputs = destination(job, self.layout) / from_job.output
        return SourceRequest("path", path=str(outputs), field="spec.source.fromJob.output"), None, None

    def _materialize(self, request: SourceRequest, incoming: Path, base_dir: Path, progress: Any) -> Materialized:
        return materialize_version(request, incoming, base_dir, progress)

    def _progress_reporter(self, key: tuple[str, str]) -> Callable[[int, int | None], None]:
        def say(message: str) -> None:
            self._progress[key] = message
            self._wake()

        return progress_reporter(say, _PROGRESS_EVERY_S, clock=self.clock)

    def _report_progress(self, dataset: Dataset) -> bool:
        key = (dataset.metadata.namespace, dataset.metadata.name)
        message = self._progress.get(key)
        if message is None or message == dataset.status.message:
            return False
        return self._set_status(dataset, message=message)

    def _collect(self) -> bool:
        changed = False
        for key, work in list(self._materializing.items()):
            if not work.future.done():
                continue
            del self._materializing[key]
            self._progress.pop(key, None)
            try:
                dataset = self.store.try_get(Dataset, *key)
            except UnreadableError:
                continue  # quarantined by the store meanwhile: nothing to record the outcome on
            if dataset is None:
                continue
            ended = materialize_outcome(work.future, work.generation, self.clock.now())
            changed |= self._set_status(dataset, **ended.changes)
            self._record(dataset, ended.reason, ended.message, warning=ended.warning)
        for staging_key, staging in list(self._stagings.items()):
            if not staging.future.done():
                continue
            del self._stagings[staging_key]
            changed = True
            job_uid = staging_key[0]
            failure = staging.future.exception()
            if failure is not None:
                text = str(failure) if isinstance(failure, CacheError) else f"staging failed: {failure!r}"
                if not isinstance(failure, CacheError):
                    log.error("staging %s on %s failed", staging.entry.key, staging.node, exc_info=failure)
                self._errors[job_uid] = text
                continue
            outcome = staging.future.result()
            if outcome in (StageOutcome.HIT, StageOutcome.COPIED):
                self._staged.add(staging_key)
                seconds = self.clock.monotonic() - staging.started
                how = "cache hit" if outcome == StageOutcome.HIT else f"copied in {seconds:.1f} s"
                entry = staging.entry
                what = f"{entry.dataset} ({entry.key}, {human_bytes(entry.bytes)})"
                self._record_job(staging.job, "Staged", f"{what} on {staging.node}: {how}")
            elif outcome == StageOutcome.WAITING:
                self._say_waiting(staging.job, job_uid, self._cache(staging.node).why_waiting(staging.entry))
        return changed

    def _set_status(self, dataset: Dataset, **changes: Any) -> bool:
        try:
            current = self.store.try_get(Dataset, dataset.metadata.namespace, dataset.metadata.name)
        except UnreadableError:
            return False  # its row no longer parses: the store quarantined it
        if current is None:
            return False
        status = current.status.model_copy(update=changes)
        if status == current.status:
            return False
        try:
            self.store.update_status(current.model_copy(update={"status": status}))
        except (ConflictError, NotFoundError):
            return True  # it changed under us: the next pass looks again
        return True

    def _remove_orphan_versions(self, datasets: dict[tuple[str, str], Dataset]) -> None:
        """Delete the materialised copies of Datasets that are gone (their node cache entries stay, evictable)."""
        known = frozenset(datasets) | frozenset(self._materializing)
        if known == self._known_datasets:
            return  # the same Datasets as last pass: nothing new to remove
        self._known_datasets = known
        remove_unknown_datasets(self.layout.datasets_root, known)

    # -- staging ----------------------------------------------------------------------------------------------
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

    def _refresh_pins(self, holders: dict[str, dict[str, set[str]]]) -> bool:
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
            if nodes != held_dataset.status.nodes:
                changed_any |= self._set_status(held_dataset, nodes=nodes)
        return changed_any

    # -- events -----------------------------------------------------------------------------------------------
    def _record(self, dataset: Dataset, reason: str, message: str, *, warning: bool = False) -> None:
        self._event("Dataset", dataset.metadata.namespace, dataset.metadata.name, reason, message, warning)

    def _record_job(self, job_key: str, reason: str, message: str) -> None:
        namespace, name = job_key.split("/", 1)
        self._event("TrainingJob", namespace, name, reason, message, False)

    def _event(self, kind: str, namespace: str, name: str, reason: str, message: str, warning: bool) -> None:
        self.store.record_event(
            Event(
                object_kind=kind,
                object_name=name,
                namespace=namespace,
                type="Warning" if warning else "Normal",
                reason=reason,
                message=mask_url(message),  # events are shown (describe): never a datasource password
                time=self.clock.now(),
            )
        )
