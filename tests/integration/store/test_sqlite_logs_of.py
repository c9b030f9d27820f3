"""SqliteBackend.logs_of: the tail of each replica's log file (latest attempt), from a line's start."""

from __future__ import annotations

from pathlib import Path

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend, read_tail

JOB = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "t"},
    "spec": {"type": "generic", "replicas": {"worker": {"count": 2, "template": {"command": ["x"]}}}},
}


def test_logs_of_reads_the_latest_attempt_of_each_replica(tmp_path: Path) -> None:
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
    assert backend.logs_of(job) == {"worker-0": "second\n", "worker-1": "w1\n"}
    assert backend.logs_of(job, "worker-1") == {"worker-1": "w1\n"}


def test_a_long_log_is_cut_at_a_line_start(tmp_path: Path) -> None:
    path = tmp_path / "replica.log"
    path.write_text("a" * 100 + "\nphalanx-metric step=1 loss=0.5\n")
    assert read_tail(path, limit=40) == "phalanx-metric step=1 loss=0.5\n"
    assert read_tail(path) == path.read_text()
