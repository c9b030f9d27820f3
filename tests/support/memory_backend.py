"""The backend port in memory (``services.port.OperationsBackend``, ``StatusWriter``) over dicts, for unit tests.

Objects are kept as the model's, by kind, namespace (cluster-scoped kinds: ``""``) and name; every write checks the
resourceVersion read, as SQLite and the API server do, and moves it on. ``calls`` records each write (verb, kind,
name) so a test can assert what was written and in which order; ``conflicts`` makes the next writes of a verb fail
with ``ConflictError``, as if another client had written first; ``logs`` holds what replicas printed, and
``log_reads`` each ``read_log`` (job uid, replica, the offset it started at, the characters it returned);
``caches`` and ``counters`` are what each node's dataset cache holds and counted;
``changes`` is the change log a watch reads (every write and deletion, with the object as written or as it was
last); ``expire_changes`` forgets the oldest, as a compacted feed does.
"""

from __future__ import annotations

import builtins
import itertools
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from phalanx.core.data import DatasetCounters
from phalanx.core.pipelines.step_files import SAME_FILESYSTEM
from phalanx.model.base import in_phases, validated_copy
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.masking import mask_url
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView
from phalanx.services.operations import NAMESPACED_KINDS, OperationError
from phalanx.services.port import (
    LOG_TAIL_CHARS,
    AlreadyExistsError,
    ConflictError,
    ExpiredError,
    JobCount,
    LabelSelector,
    ListPage,
    LogChunk,
    LogCursor,
    NotFoundError,
    Readable,
    Stored,
    WatchEvent,
    WithStatus,
    Written,
    count_jobs_of,
    page_in_memory,
    selects,
)

_CLUSTER_SCOPED = (Queue, Node)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class MemoryBackend:
    """Every object in a dict; the replicas, events and caches a test puts there."""

    job_noun = "job"
    namespaced_kinds = NAMESPACED_KINDS
    pod_field_refusals: Mapping[str, str] = {}
    cluster_scheduling = False
    runs_images = False
    own_scheduler: str | None = None
    algorithms_here = True
    step_files = SAME_FILESYSTEM

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Any] = {}
        self.replicas: dict[str, list[Replica]] = {}  # by job uid
        self.events: dict[str, list[Event]] = {}  # by object uid
        self.logs: dict[str, dict[str, str]] = {}  # by job uid: replica name -> log text
        self.log_reads: list[tuple[str, str, int, int]] = []
        self.caches: dict[str, list[CacheEntryView]] = {}  # by node
        self.counters: dict[str, dict[str, DatasetCounters]] = {}  # by node: dataset -> its reads through the cache
        self.calls: list[tuple[str, str, str]] = []
        self.conflicts: dict[str, int] = {}
        self.pending = "Pending: accepted."
        self._versions = itertools.count(1)
        self.version = 0
        self.changes: list[WatchEvent] = []
        self.kept_from = 0  # changes after this version are kept
        self._changed = threading.Condition()

    def _key(self, kind: type, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (kind.__name__, "" if kind in _CLUSTER_SCOPED else namespace or "default", name)

    def _write(self, verb: str, obj: Any) -> None:
        self.calls.append((verb, type(obj).__name__, obj.metadata.name))
        if self.conflicts.get(verb):
            self.conflicts[verb] -= 1
            raise ConflictError(f"{obj.metadata.name} was written meanwhile")

    def _stored(self, obj: Any, *, uid: str | None = None) -> Any:
        version = next(self._versions)
        changes = {"resource_version": str(version)}
        if uid is not None:
            changes |= {"uid": uid, "creation_timestamp": _EPOCH + timedelta(seconds=version)}
        stored = validated_copy(obj, metadata=validated_copy(obj.metadata, **changes))
        key = self._key(type(obj), obj.metadata.namespace, obj.metadata.name)
        change = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = stored
        self._changed_to(WatchEvent(change, str(version), key[1], key[2], stored), version)
        return stored

    def _changed_to(self, event: WatchEvent, version: int) -> None:
        with self._changed:
            self.version = version
            self.changes.append(event)
            self._changed.notify_all()

    def expire_changes(self, through: int) -> None:
        """Forget the changes up to version ``through``: a watch from before it is too old."""
        with self._changed:
            self.kept_from = through
            self.changes = [c for c in self.changes if int(c.resource_version) > through]

    # -- the object port -------------------------------------------------------------------------------------

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """One object, or None."""
        found: Readable | None = self.objects.get(self._key(kind, namespace, name))
        return found

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The objects of a kind (in a namespace) with ``labels`` and ``phases``, by namespace and name."""
        return in_phases(
            [
                obj
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == kind.__name__
                and (namespace is None or kind in _CLUSTER_SCOPED or ns == namespace)
                and selects(labels, obj.metadata.labels)
            ],
            phases,
        )

    def count_jobs(self) -> dict[JobCount, int]:
        """The jobs counted (a test's few)."""
        return count_jobs_of(self.list(TrainingJob))

    def list_page(
        self,
        kind: type[Readable],
        namespaces: Collection[str] | None = None,
        *,
        labels: LabelSelector | None = None,
        limit: int = 0,
        cursor: str | None = None,
    ) -> ListPage[Readable]:
        """A page of ``list``, of the objects of ``namespaces`` (None: all)."""
        objects = [
            obj
            for obj in self.list(kind, labels=labels)
            if namespaces is None or kind in _CLUSTER_SCOPED or obj.metadata.namespace in namespaces
        ]
        return page_in_memory(objects, limit=limit, cursor=cursor)

    def replicas_of(self, job: TrainingJob) -> builtins.list[Replica]:
        """What a test put in ``replicas`` for the job's uid."""
        return list(self.replicas.get(job.metadata.uid or "", []))

    def events_of(self, obj: WithStatus) -> builtins.list[Event]:
        """What a test put in ``events`` for the object's uid."""
        return list(self.events.get(obj.metadata.uid or "", []))

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        """The replica's text in ``logs`` past the cursor (an offset in characters), in complete lines."""
        uid = job.metadata.uid or ""
        text = self.logs.get(uid, {}).get(replica)
        if text is None:
            return None
        source = f"{uid}/{replica}"
        start = cursor.offset if cursor is not None and cursor.source == source and cursor.offset <= len(text) else 0
        if len(text) - start > LOG_TAIL_CHARS:  # fallen behind: the tail, from a line's start
            start = len(text) - LOG_TAIL_CHARS
            start += text[start:].find("\n") + 1
        end = text.rfind("\n", start) + 1 or start
        self.log_reads.append((uid, replica, start, end - start))
        return LogChunk(text[start:end], LogCursor(source, end), text[end:])

    def create(self, obj: Stored) -> None:
        """Store a new object with a uid and a creation time."""
        self._write("create", obj)
        if self._key(type(obj), obj.metadata.namespace, obj.metadata.name) in self.objects:
            raise AlreadyExistsError(obj.metadata.name)
        self._stored(obj, uid=f"uid-{obj.metadata.name}-{len(self.calls)}")

    def replace(self, obj: Stored) -> None:
        """Replace spec, labels and annotations on the version read; the status stays."""
        self._write("replace", obj)
        current = self.get(type(obj), obj.metadata.namespace, obj.metadata.name)
        if current is None:
            raise NotFoundError(obj.metadata.name)
        if current.metadata.resource_version != obj.metadata.resource_version:
            raise ConflictError(obj.metadata.name)
        # A kind with no status (JobType, Pipeline) has only its spec and metadata to replace.
        self._stored(validated_copy(obj, status=current.status) if hasattr(current, "status") else obj)

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """Remove an object (only the incarnation ``uid``, when given)."""
        current = self.get(kind, namespace, name)
        self.calls.append(("delete", kind.__name__, name))
        if current is None or (uid is not None and current.metadata.uid != uid):
            raise NotFoundError(name)
        key = self._key(kind, namespace, name)
        del self.objects[key]
        version = next(self._versions)
        # As on a cluster: the deletion carries the object as it was last, at the deletion's resourceVersion.
        gone = validated_copy(current, metadata=validated_copy(current.metadata, resource_version=str(version)))
        self._changed_to(WatchEvent("DELETED", str(version), key[1], key[2], gone), version)

    def set_suspend(self, job: TrainingJob, suspend: bool) -> TrainingJob:
        """Write ``spec.runPolicy.suspend`` on the version read."""
        self._write("set_suspend", job)
        current = self.get(TrainingJob, job.metadata.namespace, job.metadata.name)
        if current is None or current.metadata.resource_version != job.metadata.resource_version:
            raise ConflictError(job.metadata.name)
        spec = validated_copy(current.spec, run_policy=validated_copy(current.spec.run_policy, suspend=suspend))
        written: TrainingJob = self._stored(validated_copy(current, spec=spec))
        return written

    # -- the change side -------------------------------------------------------------------------------------

    def resource_version(self, kind: type[Stored]) -> str:
        """The newest version of any object."""
        return str(self.version)

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[WatchEvent]:
        """The kind's changes after the version from ``changes``, waiting on a condition for new ones."""
        after = int(resource_version)
        if after < self.kept_from:
            raise ExpiredError(f"resourceVersion {resource_version} is older than the changes kept")
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                found = [
                    c
                    for c in self.changes
                    if int(c.resource_version) > after and c.obj is not None and type(c.obj) is kind
                ]
                if not found:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    if not self._changed.wait(min(remaining, 0.5)) and self.version > after:
                        found = [WatchEvent("BOOKMARK", str(self.version))]
            for event in found:
                after = int(event.resource_version)
                yield event

    # -- the status side -------------------------------------------------------------------------------------

    def write_status(self, obj: WithStatus, changes: Mapping[str, Any]) -> Written:
        """Write the status on the version read (``conflicts["write_status"]`` loses the next writes)."""
        status = obj.status.model_copy(update=dict(changes))
        if status == obj.status:
            return Written.UNCHANGED
        current = self.get(type(obj), obj.metadata.namespace, obj.metadata.name)
        try:
            self._write("write_status", obj)
        except ConflictError:
            return Written.LOST
        if current is None or current.metadata.resource_version != obj.metadata.resource_version:
            return Written.LOST
        self._stored(validated_copy(current, status=status))
        return Written.WROTE

    def record(self, obj: WithStatus, reason: str, message: str, *, warning: bool = False) -> None:
        """Keep the Event in ``events``, under the object's uid, stamped one second after the one before."""
        time = _EPOCH + timedelta(seconds=len(self.calls))
        self.calls.append(("record", obj.kind, obj.metadata.name))
        event = Event.about(obj.kind, obj.metadata, reason, mask_url(message), time, warning=warning)
        self.events.setdefault(obj.metadata.uid or "", []).append(event)

    # -- the steps that differ between backends ---------------------------------------------------------------

    def delete_job(self, namespace: str, name: str) -> None:
        """Remove the job and its replicas at once."""
        job = self.get(TrainingJob, namespace, name)
        if job is None:
            raise NotFoundError(name)
        self.replicas.pop(job.metadata.uid or "", None)
        self.delete(TrainingJob, namespace, name)

    def remove_finished(self, job: TrainingJob) -> None:
        """Remove a finished job, unless a test left replicas of it."""
        if self.replicas.get(job.metadata.uid or ""):
            raise OperationError(f"job {job.key} is finishing; try again in a moment")
        self.delete(TrainingJob, job.metadata.namespace, job.metadata.name, uid=job.metadata.uid)

    def pending_explanation(self) -> str:
        """What a test set in ``pending``."""
        return self.pending

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        """A view of each node in ``caches``."""
        if node is not None and node not in self.caches:
            raise OperationError(f"node {node} not found; nodes: {', '.join(sorted(self.caches))}")
        return [
            NodeCacheView(
                name, 1 << 30, sum(e.bytes for e in entries), list(entries), dict(self.counters.get(name, {}))
            )
            for name, entries in sorted(self.caches.items())
            if node in (None, name)
        ]

    def evict_entries(
        self, targets: Sequence[tuple[NodeCacheView, CacheEntryView]]
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Evict unpinned entries; a pinned one is refused, naming its jobs."""
        evicted, problems = [], []
        for view, entry in targets:
            if entry.pinned_by:
                problems.append(f"{entry.key} on node {view.node} is in use by {', '.join(entry.pinned_by)}")
                continue
            self.caches[view.node] = [e for e in self.caches[view.node] if e.key != entry.key]
            evicted.append(f"{view.node}: {entry.key}")
        return evicted, problems
