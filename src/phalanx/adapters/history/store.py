"""The job history store: open (migrating to the newest schema), record, list, summarise, prune.

SQLite by default (a file of its own, ``history.db`` in the state directory) and PostgreSQL when given a
``postgresql://`` URL (psycopg 3, the ``postgres`` extra). Opening runs Alembic's ``upgrade head`` on the
database, so a new database gets the schema and an old one the revisions it lacks.

Recording is an upsert by ``uid``: a job recorded twice (on finishing, then on deletion) is one row, updated; a
``deleted_at`` once set stays. Listings are newest first (``ended_at``, then ``id``) and paged by a cursor of
the last row's position, so a page does not shift while newer jobs are recorded. Percentiles are computed
here, not in SQL: SQLite has no percentile function, and one code path for both databases is worth the scan of
the durations of the selected rows.
"""

from __future__ import annotations

import base64
import builtins
import fcntl
import math
import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Engine, and_, create_engine, delete, func, or_, select
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session

from phalanx.adapters.history.records import HistoryPage, HistoryQuery, JobRecord, QueueSummary
from phalanx.adapters.history.schema import JobRow
from phalanx.model.masking import mask_url

MIGRATIONS = Path(__file__).parent / "migrations"
_TIMES = ("submitted_at", "started_at", "finished_at", "ended_at", "deleted_at")
_FIELDS = [f.name for f in fields(JobRecord)]


class HistoryError(Exception):
    """The history database cannot be opened or used; the message says which and what to do."""


# The advisory lock PostgreSQL openers take while migrating (any constant of our own: "phalanxh").
_MIGRATION_LOCK_KEY = 0x7068616C616E7868


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Let one process at a time migrate a SQLite history file.

    Two processes opening a new file at once (the control plane and a reader) both found no schema and both
    created it; the second failed with "table job_history already exists", and the control plane ran without a
    history. ``flock`` on the database file itself does not touch SQLite's own (``fcntl``) locks.
    """
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    descriptor = os.open(database, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def database_url(url: str) -> str:
    """The SQLAlchemy URL to open for a user's ``url``: ``postgresql://`` goes through psycopg 3.

    Raises:
        HistoryError: it is no SQLAlchemy URL, or not one of SQLite or PostgreSQL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise HistoryError(
            f"history URL {mask_url(url)!r} is not a database URL; write e.g. postgresql://user@host/db"
        ) from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise HistoryError(
            f"history URL {mask_url(url)!r}: the history is kept in SQLite or PostgreSQL; write sqlite:///file.db "
            "or postgresql://user@host/db"
        )
    return parsed.render_as_string(hide_password=False)


def _utc_naive(value: datetime | None) -> datetime | None:
    """``value`` in UTC without a zone, as the columns hold times (a naive value is taken as UTC already)."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _cursor(row: JobRow) -> str:
    text = f"{row.ended_at.isoformat()}|{row.id}"
    return base64.urlsafe_b64encode(text.encode()).decode()


def _parse_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        ended, _, ident = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(ended), int(ident)
    except ValueError:
        raise HistoryError(
            f"the page cursor {cursor!r} is not one a listing returned; pass the `next` value of the previous page"
        ) from None


class HistoryStore:
    """The job history in one database (SQLite or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        """Open the database at ``url`` and bring its schema to the newest revision.

        Raises:
            HistoryError: the URL is not usable, or the database cannot be reached or migrated.
        """
        self.url = database_url(url)
        try:
            self.engine: Engine = create_engine(self.url)
            with _migration_lock(self.engine), self.engine.begin() as conn:
                self._upgrade(conn)
        except NoSuchModuleError:
            raise HistoryError(
                f"history URL {mask_url(url)!r} needs a database driver that is not installed: for PostgreSQL, "
                "pip install 'phalanx[postgres]'"
            ) from None
        except CommandError as err:
            # Alembic knows no revision the database says it is at: a newer Phalanx migrated it.
            raise HistoryError(
                f"the job history at {mask_url(url)} has a schema this Phalanx does not know ({err}); a newer "
                "Phalanx wrote it: upgrade Phalanx, or give another database"
            ) from None
        except (SQLAlchemyError, ImportError, OSError) as err:
            # OSError: the migration lock opens a SQLite file before SQLite does (a folder that does not exist).
            raise HistoryError(f"cannot open the job history at {mask_url(url)}: {err}") from None

    @classmethod
    def at_path(cls, path: Path) -> HistoryStore:
        """The SQLite history in the file ``path`` (made when missing)."""
        return cls(f"sqlite:///{path}")

    @staticmethod
    def _upgrade(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            # Held to the end of the transaction: a second opener waits, then finds the schema at head.
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_KEY})")
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, "head")

    def close(self) -> None:
        """Close the database's connections."""
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self.engine) as session, session.begin():
            yield session

    def record(self, record: JobRecord) -> None:
        """Keep ``record``: a new row, or its uid's row updated (a ``deleted_at`` already kept stays)."""
        values: dict[str, Any] = {name: getattr(record, name) for name in _FIELDS}
        for name in _TIMES:
            values[name] = _utc_naive(values[name])
        with self._session() as session:
            row = session.scalars(select(JobRow).where(JobRow.uid == record.uid).with_for_update()).first()
            if row is None:
                session.add(JobRow(**values))
                return
            if row.deleted_at is not None:
                values["deleted_at"] = row.deleted_at if values["deleted_at"] is None else values["deleted_at"]
                values["ended_at"] = row.ended_at if record.finished_at is None else values["ended_at"]
            for name, value in values.items():
                setattr(row, name, value)

    def mark_deleted(self, uid: str, when: datetime) -> bool:
        """Say that the recorded job ``uid`` was deleted at ``when``; False when it has no record."""
        with self._session() as session:
            row = session.scalars(select(JobRow).where(JobRow.uid == uid).with_for_update()).first()
            if row is None:
                return False
            if row.deleted_at is None:
                row.deleted_at = _utc_naive(when)
            return True

    def get(self, uid: str) -> JobRecord | None:
        """The record of job ``uid``, or None."""
        with self._session() as session:
            row = session.scalars(select(JobRow).where(JobRow.uid == uid)).first()
            return None if row is None else self._record(row)

    def undeleted_uids(self) -> set[str]:
        """The uids of the records not (yet) marked deleted."""
        with self._session() as session:
            return set(session.scalars(select(JobRow.uid).where(JobRow.deleted_at.is_(None))))

    @staticmethod
    def _record(row: JobRow) -> JobRecord:
        values = {name: getattr(row, name) for name in _FIELDS}
        for name in _TIMES:
            values[name] = _utc(values[name])
        return JobRecord(**values)

    @staticmethod
    def _filters(query: HistoryQuery) -> list[Any]:
        conditions: list[Any] = []
        if query.namespace is not None:
            conditions.append(JobRow.namespace == query.namespace)
        if query.namespaces is not None:
            conditions.append(JobRow.namespace.in_(sorted(query.namespaces)))
        if query.queue is not None:
            conditions.append(JobRow.queue == query.queue)
        if query.phase is not None:
            conditions.append(JobRow.phase == query.phase)
        if query.since is not None:
            conditions.append(JobRow.ended_at >= _utc_naive(query.since))
        return conditions

    def list(self, query: HistoryQuery) -> HistoryPage:
        """The records ``query`` selects, newest first, one page of at most ``query.limit``.

        Raises:
            HistoryError: ``query.after`` is no cursor a listing returned, or the limit is not positive.
        """
        if query.limit < 1:
            raise HistoryError(f"limit must be at least 1 (got {query.limit})")
        conditions = self._filters(query)
        if query.after is not None:
            ended, ident = _parse_cursor(query.after)
            conditions.append(or_(JobRow.ended_at < ended, and_(JobRow.ended_at == ended, JobRow.id < ident)))
        statement = (
            select(JobRow).where(*conditions).order_by(JobRow.ended_at.desc(), JobRow.id.desc()).limit(query.limit + 1)
        )
        with self._session() as session:
            rows = list(session.scalars(statement))
            more = len(rows) > query.limit
            rows = rows[: query.limit]
            return HistoryPage([self._record(r) for r in rows], _cursor(rows[-1]) if more and rows else None)

    def summaries(self, query: HistoryQuery) -> builtins.list[QueueSummary]:
        """Per queue (by name), how many records ``query`` selects and their p50/p95 queueing and run seconds."""
        statement = select(JobRow.queue, JobRow.queueing_seconds, JobRow.run_seconds).where(*self._filters(query))
        counts: dict[str, int] = defaultdict(int)
        queueing: dict[str, list[float]] = defaultdict(list)
        running: dict[str, list[float]] = defaultdict(list)
        with self._session() as session:
            for queue, queued, ran in session.execute(statement):
                counts[queue] += 1
                if queued is not None:
                    queueing[queue].append(queued)
                if ran is not None:
                    running[queue].append(ran)
        return [
            QueueSummary(
                queue=queue,
                count=counts[queue],
                queueing_p50=_percentile(queueing[queue], 0.5),
                queueing_p95=_percentile(queueing[queue], 0.95),
                run_p50=_percentile(running[queue], 0.5),
                run_p95=_percentile(running[queue], 0.95),
            )
            for queue in sorted(counts)
        ]

    def prune(self, *, older_than: datetime | None = None, keep: int | None = None) -> int:
        """Drop records that ended before ``older_than`` and all but the newest ``keep``; how many went.

        Raises:
            HistoryError: ``keep`` is negative.
        """
        if keep is not None and keep < 0:
            raise HistoryError(f"keep must be 0 or more records (got {keep})")
        dropped = 0
        with self._session() as session:
            if older_than is not None:
                result = session.execute(delete(JobRow).where(JobRow.ended_at < _utc_naive(older_than)))
                dropped += result.rowcount or 0  # type: ignore[attr-defined]  # a CursorResult for a DELETE
            if keep is not None:
                newest = select(JobRow.id).order_by(JobRow.ended_at.desc(), JobRow.id.desc()).limit(keep)
                result = session.execute(delete(JobRow).where(JobRow.id.not_in(newest.scalar_subquery())))
                dropped += result.rowcount or 0  # type: ignore[attr-defined]  # a CursorResult for a DELETE
        return dropped

    def count(self) -> int:
        """How many records are kept."""
        with self._session() as session:
            return int(session.scalar(select(func.count()).select_from(JobRow)) or 0)
