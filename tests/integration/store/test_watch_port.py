"""The backend port's change side (``services.port.ChangeReader``) on a real SQLite store, and in memory where the
behaviour is shared.

A watch from a resourceVersion brings every later change of its kind in order, deletions included, and never a
version twice nor an older one after a newer (the store, which reads a change's object as it is now, passes over
a row that a later one carries, keeping its ADDED); a quiet kind moves the reader on with a BOOKMARK; a
resourceVersion from before the compacted horizon is an ``ExpiredError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest

from phalanx.adapters.store import SqliteStore
from phalanx.core.clock import VirtualClock
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.loading import parse_dataset
from phalanx.model.queues import Queue
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import ExpiredError, OperationsBackend, StatusWriter
from support.memory_backend import MemoryBackend

NS = "default"


class Backend(OperationsBackend, StatusWriter, Protocol):
    """Both sides of the port, as the tests use them."""


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    return SqliteBackend(SqliteStore(tmp_path / "phalanx.db"), StateLayout(tmp_path), clock=VirtualClock())


def dataset(name: str) -> Dataset:
    document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}}
    return parse_dataset({**document, "spec": {"source": {"path": "/data"}}})


def queue(name: str) -> Queue:
    return Queue.model_validate({"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}})


def phase(backend: Backend, name: str, to: DatasetPhase) -> None:
    found = backend.get(Dataset, NS, name)
    assert found is not None
    backend.write_status(found, {"phase": to})


def test_a_watch_brings_every_later_change_of_its_kind_in_order_with_deletions(backend: Backend) -> None:
    start = backend.resource_version(Dataset)
    backend.create(dataset("a"))
    backend.create(
        Queue.model_validate(
            {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {}}
        )
    )
    backend.create(dataset("b"))
    phase(backend, "a", DatasetPhase.MATERIALIZING)
    backend.delete(Dataset, NS, "b")
    events = [e for e in backend.watch(Dataset, start, timeout=0.3) if e.type != "BOOKMARK"]
    got = [(e.type, e.name) for e in events]
    if isinstance(backend, MemoryBackend):  # it keeps every version, as the API server does
        assert got == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    else:
        # The store reads a row's object as it is now: a's ADDED row is passed over for its later row, which keeps
        # the ADDED; b is gone when its ADDED row is read, so only its deletion is seen.
        assert got == [("ADDED", "a"), ("DELETED", "b")]
    versions = [int(e.resource_version) for e in events]
    assert versions == sorted(set(versions)) and versions[0] > int(start)
    for event in events:
        if event.obj is not None:
            assert event.obj.metadata.resource_version == event.resource_version
            assert isinstance(event.obj, Dataset)
    last_a = [e for e in events if e.name == "a"][-1]
    assert last_a.obj is not None and last_a.obj.status.phase == DatasetPhase.MATERIALIZING


def test_a_watch_from_a_place_gets_only_what_follows_and_a_quiet_kind_a_bookmark(backend: Backend) -> None:
    backend.create(dataset("a"))
    after = backend.resource_version(Dataset)
    backend.create(dataset("b"))
    head = backend.resource_version(Dataset)
    events = list(backend.watch(Dataset, after, timeout=1.5))
    assert [(e.type, e.name) for e in events if e.type != "BOOKMARK"] == [("ADDED", "b")]
    quiet = list(backend.watch(Dataset, head, timeout=1.5))
    assert quiet == [] or {e.type for e in quiet} == {"BOOKMARK"}
    backend.create(
        Queue.model_validate(
            {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}, "spec": {}}
        )
    )
    moved = [e for e in backend.watch(Dataset, head, timeout=1.5)]
    assert [e.type for e in moved] == ["BOOKMARK"]  # another kind's write: a Dataset watcher moves past it
    assert int(moved[0].resource_version) == int(backend.resource_version(Dataset)) > int(head)


def test_a_place_before_the_compacted_horizon_is_expired(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "phalanx.db")
    backend = SqliteBackend(store, StateLayout(tmp_path), clock=VirtualClock())
    for name in ("a", "b", "c"):
        backend.create(dataset(name))
    store.compact_changes(keep_last=1)
    with pytest.raises(ExpiredError) as expired:
        list(backend.watch(Dataset, "1", timeout=0.3))
    assert "resourceVersion 1 is older than the changes this server keeps (from 3 on)" in str(expired.value)
    assert [e.name for e in backend.watch(Dataset, "2", timeout=0.3) if e.type != "BOOKMARK"] == ["c"]
