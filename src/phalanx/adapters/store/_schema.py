"""The SQLite schema of the embedded state store, how it is created and migrated, and how connections open.

Owns every table definition and the connection settings, so that ``sqlite.py`` holds only behaviour:

- ``objects``: one row per API object, keyed by (kind, namespace, name); the primary key's leading column is
  ``kind``, so that key's index is the by-kind index listing uses. ``body`` is the object's wire form (JSON).
- ``changes``: the change feed. Its AUTOINCREMENT ``seq`` is the store's one global revision counter: every
  write appends a row in the same transaction and the object's resourceVersion is that row's ``seq``.
  AUTOINCREMENT (not a plain rowid) keeps ``seq`` strictly increasing even after compaction deletes rows.
- ``events``, ``leases``, ``meta`` (small key/value state) and ``schema_version`` (for future migrations).
- ``quarantine`` (version 2): objects set aside so that they cannot stop the control plane, one row per object,
  each about one ``resource_version`` of it (see ``records.QuarantineRecord``).

Settings: WAL journal mode (readers never block the single writer, and several processes share the file),
``synchronous=NORMAL`` (durable across process crashes; a power loss may drop the last commits but never
corrupts the file), and a busy timeout so that concurrent writers queue instead of failing at once.
Creation is idempotent and runs under ``BEGIN IMMEDIATE``, so two processes opening a new file at the same
moment both end up with the same schema.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from phalanx.adapters.sqlite_wal import switch_to_wal
from phalanx.adapters.store.errors import StoreError

SCHEMA_VERSION = 2
"""The schema this code writes. A file with a higher version was written by a newer Phalanx."""

# version -> statements that bring a file from the previous version to this one.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """
        CREATE TABLE IF NOT EXISTS objects (
            kind TEXT NOT NULL,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            uid TEXT NOT NULL,
            resource_version INTEGER NOT NULL,
            generation INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (kind, namespace, name)
        )
        """,
        "CREATE UNIQUE INDEX IF NOT EXISTS objects_by_uid ON objects (uid)",
        """
        CREATE TABLE IF NOT EXISTS changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            type TEXT NOT NULL CHECK (type IN ('ADDED', 'MODIFIED', 'DELETED')),
            resource_version INTEGER GENERATED ALWAYS AS (seq) VIRTUAL
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            object_kind TEXT NOT NULL,
            namespace TEXT NOT NULL,
            object_name TEXT NOT NULL,
            type TEXT NOT NULL,
            reason TEXT NOT NULL,
            message TEXT NOT NULL,
            first_time INTEGER NOT NULL,
            last_time INTEGER NOT NULL,
            count INTEGER NOT NULL DEFAULT 1
        )
        """,
        "CREATE INDEX IF NOT EXISTS events_by_object ON events (object_kind, namespace, object_name, id)",
        "CREATE INDEX IF NOT EXISTS events_by_time ON events (last_time)",
        """
        CREATE TABLE IF NOT EXISTS leases (
            name TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            acquired_at INTEGER NOT NULL,
            renewed_at INTEGER NOT NULL,
            ttl_seconds REAL NOT NULL,
            holder_info TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
    2: (
        """
        CREATE TABLE IF NOT EXISTS quarantine (
            kind TEXT NOT NULL,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            resource_version INTEGER NOT NULL,
            reason TEXT NOT NULL,
            message TEXT NOT NULL,
            since INTEGER NOT NULL,
            retry_at INTEGER,
            PRIMARY KEY (kind, namespace, name)
        )
        """,
    ),
}


# Connections inherited through fork: closing them in the child would release the *child's* POSIX locks on
# the file (locks are per process and per file, not per descriptor), so they are kept alive, unused, here.
_INHERITED_CONNECTIONS: list[sqlite3.Connection] = []


class ThreadConnection:
    """One thread's connection; closed when the thread ends (its thread-local slot is dropped)."""

    __slots__ = ("__weakref__", "conn", "pid")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pid = os.getpid()

    def __del__(self) -> None:
        # May run at interpreter shutdown, when module globals (``suppress`` too) may already be None: a plain
        # try, which needs no global.
        try:
            if self.pid == os.getpid():
                self.conn.close()
            else:
                _INHERITED_CONNECTIONS.append(self.conn)
        except Exception:  # nosec B110  # closing a connection at exit: nothing to report
            pass


def open_connection(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a connection in autocommit mode (transactions are explicit) with the per-connection settings.

    ``check_same_thread`` is off only so that ``close()`` can close every thread's connection; each
    connection is otherwise used by the one thread that opened it.
    """
    conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


#: How long opening a new store waits while another process switches the same file to WAL.
WAL_SWITCH_TIMEOUT_S = 30.0


def prepare_database(conn: sqlite3.Connection, path: Path) -> None:
    """Switch the file to WAL and create or migrate the schema; safe to run from many processes at once.

    Raises:
        StoreError: the file cannot use WAL (e.g. a network file system) or has a newer schema.

    """
    mode = switch_to_wal(conn, timeout_s=WAL_SWITCH_TIMEOUT_S)
    if mode != "wal":
        raise StoreError(
            f"state store {path}: SQLite refused WAL journal mode (got {mode!r}); "
            "put the state directory on a local file system"
        )
    if _schema_version(conn) == SCHEMA_VERSION:
        # Already created: no write lock needed, so a store that another process keeps locked can still be
        # opened and read (WAL readers never wait for the writer).
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        current = int(row[0]) if row and row[0] is not None else 0
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"state store {path} has schema version {current}, but this Phalanx knows only up to "
                f"{SCHEMA_VERSION}; upgrade Phalanx or use another state directory"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
        if current < SCHEMA_VERSION:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _schema_version(conn: sqlite3.Connection) -> int | None:
    """The file's schema version, read without a write lock; None when it has no schema yet."""
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return None
        raise
    return int(row[0]) if row and row[0] is not None else None
