"""SQL sources: a SQLAlchemy URL and a query whose rows become ``data.parquet``.

Rows are fetched in batches (``yield_per``; a server-side cursor on PostgreSQL) and written batch by batch
through pyarrow, so a result larger than memory streams to disk. The query runs in a transaction that is rolled
back when the connection closes: the source is read, never changed. Column types come from the values (the first
non-null batch per column); values pyarrow cannot store (ranges, JSON of mixed shapes…) are stored as text.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.adapters.datasources._types import SourceError, SourceRequest, field_of
from phalanx.adapters.datasources.paths import mask_url, reject_parent_reference
from phalanx.adapters.datasources.staging import BudgetedFile, Progress, WriteBudget
from phalanx.adapters.lazy_imports import serially

BATCH_ROWS = 10_000
OUTPUT_NAME = "data.parquet"
DATA_EXTRA = "pip install 'phalanx[data]'"
DRIVER_EXTRAS = {"postgresql": "pip install 'phalanx[postgres]' and write the URL as postgresql://… (psycopg 3)"}


def _db_message(exc: BaseException) -> str:
    """The database's own words for ``exc`` (the DBAPI error), on one line."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).strip().splitlines() if line.strip()]
    text = " ".join(lines[:3]) if lines else type(orig).__name__
    return re.sub(r"\s+", " ", text)[:500]


def one_line(query: str, limit: int = 200) -> str:
    """``query`` collapsed to one line (whitespace runs to one space), shortened to ``limit`` characters."""
    text = re.sub(r"\s+", " ", query).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _engine(sql_url: str, field: str, base_dir: Path | None, timeout_s: float) -> tuple[Any, str]:
    with serially():  # SQLAlchemy's modules, its dialect and the driver, one thread at a time (lazy_imports)
        return _engine_unlocked(sql_url, field, base_dir, timeout_s)


def _engine_unlocked(sql_url: str, field: str, base_dir: Path | None, timeout_s: float) -> tuple[Any, str]:
    try:
        import sqlalchemy as sa
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError
    except ImportError as exc:
        raise SourceError(field, f"SQL sources need SQLAlchemy, which is not installed: {DATA_EXTRA}") from exc
    try:
        url = sa.engine.make_url(sql_url)
    except ArgumentError as exc:
        raise SourceError(
            field,
            f"{mask_url(sql_url)!r} is not a SQLAlchemy URL; write e.g. postgresql://user@host/db or sqlite:///f.db",
        ) from exc
    backend = url.get_backend_name()
    shown = url
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")  # psycopg 3 (the postgres extra), not SQLAlchemy's psycopg2
    connect_args: dict[str, Any] = {}
    if backend == "sqlite":
        database = url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            reject_parent_reference(database, field, "the SQLite database path")
            path = Path(database).expanduser()
            if not path.is_absolute():
                path = (base_dir if base_dir is not None else Path.cwd()) / path
            if not path.is_file():
                raise SourceError(field, f"no SQLite database at {path}; check the path in the URL (sqlite:///<path>)")
            url = url.set(database=str(path))
            shown = url
        connect_args["timeout"] = timeout_s
    elif backend == "postgresql":
        connect_args["connect_timeout"] = max(1, round(timeout_s))
    try:
        engine = sa.create_engine(url, connect_args=connect_args, poolclass=sa.pool.NullPool)
    except NoSuchModuleError as exc:
        raise SourceError(field, f"SQLAlchemy has no dialect for {backend!r} ({exc}); check the URL's scheme") from exc
    except ImportError as exc:
        fix = DRIVER_EXTRAS.get(backend, f"install the database driver for {backend}")
        raise SourceError(field, f"the driver for {backend} is not installed ({exc}): {fix}") from exc
    return engine, mask_url(shown.render_as_string(hide_password=True))  # also ?password=… in the query string


def _column(values: Sequence[Any], pa: Any, type_: Any | None) -> Any:
    try:
        return pa.array(values, type=type_) if type_ is not None else pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        if type_ is not None and not pa.types.is_string(type_):
            raise
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def _write_parquet(result: Any, target: Path, budget: WriteBudget, progress: Progress | None, field: str) -> int:
    try:
        with serially():
            import pyarrow as pa  # type: ignore[import-untyped]
            import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise SourceError(field, f"SQL sources need pyarrow, which is not installed: {DATA_EXTRA}") from exc
    names = [str(name) for name in result.keys()]  # noqa: SIM118 - a Result is not a mapping
    types: list[Any | None] = [None] * len(names)
    pending: list[list[Any]] = []  # batches (as columns) held back until every column's type is known
    writer: Any = None
    rows = 0
    sink = BudgetedFile(target, budget)
    try:

        def emit(columns: list[Any]) -> None:
            nonlocal writer
            table = pa.Table.from_arrays(columns, names=names)
            if writer is None:
                writer = pq.ParquetWriter(sink, table.schema)
            writer.write_table(table)

        for batch in result.partitions(BATCH_ROWS):
            columns = list(zip(*batch, strict=True)) if batch else [() for _ in names]
            arrays = []
            for i, values in enumerate(columns):
                try:
                    array = _column(values, pa, types[i])
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    raise SourceError(
                        field,
                        f"column {names[i]!r} changes type between rows ({exc}); cast it in the query, "
                        f"e.g. CAST({names[i]} AS TEXT)",
                    ) from exc
                arrays.append(array)
                if types[i] is None and not pa.types.is_null(array.type):
                    types[i] = array.type
            rows += len(batch)
            pending.append(arrays)
            if all(t is not None for t in types):
                for held in pending:
                    emit([a if a.type == types[j] else a.cast(types[j]) for j, a in enumerate(held)])
                pending.clear()
            if progress is not None:
                progress(budget.written, None)
        final = [t if t is not None else pa.null() for t in types]
        for held in pending:
            emit([a if a.type == final[j] else a.cast(final[j]) for j, a in enumerate(held)])
        if writer is None:
            writer = pq.ParquetWriter(sink, pa.schema([pa.field(n, t) for n, t in zip(names, final, strict=True)]))
        writer.close()
        writer = None
    finally:
        if writer is not None:
            with contextlib.suppress(Exception):  # the first error is the one to report
                writer.close()
        sink.close()
    return rows


def query_to_parquet(
    request: SourceRequest,
    staging: Path,
    *,
    base_dir: Path | None,
    budget: WriteBudget,
    progress: Progress | None,
    timeout_s: float,
) -> str:
    """Run the query of ``request`` and write its rows to ``staging/data.parquet``; returns the lineage line."""
    url_field = field_of(request, "sql_url")
    query_field = field_of(request, "query")
    if not request.sql_url:
        raise SourceError(url_field, "an sql source needs a SQLAlchemy URL, e.g. postgresql://user@host:5432/db")
    if not request.query or not request.query.strip():
        raise SourceError(query_field, "an sql source needs a query, e.g. SELECT * FROM samples")
    engine, shown = _engine(request.sql_url, url_field, base_dir, timeout_s)
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    try:
        try:
            connection = engine.connect()
        except DBAPIError as exc:
            raise SourceError(
                url_field,
                f"cannot connect to {shown}: {_db_message(exc)}; check the host, port, database and credentials",
            ) from exc
        with connection:
            try:
                result = connection.execution_options(yield_per=BATCH_ROWS).execute(text(request.query))
                if not result.returns_rows:
                    raise SourceError(query_field, "the statement returns no rows; write a SELECT (or … RETURNING)")
                rows = _write_parquet(result, staging / OUTPUT_NAME, budget, progress, query_field)
            except DBAPIError as exc:
                raise SourceError(
                    query_field, f"the database rejected the query: {_db_message(exc)}; fix the SQL"
                ) from exc
            except SQLAlchemyError as exc:
                raise SourceError(query_field, f"the query could not run: {exc}; fix the SQL") from exc
    finally:
        engine.dispose()
    return f"sql: {one_line(request.query)} on {shown} ({rows} row{'s' if rows != 1 else ''})"
