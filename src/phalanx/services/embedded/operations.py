"""The operations users call — submit, get, halt, resume, delete, explain, logs — one function each.

The CLI and the Python SDK only translate arguments and render results; every rule lives here. Operations
work on the store directly, so they work whether or not the control plane is running: a job submitted while
it is down waits in Pending and is picked up when it starts.

Quarantined objects (``services.embedded.quarantine``: rows that no longer parse, objects a step of the control plane
fails on) are named by ``quarantined`` and removed by ``delete_job`` and ``delete_quarantined``, whatever is
wrong with them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.adapters.datacache import CacheError, NodeDataCache
from phalanx.adapters.store import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    QuarantineRecord,
    SqliteStore,
    UnreadableError,
)
from phalanx.core.lifecycle import ACTIVE_PHASES, HOLDING_PHASES
from phalanx.core.lifecycle.quarantine import quarantine_condition
from phalanx.model.base import validated_copy
from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import (
    BUILTIN_LABEL,
    builtin_jobtypes,
)
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.services.dataset_views import (
    CacheEntryView,
    DatasetDescription,
    NodeCacheView,
    entries_to_evict,
    eviction_failure,
    readers,
)
from phalanx.services.embedded.daemon import current_leader
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.operations import (
    MAX_CONFLICT_RETRIES,
    JobDescription,
    JobExistsError,
    OperationError,
    Submitted,
    check_no_readers,
    exists_message,
    not_found_message,
    validate_documents,
)
from phalanx.services.queue_views import QueueDescription, QueueView, describe_queue, queue_views, unique_queues

SUBMIT_DIR_ANNOTATION = "phalanx.dev/submit-dir"
STORED_KINDS = (TrainingJob, JobType, Queue, Dataset, Node, Replica)
"""Every kind the embedded store keeps; rows of any other kind are quarantined as unknown."""

log = logging.getLogger(__name__)


QUEUE_NAMESPACE = "default"  # Queues are cluster-scoped; the embedded store keeps them all in one namespace


def seed_builtin_jobtypes(store: SqliteStore) -> None:
    """Make sure the built-in JobTypes exist in the store (user-defined ones are left alone)."""
    for name, jobtype in builtin_jobtypes().items():
        try:
            existing = store.try_get(JobType, "default", name)
        except UnreadableError as err:
            log.warning("not seeding the built-in JobType %s: %s", name, err)  # the row may be the user's
            continue
        if existing is None:
            with contextlib.suppress(AlreadyExistsError):  # another process seeded it first
                store.create(jobtype)
        elif existing.spec != jobtype.spec and existing.metadata.labels.get(BUILTIN_LABEL) == "true":
            # A newer Phalanx ships a changed built-in; a user's own JobType of that name is left alone.
            store.update(validated_copy(existing, spec=jobtype.spec))


class Operations:
    """User-facing operations on one state directory."""

    def __init__(self, store: SqliteStore, layout: StateLayout) -> None:
        self.store = store
        self.layout = layout

    # -- reading -------------------------------------------------------------------------------------------

    def jobtypes(self) -> dict[str, JobType]:
        """Every JobType by name (built-ins included even before the control plane first ran)."""
        found = dict(builtin_jobtypes())
        for jobtype in self.store.list(JobType):
            found[jobtype.metadata.name] = jobtype
        return found

    def get_job(self, namespace: str, name: str) -> TrainingJob:
        """One job.

        Raises:
            OperationError: no such job, with the names of existing ones.
        """
        try:
            job = self.store.try_get(TrainingJob, namespace, name)
        except UnreadableError as err:
            raise OperationError(
                f"job {namespace}/{name} is stored but cannot be read ({err.problem}); it is quarantined: delete "
                f"it with `phalanx delete job {name} -n {namespace}` (or `phalanx delete --quarantined`)"
            ) from None
        if job is None:
            names = [j.metadata.name for j in self.store.list(TrainingJob, namespace)]
            hint = f"; jobs in {namespace}: {', '.join(names[:10])}" if names else f"; {namespace} has no jobs"
            raise OperationError(f"job {namespace}/{name} not found{hint}")
        return job

    def list_jobs(self, namespace: str | None = None) -> list[TrainingJob]:
        """Jobs, newest last."""
        jobs = self.store.list(TrainingJob, namespace)
        return sorted(
            jobs,
            key=lambda j: (
                j.metadata.creation_timestamp.timestamp() if j.metadata.creation_timestamp else 0.0,
                j.metadata.name,
            ),
        )

    def list_nodes(self) -> list[Node]:
        """Nodes the control plane registered."""
        return self.store.list(Node)

    def list_queues(self) -> list[Queue]:
        """Every Queue, one per name, sorted by name (Queues are cluster-scoped: ``-n`` does not apply)."""
        return unique_queues(self.store.list(Queue))

    def get_queue(self, name: str) -> Queue:
        """One Queue.

        Raises:
            OperationError: no such queue, with the names of existing ones.
        """
        for queue in self.list_queues():
            if queue.metadata.name == name:
                return queue
        raise OperationError(_no_queue_message(name, [q.metadata.name for q in self.list_queues()]))

    def queue_views(self) -> list[QueueView]:
        """Every Queue with what its jobs hold now, its admitted and its pending jobs."""
        return queue_views(self.list_queues(), self.list_jobs(None))

    def describe_queue(self, name: str) -> QueueDescription:
        """The Queue, its usage, its admitted and pending jobs, and the other queues of its cohort.

        Raises:
            OperationError: no such queue.
        """
        queues = self.list_queues()
        described = describe_queue(name, queues, self.list_jobs(None))
        if described is None:
            raise OperationError(_no_queue_message(name, [q.metadata.name for q in queues]))
        return described

    def delete_queue(self, name: str) -> QueueView:
        """Delete a Queue; its jobs keep running, and are no longer limited by any quota.

        Returns:
            The queue as it was, with its admitted jobs (the CLI warns that they keep running).

        Raises:
            OperationError: no such queue.
        """
        described = self.describe_queue(name)
        queue = described.view.queue
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: the outcome is the same
            self.store.delete(Queue, queue.metadata.namespace, name)
        return described.view

    def apply_queue(self, queue: Queue) -> bool:
        """Create the Queue, or replace the spec of the existing one (``kubectl apply``); True when it existed."""
        queue = validated_copy(queue, metadata=validated_copy(queue.metadata, namespace=QUEUE_NAMESPACE))
        for _ in range(MAX_CONFLICT_RETRIES):
            existing = next((q for q in self.store.list(Queue) if q.metadata.name == queue.metadata.name), None)
            if existing is None:
                try:
                    self.store.create(queue)
                    return False
                except AlreadyExistsError:
                    continue
            metadata = validated_copy(
                existing.metadata, labels=queue.metadata.labels, annotations=queue.metadata.annotations
            )
            try:
                self.store.update(validated_copy(existing, metadata=metadata, spec=queue.spec))
                return True
            except (ConflictError, NotFoundError):
                continue
        raise OperationError(f"queue {queue.metadata.name} kept changing; try again")

    def replicas_of(self, job: TrainingJob) -> list[Replica]:
        """The job's current Replica objects."""
        return [r for r in self.store.list(Replica, job.metadata.namespace) if r.spec.job_uid == job.metadata.uid]

    def describe(self, namespace: str, name: str) -> JobDescription:
        """The job, its replicas and its events."""
        job = self.get_job(namespace, name)
        return JobDescription(
            job=job,
            replicas=self.replicas_of(job),
            events=self.store.list_events("TrainingJob", namespace, name),
        )

    def explain(self, namespace: str, name: str) -> str:
        """One sentence: why the job is where it is (why it waits, when it waits)."""
        job = self.get_job(namespace, name)
        phase = Phase(job.status.phase)
        if phase == Phase.PENDING:
            # A lease left behind by a control plane that was killed (-9) does not make one run.
            if current_leader(self.store) is None:
                return "Pending: no control plane is running; start one with `phalanx up`."
            return "Pending: accepted, waiting for the controller to queue it."
        if phase == Phase.QUEUED:
            return f"Queued: {job.status.message or job.status.reason or 'waiting for the next scheduling cycle'}"
        detail = job.status.message or job.status.reason
        return f"{phase}: {detail}" if detail else str(phase)

    def log_files(self, namespace: str, name: str, replica: str | None = None) -> list[tuple[str, Path]]:
        """(replica, log path) of the latest attempt of each replica (or of one), in name order."""
        job = self.get_job(namespace, name)
        assert job.metadata.uid is not None
        base = self.layout.job_dir(namespace, name, job.metadata.uid) / "replicas"
        latest: dict[str, tuple[int, Path]] = {}
        if base.is_dir():
            for run_dir in base.iterdir():
                stem, _, attempt = run_dir.name.rpartition("-a")
                if not attempt.isdigit():
                    continue
                short = stem.removeprefix(f"{name}-")
                if replica is not None and replica not in (stem, short):
                    continue
                if short not in latest or int(attempt) > latest[short][0]:
                    latest[short] = (int(attempt), run_dir / "replica.log")
        if replica is not None and not latest:
            known = ", ".join(f"{role}-{i}" for role, spec in job.spec.replicas.items() for i in range(spec.count))
            raise OperationError(f"replica {replica!r} of job {name} has no logs yet; replicas: {known}")
        return [(short, path) for short, (_, path) in sorted(latest.items())]

    # -- writing -------------------------------------------------------------------------------------------

    def validate(
        self, documents: Sequence[dict[str, Any]], *, source: str | None = None, namespace: str | None = None
    ) -> list[Any]:
        """Validate every document (moved to ``namespace`` when given); nothing is created.

        Raises:
            SpecError: every problem in every document, each with its field path.
        """
        return validate_documents(documents, self.jobtypes(), source=source, namespace=namespace)

    def submit(
        self,
        documents: Sequence[dict[str, Any]],
        *,
        submit_dir: Path,
        namespace: str | None = None,
        replace_finished: bool = False,
        source: str | None = None,
    ) -> list[Submitted]:
        """Validate everything first, then create the objects (Queues, then JobTypes, then jobs).

        An existing Queue or JobType gets the submitted spec (``configured``); a job of an existing name is an
        error unless ``replace_finished`` and it finished.

        Raises:
            SpecError: invalid documents (nothing is created).
            OperationError: a job of that name exists (and is active, or replacing was not asked for).
        """
        objects = self.validate(documents, source=source, namespace=namespace)
        self._check_datasets_exist(objects)
        replaced: set[str] = set()
        for obj in objects:
            if isinstance(obj, TrainingJob):
                existing = self.store.try_get(TrainingJob, obj.metadata.namespace, obj.metadata.name)
                if existing is None:
                    continue
                if not replace_finished or Phase(existing.status.phase) in ACTIVE_PHASES:
                    raise JobExistsError(
                        exists_message(f"job {obj.key}", obj.metadata.name, "", str(existing.status.phase)),
                        namespace=obj.metadata.namespace,
                        name=obj.metadata.name,
                        phase=str(existing.status.phase),
                    )
                if self.replicas_of(existing):
                    raise OperationError(f"job {obj.key} is finishing; try again in a moment")
                self.store.delete(TrainingJob, obj.metadata.namespace, obj.metadata.name)
                self.layout.remove_job_files(obj.metadata.namespace, obj.metadata.name, existing.metadata.uid)
                replaced.add(obj.key)
        created: list[Submitted] = []
        order: dict[type, int] = {Queue: 0, JobType: 1, Dataset: 2}
        for obj in sorted(objects, key=lambda o: order.get(type(o), 3)):
            if isinstance(obj, Queue):
                configured = self.apply_queue(obj)
                created.append(Submitted("Queue", "", obj.metadata.name, configured=configured))
                continue
            if isinstance(obj, Dataset):
                configured = self.apply_dataset(obj, submit_dir)
                created.append(Submitted("Dataset", obj.metadata.namespace, obj.metadata.name, configured=configured))
                continue
            if isinstance(obj, JobType):
                existing_type = self.store.try_get(JobType, obj.metadata.namespace, obj.metadata.name)
                if existing_type is None:
                    self.store.create(obj)
                else:
                    self.store.update(validated_copy(obj, metadata=existing_type.metadata))
                created.append(Submitted("JobType", obj.metadata.namespace, obj.metadata.name))
                continue
            annotations = {**obj.metadata.annotations, SUBMIT_DIR_ANNOTATION: str(submit_dir.resolve())}
            job = validated_copy(obj, metadata=validated_copy(obj.metadata, annotations=annotations))
            try:
                self.store.create(job)
            except AlreadyExistsError:
                raise JobExistsError(
                    exists_message(f"job {job.key}", job.metadata.name, "", None),
                    namespace=job.metadata.namespace,
                    name=job.metadata.name,
                    phase=None,
                ) from None
            created.append(Submitted("TrainingJob", job.metadata.namespace, job.metadata.name, job.key in replaced))
        return created

    def _check_datasets_exist(self, objects: Sequence[Any]) -> None:
        """Refuse jobs that read a Dataset neither stored nor in this submission (nothing is created)."""
        submitted = {(o.metadata.namespace, o.metadata.name) for o in objects if isinstance(o, Dataset)}
        errors = []
        for obj in objects:
            if not isinstance(obj, TrainingJob):
                continue
            for position, mount in enumerate(obj.spec.datasets):
                key = (obj.metadata.namespace, mount.dataset_name)
                if key in submitted or self.store.try_get(Dataset, *key) is not None:
                    continue
                field_name = "dataset" if mount.dataset else "name"
                errors.append(
                    FieldError(
                        f"spec.datasets[{position}].{field_name}",
                        f"job {obj.metadata.name}: dataset {mount.dataset_name} does not exist in namespace "
                        f"{obj.metadata.namespace}; create it first (phalanx dataset create -f dataset.yaml), put "
                        "it in the same file, or fix the name",
                    )
                )
        if errors:
            raise SpecError(errors)

    def apply_dataset(self, dataset: Dataset, submit_dir: Path) -> bool:
        """Create the Dataset, or give the existing one the submitted spec (re-materialised if it changed).

        Relative local paths in its source are relative to ``submit_dir``. Returns True when it existed.
        """
        annotations = {**dataset.metadata.annotations, SUBMIT_DIR_ANNOTATION: str(submit_dir.resolve())}
        dataset = validated_copy(dataset, metadata=validated_copy(dataset.metadata, annotations=annotations))
        for _ in range(MAX_CONFLICT_RETRIES):
            existing = self.store.try_get(Dataset, dataset.metadata.namespace, dataset.metadata.name)
            if existing is None:
                try:
                    self.store.create(dataset)
                    return False
                except AlreadyExistsError:
                    continue
            if existing.spec == dataset.spec and existing.metadata.annotations == annotations:
                return True
            metadata = validated_copy(existing.metadata, annotations=annotations)
            try:
                self.store.update(validated_copy(existing, metadata=metadata, spec=dataset.spec))
                return True
            except ConflictError:
                continue
        raise OperationError(f"dataset {dataset.metadata.namespace}/{dataset.metadata.name} kept changing; try again")

    # -- datasets and node caches ---------------------------------------------------------------------------
    def list_datasets(self, namespace: str | None = None) -> list[Dataset]:
        """Datasets of the namespace (every namespace when None), by namespace and name."""
        return sorted(self.store.list(Dataset, namespace), key=lambda d: (d.metadata.namespace, d.metadata.name))

    def get_dataset(self, namespace: str, name: str) -> Dataset:
        """One Dataset.

        Raises:
            OperationError: no such Dataset, with the names of the others.
        """
        try:
            dataset = self.store.try_get(Dataset, namespace, name)
        except UnreadableError as err:
            raise OperationError(
                f"dataset {namespace}/{name} is stored but cannot be read ({err.problem}); it is quarantined: delete "
                "it with `phalanx delete --quarantined`"
            ) from None
        if dataset is None:
            raise OperationError(not_found_message("dataset", namespace, name, self.list_datasets(namespace)))
        return dataset

    def describe_dataset(self, namespace: str, name: str) -> DatasetDescription:
        """The Dataset, the jobs that read it and its events."""
        dataset = self.get_dataset(namespace, name)
        return DatasetDescription(
            dataset=dataset,
            jobs=readers(dataset, self.list_jobs(namespace)),
            events=self.store.list_events("Dataset", namespace, name),
        )

    def delete_dataset(self, namespace: str, name: str) -> Dataset:
        """Delete a Dataset no unfinished job reads; the control plane then removes its materialised copies.

        Raises:
            OperationError: no such Dataset, or unfinished jobs read it (named).
        """
        dataset = self.get_dataset(namespace, name)
        check_no_readers(dataset, self.list_jobs(namespace))
        with contextlib.suppress(NotFoundError):
            self.store.delete(Dataset, namespace, name)
        return dataset

    def cache_views(self, node: str | None = None) -> list[NodeCacheView]:
        """Every node's dataset cache (or one node's), with entries, pins and counters."""
        names = [n.metadata.name for n in self.list_nodes()]
        if node is not None and node not in names:
            raise OperationError(f"node {node} not found; nodes: {', '.join(names) or 'none (run phalanx up)'}")
        views = []
        for name in [node] if node else names:
            cache = self._node_cache(name)
            if cache is None:
                views.append(NodeCacheView(name, None, 0, []))
                continue
            entries = [CacheEntryView(e.key, e.dataset, e.bytes, e.state, e.pinned_by) for e in cache.entries()]
            views.append(NodeCacheView(name, cache.capacity, cache.used(), entries, cache.counters()))
        return views

    def evict(self, *, key: str | None = None, dataset: str | None = None, node: str | None = None) -> list[str]:
        """Evict one cache entry (``key``) or every entry of a Dataset, on one node or on all.

        ``dataset`` is ``namespace/name``, or a name in ``default``. Returns ``node: key`` of each entry evicted.

        Raises:
            OperationError: nothing matched, or an entry is in use (naming the jobs); nothing in use is evicted.
        """
        try:
            targets = entries_to_evict(self.cache_views(node), key, dataset)
        except ValueError as error:
            raise OperationError(str(error)) from None
        evicted: list[str] = []
        problems: list[str] = []
        for view, entry in targets:
            cache = self._node_cache(view.node)
            assert cache is not None  # the view came from its ledger
            try:
                cache.evict(entry.key)
                evicted.append(f"{view.node}: {entry.key}")
            except CacheError as err:
                problems.append(str(err))
        failure = eviction_failure(problems, evicted)
        if failure is not None:
            raise OperationError(failure)
        return evicted

    def _node_cache(self, node: str) -> NodeDataCache | None:
        directory = self.layout.node_cache_dir(node)
        if not (directory / "ledger.json").exists():
            return None
        return NodeDataCache(directory, name=f"node {node}")

    def set_suspended(self, namespace: str, name: str, suspend: bool) -> TrainingJob:
        """Halt (suspend) or resume a job; level-triggered: the controller does the rest.

        Raises:
            OperationError: no such job, or the job is finished.
        """
        for _ in range(MAX_CONFLICT_RETRIES):
            job = self.get_job(namespace, name)
            if Phase(job.status.phase) not in ACTIVE_PHASES:
                raise OperationError(f"job {job.key} is {job.status.phase}; it cannot be halted or resumed")
            if job.spec.run_policy.suspend == suspend:
                return job
            run_policy = validated_copy(job.spec.run_policy, suspend=suspend)
            spec = validated_copy(job.spec, run_policy=run_policy)
            try:
                return self.store.update(validated_copy(job, spec=spec))
            except ConflictError:
                continue
        raise OperationError(f"job {namespace}/{name} kept changing; try again")

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job: its replicas are stopped first, then the job is removed.

        A quarantined job is removed at once, even when its row cannot be read (its namespace may then be no
        valid name): no step of the control plane would finish a graceful deletion of it. Its replicas, if
        any, are then stopped and collected by the node runtime as those of any deleted job.

        Raises:
            OperationError: no such job.
        """
        try:
            stored = self.store.try_get(TrainingJob, namespace, name)
        except UnreadableError:
            with contextlib.suppress(NotFoundError):
                self.store.delete_row("TrainingJob", namespace, name)
            return
        job = stored if stored is not None else self.get_job(namespace, name)  # the latter says it is not found
        replicas = self.replicas_of(job)
        if quarantine_condition(job.status) is not None or any(
            (r.kind, r.namespace, r.name) == ("TrainingJob", namespace, name) for r in self.store.quarantined()
        ):
            with contextlib.suppress(NotFoundError):
                self.store.delete(TrainingJob, namespace, name)
            if not replicas:
                self.layout.remove_job_files(namespace, name, job.metadata.uid)
            return
        if not replicas and Phase(job.status.phase) not in HOLDING_PHASES:
            with contextlib.suppress(NotFoundError):
                self.store.delete(TrainingJob, namespace, name)
                self.layout.remove_job_files(namespace, name, job.metadata.uid)
            return
        self.store.mark_deleting(TrainingJob, namespace, name)

    # -- quarantine ------------------------------------------------------------------------------------------
    def quarantined(self) -> list[QuarantineRecord]:
        """Every quarantined object, after reading every row (so rows that no longer parse are found too)."""
        return self.store.audit(STORED_KINDS)

    def delete_quarantined(self) -> list[QuarantineRecord]:
        """Delete every quarantined object (jobs as ``delete_job`` does); returns what was deleted."""
        deleted = []
        for record in self.quarantined():
            if record.kind == "TrainingJob":
                self.delete_job(record.namespace, record.name)
            else:
                with contextlib.suppress(NotFoundError):
                    self.store.delete_row(record.kind, record.namespace, record.name)
            deleted.append(record)
        return deleted


def _no_queue_message(name: str, names: Sequence[str]) -> str:
    known = f"queues: {', '.join(names[:20])}" if names else "there are no queues; create one with `phalanx submit -f`"
    return f"queue {name} not found; {known}"
