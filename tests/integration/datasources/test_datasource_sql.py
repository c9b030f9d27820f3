"""SQL sources against real databases: SQLite (built in) and a real PostgreSQL server started for the session."""

from __future__ import annotations

import datetime as dt
import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from phalanx.adapters.datasources import SourceError, SourceRequest, content_version, materialize
from phalanx.adapters.datasources.sql import BATCH_ROWS
from support.postgres import PostgresServer, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "db" / "samples.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE samples (id INTEGER, label TEXT, score REAL)")
        rows = [(i, None if i < BATCH_ROWS + 5 else f"l{i % 7}", i / 4) for i in range(BATCH_ROWS * 2 + 123)]
        conn.executemany("INSERT INTO samples VALUES (?, ?, ?)", rows)
    conn.close()
    return path


def test_sqlite_to_parquet_in_batches(tmp_path: Path, sqlite_db: Path) -> None:
    dest = tmp_path / "ds"
    request = SourceRequest(
        "sql", sql_url="sqlite:///db/samples.db", query="SELECT id, label, score\nFROM samples ORDER BY id"
    )
    result = materialize(request, dest, base_dir=tmp_path)
    table = pq.read_table(dest / "data.parquet")
    assert table.num_rows == BATCH_ROWS * 2 + 123
    assert table.column_names == ["id", "label", "score"]
    assert str(table.schema.field("label").type) == "string"  # first batch all NULL: typed from a later one
    assert table.column("label")[0].as_py() is None
    assert table.column("label")[-1].as_py() == f"l{(BATCH_ROWS * 2 + 122) % 7}"
    assert [f.path for f in result.files] == ["data.parquet"]
    assert result.lineage == (
        f"sql: SELECT id, label, score FROM samples ORDER BY id on sqlite:///{sqlite_db} ({BATCH_ROWS * 2 + 123} rows)"
    )
    assert (result.files, result.version) == content_version(dest)


def test_sqlite_empty_result_still_has_columns(tmp_path: Path, sqlite_db: Path) -> None:
    dest = tmp_path / "ds"
    materialize(SourceRequest("sql", sql_url=f"sqlite:///{sqlite_db}", query="SELECT * FROM samples WHERE 0"), dest)
    table = pq.read_table(dest / "data.parquet")
    assert (table.num_rows, table.column_names) == (0, ["id", "label", "score"])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT nope FROM samples", "no such column: nope"),
        ("SELEC 1", "syntax error"),
    ],
)
def test_sqlite_bad_sql(tmp_path: Path, sqlite_db: Path, query: str, message: str) -> None:
    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("sql", sql_url=f"sqlite:///{sqlite_db}", query=query), dest)
    assert err.value.field == "spec.source.sql.query"
    assert message in err.value.message
    assert "fix the SQL" in err.value.message
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == [sqlite_db.parent]


def test_sqlite_missing_file_and_bad_url(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        materialize(
            SourceRequest("sql", sql_url="sqlite:///absent.db", query="SELECT 1"), tmp_path / "a", base_dir=tmp_path
        )
    assert err.value.field == "spec.source.sql.url"
    assert "no SQLite database at" in err.value.message
    assert not (tmp_path / "absent.db").exists()  # never created by a failed attempt
    with pytest.raises(SourceError, match=r"spec\.source\.sql\.url: .* has a '\.\.' component"):
        materialize(SourceRequest("sql", sql_url="sqlite:///../x.db", query="SELECT 1"), tmp_path / "b")
    with pytest.raises(SourceError, match="not a SQLAlchemy URL"):
        materialize(SourceRequest("sql", sql_url="::nonsense::", query="SELECT 1"), tmp_path / "c")
    assert list(tmp_path.iterdir()) == []


def test_sqlite_disk_full_while_writing_parquet(tmp_path: Path, sqlite_db: Path) -> None:
    cache = tmp_path / "cache"
    dest = cache / "ds"
    with pytest.raises(SourceError) as err:
        materialize(
            SourceRequest("sql", sql_url=f"sqlite:///{sqlite_db}", query="SELECT * FROM samples"), dest, max_bytes=4096
        )
    assert err.value.field == "spec.source"
    assert f"no space left on the device holding {cache}: free space or point the cache elsewhere" in err.value.message
    assert list(cache.iterdir()) == []


@pytest.fixture(scope="module")
def pg_table(postgres_url: str) -> str:
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS readings"))
        conn.execute(
            sa.text(
                "CREATE TABLE readings (id int PRIMARY KEY, sensor text, value double precision, "
                "price numeric(10,2), taken timestamptz, tag uuid)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO readings SELECT g, 's' || (g % 3), g * 0.5, (g % 100) + 0.25, "
                "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute', "
                "md5(g::text)::uuid FROM generate_series(1, 25000) AS g"
            )
        )
    engine.dispose()
    return "readings"


def test_postgres_to_parquet(tmp_path: Path, postgres_url: str, pg_table: str, postgres: PostgresServer) -> None:
    dest = tmp_path / "ds"
    seen: list[tuple[int, int | None]] = []
    query = (
        f"SELECT id, sensor, value, price, taken, tag, value::int AS rounded FROM {pg_table} "
        "WHERE id <= 21000 ORDER BY id"
    )
    result = materialize(
        SourceRequest("sql", sql_url=postgres_url, query=query), dest, progress=lambda d, t: seen.append((d, t))
    )
    table = pq.read_table(dest / "data.parquet")
    assert table.num_rows == 21000
    first = table.slice(0, 1).to_pylist()[0]
    assert first["sensor"] == "s1"
    assert first["price"] == Decimal("1.25")
    assert first["taken"] == dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC)
    assert str(first["tag"]) == "c4ca4238-a0b9-2382-0dcc-509a6f75849b"  # md5('1'): a UUID, or text on old pyarrow
    assert first["rounded"] == 0
    host, port = postgres.host, postgres.port
    assert result.lineage == f"sql: {query} on postgresql://phalanx:***@{host}:{port}/phalanx_test (21000 rows)"
    assert "s3cret" not in result.lineage
    assert seen and all(t is None for _, t in seen)


def test_postgres_bad_sql_gives_the_database_message(tmp_path: Path, postgres_url: str, pg_table: str) -> None:
    dest = tmp_path / "ds"
    with pytest.raises(SourceError) as err:
        materialize(SourceRequest("sql", sql_url=postgres_url, query=f"SELECT missing_col FROM {pg_table}"), dest)
    assert err.value.field == "spec.source.sql.query"
    assert 'column "missing_col" does not exist' in err.value.message
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_postgres_query_cannot_change_data(tmp_path: Path, postgres_url: str, pg_table: str) -> None:
    # Rows are read through a server-side cursor, which PostgreSQL only opens for read-only queries.
    with pytest.raises(SourceError, match="the database rejected the query"):
        materialize(
            SourceRequest("sql", sql_url=postgres_url, query=f"DELETE FROM {pg_table} WHERE id = 1 RETURNING id"),
            tmp_path / "ds",
        )
    count = materialize(
        SourceRequest("sql", sql_url=postgres_url, query=f"SELECT count(*) AS n FROM {pg_table}"), tmp_path / "count"
    )
    assert pq.read_table(tmp_path / "count" / "data.parquet").to_pylist() == [{"n": 25000}]
    assert count.lineage.endswith("(1 row)")
    assert not (tmp_path / "ds").exists()


def test_postgres_unreachable_and_wrong_password(tmp_path: Path, postgres: PostgresServer) -> None:
    with pytest.raises(SourceError) as err:
        materialize(
            SourceRequest("sql", sql_url=f"postgresql://u:topsecret@127.0.0.1:{free_port()}/db", query="SELECT 1"),
            tmp_path / "a",
            timeout_s=5,
        )
    assert err.value.field == "spec.source.sql.url"
    assert "cannot connect to postgresql://u:***@127.0.0.1" in err.value.message
    assert "topsecret" not in str(err.value)
    host, port = postgres.host, postgres.port
    with pytest.raises(SourceError, match="password authentication failed"):
        materialize(
            SourceRequest("sql", sql_url=f"postgresql://phalanx:wrong@{host}:{port}/phalanx_test", query="SELECT 1"),
            tmp_path / "b",
        )
    assert list(tmp_path.iterdir()) == []
