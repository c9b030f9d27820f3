"""The backend port's status side (``services.port.StatusWriter``), the same on a real SQLite store and in memory.

A status is written on the resourceVersion read: a write on an object that moved on, or on a namesake created after
a delete, is lost (the next pass reads again); a write that changes nothing is not made. Events are kept with their
credentials masked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.loading import parse_dataset
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import OperationsBackend, StatusWriter, Written
from support.memory_backend import MemoryBackend

NS = "default"


class Backend(OperationsBackend, StatusWriter, Protocol):
    """Both sides of the port, as the tests use them."""


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    store = SqliteStore(tmp_path / "phalanx.db")
    return SqliteBackend(store, StateLayout(tmp_path), clock=VirtualClock())


def created(backend: Backend, name: str = "d") -> Dataset:
    document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}}
    backend.create(parse_dataset({**document, "spec": {"source": {"path": "/data"}}}))
    found = backend.get(Dataset, NS, name)
    assert found is not None
    return found


def test_a_status_is_written_on_the_version_read_and_a_stale_write_is_lost(backend: Backend) -> None:
    read = created(backend)
    assert backend.write_status(read, {"phase": DatasetPhase.MATERIALIZING, "message": "copying"}) is Written.WROTE
    stored = backend.get(Dataset, NS, "d")
    assert stored is not None
    assert (stored.status.phase, stored.status.message) == (DatasetPhase.MATERIALIZING, "copying")
    assert stored.metadata.resource_version != read.metadata.resource_version

    assert backend.write_status(read, {"phase": DatasetPhase.FAILED}) is Written.LOST, "written on a stale version"
    after = backend.get(Dataset, NS, "d")
    assert after is not None and after.status.phase == DatasetPhase.MATERIALIZING
    assert backend.write_status(after, {"message": "copying"}) is Written.UNCHANGED


def test_a_status_for_a_deleted_object_does_not_reach_its_namesake(backend: Backend) -> None:
    old = created(backend)
    backend.delete(Dataset, NS, "d")
    assert backend.write_status(old, {"phase": DatasetPhase.READY}) is Written.LOST
    new = created(backend)
    assert backend.write_status(old, {"phase": DatasetPhase.READY}) is Written.LOST
    assert backend.get(Dataset, NS, "d") == new


def test_events_are_kept_in_order_with_their_credentials_masked(backend: Backend) -> None:
    dataset = created(backend)
    backend.record(dataset, "Materializing", "materialising from url")
    backend.record(dataset, "MaterializeFailed", "cannot read https://ann:s3cret@example.com/x", warning=True)
    events = backend.events_of(dataset)
    assert [(e.reason, e.type) for e in events] == [("Materializing", "Normal"), ("MaterializeFailed", "Warning")]
    assert "s3cret" not in events[1].message and "ann:" in events[1].message
    assert {(e.object_kind, e.object_name, e.namespace) for e in events} == {("Dataset", "d", NS)}
