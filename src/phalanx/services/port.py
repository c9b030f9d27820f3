"""The backend port: what a backend answers and does, so the services above it are written once.

A backend is the SQLite store of the embedded runtime (``services.embedded.operations.SqliteBackend``), the API
server of a cluster (``services.kubernetes.operations.KubeBackend``) or memory (``tests/support``). The port has
a read side (``ObjectReader``: get and list the objects, selected by labels, whole or a page at a time; a job's
replicas, an object's events, and what a replica's log gained since a ``LogCursor``) and a write side
(``ObjectWriter``: create, replace and delete objects, each write conditional on the resourceVersion read), and
``OperationsBackend`` adds the few steps of the user's operations that truly differ between backends: how a job
is deleted (graceful on the embedded runtime, garbage collection on a cluster), how a finished job gives up its
name, why a Pending job waits, and how a node's dataset cache is read and evicted. The status side
(``StatusWriter``) writes an object's status on the resourceVersion read and records Events about it (the dataset
manager's; the schedulers' admissions, preemptions and waiting reasons). The change side (``ChangeReader``) says
what changed in a kind after a resourceVersion, deletions included, for watchers (the REST API's watch).

Failures every backend reports the same way are the errors here; a failure only a backend can explain (an
unreachable API server, a quarantined row) is an ``OperationError`` with its own sentence. A method is added
when a service written once needs it, not before.
"""

from __future__ import annotations

import builtins
import enum
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from phalanx.model.datasets import Dataset
from phalanx.model.events import Event
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.nodes import Node
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.queues import Queue
from phalanx.model.replicas import Replica
from phalanx.model.sweeps import Sweep
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView

Stored = TrainingJob | JobType | Queue | Dataset | Sweep | Pipeline | PipelineRun
"""The kinds a user submits and the operations write."""
Readable = TypeVar("Readable", TrainingJob, JobType, Queue, Dataset, Node, Sweep, Pipeline, PipelineRun)
WithStatus = TrainingJob | Dataset | Sweep | PipelineRun
"""The kinds a controller writes the status of and records Events about."""


#: How much of a replica's log ``ObjectReader.read_log`` returns at most: its last characters (1 Mi).
LOG_TAIL_CHARS = 1 << 20


LabelSelector = Mapping[str, str | None]
"""Labels a listed object must carry: each key with that value, or (None) with any value."""


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Whether an object with ``labels`` is one ``selector`` asks for (None asks for every object)."""
    if not selector:
        return True
    return all(key in labels if value is None else labels.get(key) == value for key, value in selector.items())


def selector_text(selector: LabelSelector) -> str:
    """The selector as the Kubernetes API writes one: ``key=value`` or ``key`` (has it), comma-separated."""
    return ",".join(key if value is None else f"{key}={value}" for key, value in sorted(selector.items()))


#: The (namespace, queue, phase) ``count_jobs`` counts jobs by.
JobCount = tuple[str, str, str]


def count_jobs_of(jobs: Iterable[TrainingJob]) -> dict[JobCount, int]:
    """``count_jobs`` over jobs already read (a backend that reads them whole anyway)."""
    return dict(Counter((j.metadata.namespace, j.spec.scheduling.queue, str(j.status.phase)) for j in jobs))


@dataclass(frozen=True)
class ListPage(Generic[Readable]):
    """One page of a list (``ObjectReader.list_page``), in namespace then name order.

    ``cursor`` is where the next page starts, opaque to callers and only meaningful to the backend that wrote
    it (None: this is the last page); ``remaining`` is how many objects follow this page when the backend can
    tell (None: it cannot, e.g. the API server with a label selector). A page may hold fewer than ``limit``
    objects and still have a next one: rows that cannot be read are left out after the limit was applied.
    """

    items: builtins.list[Readable]
    cursor: str | None
    remaining: int | None


class CursorError(ValueError):
    """A cursor this backend did not write (or wrote for another kind, namespaces or selector); the message says."""


#: What ``CursorError`` says: the fix is the same whatever is wrong with the cursor.
CURSOR_REFUSAL = (
    "continue is not a token this server gave out for this list; pass the metadata.continue of the previous "
    "page as it was, with the same path and labelSelector, or list again from the start without continue"
)


def page_in_memory(
    objects: Sequence[Readable], *, limit: int, cursor: str | None, remaining_known: bool = True
) -> ListPage[Readable]:
    """A page of objects already read whole: a backend that holds them (memory), or a kind that stays small.

    The cursor is the (namespace, name) of the last object of the page before (``key_cursor``).

    Raises:
        CursorError: ``cursor`` is not one this function wrote.
    """
    ordered = sorted(objects, key=_order)
    if cursor is not None:
        after = read_key_cursor(cursor)
        ordered = [obj for obj in ordered if _order(obj) > after]
    if limit <= 0 or len(ordered) <= limit:
        return ListPage(list(ordered), None, 0)
    items = list(ordered[:limit])
    return ListPage(items, key_cursor(_order(items[-1])), len(ordered) - limit if remaining_known else None)


def _order(obj: Any) -> tuple[str, str]:
    return (obj.metadata.namespace or "", obj.metadata.name)


def key_cursor(after: tuple[str, str]) -> str:
    """The cursor of a page that goes on after the object at ``after`` (namespace, name)."""
    return json.dumps(list(after), separators=(",", ":"))


def read_key_cursor(cursor: str) -> tuple[str, str]:
    """The (namespace, name) a ``key_cursor`` goes on after.

    Raises:
        CursorError: not such a cursor.
    """
    try:
        after = json.loads(cursor)
    except ValueError:
        raise CursorError(CURSOR_REFUSAL) from None
    if not (isinstance(after, list) and len(after) == 2 and all(isinstance(part, str) for part in after)):
        raise CursorError(CURSOR_REFUSAL)
    return (after[0], after[1])


@dataclass(frozen=True)
class LogCursor:
    """Where a read of a replica's log stopped: which log it was, and how far into it.

    ``source`` names one log (an attempt's file on the embedded runtime, a Pod's uid on a cluster): a cursor of
    another source is no place in the current log, which is then read from its start. ``offset`` is how far the
    complete lines read reach: bytes into a file; on a cluster, which reads by time, the lines read that carry
    the timestamp ``stamp`` (the last line's).
    """

    source: str
    offset: int = 0
    stamp: str = ""


@dataclass(frozen=True)
class LogChunk:
    """What a replica's log holds past a cursor: its complete lines, and the cursor past them.

    ``partial`` is the last line when it has no newline yet: not covered by ``cursor``, so it is read again, in
    full, once it is finished. A reader that knows the replica has ended (its job finished) takes it as a line.
    """

    text: str
    cursor: LogCursor
    partial: str = ""


class PortError(Exception):
    """A write the backend refused for a reason every backend shares."""


class NotFoundError(PortError):
    """The object does not exist (any longer)."""


class ConflictError(PortError):
    """The object changed since it was read (its resourceVersion moved on): read it again and retry."""


class AlreadyExistsError(ConflictError):
    """An object of that kind and name exists already."""


class ObjectReader(Protocol):
    """The read side: the stored objects as the model's, and what belongs to them."""

    def get(self, kind: type[Readable], namespace: str, name: str) -> Readable | None:
        """One object (``namespace`` is ignored for cluster-scoped kinds), or None when there is none."""
        ...

    def list(
        self,
        kind: type[Readable],
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[Readable]:
        """The objects of a namespace (None: all) with ``labels`` and ``phases``; unreadable ones are left out.

        ``phases``: only objects whose ``status.phase`` is one of these (None: any phase).
        The backend selects (an SQL condition, a label selector, a cache scan before parsing): a controller that
        wants a few objects of a kind does not pay for parsing them all, nor a view of the active jobs for the
        finished ones.
        """
        ...

    def count_jobs(self) -> dict[JobCount, int]:
        """How many TrainingJobs there are of each (namespace, queue, phase).

        Counted without parsing each job where the backend can (SQL on the embedded store, the parsed cache of
        an operator).
        """
        ...

    def list_page(
        self,
        kind: type[Readable],
        namespaces: Collection[str] | None = None,
        *,
        labels: LabelSelector | None = None,
        limit: int = 0,
        cursor: str | None = None,
    ) -> ListPage[Readable]:
        """A page: at most ``limit`` objects (0: all) with ``labels``, from where ``cursor`` (a previous page's) says.

        The objects are those of ``namespaces`` (None: every namespace; ignored for cluster-scoped kinds), in
        namespace then name order.

        The backend pages (SQL ``LIMIT`` over its key, the API server's own ``limit``/``continue``): a page of a
        large list costs about its own size, not the list's.

        Raises:
            CursorError: ``cursor`` is not one of this backend's.
        """
        ...

    def replicas_of(self, job: TrainingJob) -> builtins.list[Replica]:
        """The job's replicas (Pods on a cluster), of this incarnation of its name."""
        ...

    def events_of(self, obj: WithStatus) -> builtins.list[Event]:
        """Events about the object, oldest first."""
        ...

    def read_log(self, job: TrainingJob, replica: str, cursor: LogCursor | None = None) -> LogChunk | None:
        """The replica's log (its latest attempt) past ``cursor``: only what was written since, in complete lines.

        Without a cursor, or with one of another attempt (a Pod of another uid, a restarted replica), the log is
        read from its start. Either way at most its last ``LOG_TAIL_CHARS`` characters (a cluster: its last
        ``LOG_TAIL_LINES`` lines) are returned, from a line's start: a reader that falls that far behind skips
        ahead, as the tail would. None when the replica has no log yet (not placed, not started).
        """
        ...


WatchType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True)
class WatchEvent:
    """One change of an object, as a Kubernetes watch event says it, at the resourceVersion that made it.

    ``obj`` is the object as written (ADDED, MODIFIED), or as last known when the backend keeps it (DELETED on a
    cluster); None for a deletion the backend keeps no body of (the embedded store's change log holds only the
    key) and for a BOOKMARK, which only says the kind has no change up to ``resource_version``. ``namespace`` is
    "" for a cluster-scoped kind.
    """

    type: WatchType
    resource_version: str
    namespace: str = ""
    name: str = ""
    obj: Stored | None = None


class ExpiredError(PortError):
    """The resourceVersion a watch asked to start after is older than the changes the backend keeps: list again.

    The message is one sentence saying so; the REST API answers it 410 Gone.
    """


class ChangeReader(Protocol):
    """The change side: where a kind's changes stand now, and what changed after a resourceVersion."""

    def resource_version(self, kind: type[Stored]) -> str:
        """The resourceVersion a watch of ``kind`` starts after to see every change made from now on."""
        ...

    def watch(self, kind: type[Stored], resource_version: str, *, timeout: float) -> Iterator[WatchEvent]:
        """The changes of ``kind`` (every namespace) after ``resource_version``, oldest first, as they happen.

        The iterator ends once ``timeout`` seconds pass (a reader goes on from the last resourceVersion it saw);
        while nothing changes it yields BOOKMARKs now and then, so a reader's place moves on. A backend that
        merged writes (the embedded store keeps each write, but reads the object as it is now) yields an object
        once, at its newest version: never an older version after a newer one.

        Raises:
            ExpiredError: ``resource_version`` is older than the changes kept (when iterated).
        """
        ...


class ObjectWriter(Protocol):
    """The write side; every write of an object read earlier is conditional on its resourceVersion."""

    def create(self, obj: Stored) -> Mapping[str, Any] | None:
        """Store a new object; the object as stored in its wire form, where the backend has it without a read.

        None where it would take another read (the caller reads the object when it needs it): a server that
        answers a POST with the created object saves a read and a parse on a backend that returns it.

        Raises:
            AlreadyExistsError: the name is taken.
        """
        ...

    def replace(self, obj: Stored) -> None:
        """Give the stored object ``obj``'s spec, labels and annotations (its status stays).

        Raises:
            ConflictError: it changed since ``obj`` was read.
            NotFoundError: it is gone.
        """
        ...

    def delete(self, kind: type[Stored], namespace: str, name: str, *, uid: str | None = None) -> None:
        """Remove an object (only the incarnation ``uid``, when given).

        Raises:
            NotFoundError: there is none.
        """
        ...

    def set_suspend(self, job: TrainingJob, suspend: bool) -> TrainingJob:
        """Write ``spec.runPolicy.suspend`` alone, on the version read; the job as written.

        Raises:
            ConflictError: it changed since ``job`` was read.
        """
        ...


class Written(enum.Enum):
    """What became of a status write: written, nothing to write, or lost (changed or gone: the next pass looks)."""

    WROTE = "wrote"
    UNCHANGED = "unchanged"
    LOST = "lost"


class StatusWriter(Protocol):
    """The status side: what a controller writes about an object it read, and the Events that say so."""

    def write_status(self, obj: WithStatus, changes: Mapping[str, Any]) -> Written:
        """Write ``obj``'s status with ``changes`` (status fields) on the resourceVersion read (moved on: LOST)."""
        ...

    def record(self, obj: WithStatus, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event about the object (best effort), its message with any credentials masked."""
        ...


class OperationsBackend(ObjectReader, ObjectWriter, Protocol):
    """The port of the user's operations: the object port and the steps that differ between backends."""

    job_noun: str
    """How messages name a job: ``job`` on the embedded runtime, ``trainingjob`` (the resource) on a cluster."""
    namespaced_kinds: frozenset[str]
    """The kinds ``submit -n`` moves to its namespace (JobTypes are cluster-scoped on a cluster)."""
    pod_field_refusals: Mapping[str, str]
    """Pod fields of a replica template (``model.pods``) this backend cannot honour, each with why: a job that
    sets one is refused at the validation door, naming the field's path. Empty on a cluster."""
    cluster_scheduling: bool
    """Whether a job may leave its placement to the cluster's scheduler (``spec.scheduling.schedulerName``)."""
    runs_images: bool
    """Whether replicas run their container images (a cluster); where they do not, a local program may stand in
    for an image (``core.stand_ins``)."""
    own_scheduler: str | None
    """The name of Phalanx's own scheduler on this backend (a job naming it is placed by Phalanx); None where
    Phalanx places every job itself."""
    algorithms_here: bool
    """Whether a Sweep's search algorithm runs with this process's installation (the embedded control plane shares
    the CLI's), so the door can refuse one whose libraries are missing; on a cluster the operator's image decides,
    and the operator says so in the Sweep's status."""

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job and, in the backend's way, its replicas.

        Raises:
            NotFoundError: there is no such job.
        """
        ...

    def remove_finished(self, job: TrainingJob) -> None:
        """Remove a finished job so a submission can take its name; return once the name is free.

        Raises:
            OperationError: it cannot be removed yet (its replicas are still finishing).
        """
        ...

    def pending_explanation(self) -> str:
        """Why a job is Pending, in a sentence that says what to check."""
        ...

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        """Every node's dataset cache (or one node's).

        Raises:
            OperationError: no such node.
        """
        ...

    def evict_entries(
        self, targets: Sequence[tuple[NodeCacheView, CacheEntryView]]
    ) -> tuple[builtins.list[str], builtins.list[str]]:
        """Evict the entries; ``node: key`` of each evicted and a sentence for each that was not."""
        ...


class ServedBackend(OperationsBackend, ChangeReader, Protocol):
    """A backend the REST server serves: the user's operations and the changes its watches follow.

    The embedded and Kubernetes backends are both; the HTTP backend (a client of a server) needs no change side.
    """
