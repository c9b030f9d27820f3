"""SqliteBackend.read_log: what a replica's log file (its latest attempt) gained past a cursor, in complete lines."""

from __future__ import annotations

from pathlib import Path

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend, read_lines_from
from phalanx.services.port import LogCursor

JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "t"},
    "spec": {"type": "generic", "replicas": {"worker": {"count": 2, "template": {"command": ["x"]}}}},
}


def test_read_log_reads_the_latest_attempt_of_the_named_replica(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    backend = SqliteBackend(SqliteStore(tmp_path / "phalanx.db"), layout, clock=VirtualClock())
    backend.create(validate_job(JOB, builtin_jobtypes()))
    job = backend.get(TrainingJob, "default", "t")
    assert job is not None and job.metadata.uid
    for replica, attempt, text in (
        ("t-worker-0", 1, "first\n"),
        ("t-worker-0", 2, "second\n"),
        ("t-worker-1", 1, "w1\n"),
    ):
        run = layout.replica_run_dir("default", "t", job.metadata.uid, replica, attempt)
        run.mkdir(parents=True)
        (run / "replica.log").write_text(text)
    read = {replica: backend.read_log(job, replica) for replica in ("worker-0", "worker-1", "worker-2")}
    assert {replica: chunk.text if chunk else None for replica, chunk in read.items()} == {
        "worker-0": "second\n",
        "worker-1": "w1\n",
        "worker-2": None,  # no log yet
    }


def test_read_lines_from_returns_complete_lines_past_the_cursor_and_the_line_being_written(tmp_path: Path) -> None:
    run = tmp_path / "t-worker-0-a1"
    run.mkdir()
    path = run / "replica.log"
    path.write_bytes(b"one\ntwo\nthr")
    first = read_lines_from(path, None)
    assert (first.text, first.partial, first.cursor) == ("one\ntwo\n", "thr", LogCursor("t-worker-0-a1", 8))
    with path.open("ab") as file:
        file.write("ee \u00e9\nfour\n".encode())
    second = read_lines_from(path, first.cursor)
    assert (second.text, second.partial) == ("three \u00e9\nfour\n", "")
    assert second.cursor.offset == path.stat().st_size
    assert read_lines_from(path, second.cursor).text == ""
    # A cursor of another attempt's log, or past this file's end (written anew), reads it from its start.
    assert read_lines_from(path, LogCursor("t-worker-0-a2", 8)).text.startswith("one\n")
    path.write_bytes(b"new\n")
    assert read_lines_from(path, second.cursor).text == "new\n"
    # Fallen more than the limit behind: the tail, from a line's start.
    path.write_bytes(b"a" * 100 + b"\nphalanx-metric step=1 loss=0.5\n")
    behind = read_lines_from(path, LogCursor("t-worker-0-a1", 0), limit=40)
    assert behind.text == "phalanx-metric step=1 loss=0.5\n" and behind.cursor.offset == path.stat().st_size


def test_a_new_attempt_of_the_replica_is_read_from_its_start(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    backend = SqliteBackend(SqliteStore(tmp_path / "phalanx.db"), layout, clock=VirtualClock())
    backend.create(validate_job(JOB, builtin_jobtypes()))
    job = backend.get(TrainingJob, "default", "t")
    assert job is not None and job.metadata.uid
    first = layout.replica_run_dir("default", "t", job.metadata.uid, "t-worker-0", 1)
    first.mkdir(parents=True)
    (first / "replica.log").write_text("a1 line\n")
    read = backend.read_log(job, "worker-0")
    assert read is not None and read.text == "a1 line\n"
    second = layout.replica_run_dir("default", "t", job.metadata.uid, "t-worker-0", 2)
    second.mkdir(parents=True)
    (second / "replica.log").write_text("a2\n")
    again = backend.read_log(job, "worker-0", read.cursor)  # the offset is of another attempt's file
    assert again is not None and again.text == "a2\n"
