"""Row-level SQL of the state store, run inside the caller's connection or transaction.

``sqlite.py`` decides *what* a write does (checks, merging, revisions); these functions only read and write
rows, so every statement against the schema of ``_schema.py`` is in one place.
"""

from __future__ import annotations

import json
import sqlite3

from phalanx.adapters.store.records import ChangeType, Lease, QuarantineRecord, from_micros

RESERVED_META_PREFIX = "_store."
"""Keys of the ``meta`` table that belong to the store itself."""

COMPACTED_THROUGH = RESERVED_META_PREFIX + "changes_compacted_through"
"""The highest feed ``seq`` that compaction removed (0: nothing removed)."""


def dumps(data: object) -> str:
    """Serialise JSON compactly, as bodies are stored."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def select_object(conn: sqlite3.Connection, kind: str, namespace: str, name: str) -> tuple[int, int, str] | None:
    row = conn.execute(
        "SELECT resource_version, generation, body FROM objects WHERE kind = ? AND namespace = ? AND name = ?",
        (kind, namespace, name),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]), str(row[2]))


def write_object(
    conn: sqlite3.Connection, kind: str, namespace: str, name: str, seq: int, generation: int, body: object
) -> None:
    conn.execute(
        "UPDATE objects SET resource_version = ?, generation = ?, body = ? "
        "WHERE kind = ? AND namespace = ? AND name = ?",
        (seq, generation, dumps(body), kind, namespace, name),
    )


def append_change(conn: sqlite3.Connection, kind: str, namespace: str, name: str, change: ChangeType) -> int:
    """Append to the feed inside the caller's transaction; the new ``seq`` is the write's revision."""
    row = conn.execute(
        "INSERT INTO changes (kind, namespace, name, type) VALUES (?, ?, ?, ?) RETURNING seq",
        (kind, namespace, name, change),
    ).fetchone()
    return int(row[0])


def latest_seq(conn: sqlite3.Connection) -> int:
    # sqlite_sequence keeps the highest seq ever handed out, even when compaction removed every row.
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return 0 if row is None else int(row[0])


def compacted_through(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (COMPACTED_THROUGH,)).fetchone()
    return 0 if row is None else int(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def select_lease(conn: sqlite3.Connection, name: str) -> Lease | None:
    row = conn.execute(
        "SELECT holder, acquired_at, renewed_at, ttl_seconds, holder_info FROM leases WHERE name = ?", (name,)
    ).fetchone()
    if row is None:
        return None
    return Lease(
        name=name,
        holder=str(row[0]),
        acquired_at=from_micros(row[1]),
        renewed_at=from_micros(row[2]),
        ttl_seconds=float(row[3]),
        holder_info=json.loads(row[4]),
    )


def select_quarantine(conn: sqlite3.Connection, kind: str | None = None) -> list[QuarantineRecord]:
    """The records that still apply: their row exists at the version they are about (unknown kinds included)."""
    sql = (
        "SELECT q.kind, q.namespace, q.name, q.resource_version, q.reason, q.message, q.since, q.retry_at "
        "FROM quarantine q JOIN objects o ON o.kind = q.kind AND o.namespace = q.namespace AND o.name = q.name "
        "AND o.resource_version = q.resource_version"
    )
    params: list[str] = []
    if kind is not None:
        sql += " WHERE q.kind = ?"
        params.append(kind)
    rows = conn.execute(sql + " ORDER BY q.kind, q.namespace, q.name", params).fetchall()
    return [
        QuarantineRecord(
            kind=str(row[0]),
            namespace=str(row[1]),
            name=str(row[2]),
            resource_version=int(row[3]),
            reason=str(row[4]),
            message=str(row[5]),
            since=from_micros(row[6]),
            retry_at=None if row[7] is None else from_micros(row[7]),
        )
        for row in rows
    ]


def write_quarantine(conn: sqlite3.Connection, record: QuarantineRecord, *, since: int, retry_at: int | None) -> None:
    """Insert or replace the object's record; ``since`` stays that of the first record until it is deleted."""
    conn.execute(
        "INSERT INTO quarantine (kind, namespace, name, resource_version, reason, message, since, retry_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, namespace, name) DO UPDATE SET "
        "resource_version = excluded.resource_version, reason = excluded.reason, message = excluded.message, "
        "retry_at = excluded.retry_at",
        (
            record.kind,
            record.namespace,
            record.name,
            record.resource_version,
            record.reason,
            record.message,
            since,
            retry_at,
        ),
    )


def delete_quarantine(conn: sqlite3.Connection, kind: str, namespace: str, name: str) -> None:
    conn.execute("DELETE FROM quarantine WHERE kind = ? AND namespace = ? AND name = ?", (kind, namespace, name))
