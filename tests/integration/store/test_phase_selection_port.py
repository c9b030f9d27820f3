"""The port's phase selection and job counts, on the embedded store (SQL over the stored rows) and in memory:
``list(phases=...)`` gives exactly the jobs of those phases, ``count_jobs`` exactly what counting every parsed job
gives, a row whose stored status names no phase counts as its model's default one, and a row that no longer
parses is selected by neither.

These are what a /metrics scrape, the nodes view and the queues view read on a store of many finished jobs.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.store import SqliteStore
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import OperationsBackend, count_jobs_of
from support.memory_backend import MemoryBackend

JOBS = [
    ("ml", "a", "gpu", Phase.RUNNING),
    ("ml", "b", "gpu", Phase.SUCCEEDED),
    ("ml", "c", "default", Phase.PENDING),
    ("cv", "d", "gpu", Phase.FAILED),
    ("cv", "e", "cpu", Phase.ADMITTED),
    ("cv", "f", "cpu", Phase.SUCCEEDED),
    ("nlp", "g", "gpu", Phase.HALTED),
]


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> OperationsBackend:
    made: OperationsBackend
    if request.param == "memory":
        made = MemoryBackend()  # type: ignore[assignment]  # the port's test stand-in
    else:
        made = SqliteBackend(SqliteStore(tmp_path / "state.db"), StateLayout(tmp_path))
    for namespace, name, queue, phase in JOBS:
        made.create(job(name, namespace, queue))
        stored = made.get(TrainingJob, namespace, name)
        assert stored is not None
        if phase != Phase.PENDING:
            made.write_status(stored, {"phase": phase.value})
    return made


def job(name: str, namespace: str, queue: str) -> TrainingJob:
    template = {"command": ["true"], "resources": {"cpu": 1, "memory": "64Mi"}}
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "generic",
            "scheduling": {"queue": queue},
            "replicas": {"worker": {"count": 1, "template": template}},
        },
    }
    return TrainingJob.model_validate(document)


def keys(jobs: list[TrainingJob]) -> list[str]:
    return [f"{j.metadata.namespace}/{j.metadata.name}" for j in jobs]


def test_listing_by_phase_gives_exactly_the_jobs_of_those_phases(backend: OperationsBackend) -> None:
    assert keys(backend.list(TrainingJob, phases=HOLDING_PHASES)) == ["cv/e", "ml/a"]
    assert keys(backend.list(TrainingJob, phases=[Phase.SUCCEEDED])) == ["cv/f", "ml/b"]
    assert keys(backend.list(TrainingJob, "ml", phases=["Succeeded", "Pending"])) == ["ml/b", "ml/c"]
    assert backend.list(TrainingJob, phases=[]) == []
    everything = backend.list(TrainingJob)
    assert keys(backend.list(TrainingJob, phases=list(Phase))) == keys(everything)


def test_the_counts_are_those_of_every_job_read(backend: OperationsBackend) -> None:
    counted = backend.count_jobs()
    assert counted == count_jobs_of(backend.list(TrainingJob))
    assert counted[("ml", "gpu", "Running")] == 1 and sum(counted.values()) == len(JOBS)


def sqlite_backend(tmp_path: Path) -> tuple[SqliteBackend, Path]:
    path = tmp_path / "state.db"
    made = SqliteBackend(SqliteStore(path), StateLayout(tmp_path))
    for namespace, name, queue, _ in JOBS[:2]:
        made.create(job(name, namespace, queue))
    return made, path


def edit_body(path: Path, name: str, change: Any) -> None:
    """Rewrite a stored row's body as an older or a damaged writer could have left it."""
    with sqlite3.connect(path) as conn:
        (body,) = conn.execute("SELECT body FROM objects WHERE kind = 'TrainingJob' AND name = ?", (name,)).fetchone()
        conn.execute("UPDATE objects SET body = ? WHERE kind = 'TrainingJob' AND name = ?", (change(body), name))


def test_a_row_naming_no_phase_or_queue_counts_as_the_defaults(tmp_path: Path) -> None:
    backend, path = sqlite_backend(tmp_path)

    def bare(body: str) -> str:
        document = json.loads(body)
        document.pop("status", None)
        document["spec"].pop("scheduling", None)
        return json.dumps(document)

    edit_body(path, "a", bare)
    assert keys(backend.list(TrainingJob, phases=[Phase.PENDING])) == ["ml/a", "ml/b"]
    assert backend.count_jobs() == {("ml", "default", "Pending"): 1, ("ml", "gpu", "Pending"): 1}
    assert backend.count_jobs() == count_jobs_of(backend.list(TrainingJob))


def test_a_row_that_is_not_json_is_neither_listed_nor_counted(tmp_path: Path) -> None:
    backend, path = sqlite_backend(tmp_path)
    edit_body(path, "a", lambda body: "{not json")
    assert keys(backend.list(TrainingJob, phases=[Phase.PENDING])) == ["ml/b"]
    assert backend.count_jobs() == {("ml", "gpu", "Pending"): 1}
