"""The history recorder over the in-memory backend port, into a real history store (a SQLite file).

What is recorded when: a finished job once (at one resourceVersion), a job being deleted, a job gone since the
last sync (with the snapshot last seen), a job removed by its backend in the step that finished it, and after a
restart the records of jobs deleted while no recorder ran.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.history.records import HistoryQuery, JobRecord
from phalanx.adapters.history.store import HistoryStore
from phalanx.model.jobs import ReplicaPlacement, TrainingJob
from phalanx.services.history import HistoryRecorder, OpeningSink
from support.memory_backend import MemoryBackend

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.time = NOW

    def now(self) -> datetime:
        return self.time

    def monotonic(self) -> float:
        return (self.time - NOW).total_seconds()

    def sleep(self, seconds: float) -> None:
        self.time += timedelta(seconds=seconds)


def submit(backend: MemoryBackend, name: str, queue: str = "default") -> TrainingJob:
    template = {"command": ["python", "train.py"], "env": {"DATA": "postgresql://reader:hunter2@db/x"}}
    backend.create(
        TrainingJob.model_validate(
            {
                "metadata": {"name": name},
                "spec": {
                    "type": "generic",
                    "scheduling": {"queue": queue},
                    "replicas": {"worker": {"count": 1, "template": template}},
                },
            }
        )
    )
    job = backend.get(TrainingJob, "default", name)
    assert job is not None
    return job


def advance(backend: MemoryBackend, name: str, **status: Any) -> TrainingJob:
    job = backend.get(TrainingJob, "default", name)
    assert job is not None
    backend.write_status(job, status)
    job = backend.get(TrainingJob, "default", name)
    assert job is not None
    return job


def finish(backend: MemoryBackend, name: str, phase: str = "Succeeded") -> TrainingJob:
    job = backend.get(TrainingJob, "default", name)
    assert job is not None and job.metadata.creation_timestamp is not None
    born = job.metadata.creation_timestamp
    backend.record(job, "Admitted", "to queue default")
    return advance(
        backend,
        name,
        phase=phase,
        reason="Done",
        admitted_time=born + timedelta(seconds=5),
        start_time=born + timedelta(seconds=7),
        completion_time=born + timedelta(seconds=67),
        metrics={"loss": 0.5},
    )


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def store(tmp_path: Path) -> HistoryStore:
    return HistoryStore.at_path(tmp_path / "history.db")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def recorder(backend: MemoryBackend, store: HistoryStore, clock: Clock) -> HistoryRecorder:
    return HistoryRecorder(backend, store, clock)


def only(store: HistoryStore) -> JobRecord:
    records = store.list(HistoryQuery()).records
    assert len(records) == 1
    return records[0]


def test_a_running_job_is_not_recorded_and_a_finished_one_is_once(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder
) -> None:
    submit(backend, "train", queue="gpu")
    advance(backend, "train", phase="Running")
    assert not recorder.sync()
    assert store.count() == 0
    job = finish(backend, "train")
    assert recorder.sync()
    assert not recorder.sync()  # the same resourceVersion: nothing new
    kept = only(store)
    assert (kept.uid, kept.name, kept.queue, kept.phase, kept.reason) == (
        job.metadata.uid,
        "train",
        "gpu",
        "Succeeded",
        "Done",
    )
    assert (kept.queueing_seconds, kept.run_seconds) == (5.0, 60.0)
    assert kept.metrics == {"loss": 0.5}
    assert [e["reason"] for e in kept.events] == ["Admitted"]
    assert kept.finished_at == kept.ended_at == job.status.completion_time
    assert kept.deleted_at is None
    env = kept.spec["replicas"]["worker"]["template"]["env"]
    assert env["DATA"] == "postgresql://reader:***@db/x"  # masked, as every output of a job is


def test_a_finished_job_deleted_later_keeps_its_record_marked_deleted(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder, clock: Clock
) -> None:
    submit(backend, "train")
    finish(backend, "train", phase="Failed")
    recorder.sync()
    backend.delete_job("default", "train")
    clock.sleep(30)
    assert recorder.sync()
    kept = only(store)
    assert (kept.phase, kept.deleted_at) == ("Failed", clock.time)
    submit(backend, "train")  # the name again: another uid, another record
    finish(backend, "train")
    recorder.sync()
    assert [r.phase for r in store.list(HistoryQuery()).records] == ["Succeeded", "Failed"]


def test_a_job_deleted_before_it_finished_is_recorded_from_the_last_snapshot_seen(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder, clock: Clock
) -> None:
    submit(backend, "train")
    advance(backend, "train", phase="Running")
    recorder.sync()
    assert store.count() == 0
    backend.delete_job("default", "train")
    clock.sleep(10)
    assert recorder.sync()
    kept = only(store)
    assert (kept.phase, kept.deleted_at, kept.ended_at, kept.finished_at) == ("Running", clock.time, clock.time, None)


def test_a_job_being_deleted_is_recorded_with_its_deletion_time(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder
) -> None:
    job = submit(backend, "train")
    deleting = NOW - timedelta(minutes=1)
    key = ("TrainingJob", "default", "train")
    backend.objects[key] = job.model_copy(
        update={"metadata": job.metadata.model_copy(update={"deletion_timestamp": deleting})}
    )
    assert recorder.sync()
    assert only(store).deleted_at == deleting


def test_removing_records_a_job_no_sync_saw_finished(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder, clock: Clock
) -> None:
    submit(backend, "train")
    recorder.sync()
    job = finish(backend, "train")
    recorder.removing(job)  # its TTL of 0 removes it in the step that finished it
    backend.delete_job("default", "train")
    recorder.sync()
    kept = only(store)
    assert (kept.phase, kept.deleted_at, kept.run_seconds) == ("Succeeded", clock.time, 60.0)


def test_after_a_restart_records_of_jobs_gone_meanwhile_are_marked_deleted(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder, clock: Clock
) -> None:
    submit(backend, "gone")
    submit(backend, "stays")
    finish(backend, "gone")
    finish(backend, "stays")
    recorder.sync()
    backend.delete_job("default", "gone")  # while no recorder runs
    clock.sleep(60)
    assert HistoryRecorder(backend, store, clock).sync()
    deleted = {r.name: r.deleted_at for r in store.list(HistoryQuery()).records}
    assert deleted == {"gone": clock.time, "stays": None}


def test_a_failing_history_does_not_raise_and_is_retried(
    backend: MemoryBackend, store: HistoryStore, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def __init__(self) -> None:
            self.broken = True

        def record(self, record: JobRecord) -> None:
            if self.broken:
                raise OSError("disk full")
            store.record(record)

        def mark_deleted(self, uid: str, when: datetime) -> bool:
            return store.mark_deleted(uid, when)

        def undeleted_uids(self) -> set[str]:
            return store.undeleted_uids()

        def prune(self, *, older_than: datetime | None = None, keep: int | None = None) -> int:
            return store.prune(older_than=older_than, keep=keep)

        def close(self) -> None:
            store.close()

    sink = Broken()
    recorder = HistoryRecorder(backend, sink, clock)
    submit(backend, "train")
    finish(backend, "train")
    assert not recorder.sync()
    assert "disk full" in caplog.text
    assert recorder.failing  # so the control plane tries again though nothing changed
    sink.broken = False
    assert recorder.sync()
    assert not recorder.failing
    assert only(store).phase == "Succeeded"


def test_placements_released_on_finishing_are_kept_from_what_was_seen(
    backend: MemoryBackend, store: HistoryStore, recorder: HistoryRecorder
) -> None:
    submit(backend, "train")
    advance(backend, "train", phase="Running", placements={"train-worker-0": ReplicaPlacement(node="n1", gpus=[2, 3])})
    recorder.sync()
    finish(backend, "train")
    advance(backend, "train", placements={})  # released, as the lifecycle does on finishing
    recorder.sync()
    assert only(store).placements == {"train-worker-0": {"node": "n1", "cpus": [], "gpus": [2, 3], "gpuMilli": 0}}


def test_while_the_history_opens_the_recorder_watches_and_records_all_it_saw_once_open(
    backend: MemoryBackend, store: HistoryStore, clock: Clock
) -> None:
    # The control loop runs while the history opens (SQLAlchemy, Alembic and a migration take seconds): a loop
    # that waited would miss the deadlines of jobs submitted meanwhile. A CI run failed a 2 s deadline that way.
    release, rang = threading.Event(), threading.Event()

    def open_slowly() -> HistoryStore:
        assert release.wait(10)
        return store

    opening = OpeningSink(open_slowly, on_ready=rang.set)
    recorder = HistoryRecorder(backend, opening, clock, opened=opening.is_open)
    submit(backend, "gone")
    submit(backend, "done")
    for name in ("gone", "done"):
        advance(backend, name, phase="Running", placements={f"{name}-worker-0": ReplicaPlacement(node="n1")})
    assert not recorder.sync() and recorder.behind  # watched, nothing written: the history is not open
    finish(backend, "done")
    advance(backend, "done", placements={})  # released, as the lifecycle does on finishing
    backend.delete_job("default", "gone")  # deleted while the history opened
    assert not recorder.sync()
    assert not opening.is_open() and not opening.is_off() and not rang.is_set()

    release.set()
    assert rang.wait(10) and opening.is_open()
    assert recorder.sync() and not recorder.behind
    kept = {r.name: r for r in store.list(HistoryQuery()).records}
    assert kept["done"].phase == "Succeeded" and "done-worker-0" in kept["done"].placements
    assert kept["gone"].phase == "Running" and kept["gone"].deleted_at == clock.time
    assert "gone-worker-0" in kept["gone"].placements
    opening.close()


def test_a_removal_while_the_history_opens_waits_for_it_rather_than_losing_the_record(
    backend: MemoryBackend, store: HistoryStore, clock: Clock
) -> None:
    release = threading.Event()
    opening = OpeningSink(lambda: store if release.wait(10) else None)
    recorder = HistoryRecorder(backend, opening, clock, opened=opening.is_open)
    submit(backend, "ttl-zero")
    job = finish(backend, "ttl-zero")
    remover = threading.Thread(target=recorder.removing, args=(job,))
    remover.start()
    remover.join(0.2)
    assert remover.is_alive()
    release.set()
    remover.join(10)
    assert not remover.is_alive()
    assert only(store).name == "ttl-zero" and only(store).deleted_at == clock.time
    opening.close()


def test_a_history_that_fails_to_open_is_off_and_still_wakes_the_loop(backend: MemoryBackend, clock: Clock) -> None:
    rang = threading.Event()

    def broken() -> HistoryStore:
        raise RuntimeError("no such database")

    opening = OpeningSink(broken, on_ready=rang.set)
    assert rang.wait(10) and opening.is_off() and not opening.is_open()
    recorder = HistoryRecorder(backend, opening, clock, opened=opening.is_open)
    recorder.removing(submit(backend, "x"))  # nothing to record into, and nothing raised
    assert not recorder.failing
    opening.close()
