"""The job history store on a SQLite file and on a real PostgreSQL server: the same tests, both databases.

Every PostgreSQL test gets a database of its own, made empty, so "migrations from empty" is what each one runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from phalanx.adapters.history.records import HistoryQuery, JobRecord
from phalanx.adapters.history.store import HistoryError, HistoryStore
from support.postgres import fresh_database

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return fresh_database(request.getfixturevalue("postgres"), "history")


@pytest.fixture
def store(url: str) -> HistoryStore:
    return HistoryStore(url)


def record(uid: str, *, minutes: int = 0, **changes: object) -> JobRecord:
    values: dict[str, object] = {
        "uid": uid,
        "namespace": "team-a",
        "name": f"job-{uid}",
        "queue": "default",
        "job_type": "generic",
        "phase": "Succeeded",
        "ended_at": T0 + timedelta(minutes=minutes),
    }
    values.update(changes)
    return JobRecord(**values)  # type: ignore[arg-type]


def test_opening_an_empty_database_migrates_it_to_the_newest_revision(url: str) -> None:
    store = HistoryStore(url)
    engine = create_engine(store.url)
    tables = set(inspect(engine).get_table_names())
    indexes = {ix["name"] for ix in inspect(engine).get_indexes("job_history")}
    with engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    engine.dispose()
    assert {"job_history", "alembic_version"} <= tables
    assert {"ix_job_history_ended", "ix_job_history_namespace_ended", "ix_job_history_queue_ended"} <= indexes
    assert version == "0001"
    HistoryStore(url).close()  # opening again finds nothing to do


def test_a_job_recorded_twice_is_one_row_with_the_latest_values(store: HistoryStore) -> None:
    full = record(
        "u1",
        spec={"queue": "default", "replicas": {"worker": {"replicas": 2}}},
        status={"phase": "Succeeded"},
        placements={"j-worker-0": {"node": "n1", "gpus": [0, 1]}},
        events=[{"reason": "Admitted", "message": "to queue default"}],
        metrics={"loss": 0.25},
        queueing_seconds=1.5,
        run_seconds=30.0,
        submitted_at=T0 - timedelta(seconds=40),
    )
    store.record(full)
    store.record(full)
    assert store.count() == 1
    got = store.get("u1")
    assert got == full
    deleted_at = T0 + timedelta(hours=1)
    assert store.mark_deleted("u1", deleted_at)
    store.record(full)  # recorded again after its deletion was: the deletion stays
    got = store.get("u1")
    assert got is not None and got.deleted_at == deleted_at
    assert store.count() == 1
    assert not store.mark_deleted("never-recorded", deleted_at)
    assert store.undeleted_uids() == set()


def test_listings_filter_and_page_newest_first(store: HistoryStore) -> None:
    for i in range(7):
        store.record(
            record(
                f"u{i}",
                minutes=i,
                namespace="team-a" if i % 2 == 0 else "team-b",
                queue="gpu" if i < 4 else "cpu",
                phase="Failed" if i == 3 else "Succeeded",
            )
        )
    every = store.list(HistoryQuery(limit=100)).records
    assert [r.uid for r in every] == [f"u{i}" for i in range(6, -1, -1)]
    assert [r.uid for r in store.list(HistoryQuery(namespace="team-b")).records] == ["u5", "u3", "u1"]
    assert [r.uid for r in store.list(HistoryQuery(queue="gpu", phase="Succeeded")).records] == ["u2", "u1", "u0"]
    assert [r.uid for r in store.list(HistoryQuery(since=T0 + timedelta(minutes=5))).records] == ["u6", "u5"]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = store.list(HistoryQuery(limit=3, after=cursor))
        seen += [r.uid for r in page.records]
        if page.next is None:
            break
        cursor = page.next
    assert seen == [r.uid for r in every]


def test_bad_listing_arguments_are_refused_with_a_sentence(store: HistoryStore) -> None:
    with pytest.raises(HistoryError, match="cursor"):
        store.list(HistoryQuery(after="not-a-cursor"))
    with pytest.raises(HistoryError, match="limit must be at least 1"):
        store.list(HistoryQuery(limit=0))
    with pytest.raises(HistoryError, match="keep must be 0 or more"):
        store.prune(keep=-1)


def test_summaries_give_per_queue_counts_and_percentiles(store: HistoryStore) -> None:
    for i in range(1, 21):  # queueing 1..20 s, running 10..200 s
        store.record(record(f"g{i}", minutes=i, queue="gpu", queueing_seconds=float(i), run_seconds=10.0 * i))
    store.record(record("c1", queue="cpu", run_seconds=5.0))
    summaries = {s.queue: s for s in store.summaries(HistoryQuery())}
    assert set(summaries) == {"gpu", "cpu"}
    gpu, cpu = summaries["gpu"], summaries["cpu"]
    assert gpu.count == 20
    assert gpu.queueing_p50 == pytest.approx(10.5)
    assert gpu.queueing_p95 == pytest.approx(19.05)
    assert gpu.run_p50 == pytest.approx(105.0)
    assert gpu.run_p95 == pytest.approx(190.5)
    assert (cpu.count, cpu.queueing_p50, cpu.run_p50) == (1, None, 5.0)
    only_late = store.summaries(HistoryQuery(queue="gpu", since=T0 + timedelta(minutes=11)))
    assert [(s.queue, s.count) for s in only_late] == [("gpu", 10)]


def test_retention_by_age_and_by_count(store: HistoryStore) -> None:
    for i in range(10):
        store.record(record(f"u{i}", minutes=i))
    assert store.prune(older_than=T0 + timedelta(minutes=3)) == 3
    assert store.count() == 7
    assert store.prune(keep=4) == 3
    assert [r.uid for r in store.list(HistoryQuery()).records] == ["u9", "u8", "u7", "u6"]
    assert store.prune(older_than=T0, keep=10) == 0
    assert store.prune(keep=0) == 4
    assert store.count() == 0


def test_a_database_migrated_by_a_newer_phalanx_is_refused_with_a_sentence(url: str) -> None:
    store = HistoryStore(url)
    engine = create_engine(store.url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    engine.dispose()
    store.close()
    with pytest.raises(HistoryError, match="a newer Phalanx wrote it: upgrade Phalanx"):
        HistoryStore(url)


def test_an_unusable_url_is_refused_with_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="not a database URL"):
        HistoryStore("no url at all")
    with pytest.raises(HistoryError, match="SQLite or PostgreSQL"):
        HistoryStore("mysql://u:secret@host/db")
    with pytest.raises(HistoryError) as caught:
        HistoryStore("postgresql://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(caught.value)
