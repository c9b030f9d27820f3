"""SqliteStore on a real SQLite file: objects, concurrency across processes, feed, events, leases."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from phalanx.adapters.store import (
    EVENT_KIND,
    AlreadyExistsError,
    Change,
    ChangesExpiredError,
    ConflictError,
    Lease,
    NotFoundError,
    SqliteStore,
    StoreError,
)
from phalanx.adapters.store._schema import SCHEMA_VERSION
from phalanx.core.clock import VirtualClock
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import CpuInfo, GpuInfo, Node, NodeStatus
from phalanx.model.replicas import Replica, ReplicaObjectSpec, ReplicaPhase
from phalanx.model.validation import validate_job

pytestmark = pytest.mark.integration

JOBTYPES = builtin_jobtypes()
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# --------------------------------------------------------------------------------------------- builders


def make_job(name: str = "q", namespace: str = "default", labels: dict[str, str] | None = None) -> TrainingJob:
    raw = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "type": "pytorch",
            "replicas": {
                "master": {"count": 1, "template": {"command": ["python", "train.py"]}},
                "worker": {"count": 2, "template": {"command": ["python", "train.py"]}},
            },
        },
    }
    return validate_job(raw, JOBTYPES)


def make_replica(name: str = "q-worker-0") -> Replica:
    return Replica(
        metadata=ObjectMeta(name=name, labels={"phalanx.dev/job": "q"}),
        spec=ReplicaObjectSpec(
            job_name="q",
            job_uid="uid-q",
            role="worker",
            index=0,
            command=["python", "train.py"],
            env={"RANK": "0"},
            placement=ReplicaPlacement(node="local", cpus=[0, 1], gpus=[0]),
        ),
    )


def make_node(name: str = "local") -> Node:
    return Node(
        metadata=ObjectMeta(name=name, namespace="default"),
        status=NodeStatus(
            cpus=[CpuInfo(id=i, core=i, numa=i // 2) for i in range(4)],
            memory=64 * 2**30,
            gpus=[GpuInfo(index=0, model="H100", memory=80 * 2**30, nvlinks={1: 18}), GpuInfo(index=1)],
            source="simulated",
        ),
    )


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


@pytest.fixture
def store(tmp_path: Path, clock: VirtualClock) -> Iterator[SqliteStore]:
    uids = (f"uid-{n}" for n in itertools.count(1))
    with SqliteStore(tmp_path / "state" / "phalanx.db", now=clock.now, uid_factory=lambda: next(uids)) as opened:
        yield opened


# ------------------------------------------------------------------------------------------- round trips


def test_create_sets_store_owned_metadata_and_round_trips(store: SqliteStore) -> None:
    job = make_job()
    job.metadata.uid = "client-chosen"
    job.metadata.generation = 7

    created = store.create(job)

    assert isinstance(created, TrainingJob)
    assert created.metadata.uid == "uid-1"
    assert created.metadata.generation == 1
    assert created.metadata.creation_timestamp == START
    assert created.metadata.resource_version == str(store.latest_seq())
    assert created.spec == job.spec
    fetched = store.get(TrainingJob, "default", "q")
    assert fetched == created
    assert fetched.to_dict() == created.to_dict()


@pytest.mark.parametrize(
    ("cls", "build", "namespace", "name"),
    [
        (Replica, make_replica, "default", "q-worker-0"),
        (Node, make_node, "default", "local"),
        (JobType, lambda: JOBTYPES["pytorch"], "default", "pytorch"),
    ],
    ids=["replica", "node", "jobtype"],
)
def test_other_kinds_round_trip(store: SqliteStore, cls: Any, build: Any, namespace: str, name: str) -> None:
    original = build()
    created = store.create(original)

    assert type(created) is cls
    assert store.get(cls, namespace, name) == created
    assert created.spec == original.spec
    assert [item.metadata.name for item in store.list(cls)] == [name]

    created.metadata.labels["touched"] = "yes"
    updated = store.update(created)
    assert store.get(cls, namespace, name).metadata.labels["touched"] == "yes"
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)

    store.delete(cls, namespace, name)
    assert store.try_get(cls, namespace, name) is None


def test_node_status_survives_round_trip(store: SqliteStore) -> None:
    created = store.create(make_node())

    assert created.status.gpus[0].nvlinks == {1: 18}
    assert created.status.cpus[3].numa == 1
    assert created.gpu_link(0, 1) == "NV"


def test_missing_objects_raise_not_found(store: SqliteStore) -> None:
    with pytest.raises(NotFoundError, match="TrainingJob default/nope not found"):
        store.get(TrainingJob, "default", "nope")
    assert store.try_get(TrainingJob, "default", "nope") is None
    with pytest.raises(NotFoundError):
        store.update(make_job("nope"))
    with pytest.raises(NotFoundError):
        store.update_status(make_job("nope"))
    with pytest.raises(NotFoundError):
        store.delete(TrainingJob, "default", "nope")
    with pytest.raises(NotFoundError):
        store.mark_deleting(TrainingJob, "default", "nope")


def test_create_twice_raises_already_exists(store: SqliteStore) -> None:
    store.create(make_job())

    with pytest.raises(AlreadyExistsError, match="TrainingJob default/q already exists"):
        store.create(make_job())
    # Same name, other namespace or other kind: different objects.
    store.create(make_job(namespace="team-a"))
    store.create(make_replica("q"))


def test_resource_versions_strictly_increase_across_objects_and_kinds(store: SqliteStore) -> None:
    versions = [int(store.create(make_job(f"job-{i}")).metadata.resource_version or 0) for i in range(3)]
    versions.append(int(store.create(make_node()).metadata.resource_version or 0))
    job = store.get(TrainingJob, "default", "job-0")
    job.metadata.labels["x"] = "1"
    versions.append(int(store.update(job).metadata.resource_version or 0))
    job.status.phase = Phase.QUEUED
    stale = job.model_copy(deep=True)
    stale.metadata.resource_version = str(versions[-1])
    versions.append(int(store.update_status(stale).metadata.resource_version or 0))

    assert versions == sorted(set(versions))
    assert versions[-1] == store.latest_seq()


# ------------------------------------------------------------------------------------ update semantics


def test_generation_moves_only_when_spec_changes(store: SqliteStore) -> None:
    job = store.create(make_job())

    job.metadata.labels["team"] = "vision"
    job = store.update(job)
    assert job.metadata.generation == 1

    job.spec.run_policy.backoff_limit = 9
    job = store.update(job)
    assert job.metadata.generation == 2

    job.status.phase = Phase.RUNNING
    job = store.update_status(job)
    assert job.metadata.generation == 2
    assert store.get(TrainingJob, "default", "q").metadata.generation == 2


def test_update_keeps_stored_status_and_update_status_keeps_spec(store: SqliteStore) -> None:
    job = store.create(make_job())
    job.status.phase = Phase.RUNNING
    job.status.restarts = 2
    running = store.update_status(job)

    # A spec writer with a stale idea of status must not clobber it.
    running.status.phase = Phase.PENDING
    running.status.restarts = 0
    running.spec.run_policy.backoff_limit = 5
    after_update = store.update(running)
    assert after_update.status.phase == Phase.RUNNING
    assert after_update.status.restarts == 2
    assert after_update.spec.run_policy.backoff_limit == 5

    # A status writer cannot change spec or labels.
    after_update.spec.run_policy.backoff_limit = 0
    after_update.metadata.labels["sneaky"] = "yes"
    after_update.status.phase = Phase.SUCCEEDED
    after_status = store.update_status(after_update)
    assert after_status.spec.run_policy.backoff_limit == 5
    assert "sneaky" not in after_status.metadata.labels
    assert after_status.status.phase == Phase.SUCCEEDED
    assert store.get(TrainingJob, "default", "q") == after_status


def test_update_ignores_client_changes_to_store_owned_fields(store: SqliteStore) -> None:
    created = store.create(make_job())
    created.metadata.uid = "forged"
    created.metadata.creation_timestamp = START - timedelta(days=365)
    created.metadata.generation = 99
    created.metadata.deletion_timestamp = START
    created.metadata.labels["a"] = "b"

    updated = store.update(created)

    assert updated.metadata.uid == "uid-1"
    assert updated.metadata.creation_timestamp == START
    assert updated.metadata.generation == 1
    assert updated.metadata.deletion_timestamp is None
    assert updated.metadata.labels["a"] == "b"


def test_stale_resource_version_raises_conflict(store: SqliteStore) -> None:
    first = store.create(make_job())
    second_reader = store.get(TrainingJob, "default", "q")
    first.metadata.labels["winner"] = "first"
    winner = store.update(first)

    second_reader.metadata.labels["winner"] = "second"
    expected = (
        f"TrainingJob default/q was modified (resourceVersion {winner.metadata.resource_version}, "
        f"you had {second_reader.metadata.resource_version}); re-read and retry"
    )
    with pytest.raises(ConflictError) as caught:
        store.update(second_reader)
    assert str(caught.value) == expected
    with pytest.raises(ConflictError):
        store.update_status(second_reader)
    assert store.get(TrainingJob, "default", "q").metadata.labels["winner"] == "first"


def test_noop_update_writes_nothing(store: SqliteStore) -> None:
    job = store.create(make_job())
    seq = store.latest_seq()

    again = store.update(job)
    again_status = store.update_status(job)

    assert again.metadata.resource_version == job.metadata.resource_version
    assert again_status == job
    assert store.latest_seq() == seq


def test_delete_with_precondition_and_mark_deleting(store: SqliteStore, clock: VirtualClock) -> None:
    job = store.create(make_job())
    job.metadata.labels["x"] = "y"
    store.update(job)

    with pytest.raises(ConflictError):
        store.delete(TrainingJob, "default", "q", resource_version=job.metadata.resource_version)

    clock.advance(5)
    marked = store.mark_deleting(TrainingJob, "default", "q")
    assert marked.metadata.deletion_timestamp == START + timedelta(seconds=5)
    clock.advance(5)
    again = store.mark_deleting(TrainingJob, "default", "q")
    assert again == marked  # idempotent: same timestamp, same resourceVersion

    # A client cannot clear the deletion timestamp by updating.
    again.metadata.deletion_timestamp = None
    again.metadata.labels["still"] = "here"
    assert store.update(again).metadata.deletion_timestamp == marked.metadata.deletion_timestamp

    current = store.get(TrainingJob, "default", "q")
    store.delete(TrainingJob, "default", "q", resource_version=current.metadata.resource_version)
    assert store.try_get(TrainingJob, "default", "q") is None
    assert store.changes_since(0)[-1] == Change(store.latest_seq(), "TrainingJob", "default", "q", "DELETED")


def test_list_sorts_and_filters_by_namespace_and_labels(store: SqliteStore) -> None:
    store.create(make_job("b", "team-b", {"app": "x"}))
    store.create(make_job("a", "team-b", {"app": "y"}))
    store.create(make_job("z", "team-a", {"app": "x", "tier": "gold"}))
    store.create(make_replica("z"))

    def names(items: list[TrainingJob]) -> list[str]:
        return [job.key for job in items]

    assert names(store.list(TrainingJob)) == ["team-a/z", "team-b/a", "team-b/b"]
    assert names(store.list(TrainingJob, "team-b")) == ["team-b/a", "team-b/b"]
    assert names(store.list(TrainingJob, labels={"app": "x"})) == ["team-a/z", "team-b/b"]
    assert names(store.list(TrainingJob, labels={"app": "x", "tier": "gold"})) == ["team-a/z"]
    assert names(store.list(TrainingJob, labels={"tier": None})) == ["team-a/z"]  # has the label, any value
    assert names(store.list(TrainingJob, "team-b", labels={"app": None})) == ["team-b/a", "team-b/b"]
    assert store.list(TrainingJob, "nowhere") == []


# ------------------------------------------------------------------------------------------ concurrency


def _increment_counter(path: str, rounds: int, ready: Any, start: Any, results: Any) -> None:
    store = SqliteStore(Path(path))
    ready.release()
    start.wait(60)
    conflicts = 0
    for _ in range(rounds):
        while True:
            job = store.get(TrainingJob, "default", "counter")
            job.metadata.annotations["count"] = str(int(job.metadata.annotations.get("count", "0")) + 1)
            try:
                store.update(job)
                break
            except ConflictError:
                conflicts += 1
    store.close()
    results.put(conflicts)


def test_two_processes_read_modify_write_lose_no_increment(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    rounds = 150
    with SqliteStore(path) as store:
        store.create(make_job("counter"))
        context = multiprocessing.get_context("spawn")
        ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
        workers = [
            context.Process(target=_increment_counter, args=(str(path), rounds, ready, start, results))
            for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        for _ in workers:
            assert ready.acquire(timeout=60)
        start.set()
        conflicts = [results.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(60)
            assert worker.exitcode == 0

        final = store.get(TrainingJob, "default", "counter")
        assert final.metadata.annotations["count"] == str(2 * rounds)
        assert final.metadata.generation == 1
        modified = [c for c in store.changes_since(0) if c.type == "MODIFIED"]
        assert len(modified) == 2 * rounds
        print(f"conflicts retried per process: {conflicts}")


def test_threads_share_one_store_safely(store: SqliteStore) -> None:
    store.create(make_job("counter"))
    rounds, errors = 50, []

    def bump() -> None:
        try:
            for _ in range(rounds):
                while True:
                    job = store.get(TrainingJob, "default", "counter")
                    job.metadata.annotations["n"] = str(int(job.metadata.annotations.get("n", "0")) + 1)
                    try:
                        store.update(job)
                        break
                    except ConflictError:
                        continue
        except Exception as err:  # surfaced below; a thread's exception is otherwise lost
            errors.append(err)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert store.get(TrainingJob, "default", "counter").metadata.annotations["n"] == str(4 * rounds)


def _create_in_forked_child(store: SqliteStore, results: Any) -> None:
    created = store.create(make_job("from-child"))
    results.put((os.getpid(), created.metadata.resource_version))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    # Random uids: a counting uid factory would be copied into the child and hand out the same uid twice.
    store = SqliteStore(tmp_path / "phalanx.db")
    store.create(make_job("before-fork"))
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_create_in_forked_child, args=(store, results))
    child.start()
    child_pid, version = results.get(timeout=60)
    child.join(60)

    assert child.exitcode == 0
    assert child_pid != os.getpid()
    assert store.get(TrainingJob, "default", "from-child").metadata.resource_version == version
    store.create(make_job("after-fork"))  # the parent's connection is unharmed
    store.close()


# ------------------------------------------------------------------------------------------ change feed


def test_change_feed_orders_changes_and_filters_kinds(store: SqliteStore) -> None:
    job = store.create(make_job())
    store.create(make_node())
    job.metadata.labels["x"] = "1"
    store.update(job)
    store.record_event(Event(object_kind="TrainingJob", object_name="q", reason="Queued", message="m", time=START))
    store.delete(Node, "default", "local")

    changes = store.changes_since(0)
    assert [(c.kind, c.name, c.type) for c in changes] == [
        ("TrainingJob", "q", "ADDED"),
        ("Node", "local", "ADDED"),
        ("TrainingJob", "q", "MODIFIED"),
        (EVENT_KIND, "TrainingJob/q", "ADDED"),
        ("Node", "local", "DELETED"),
    ]
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    assert [c.type for c in store.changes_since(0, kinds=["Node"])] == ["ADDED", "DELETED"]
    assert store.changes_since(changes[2].seq, kinds={"TrainingJob", "Node"}) == [changes[4]]
    assert store.changes_since(0, kinds=[]) == []
    assert store.changes_since(0, limit=2) == changes[:2]
    assert store.changes_since(store.latest_seq()) == []


def test_compaction_keeps_revisions_and_expires_old_readers(store: SqliteStore) -> None:
    for i in range(10):
        store.create(make_job(f"j{i}"))
    latest = store.latest_seq()

    assert store.compact_changes(keep_last=3) == 7
    assert store.compact_changes(keep_last=3) == 0
    assert [c.seq for c in store.changes_since(latest - 3)] == [latest - 2, latest - 1, latest]
    with pytest.raises(ChangesExpiredError, match="list the objects again"):
        store.changes_since(0)

    assert store.compact_changes(keep_last=0) == 3
    assert store.latest_seq() == latest
    assert int(store.create(make_job("next")).metadata.resource_version or 0) == latest + 1


def _write_node_on_signal(path: str, ready: Any, go: Any, results: Any) -> None:
    store = SqliteStore(Path(path))
    ready.set()
    go.wait(60)
    store.create(make_node("from-other-process"))
    results.put(time.time())
    store.close()


def test_wait_for_change_wakes_on_write_from_another_process(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    with SqliteStore(path) as store:
        store.create(make_job())
        after = store.latest_seq()
        context = multiprocessing.get_context("spawn")
        ready, go, results = context.Event(), context.Event(), context.Queue()
        writer = context.Process(target=_write_node_on_signal, args=(str(path), ready, go, results))
        writer.start()
        assert ready.wait(60)

        go.set()
        changes = store.wait_for_change(after, timeout=30, kinds=["Node"])
        woke = time.time()
        written = results.get(timeout=30)
        writer.join(60)

        assert [(c.kind, c.name, c.type) for c in changes] == [("Node", "from-other-process", "ADDED")]
        assert woke - written < 1.0, f"woke {woke - written:.3f}s after the other process committed"


def test_wait_for_change_returns_promptly_on_same_process_write(tmp_path: Path) -> None:
    # A poll interval far above the bound: only the in-process notification can wake the waiter in time.
    with SqliteStore(tmp_path / "phalanx.db", change_poll_interval=30.0) as store:
        after = store.latest_seq()
        go = threading.Event()

        def write() -> None:
            go.wait(30)
            store.create(make_job())

        writer = threading.Thread(target=write)
        writer.start()
        began = time.monotonic()
        go.set()
        changes = store.wait_for_change(after, timeout=20)
        elapsed = time.monotonic() - began
        writer.join(30)

        assert [(c.kind, c.type) for c in changes] == [("TrainingJob", "ADDED")]
        assert elapsed < 1.0


def test_wait_for_change_times_out_and_ignores_other_kinds(store: SqliteStore) -> None:
    store.create(make_job())
    began = time.monotonic()

    assert store.wait_for_change(0, timeout=0.2, kinds=["Node"]) == []
    assert 0.2 <= time.monotonic() - began < 5
    assert [c.kind for c in store.wait_for_change(0, timeout=0)] == ["TrainingJob"]


# ---------------------------------------------------------------------------------------------- events


def test_events_are_listed_in_time_order_and_repeats_counted(store: SqliteStore) -> None:
    def event(reason: str, message: str, seconds: int, kind: str = "TrainingJob") -> Event:
        return Event(
            object_kind=kind,
            object_name="q",
            reason=reason,
            message=message,
            time=START + timedelta(seconds=seconds),
        )

    store.record_event(event("Queued", "waiting for 2 GPUs", 0))
    store.record_event(event("Queued", "waiting for 2 GPUs", 5))
    store.record_event(event("Queued", "waiting for 2 GPUs", 9))
    store.record_event(event("Admitted", "placed on local", 10))
    store.record_event(event("Queued", "waiting for 2 GPUs", 11))
    store.record_event(event("Started", "replica of another kind", 3, kind="Replica"))

    events = store.list_events("TrainingJob", "default", "q")
    assert [(e.reason, e.time) for e in events] == [
        ("Queued", START + timedelta(seconds=9)),
        ("Admitted", START + timedelta(seconds=10)),
        ("Queued", START + timedelta(seconds=11)),
    ]
    records = store.list_event_records("TrainingJob", "default", "q")
    assert [r.count for r in records] == [3, 1, 1]
    assert records[0].first_time == START
    assert [e.reason for e in store.list_events("Replica", "default", "q")] == ["Started"]
    event_changes = store.changes_since(0, kinds=[EVENT_KIND])
    assert [c.type for c in event_changes] == ["ADDED", "MODIFIED", "MODIFIED", "ADDED", "ADDED", "ADDED"]

    assert store.prune_events(START + timedelta(seconds=10)) == 2
    assert [e.reason for e in store.list_events("TrainingJob", "default", "q")] == ["Admitted", "Queued"]


# ---------------------------------------------------------------------------------------------- leases


def test_lease_is_exclusive_until_it_expires(store: SqliteStore, clock: VirtualClock) -> None:
    info = {"pid": 1234, "host": "box"}
    assert store.try_acquire_lease("control-plane", "a", 15, holder_info=info)
    assert not store.try_acquire_lease("control-plane", "b", 15)
    lease = store.get_lease("control-plane")
    assert lease == Lease("control-plane", "a", START, START, 15.0, info)

    clock.advance(10)
    assert store.try_acquire_lease("control-plane", "a", 15)  # re-acquiring renews, keeps acquired_at
    renewed = store.get_lease("control-plane")
    assert renewed is not None
    assert (renewed.acquired_at, renewed.renewed_at, renewed.holder_info) == (START, clock.now(), info)

    clock.advance(15)  # exactly at the expiry instant: still valid
    assert not store.try_acquire_lease("control-plane", "b", 15)
    clock.advance(0.001)
    assert store.try_acquire_lease("control-plane", "b", 15)
    taken = store.get_lease("control-plane")
    assert taken is not None
    assert (taken.holder, taken.acquired_at, taken.holder_info) == ("b", clock.now(), {})
    assert not store.renew_lease("control-plane", "a")


def test_lease_taken_over_when_holder_is_dead(store: SqliteStore) -> None:
    assert store.try_acquire_lease("control-plane", "old", 3600, holder_info={"pid": 999_999, "host": "box"})
    seen: list[Lease] = []

    def alive(lease: Lease) -> bool:
        seen.append(lease)
        return False

    assert not store.try_acquire_lease("control-plane", "new", 30, is_holder_dead=alive)
    assert seen[0].holder_info == {"pid": 999_999, "host": "box"}
    assert store.try_acquire_lease(
        "control-plane", "new", 30, is_holder_dead=lambda lease: lease.holder_info.get("pid") == 999_999
    )
    current = store.get_lease("control-plane")
    assert current is not None
    assert (current.holder, current.ttl_seconds) == ("new", 30.0)


def test_lease_renew_and_release(store: SqliteStore, clock: VirtualClock) -> None:
    assert not store.renew_lease("control-plane", "a")
    assert store.try_acquire_lease("control-plane", "a", 10)
    clock.advance(8)
    assert store.renew_lease("control-plane", "a")
    assert not store.renew_lease("control-plane", "b")
    clock.advance(8)
    assert not store.try_acquire_lease("control-plane", "b", 10)  # renewed 8 s ago, valid for 10

    store.release_lease("control-plane", "b")  # not b's: nothing happens
    assert store.get_lease("control-plane") is not None
    store.release_lease("control-plane", "a")
    assert store.get_lease("control-plane") is None
    assert store.try_acquire_lease("control-plane", "b", 10)
    with pytest.raises(ValueError, match="ttl_seconds"):
        store.try_acquire_lease("other", "a", 0)


# ---------------------------------------------------------------------------------- file, state, errors


def test_file_uses_wal_journal_mode(store: SqliteStore) -> None:
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_meta_values_and_reopening_keep_state(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    with SqliteStore(path) as store:
        assert store.get_meta("cluster-id") is None
        store.set_meta("cluster-id", "abc")
        store.set_meta("cluster-id", "def")
        store.create(make_job())
        with pytest.raises(ValueError, match="reserved"):
            store.set_meta("_store.anything", "x")

    with SqliteStore(path) as reopened:
        assert reopened.get_meta("cluster-id") == "def"
        assert reopened.get(TrainingJob, "default", "q").metadata.generation == 1


def test_second_store_on_same_file_sees_writes(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    with SqliteStore(path) as first, SqliteStore(path) as second:
        created = first.create(make_replica())
        assert second.get(Replica, "default", "q-worker-0") == created
        created.status.phase = ReplicaPhase.RUNNING
        first.update_status(created)
        assert second.get(Replica, "default", "q-worker-0").status.phase == ReplicaPhase.RUNNING


def test_corrupt_file_gives_clear_store_error(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    path.write_bytes(b"this is not a database, just bytes " * 200)

    with pytest.raises(StoreError, match=r"corrupt or not a SQLite database.*move it aside"):
        SqliteStore(path)


def test_unwritable_location_gives_clear_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the state directory should be")

    with pytest.raises(StoreError, match="cannot create the state directory"):
        SqliteStore(blocker / "phalanx.db")
    with pytest.raises(StoreError, match="check that the file and its directory exist and are writable"):
        SqliteStore(tmp_path)  # a directory, not a file


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "phalanx.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE schema_version SET version = 99")

    with pytest.raises(StoreError, match="schema version 99"):
        SqliteStore(path)


def test_closed_store_refuses_use(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "phalanx.db")
    store.close()

    with pytest.raises(StoreError, match="closed"):
        store.latest_seq()


def test_objects_without_kind_or_metadata_are_refused(store: SqliteStore) -> None:
    with pytest.raises(StoreError, match="kind"):
        store.list(ObjectMeta)
    with pytest.raises(StoreError, match="has no ObjectMeta 'metadata'"):
        store.create(_NoMetadata())


class _NoMetadata(BaseModel):
    kind: str = "Thing"
