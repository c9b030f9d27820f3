"""The embedded backend of the operations: the port over one state directory's SQLite store.

``EmbeddedOperations`` is the one ``services.operations.Operations`` over ``SqliteBackend``, plus what only a state
directory has: replica log files and the quarantine. Operations work on the store directly, so they work whether or
not the control plane is running: a job submitted while it is down waits in Pending and is picked up when it starts.

Quarantined objects (``services.embedded.quarantine``: rows that no longer parse, objects a step of the control plane
fails on) are named by ``quarantined`` and removed by ``delete_job`` and ``delete_quarantined``, whatever is
wrong with them.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from phalanx.adapters import store as stored
from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.datacache import CacheError, NodeDataCache
from phalanx.adapters.store import AlreadyExistsError, NotFoundError, QuarantineRecord, SqliteStore, UnreadableError
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.core.lifecycle.quarantine import quarantine_condition
from phalanx.core.pipelines.step_files import SAME_FILESYSTEM
from phalanx.model.base import validated_copy
from phalanx.model.datasets import Dataset
from phalanx.model.errors import FieldError, SpecError
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, SchedulingPolicy, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import BUILTIN_LABEL, builtin_jobtypes
from phalanx.model.masking import mask_url
from phalanx.model.nodes import Node
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.pods import EMBEDDED_REFUSALS
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.model.sweeps import Sweep
from phalanx.services import port
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView
from phalanx.services.embedded.daemon import current_leader
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.watching import watch_store
from phalanx.services.operations import NAMESPACED_KINDS, OperationError, Operations, Submitted, no_replica_logs
from phalanx.services.port import Readable, Stored, WithStatus, Written
from phalanx.services.queue_views import unique_queues

SUBMIT_DIR_ANNOTATION = "phalanx.dev/submit-dir"
STORED_KINDS = (TrainingJob, JobType, Queue, Dataset, Node, Replica, Sweep, Pipeline, PipelineRun)
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


def latest_logs(layout: StateLayout, namespace: str, name: str, uid: str) -> builtins.list[tuple[str, Path]]:
    """(replica, log path) of the latest attempt of each replica of one job (one uid), in name order."""
    base = layout.job_dir(namespace, name, uid) / "replicas"
    latest: dict[str, tuple[int, Path]] = {}
    if base.is_dir():
        for run_dir in base.iterdir():
            stem, _, attempt = run_dir.name.rpartition("-a")
            if not attempt.isdigit():
                continue
            short = stem.removeprefix(f"{name}-")
            if short not in latest or int(attempt) > latest[short][0]:
                latest[short] = (int(attempt), run_dir / "replica.log")
    return [(short, path) for short, (_, path) in sorted(latest.items())]


def read_lines_from(path: Path, cursor: port.LogCursor | None, limit: int = port.LOG_TAIL_CHARS) -> port.LogChunk:
    """A log file's complete lines past ``cursor`` (the file's run folder is its source), at most ``limit`` bytes.

    A cursor of another file, or past the file's end (it was written anew), reads from the start. A reader more
    than ``limit`` bytes behind skips to the last ``limit`` bytes, from a line's start, as a tail would.
    """
    source = path.parent.name  # <replica>-a<attempt>: one attempt's log
    with path.open("rb") as file:
        size = file.seek(0, 2)
        start = cursor.offset if cursor is not None and cursor.source == source and cursor.offset <= size else 0
        behind = size - start > limit
        if behind:
            start = size - limit
        file.seek(start)
        data = file.read(size - start)
    if behind:  # the first line is cut: leave it out
        cut = data.find(b"\n") + 1
        start, data = start + cut, data[cut:]
    end = data.rfind(b"\n") + 1
    return port.LogChunk(
        data[:end].decode(errors="replace"), port.LogCursor(source, start + end), data[end:].decode(errors="replace")
    )


class SqliteStatus:
    """The port's status side over the SQLite store (``services.port.StatusWriter``), for the control loops."""

    def __init__(self, store: SqliteStore, *, clock: Clock | None = None) -> None:
        self.store = store
        self.clock = clock or SystemClock()

    def write_status(self, obj: WithStatus, changes: Mapping[str, Any]) -> Written:
        """Replace the stored status on the version read."""
        status = obj.status.model_copy(update=dict(changes))
        if status == obj.status:
            return Written.UNCHANGED
        try:
            self.store.update_status(obj.model_copy(update={"status": status}))
        except (stored.ConflictError, NotFoundError):
            return Written.LOST
        return Written.WROTE

    def record(self, obj: WithStatus, reason: str, message: str, *, warning: bool = False) -> None:
        """Store an Event about the object."""
        event = Event.about(obj.kind, obj.metadata, reason, mask_url(message), self.clock.now(), warning=warning)
        self.store.record_event(event)


class SqliteBackend(SqliteStatus):
    """The operations' port over one state directory: its SQLite store and its files."""

    job_noun = "job"
    namespaced_kinds = NAMESPACED_KINDS
    pod_field_refusals: Mapping[str, str] = EMBEDDED_REFUSALS
    cluster_scheduling = False
    runs_images = False
    own_scheduler: str | None = None
    algorithms_here = True
    step_files = SAME_FILESYSTEM  # replicas are processes of this host: the store's paths are theirs

    def __init__(self, store: SqliteStore, layout: StateLayout, *, clock: Clock | None = None) -> None:
        super().__init__(store, clock=clock)
        self.layout = layout
        #: Every stored JobType as last parsed, with the store's mark of the kind when it was read (``_jobtypes``).
        self._jobtypes_read: tuple[tuple[int, int], builtins.list[JobType]] | None = None

    # -- the object port -----------------------------------------------------------------------------------

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """One object; a row that no longer parses says it is quarantined and how to delete it."""
        if kind is Queue:
            return next((q for q in self.list(kind) if q.metadata.name == name), None)
        try:
            return self.store.try_get(kind, namespace, name)
        except UnreadableError as err:
            fix = f"`phalanx delete job {name} -n {namespace}` (or `phalanx delete --quarantined`)"
            noun = "job" if kind is TrainingJob else kind.__name__.lower()
            raise OperationError(
                f"{noun} {namespace}/{name} is stored but cannot be read ({err.problem}); it is "
                f"quarantined: delete it with {fix if kind is TrainingJob else '`phalanx delete --quarantined`'}"
            ) from None

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: port.LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The objects of a namespace (None: all) with ``labels`` and ``phases``, selected in SQL first.

        Nothing is parsed before that selection. Rows that no longer parse are quarantined and left out.
        """
        if kind is JobType and namespace is None and labels is None and phases is None:
            return list(self._jobtypes())  # type: ignore[arg-type]  # kind is JobType: Readable is JobType
        found = self.store.list(kind, namespace, labels=labels, phases=phases)
        return unique_queues(found) if kind is Queue else found  # type: ignore[arg-type,return-value]

    def _jobtypes(self) -> builtins.list[JobType]:
        """Every stored JobType, parsed again only when one changed (the store's ``kind_mark`` moved).

        Every submission validates against all of them: with the seven built-ins stored (a control plane seeds
        them), parsing them was ~300 us of each POST's CPU; the mark is one indexed read. It is read before the
        list, so a list is never older than the mark it is kept under. The JobTypes are shared, as the built-ins
        of ``builtin_jobtypes`` are: nothing changes a JobType in place.
        """
        mark = self.store.kind_mark(JobType)
        read = self._jobtypes_read
        if read is not None and read[0] == mark:
            return read[1]
        found = self.store.list(JobType)
        self._jobtypes_read = (mark, found)
        return found

    def count_jobs(self) -> dict[port.JobCount, int]:
        """The jobs counted in SQL by their stored namespace, queue and phase; nothing parsed."""
        fields = ("metadata.namespace", "spec.scheduling.queue", "status.phase")
        default_queue = SchedulingPolicy.model_fields["queue"].default
        default_phase = str(TrainingJobStatus.model_fields["phase"].default.value)
        counts: dict[port.JobCount, int] = {}
        for (namespace, queue, phase), count in self.store.count_by(TrainingJob, fields).items():
            key = (str(namespace or ""), str(queue or default_queue), str(phase or default_phase))
            counts[key] = counts.get(key, 0) + count
        return counts

    def list_page(
        self,
        kind: type[Readable],
        namespaces: Collection[str] | None = None,
        *,
        labels: port.LabelSelector | None = None,
        limit: int = 0,
        cursor: str | None = None,
    ) -> port.ListPage[Readable]:
        """A page read with SQL ``LIMIT`` after the cursor's (namespace, name): only the page's rows are parsed."""
        if kind is Queue:  # one per name across namespaces (unique_queues), and few: paged once read whole
            return port.page_in_memory(self.list(kind, labels=labels), limit=limit, cursor=cursor)
        after = port.read_key_cursor(cursor) if cursor is not None else None
        if kind in (JobType, Node):
            namespaces = None  # cluster-scoped, whatever namespace the store files them under
        items, last, remaining = self.store.list_page(kind, namespaces, labels=labels, limit=limit, after=after)
        return port.ListPage(items, port.key_cursor(last) if last is not None else None, remaining)

    def replicas_of(self, job: TrainingJob) -> builtins.list[Replica]:
        """The job's current Replica objects."""
        return [r for r in self.store.list(Replica, job.metadata.namespace) if r.spec.job_uid == job.metadata.uid]

    def events_of(self, obj: WithStatus) -> builtins.list[Event]:
        """Events recorded about the object."""
        return self.store.list_events(obj.kind, obj.metadata.namespace, obj.metadata.name)

    def read_log(self, job: TrainingJob, replica: str, cursor: port.LogCursor | None = None) -> port.LogChunk | None:
        """The replica's log file (its latest attempt) from the cursor's byte offset on, in complete lines."""
        assert job.metadata.uid is not None
        path = dict(latest_logs(self.layout, job.metadata.namespace, job.metadata.name, job.metadata.uid)).get(replica)
        if path is None:
            return None
        try:
            return read_lines_from(path, cursor)
        except OSError:
            return None  # not written yet, or removed with its job meanwhile

    # -- the change side (``watching``) ----------------------------------------------------------------------------

    def resource_version(self, kind: type[Stored]) -> str:
        """The store's newest revision: every kind's changes are numbered in one sequence."""
        return str(self.store.latest_seq())

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[port.WatchEvent]:
        """The kind's changes read from the store's change feed (``watching.watch_store``)."""
        return watch_store(self.store, kind, resource_version, timeout)

    def create(self, obj: Stored) -> dict[str, Any] | None:
        """Store a new object (Queues, cluster-scoped, in the one namespace the store keeps them in).

        A Queue's stored form names the store's namespace, not none as the port shows it: None for it.
        """
        queue = isinstance(obj, Queue)
        if queue:
            obj = validated_copy(obj, metadata=validated_copy(obj.metadata, namespace=QUEUE_NAMESPACE))
        try:
            stored = self.store.insert(obj)  # as stored, no parse of it back
            return None if queue else stored
        except AlreadyExistsError:
            raise port.AlreadyExistsError(f"{obj.metadata.namespace}/{obj.metadata.name}") from None

    def replace(self, obj: Stored) -> None:
        """Replace metadata and spec on the version read."""
        try:
            self.store.update(obj)
        except stored.ConflictError as err:
            raise port.ConflictError(str(err)) from None
        except NotFoundError as err:
            raise port.NotFoundError(str(err)) from None

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """Remove an object at once (only the incarnation ``uid``, when given)."""
        try:
            if uid is not None:
                current = self.store.try_get(kind, namespace, name)
                if current is None or current.metadata.uid != uid:
                    raise NotFoundError(kind.__name__, namespace, name)
            self.store.delete(kind, namespace, name)
        except NotFoundError as err:
            raise port.NotFoundError(str(err)) from None

    def set_suspend(self, job: TrainingJob, suspend: bool) -> TrainingJob:
        """Write ``spec.runPolicy.suspend`` on the version read."""
        spec = validated_copy(job.spec, run_policy=validated_copy(job.spec.run_policy, suspend=suspend))
        try:
            return self.store.update(validated_copy(job, spec=spec))
        except stored.ConflictError as err:
            raise port.ConflictError(str(err)) from None

    # -- the steps of the operations that are the embedded runtime's own --------------------------------------

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job: its replicas are stopped first (graceful deletion), then the job is removed.

        A quarantined job is removed at once, even when its row cannot be read (its namespace may then be no
        valid name): no step of the control plane would finish a graceful deletion of it. Its replicas, if
        any, are then stopped and collected by the node runtime as those of any deleted job.
        """
        try:
            job = self.store.try_get(TrainingJob, namespace, name)
        except UnreadableError:
            with contextlib.suppress(NotFoundError):
                self.store.delete_row("TrainingJob", namespace, name)
            return
        if job is None:
            raise port.NotFoundError(f"job {namespace}/{name}")
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
        with contextlib.suppress(NotFoundError):
            self.store.mark_deleting(TrainingJob, namespace, name)

    def remove_finished(self, job: TrainingJob) -> None:
        """Remove a finished job and its files at once, unless its replicas are still being collected."""
        if self.replicas_of(job):
            raise OperationError(f"job {job.key} is finishing; try again in a moment")
        with contextlib.suppress(NotFoundError):
            self.store.delete(TrainingJob, job.metadata.namespace, job.metadata.name)
        self.layout.remove_job_files(job.metadata.namespace, job.metadata.name, job.metadata.uid)

    def pending_explanation(self) -> str:
        """Pending: accepted, or no control plane runs to pick it up."""
        # A lease left behind by a control plane that was killed (-9) does not make one run.
        if current_leader(self.store) is None:
            return "Pending: no control plane is running; start one with `phalanx up`."
        return "Pending: accepted, waiting for the controller to queue it."

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        """Each node's cache, read from its ledger in the state directory."""
        names = [n.metadata.name for n in self.store.list(Node)]
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

    def evict_entries(
        self, targets: Sequence[tuple[NodeCacheView, CacheEntryView]]
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Evict each entry from its node's cache here (the cache refuses one a job pins)."""
        evicted: builtins.list[str] = []
        problems: builtins.list[str] = []
        for view, entry in targets:
            cache = self._node_cache(view.node)
            assert cache is not None  # the view came from its ledger
            try:
                cache.evict(entry.key)
                evicted.append(f"{view.node}: {entry.key}")
            except CacheError as err:
                problems.append(str(err))
        return evicted, problems

    def _node_cache(self, node: str) -> NodeDataCache | None:
        directory = self.layout.node_cache_dir(node)
        if not (directory / "ledger.json").exists():
            return None
        return NodeDataCache(directory, name=f"node {node}")


class EmbeddedOperations(Operations):
    """The user's operations on one state directory, with its replica logs and its quarantine."""

    backend: SqliteBackend

    def __init__(self, store: SqliteStore, layout: StateLayout) -> None:
        super().__init__(SqliteBackend(store, layout))
        self.store = store
        self.layout = layout

    def submit(  # type: ignore[override]  # submit_dir: where relative paths start, which a state directory needs
        self,
        documents: Sequence[dict[str, Any]],
        *,
        submit_dir: Path,
        namespace: str | None = None,
        replace_finished: bool = False,
        source: str | None = None,
        stand_ins: Mapping[str, Sequence[str]] | None = None,
    ) -> builtins.list[Submitted]:
        """``Operations.submit``, with ``submit_dir`` (relative paths of jobs and Datasets start there).

        A Pipeline's component paths start at the directory of ``source`` (relative to ``submit_dir``), or at
        ``submit_dir`` for documents that came from no file. A job whose ``outputs.storeTo`` is in the state
        directory is refused (``storing.refused_destination``).
        """
        component_dir = (submit_dir / source).resolve().parent if source else submit_dir.resolve()
        objects = self.validate(
            documents, source=source, namespace=namespace, stand_ins=stand_ins, component_dir=component_dir
        )
        self._refuse_store_destinations(objects, submit_dir.resolve(), source)
        return self.submit_validated(
            objects,
            replace_finished=replace_finished,
            annotations={SUBMIT_DIR_ANNOTATION: str(submit_dir.resolve())},
        )

    def _refuse_store_destinations(self, objects: Sequence[Any], submit_dir: Path, source: str | None) -> None:
        from phalanx.services.embedded.storing import refused_destination

        errors = []
        for position, obj in enumerate(objects):
            store_to = obj.spec.outputs.store_to if isinstance(obj, TrainingJob) else None
            if not store_to:
                continue
            target = Path(store_to).expanduser()
            refused = refused_destination(target if target.is_absolute() else submit_dir / target, self.layout)
            if refused is not None:
                where = f"document {position + 1}: " if len(objects) > 1 else ""
                errors.append(FieldError("spec.outputs.storeTo", f"{where}{refused}"))
        if errors:
            raise SpecError(errors, source=source)

    def log_files(self, namespace: str, name: str, replica: str | None = None) -> builtins.list[tuple[str, Path]]:
        """(replica, log path) of the latest attempt of each replica (or of one), in name order."""
        job = self.get_job(namespace, name)
        assert job.metadata.uid is not None
        found = [
            (short, path)
            for short, path in latest_logs(self.layout, namespace, name, job.metadata.uid)
            if replica is None or replica in (short, f"{name}-{short}")
        ]
        if replica is not None and not found:
            raise no_replica_logs(job, replica, "no logs yet")
        return found

    # -- quarantine ------------------------------------------------------------------------------------------
    def quarantined(self) -> builtins.list[QuarantineRecord]:
        """Every quarantined object, after reading every row (so rows that no longer parse are found too)."""
        return self.store.audit(STORED_KINDS)

    def delete_quarantined(self) -> builtins.list[QuarantineRecord]:
        """Delete every quarantined object (jobs as ``delete_job`` does); returns what was deleted."""
        deleted = []
        for record in self.quarantined():
            if record.kind == "TrainingJob":
                with contextlib.suppress(port.NotFoundError):  # deleted meanwhile
                    self.backend.delete_job(record.namespace, record.name)
            else:
                with contextlib.suppress(NotFoundError):
                    self.store.delete_row(record.kind, record.namespace, record.name)
            deleted.append(record)
        return deleted
