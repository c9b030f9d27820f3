"""SqliteStore on a real file: a row that does not parse never makes a read fail for the others.

Rows are written behind the store's back with sqlite3, as an older version, a hand edit or a bug would.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from phalanx.adapters.store import (
    UNKNOWN_KIND,
    UNREADABLE,
    NotFoundError,
    SqliteStore,
    UnreadableError,
)
from phalanx.core.clock import VirtualClock
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.queues import Queue
from phalanx.model.validation import validate_job

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOBTYPES = builtin_jobtypes()


def make_job(name: str, labels: dict[str, str] | None = None) -> TrainingJob:
    raw = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}},
    }
    return validate_job(raw, JOBTYPES)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


@pytest.fixture
def store(tmp_path: Path, clock: VirtualClock) -> Iterator[SqliteStore]:
    uids = (f"uid-{n}" for n in itertools.count(1))
    with SqliteStore(tmp_path / "phalanx.db", now=clock.now, uid_factory=lambda: next(uids)) as opened:
        yield opened


def raw_sql(store: SqliteStore, sql: str, *params: object) -> None:
    with sqlite3.connect(store.path) as raw:
        raw.execute(sql, params)


def corrupt(store: SqliteStore, name: str, change: str, *params: object) -> None:
    """Rewrite one job's body in SQL (``change`` is an expression over ``body``)."""
    raw_sql(store, f"UPDATE objects SET body = {change} WHERE kind = 'TrainingJob' AND name = ?", *params, name)


def test_list_leaves_out_rows_that_do_not_parse_and_quarantines_them(store: SqliteStore) -> None:
    for name in ("a-good", "b-garbage", "c-namespace", "d-good", "e-moved"):
        store.create(make_job(name, labels={"team": "x"}))
    corrupt(store, "b-garbage", "'{not json'")
    corrupt(store, "c-namespace", "json_set(body, '$.metadata.namespace', 'Team-A')")
    corrupt(store, "e-moved", "json_set(body, '$.metadata.name', 'elsewhere')")

    assert [j.metadata.name for j in store.list(TrainingJob)] == ["a-good", "d-good"]
    assert [j.metadata.name for j in store.list(TrainingJob, labels={"team": "x"})] == ["a-good", "d-good"]
    assert [j.metadata.name for j in store.list(TrainingJob, labels={'we"ird': "x"})] == []
    assert [j.metadata.name for j in store.list(TrainingJob, labels={"team": None})] == ["a-good", "d-good"]
    assert [j.metadata.name for j in store.list(TrainingJob, labels={'we"ird': None})] == []

    records = {record.name: record for record in store.quarantined()}
    assert sorted(records) == ["b-garbage", "c-namespace", "e-moved"]
    assert all(r.reason == UNREADABLE and not r.readable and r.kind == "TrainingJob" for r in records.values())
    assert "Invalid JSON" in records["b-garbage"].message
    assert "metadata.namespace" in records["c-namespace"].message and "Team-A" in records["c-namespace"].message
    assert "stored as default/e-moved" in records["e-moved"].message
    assert all("\n" not in r.message for r in records.values())  # one sentence each


def test_get_of_an_unreadable_row_raises_for_it_alone_and_delete_row_removes_it(store: SqliteStore) -> None:
    store.create(make_job("good"))
    store.create(make_job("bad"))
    corrupt(store, "bad", "json_set(body, '$.status.phase', 'Exploded')")

    with pytest.raises(UnreadableError, match=r"TrainingJob default/bad .*status\.phase.*Exploded"):
        store.get(TrainingJob, "default", "bad")
    assert store.get(TrainingJob, "default", "good").metadata.name == "good"
    assert [r.name for r in store.quarantined("TrainingJob")] == ["bad"]

    seq = store.latest_seq()
    store.delete_row("TrainingJob", "default", "bad")
    assert [c.type for c in store.changes_since(seq)] == ["DELETED"]  # watchers see it go
    assert store.quarantined() == []
    assert store.try_get(TrainingJob, "default", "bad") is None
    with pytest.raises(NotFoundError):
        store.delete_row("TrainingJob", "default", "bad")


def test_a_record_stops_applying_once_its_row_changes(store: SqliteStore) -> None:
    store.create(make_job("bad"))
    corrupt(store, "bad", "'[]'")
    store.list(TrainingJob)
    assert [r.name for r in store.quarantined()] == ["bad"]

    raw_sql(store, "UPDATE objects SET resource_version = resource_version + 100 WHERE name = 'bad'")
    assert store.quarantined() == []  # the row changed: whoever changed it may have fixed it
    store.list(TrainingJob)
    assert [r.name for r in store.quarantined()] == ["bad"]  # it was not fixed: quarantined again


def test_a_step_quarantines_a_readable_object_until_released(store: SqliteStore, clock: VirtualClock) -> None:
    job = store.create(make_job("stuck"))
    retry = START + timedelta(minutes=5)
    record = store.quarantine(
        TrainingJob, "default", "stuck", reason="ControllerError", message="it failed", retry_at=retry
    )
    assert record is not None and record.readable
    assert record.resource_version == int(job.metadata.resource_version or 0)
    [stored] = store.quarantined("TrainingJob")
    assert (stored.reason, stored.message) == ("ControllerError", "it failed")
    assert (stored.retry_at, stored.since) == (retry, START)
    assert [j.metadata.name for j in store.list(TrainingJob)] == ["stuck"]  # still listed: it parses

    store.release(TrainingJob, "default", "stuck")
    assert store.quarantined() == []
    assert store.quarantine(TrainingJob, "default", "gone", reason="X", message="m", retry_at=None) is None


def test_audit_finds_unreadable_rows_and_rows_of_unknown_kinds(store: SqliteStore) -> None:
    store.create(make_job("fine"))
    raw_sql(
        store,
        "INSERT INTO objects (kind, namespace, name, uid, resource_version, generation, body) "
        "VALUES ('TrainingJobV0', 'default', 'old', 'uid-old', 1, 1, ?), ('Queue', 'default', 'q', 'uid-q', 2, 1, ?)",
        json.dumps({"kind": "TrainingJobV0"}),
        "{}",
    )

    records = {(r.kind, r.name): r for r in store.audit([TrainingJob, Queue])}
    assert set(records) == {("TrainingJobV0", "old"), ("Queue", "q")}
    assert records[("TrainingJobV0", "old")].reason == UNKNOWN_KIND
    assert "'TrainingJobV0' is not one this Phalanx knows" in records[("TrainingJobV0", "old")].message
    assert records[("Queue", "q")].reason == UNREADABLE
    for kind, name in records:
        store.delete_row(kind, "default", name)
    assert store.audit([TrainingJob, Queue]) == []


def test_a_body_whose_resource_version_disagrees_with_its_row_can_still_be_written(store: SqliteStore) -> None:
    # Otherwise every write back would conflict, and a step would retry it on every pass, forever.
    store.create(make_job("edited"))
    corrupt(store, "edited", "json_set(body, '$.metadata.resourceVersion', '999')")

    job = store.get(TrainingJob, "default", "edited")
    assert job.metadata.resource_version == "1"
    assert [j.metadata.resource_version for j in store.list(TrainingJob)] == ["1"]
    job.metadata.labels = {"fixed": "yes"}
    assert store.update(job).metadata.labels == {"fixed": "yes"}
