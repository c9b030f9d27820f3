"""The embedded state store: API objects, change feed, events, leases and small state in one SQLite file.

This is the single source of truth of the embedded runtime. The control plane daemon and every CLI invocation
open the same file, so the store is built for several *processes* and several threads at once:

- Each thread of each process gets its own connection (``threading.local``); after ``fork`` the child opens
  fresh ones and never touches (nor closes) the inherited ones, which SQLite forbids.
- Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write lock before reading, so a
  read-check-write (the resourceVersion check of ``update``) cannot interleave with another process's.
- One global revision: every write appends to the ``changes`` feed in the same transaction, and the new
  ``seq`` becomes the object's ``metadata.resourceVersion`` (the etcd model). resourceVersions therefore
  increase strictly across all objects, and "what changed since revision N" is a range scan.
- Watching is cheap across processes: ``wait_for_change`` polls ``PRAGMA data_version`` (a counter that moves
  only when *another* connection commits, answered without reading the database) and queries the feed only
  when it moved; writes from this process wake waiters at once through a condition variable.

A row that no longer parses as its kind (written by an older version, by hand, or by a bug) never makes a read
fail for the others: ``list`` leaves it out and ``get`` raises ``UnreadableError`` for it alone; either way the
store quarantines it (a ``quarantine`` record naming the row and the problem, see ``quarantined``), and
``delete_row`` removes it. Services quarantine objects that make their steps fail the same way (``quarantine``).

Update semantics follow Kubernetes with a status subresource: ``update`` changes metadata and spec and keeps
the stored status; ``update_status`` changes only status; ``generation`` moves only when spec changes; the
store owns uid, resourceVersion, generation and the timestamps whatever the client sends; an update that
changes nothing writes nothing and keeps the resourceVersion.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from phalanx.adapters.private_files import make_private_dirs, open_private, tighten
from phalanx.adapters.store import _rows
from phalanx.adapters.store._parsing import parse_row
from phalanx.adapters.store._quarantine import QuarantineVerbs
from phalanx.adapters.store._schema import ThreadConnection, open_connection, prepare_database
from phalanx.adapters.store.errors import (
    AlreadyExistsError,
    ChangesExpiredError,
    ConflictError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    UnreadableError,
)
from phalanx.adapters.store.records import (
    EVENT_KIND,
    Change,
    ChangeType,
    EventRecord,
    Lease,
    format_time,
    from_micros,
    to_micros,
    to_utc,
)
from phalanx.model.base import in_phases
from phalanx.model.events import Event
from phalanx.model.meta import ObjectMeta

T = TypeVar("T", bound=BaseModel)

# How long a write waits for another process's write lock before the store reports itself locked.
DEFAULT_BUSY_TIMEOUT_MS = 10_000
DEFAULT_CHANGE_POLL_INTERVAL = 0.002
MAX_CHANGE_POLL_INTERVAL = 0.02
# The files SQLite keeps next to the database (WAL mode; a rollback journal when it falls back).
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")

# Metadata fields (wire names) that only the store sets; whatever a client sends for them is ignored.
_STORE_OWNED = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")


class SqliteStore(QuarantineVerbs):
    """The embedded runtime's state store on one SQLite file, safe for many processes and threads.

    Args:
        path: the database file; its directory is created if missing.
        now: the clock (timezone-aware UTC datetimes; naive ones are taken as UTC).
        uid_factory: makes object uids (default: random UUID4 strings).
        busy_timeout_ms: how long a writer waits for another process's write lock before failing.
        change_poll_interval: seconds between ``PRAGMA data_version`` checks in ``wait_for_change``.
        max_change_poll_interval: how far that interval grows while nothing changes.

    Raises:
        StoreError: the file cannot be created or opened, is not a SQLite database, or has a newer schema.

    """

    def __init__(
        self,
        path: Path,
        *,
        now: Callable[[], datetime] | None = None,
        uid_factory: Callable[[], str] | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        change_poll_interval: float = DEFAULT_CHANGE_POLL_INTERVAL,
        max_change_poll_interval: float = MAX_CHANGE_POLL_INTERVAL,
    ) -> None:
        self._path = Path(path)
        self._now = now or _utc_now
        self._uid_factory = uid_factory or _random_uid
        self._busy_timeout_ms = busy_timeout_ms
        self._poll_interval = change_poll_interval
        self._max_poll_interval = max(change_poll_interval, max_change_poll_interval)
        self._kinds: dict[type[BaseModel], str] = {}
        self._start_quarantine()
        self._closed = False
        self._start_process_state()
        try:
            make_private_dirs(self._path.parent)
        except OSError as err:
            raise StoreError(
                f"cannot create the state directory {self._path.parent} ({err}); "
                "choose a writable location for the state store"
            ) from err
        _create_private(self._path)
        try:
            with self._translated("open"):
                prepare_database(self._connection(), self._path)
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SqliteStore({str(self._path)!r})"

    # ----------------------------------------------------------------------------------------- objects

    def create(self, obj: T) -> T:
        """Store a new object, setting its uid, creationTimestamp, generation 1 and resourceVersion.

        Spec and status are stored as given (an observed object such as a Node arrives with its status).

        Returns:
            The stored object, parsed back into the object's class.

        Raises:
            AlreadyExistsError: an object of that kind, namespace and name exists.

        """
        return type(obj).model_validate(self._insert(obj))

    def insert(self, obj: T) -> dict[str, Any]:
        """``create`` without parsing the stored object back: the object as stored, in its wire form.

        Raises:
            AlreadyExistsError: an object of that kind, namespace and name exists.
        """
        return self._insert(obj)

    def _insert(self, obj: T) -> dict[str, Any]:
        """Write a new object's row and its ADDED change; the body as stored."""
        kind = self._kind_of(type(obj))
        meta = _metadata_of(obj)
        namespace, name = meta.namespace, meta.name
        body = _wire(obj)
        uid = self._uid_factory()
        owned = body["metadata"]
        owned.pop("deletionTimestamp", None)
        owned.update(uid=uid, generation=1, creationTimestamp=format_time(self._now()))
        with self._writing(f"create {kind} {namespace}/{name}") as conn:
            if _rows.select_object(conn, kind, namespace, name) is not None:
                raise AlreadyExistsError(kind, namespace, name)
            seq = _rows.append_change(conn, kind, namespace, name, "ADDED")
            owned["resourceVersion"] = str(seq)
            try:
                conn.execute(
                    "INSERT INTO objects (kind, namespace, name, uid, resource_version, generation, body) "
                    "VALUES (?, ?, ?, ?, ?, 1, ?)",
                    (kind, namespace, name, uid, seq, _rows.dumps(body)),
                )
            except sqlite3.IntegrityError as err:
                raise StoreError(
                    f"cannot create {kind} {namespace}/{name}: uid {uid!r} is already used ({err})"
                ) from err
        return body

    def get(self, cls: type[T], namespace: str, name: str) -> T:
        """Return the stored object.

        Raises:
            NotFoundError: there is no such object.
            UnreadableError: the row does not parse as ``cls`` (the store quarantines it).

        """
        found = self.try_get(cls, namespace, name)
        if found is None:
            raise NotFoundError(self._kind_of(cls), namespace, name)
        return found

    def try_get(self, cls: type[T], namespace: str, name: str) -> T | None:
        """Return the stored object, or None when there is none.

        Raises:
            UnreadableError: the row does not parse as ``cls`` (the store quarantines it).

        """
        kind = self._kind_of(cls)
        with self._translated(f"get {kind} {namespace}/{name}"):
            row = _rows.select_object(self._connection(), kind, namespace, name)
        if row is None:
            return None
        obj, problem = parse_row(cls, namespace, name, row[0], row[2])
        if obj is None:
            self._note_unreadable(kind, namespace, name, row[0], problem)
            raise UnreadableError(kind, namespace, name, problem)
        return obj

    def list(
        self,
        cls: type[T],
        namespace: str | None = None,
        *,
        labels: Mapping[str, str | None] | None = None,
        phases: Collection[str] | None = None,
    ) -> builtins.list[T]:
        """Objects of a kind, sorted by namespace then name.

        Args:
            cls: the model class; its ``kind`` default names the kind.
            namespace: only this namespace; None for all.
            labels: only objects carrying every one of these labels with exactly these values (None: any value).
            phases: only objects whose ``status.phase`` is one of these (None: any); selected in SQL before any
                row is parsed, so listing the few active jobs among many finished ones costs the few.

        A row that does not parse as ``cls`` is left out and quarantined (see ``quarantined``): one bad row
        never hides the others.

        """
        kind = self._kind_of(cls)
        where, params, unusual = _selection(kind, None if namespace is None else [namespace], labels)
        if phases is not None:
            chosen = sorted({str(phase) for phase in phases})
            # A row naming no phase has its model's default one: it is parsed and decided below.
            where += " AND CASE WHEN json_valid(body) THEN "
            where += f"coalesce(json_extract(body, '$.status.phase') IN ({', '.join('?' * len(chosen))}), 1) END"
            params += chosen
        sql = f"SELECT namespace, name, resource_version, body FROM objects WHERE {where} ORDER BY namespace, name"  # nosec B608  # only ? marks and constants are formatted in; values are parameters
        with self._translated(f"list {kind}"):
            rows = self._connection().execute(sql, params).fetchall()
        return in_phases(self._parsed(cls, kind, rows, unusual), phases)

    def count_by(self, cls: type[Any], fields: Sequence[str]) -> dict[tuple[Any, ...], int]:
        """How many objects of a kind have each combination of values at ``fields`` (dotted wire paths).

        Counted in SQL, nothing parsed: a field a row does not hold counts as None (the caller knows its
        default), and a row that is not JSON at all is not counted.
        """
        kind = self._kind_of(cls)
        values = ", ".join("json_extract(body, ?)" for _ in fields)
        sql = f"SELECT {values}, COUNT(*) FROM objects WHERE kind = ? AND json_valid(body) GROUP BY {values}"  # nosec B608  # only ? marks and constants are formatted in; values are parameters
        paths = [f"$.{field}" for field in fields]
        with self._translated(f"count {kind}"):
            rows = self._connection().execute(sql, [*paths, kind, *paths]).fetchall()
        return {tuple(row[:-1]): int(row[-1]) for row in rows}

    def list_page(
        self,
        cls: type[T],
        namespaces: Collection[str] | None = None,
        *,
        labels: Mapping[str, str | None] | None = None,
        limit: int = 0,
        after: tuple[str, str] | None = None,
    ) -> tuple[builtins.list[T], tuple[str, str] | None, int]:
        """A page of ``list``: at most ``limit`` rows (0: all) after the row at ``after`` (namespace, name).

        The page is read with ``LIMIT`` over the primary key's order (kind, namespace, name), so its cost is
        the page's, not the kind's: only its rows are parsed. Rows that do not parse are left out (and
        quarantined) after the limit, so a page may be shorter than ``limit``.

        Returns:
            The page's objects, the (namespace, name) of its last row when more rows follow (None: the last
            page), and how many rows follow it (``COUNT`` over the same selection).
        """
        kind = self._kind_of(cls)
        where, params, unusual = _selection(kind, namespaces, labels)
        if after is not None:
            where += " AND (namespace, name) > (?, ?)"
            params += list(after)
        sql = f"SELECT namespace, name, resource_version, body FROM objects WHERE {where} ORDER BY namespace, name"  # nosec B608  # only ? marks and constants are formatted in; values are parameters
        with self._translated(f"list {kind}"):
            connection = self._connection()
            if limit <= 0:
                return self._parsed(cls, kind, connection.execute(sql, params).fetchall(), unusual), None, 0
            # One more row than the page: whether another page follows, without counting when none does.
            rows = connection.execute(sql + " LIMIT ?", [*params, limit + 1]).fetchall()
            if len(rows) <= limit:
                return self._parsed(cls, kind, rows, unusual), None, 0
            rows = rows[:limit]
            last = (str(rows[-1][0]), str(rows[-1][1]))
            count_sql = f"SELECT COUNT(*) FROM objects WHERE {where} AND (namespace, name) > (?, ?)"  # nosec B608  # only ? marks and constants are formatted in; values are parameters
            remaining = int(connection.execute(count_sql, [*params, *last]).fetchone()[0])
        return self._parsed(cls, kind, rows, unusual), last, remaining

    def _parsed(
        self, cls: type[T], kind: str, rows: builtins.list[Any], unusual: Mapping[str, str | None]
    ) -> builtins.list[T]:
        """The rows that parse as ``cls`` and carry the ``unusual`` labels; the others are quarantined."""
        found: builtins.list[T] = []
        for row_namespace, row_name, version, text in rows:
            obj, problem = parse_row(cls, row_namespace, row_name, version, text)
            if obj is None:
                self._note_unreadable(kind, row_namespace, row_name, version, problem)
            elif not unusual or _has_labels(_metadata_of(obj), unusual):
                found.append(obj)
        return found

    def update(self, obj: T) -> T:
        """Replace metadata and spec; keep the stored status. Optimistic: the resourceVersion must match.

        The store keeps its own uid, creationTimestamp and deletionTimestamp; ``generation`` moves only when
        spec changes. An update that changes nothing is not written and keeps the resourceVersion.

        Raises:
            NotFoundError: there is no such object.
            ConflictError: the object changed since ``obj`` was read.

        """
        return self._replace(obj, status_only=False)

    def update_status(self, obj: T) -> T:
        """Replace only the status. Optimistic: the resourceVersion must match.

        Raises:
            NotFoundError: there is no such object.
            ConflictError: the object changed since ``obj`` was read.

        """
        return self._replace(obj, status_only=True)

    def delete(self, cls: type[T], namespace: str, name: str, *, resource_version: str | None = None) -> None:
        """Remove an object at once (see ``mark_deleting`` for graceful deletion).

        Raises:
            NotFoundError: there is no such object.
            ConflictError: ``resource_version`` is given and the object has moved on from it.

        """
        self.delete_row(self._kind_of(cls), namespace, name, resource_version=resource_version)

    def delete_row(self, kind: str, namespace: str, name: str, *, resource_version: str | None = None) -> None:
        """Remove an object by its kind's name, whether or not its row parses (and its quarantine record).

        This is how a quarantined row that cannot be read, or whose kind is unknown, is removed.

        Raises:
            NotFoundError: there is no such object.
            ConflictError: ``resource_version`` is given and the object has moved on from it.

        """
        with self._writing(f"delete {kind} {namespace}/{name}") as conn:
            row = _rows.select_object(conn, kind, namespace, name)
            if row is None:
                raise NotFoundError(kind, namespace, name)
            if resource_version is not None and resource_version != str(row[0]):
                raise ConflictError(kind, namespace, name, current=str(row[0]), expected=resource_version)
            conn.execute("DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?", (kind, namespace, name))
            _rows.delete_quarantine(conn, kind, namespace, name)
            _rows.append_change(conn, kind, namespace, name, "DELETED")

    def mark_deleting(self, cls: type[T], namespace: str, name: str) -> T:
        """Set ``metadata.deletionTimestamp`` (graceful deletion); a second call changes nothing.

        Raises:
            NotFoundError: there is no such object.

        """
        kind = self._kind_of(cls)
        stamp = format_time(self._now())
        with self._writing(f"mark {kind} {namespace}/{name} for deletion") as conn:
            row = _rows.select_object(conn, kind, namespace, name)
            if row is None:
                raise NotFoundError(kind, namespace, name)
            body = json.loads(row[2])
            if not body["metadata"].get("deletionTimestamp"):
                seq = _rows.append_change(conn, kind, namespace, name, "MODIFIED")
                body["metadata"].update(deletionTimestamp=stamp, resourceVersion=str(seq))
                _rows.write_object(conn, kind, namespace, name, seq, row[1], body)
        return cls.model_validate(body)

    def _replace(self, obj: T, *, status_only: bool) -> T:
        cls = type(obj)
        kind = self._kind_of(cls)
        meta = _metadata_of(obj)
        namespace, name = meta.namespace, meta.name
        incoming = _wire(obj)
        action = "update status of" if status_only else "update"
        with self._writing(f"{action} {kind} {namespace}/{name}") as conn:
            row = _rows.select_object(conn, kind, namespace, name)
            if row is None:
                raise NotFoundError(kind, namespace, name)
            current_version, generation, text = row
            if meta.resource_version != str(current_version):
                raise ConflictError(kind, namespace, name, current=str(current_version), expected=meta.resource_version)
            stored = json.loads(text)
            if status_only:
                merged = _with_part(stored, "status", incoming)
            else:
                merged = _with_part(incoming, "status", stored)
                client_meta = {k: v for k, v in incoming["metadata"].items() if k not in _STORE_OWNED}
                merged["metadata"] = {**client_meta, **_store_owned(stored["metadata"])}
                if merged.get("spec") != stored.get("spec"):
                    generation += 1
                    merged["metadata"]["generation"] = generation
            if merged == stored:
                return cls.model_validate(stored)
            seq = _rows.append_change(conn, kind, namespace, name, "MODIFIED")
            merged["metadata"]["resourceVersion"] = str(seq)
            _rows.write_object(conn, kind, namespace, name, seq, generation, merged)
        return cls.model_validate(merged)

    def kind_mark(self, cls: type[BaseModel]) -> tuple[int, int]:
        """How many objects of a kind are stored, and the newest resourceVersion among them; one indexed read.

        It moves with every change of the kind, from any process: each create or write gives its object a new
        revision, above every earlier one, and a delete (the only write that does not) lowers the count. A
        cache of a kind's objects read after this mark stays true while the mark does.
        """
        kind = self._kind_of(cls)
        with self._translated(f"read the revision of the {kind} objects"):
            count, newest = (
                self._connection()
                .execute(
                    "SELECT count(*), coalesce(max(resource_version), 0) FROM objects WHERE kind = ?",
                    (kind,),
                )
                .fetchone()
            )
        return int(count), int(newest)

    # -------------------------------------------------------------------------------------- change feed

    def latest_seq(self) -> int:
        """Return the newest revision (0 for a new store); follow the feed from here after a list."""
        with self._translated("read the latest revision"):
            return _rows.latest_seq(self._connection())

    def changes_since(
        self, seq: int, kinds: Collection[str] | None = None, *, limit: int | None = None
    ) -> builtins.list[Change]:
        """Return the changes with a revision above ``seq``, oldest first.

        Args:
            seq: the last revision the caller has seen.
            kinds: only changes of these kinds (``"Event"`` for recorded events); None for all.
            limit: at most this many changes (the oldest ones).

        Raises:
            ChangesExpiredError: changes after ``seq`` were compacted away; list again and restart the feed.

        """
        sql = "SELECT seq, kind, namespace, name, type FROM changes WHERE seq > ?"
        params: builtins.list[object] = [seq]
        if kinds is not None:
            wanted = sorted(set(kinds))
            if not wanted:
                return []
            sql += f" AND kind IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._translated("read the change feed"):
            conn = self._connection()
            rows = conn.execute(sql, params).fetchall()
            # Read after the rows: compaction only moves forward, so a horizon at or below ``seq`` now was
            # also at or below it when the rows were read, and nothing after ``seq`` was missing.
            compacted = _rows.compacted_through(conn)
        if seq < compacted:
            raise ChangesExpiredError(seq, compacted)
        return [Change(seq=r[0], kind=r[1], namespace=r[2], name=r[3], type=cast(ChangeType, r[4])) for r in rows]

    def wait_for_change(
        self, after_seq: int, timeout: float, kinds: Collection[str] | None = None
    ) -> builtins.list[Change]:
        """Block until a change above ``after_seq`` (of ``kinds``, if given) exists, or ``timeout`` passes.

        Returns:
            The changes found, oldest first; empty when the timeout passed first.

        Raises:
            ChangesExpiredError: as ``changes_since``.

        """
        deadline = time.monotonic() + max(0.0, timeout)
        conn = self._connection()
        while True:
            with self._cond:
                local_writes = self._local_writes
            with self._translated("watch the change feed"):
                version = _rows.data_version(conn)
            found = self.changes_since(after_seq, kinds)
            if found:
                return found
            if not self._wait_for_commit(conn, version, local_writes, deadline):
                return []

    def _wait_for_commit(self, conn: sqlite3.Connection, version: int, local_writes: int, deadline: float) -> bool:
        """Wait until some connection commits after ``version``/``local_writes`` (True) or the deadline.

        The check interval starts at ``change_poll_interval`` and grows while nothing happens, up to
        ``MAX_CHANGE_POLL_INTERVAL``: a burst of writes is seen within milliseconds, and an idle watcher costs
        tens of checks per second instead of hundreds.
        """
        interval = self._poll_interval
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                if self._local_writes == local_writes:
                    self._cond.wait(min(remaining, interval))
                    interval = min(interval * 1.5, self._max_poll_interval)
                if self._local_writes != local_writes:
                    return True
            with self._translated("watch the change feed"):
                if _rows.data_version(conn) != version:
                    return True

    def compact_changes(self, keep_last: int = 100_000) -> int:
        """Drop all but the newest ``keep_last`` feed entries; returns how many were dropped.

        A reader that asks for changes from before the new horizon gets ``ChangesExpiredError``.
        """
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")
        with self._writing("compact the change feed") as conn:
            horizon = _rows.latest_seq(conn) - keep_last
            if horizon <= _rows.compacted_through(conn):
                return 0
            dropped = conn.execute("DELETE FROM changes WHERE seq <= ?", (horizon,)).rowcount
            _rows.set_meta(conn, _rows.COMPACTED_THROUGH, str(horizon))
            return dropped

    # ------------------------------------------------------------------------------------------- events

    def record_event(self, event: Event) -> None:
        """Store an event; one identical to the object's previous event (type, reason, message) is counted.

        The event also enters the change feed as kind ``"Event"`` named ``"<ObjectKind>/<objectName>"``.
        """
        when = to_micros(event.time)
        key = (event.object_kind, event.namespace, event.object_name)
        with self._writing(f"record an event for {event.object_kind} {event.namespace}/{event.object_name}") as conn:
            last = conn.execute(
                "SELECT id, type, reason, message FROM events "
                "WHERE object_kind = ? AND namespace = ? AND object_name = ? ORDER BY id DESC LIMIT 1",
                key,
            ).fetchone()
            change: ChangeType = "ADDED"
            if last is not None and tuple(last[1:]) == (event.type, event.reason, event.message):
                conn.execute(
                    "UPDATE events SET count = count + 1, last_time = MAX(last_time, ?) WHERE id = ?",
                    (when, last[0]),
                )
                change = "MODIFIED"
            else:
                conn.execute(
                    "INSERT INTO events (object_kind, namespace, object_name, type, reason, message, "
                    "first_time, last_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, event.type, event.reason, event.message, when, when),
                )
            _rows.append_change(conn, EVENT_KIND, event.namespace, f"{event.object_kind}/{event.object_name}", change)

    def list_events(self, object_kind: str, namespace: str, name: str) -> builtins.list[Event]:
        """Return the events of one object in time order; a repeated one appears once, at its latest time."""
        return [record.event for record in self.list_event_records(object_kind, namespace, name)]

    def list_event_records(self, object_kind: str, namespace: str, name: str) -> builtins.list[EventRecord]:
        """Return the events of one object in time order, with how often and when each occurred."""
        with self._translated(f"list events of {object_kind} {namespace}/{name}"):
            rows = (
                self._connection()
                .execute(
                    "SELECT type, reason, message, first_time, last_time, count FROM events "
                    "WHERE object_kind = ? AND namespace = ? AND object_name = ? ORDER BY last_time, id",
                    (object_kind, namespace, name),
                )
                .fetchall()
            )
        return [
            EventRecord(
                event=Event(
                    object_kind=object_kind,
                    object_name=name,
                    namespace=namespace,
                    type=row[0],
                    reason=row[1],
                    message=row[2],
                    time=from_micros(row[4]),
                ),
                count=row[5],
                first_time=from_micros(row[3]),
                last_time=from_micros(row[4]),
            )
            for row in rows
        ]

    def prune_events(self, before: datetime) -> int:
        """Delete events last seen before ``before``; returns how many were deleted."""
        with self._writing("prune events") as conn:
            return conn.execute("DELETE FROM events WHERE last_time < ?", (to_micros(before),)).rowcount

    # ------------------------------------------------------------------------------------------- leases

    def try_acquire_lease(
        self,
        name: str,
        holder: str,
        ttl_seconds: float,
        *,
        holder_info: Mapping[str, object] | None = None,
        is_holder_dead: Callable[[Lease], bool] | None = None,
    ) -> bool:
        """Take or keep a lease; True when ``holder`` holds it afterwards.

        The lease is taken when it is free, expired (``renewed_at + ttl < now``), already ``holder``'s
        (then it is renewed), or when ``is_holder_dead`` says its holder is gone. ``is_holder_dead`` runs
        outside the write transaction (it may be slow or use this store); the takeover then happens only if
        the lease is still exactly as it was shown to it, so a holder that renewed meanwhile keeps it.
        """
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be > 0, got {ttl_seconds}")
        info = _rows.dumps(dict(holder_info)) if holder_info is not None else None
        now = to_utc(self._now())
        suspect: Lease | None = None
        if is_holder_dead is not None:
            seen = self.get_lease(name)
            if seen is not None and seen.holder != holder and not seen.is_expired(now) and is_holder_dead(seen):
                suspect = seen
        with self._writing(f"acquire lease {name}") as conn:
            current = _rows.select_lease(conn, name)
            if current is not None and current.holder == holder:
                conn.execute(
                    "UPDATE leases SET renewed_at = ?, ttl_seconds = ?, "
                    "holder_info = COALESCE(?, holder_info) WHERE name = ?",
                    (to_micros(now), ttl_seconds, info, name),
                )
                return True
            if current is None or current.is_expired(now) or current == suspect:
                conn.execute(
                    "INSERT OR REPLACE INTO leases (name, holder, acquired_at, renewed_at, ttl_seconds, "
                    "holder_info) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, holder, to_micros(now), to_micros(now), ttl_seconds, info or "{}"),
                )
                return True
            return False

    def renew_lease(self, name: str, holder: str) -> bool:
        """Extend ``holder``'s lease from now; False when the lease is gone or someone else holds it."""
        with self._translated(f"renew lease {name}"):
            cursor = self._connection().execute(
                "UPDATE leases SET renewed_at = ? WHERE name = ? AND holder = ?",
                (to_micros(self._now()), name, holder),
            )
        return cursor.rowcount == 1

    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it (otherwise do nothing)."""
        with self._translated(f"release lease {name}"):
            self._connection().execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def get_lease(self, name: str) -> Lease | None:
        """Return the lease as stored (possibly expired), or None."""
        with self._translated(f"read lease {name}"):
            return _rows.select_lease(self._connection(), name)

    # -------------------------------------------------------------------------------- small state, life

    def get_meta(self, key: str) -> str | None:
        """Return a value of the store's small key/value state, or None."""
        with self._translated(f"read {key!r}"):
            row = self._connection().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the small key/value state (keys starting with ``_store.`` are the store's own)."""
        if key.startswith(_rows.RESERVED_META_PREFIX):
            raise ValueError(f"meta keys starting with {_rows.RESERVED_META_PREFIX!r} are reserved for the store")
        with self._writing(f"write {key!r}") as conn:
            _rows.set_meta(conn, key, value)

    def close(self) -> None:
        """Close this process's connections (every thread's); the store cannot be used afterwards."""
        self._closed = True
        with self._registry_lock:
            slots = builtins.list(self._slots)
            self._slots.clear()
        for slot in slots:
            if slot.pid == os.getpid():
                slot.conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- connections

    def _start_process_state(self) -> None:
        """Fresh per-process state: no connections, new locks (a fork may have copied held ones)."""
        self._pid = os.getpid()
        self._local = threading.local()
        self._registry_lock = threading.Lock()
        self._slots: weakref.WeakSet[ThreadConnection] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._local_writes = 0

    def _connection(self) -> sqlite3.Connection:
        """Return the connection of this thread in this process, opened on first use."""
        if self._closed:
            raise StoreError(f"state store {self._path} is closed")
        if self._pid != os.getpid():
            self._start_process_state()
        slot: ThreadConnection | None = getattr(self._local, "slot", None)
        if slot is None:
            with self._translated("open"):
                slot = ThreadConnection(open_connection(self._path, busy_timeout_ms=self._busy_timeout_ms))
            self._local.slot = slot
            with self._registry_lock:
                self._slots.add(slot)
        return slot.conn

    @contextmanager
    def _writing(self, action: str) -> Iterator[sqlite3.Connection]:
        """One write transaction that holds the file's write lock from its first read."""
        conn = self._connection()
        before = conn.total_changes
        with self._translated(action):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT (a full disk), which leaves the transaction open: the next write
                # must start afresh, not fail on "cannot start a transaction within a transaction".
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
        if conn.total_changes != before:
            with self._cond:
                self._local_writes += 1
                self._cond.notify_all()

    @contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        """Turn SQLite's errors into a ``StoreError`` that says what failed and what to do.

        A lock held past the busy timeout and a full or failing disk become ``StoreUnavailableError``: the
        transaction was rolled back, and the same call may succeed later.
        """
        try:
            yield
        except sqlite3.Error as err:
            unavailable = self._unavailable(err)
            if unavailable is not None:
                raise unavailable from err
            raise StoreError(self._explain(err, action)) from err

    def _unavailable(self, err: sqlite3.Error) -> StoreUnavailableError | None:
        """The error as a passing fault of the store (locked, disk full, I/O), or None if it is not one."""
        name = str(getattr(err, "sqlite_errorname", "") or "")
        text = str(err).lower()
        path = str(self._path)
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
            return StoreUnavailableError(path, "locked", waited_seconds=self._busy_timeout_ms / 1000)
        if name.startswith("SQLITE_FULL") or "disk is full" in text:
            return StoreUnavailableError(path, "full")
        if name.startswith("SQLITE_IOERR") or "disk i/o error" in text:
            return StoreUnavailableError(path, "io", detail=str(err))
        return None

    def _explain(self, err: sqlite3.Error, action: str) -> str:
        text = str(err)
        if "not a database" in text or "malformed" in text:
            return (
                f"state store {self._path} is corrupt or not a SQLite database ({text}); "
                "move it aside (Phalanx then starts with an empty store) or restore a backup"
            )
        if "unable to open" in text or "readonly" in text or "read-only" in text:
            return (
                f"cannot {action} the state store {self._path} ({text}); "
                "check that the file and its directory exist and are writable"
            )
        return f"cannot {action} in the state store {self._path}: {text}"

    def _kind_of(self, cls: type[BaseModel]) -> str:
        kind = self._kinds.get(cls)
        if kind is None:
            field = cls.model_fields.get("kind")
            default = field.default if field is not None else None
            if not isinstance(default, str) or not default:
                raise StoreError(f"{cls.__name__} has no default 'kind' string; the store keys objects by kind")
            self._kinds[cls] = kind = default
        return kind


# ----------------------------------------------------------------------------------------------- helpers


def _create_private(path: Path) -> None:
    """Create the database file 0600 before SQLite opens it, and make one an older version left 0644 private.

    SQLite creates a new database 0644, and its ``-wal``, ``-shm`` and ``-journal`` files with the mode of the
    database file: created 0600 here, they are all the owner's alone from the start. The store holds job
    environments and datasource URLs, which may carry tokens and passwords.
    """
    # Where this fails (a directory in the way, no permission), opening it fails too and says why in SQLite's
    # terms, which the store translates into one sentence.
    with suppress(OSError):
        os.close(open_private(path, os.O_RDWR))
        for suffix in ("", *SIDE_FILE_SUFFIXES):
            tighten(path.with_name(path.name + suffix))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _random_uid() -> str:
    return str(uuid.uuid4())


def _metadata_of(obj: BaseModel) -> ObjectMeta:
    meta = getattr(obj, "metadata", None)
    if not isinstance(meta, ObjectMeta):
        raise StoreError(f"{type(obj).__name__} has no ObjectMeta 'metadata'; only API objects can be stored")
    return meta


def _wire(obj: BaseModel) -> dict[str, Any]:
    """Dump the wire form, as ``ApiModel.to_dict`` writes it."""
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)


def _store_owned(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Pick the metadata fields only the store sets, as stored."""
    return {key: meta[key] for key in _STORE_OWNED if key in meta}


def _with_part(base: Mapping[str, Any], part: str, source: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``base`` with its ``part`` taken from ``source`` (removed when ``source`` has none)."""
    merged = dict(base)
    if part in source:
        merged[part] = source[part]
    else:
        merged.pop(part, None)
    return merged


def _has_labels(meta: ObjectMeta, wanted: Mapping[str, str | None]) -> bool:
    return all(key in meta.labels if value is None else meta.labels.get(key) == value for key, value in wanted.items())


def _selection(
    kind: str, namespaces: Collection[str] | None, labels: Mapping[str, str | None] | None
) -> tuple[str, builtins.list[str], dict[str, str | None]]:
    """The ``WHERE`` condition and parameters of the rows of ``kind`` in ``namespaces`` (None: all) with ``labels``.

    Labels whose keys a JSON path cannot quote are returned apart, to be checked on the parsed objects.
    """
    where = "kind = ?"
    params: builtins.list[str] = [kind]
    if namespaces is not None:
        chosen = sorted(set(namespaces))
        where += f" AND namespace IN ({', '.join('?' * len(chosen))})" if chosen else " AND 0"
        params += chosen
    unusual: dict[str, str | None] = {}  # keys JSON paths cannot quote: filtered on the objects instead
    for key, value in (labels or {}).items():
        if '"' in key or "\\" in key:
            unusual[key] = value
            continue
        # A body that is not JSON at all must not fail the query: it is left out here, like any unreadable row.
        where += " AND CASE WHEN json_valid(body) THEN json_extract(body, ?) END"
        where += " IS NOT NULL" if value is None else " = ?"
        params += [f'$.metadata.labels."{key}"'] if value is None else [f'$.metadata.labels."{key}"', value]
    return where, params, unusual
