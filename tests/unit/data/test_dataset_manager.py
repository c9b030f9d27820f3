"""services.dataset_manager: when a Dataset is materialised and what its status says, against an in-memory backend.

The materialisations run on a pool that runs them only when the test says so, so that "while it runs" is a state
the test holds, not a race.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from phalanx.core.clock import VirtualClock
from phalanx.model.base import validated_copy
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.loading import parse_dataset
from phalanx.services.dataset_manager import DatasetMaterializer, SourceChoice
from phalanx.services.dataset_store import DatasetStore, source_request
from support.memory_backend import MemoryBackend

NS = "default"


class HeldPool(Executor):
    """Runs what is submitted when ``run`` is called."""

    def __init__(self) -> None:
        self.queued: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.queued.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run(self) -> None:
        queued, self.queued = self.queued, []
        for future, call in queued:
            try:
                future.set_result(call())
            except Exception as error:  # the manager reads it from the future, as from a real pool
                future.set_exception(error)


class MemoryDatasets:
    """The Datasets of a ``MemoryBackend`` (the port the materialiser writes through) and their sources."""

    def __init__(self) -> None:
        self.port = MemoryBackend()
        self.refusals: dict[str, str] = {}  # by name

    @property
    def objects(self) -> dict[tuple[str, str], Dataset]:
        return {(d.metadata.namespace, d.metadata.name): d for d in self.port.list(Dataset)}

    @property
    def events(self) -> list[tuple[str, str]]:
        """(name, reason) of every event recorded, oldest first."""
        events = sorted((e for found in self.port.events.values() for e in found), key=lambda e: e.time)
        return [(e.object_name, e.reason) for e in events]

    def put(self, name: str, source: Path, *, generation: int = 1) -> Dataset:
        """Create the Dataset, or give it a new spec (its status stays)."""
        document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}}
        dataset = parse_dataset({**document, "spec": {"source": {"path": str(source)}}})
        old = self.port.get(Dataset, NS, name)
        if old is None:
            self.port.create(dataset)
            old = self.port.get(Dataset, NS, name)
            assert old is not None
        self.port.replace(validated_copy(dataset, metadata=validated_copy(old.metadata, generation=generation)))
        return self.objects[(NS, name)]

    def current(self, namespace: str, name: str) -> Dataset | None:
        return self.port.get(Dataset, namespace, name)

    def source(self, dataset: Dataset) -> SourceChoice:
        refusal = self.refusals.get(dataset.metadata.name)
        if refusal is not None:
            return SourceChoice(refusal=refusal)
        return SourceChoice(source_request(dataset.spec.source))


def directory(root: Path, **files: int) -> Path:
    root.mkdir(parents=True)
    for name, size in files.items():
        (root / name).write_bytes(b"x" * size)
    return root


def manager(tmp_path: Path) -> tuple[DatasetMaterializer, MemoryDatasets, HeldPool]:
    backend, pool = MemoryDatasets(), HeldPool()
    store = DatasetStore(tmp_path / "store")
    materializer = DatasetMaterializer(
        backend.port, backend, store, pool, wake=lambda: None, clock=VirtualClock(), progress_every_s=1
    )
    return materializer, backend, pool


def pass_over(materializer: DatasetMaterializer, backend: MemoryDatasets) -> None:
    materializer.collect()
    for dataset in list(backend.objects.values()):
        materializer.materialize_if_due(dataset)


def test_a_new_spec_is_materialised_again_and_its_outcome_replaces_the_old(tmp_path: Path) -> None:
    materializer, backend, pool = manager(tmp_path)
    backend.put("d", directory(tmp_path / "a", one=10))
    pass_over(materializer, backend)
    assert backend.objects[(NS, "d")].status.phase == DatasetPhase.MATERIALIZING
    pool.run()
    pass_over(materializer, backend)
    first = backend.objects[(NS, "d")]
    assert (first.status.phase, first.status.observed_generation, first.status.files) == (DatasetPhase.READY, 1, 1)
    assert first.settled and not materializer.materialize_if_due(first), "a Ready generation is not materialised again"

    backend.put("d", directory(tmp_path / "b", one=10, two=20), generation=2)
    assert not backend.objects[(NS, "d")].settled  # the Ready above is the previous spec's
    pass_over(materializer, backend)
    assert backend.objects[(NS, "d")].status.phase == DatasetPhase.MATERIALIZING
    pool.run()
    pass_over(materializer, backend)
    second = backend.objects[(NS, "d")].status
    assert (second.phase, second.observed_generation, second.files) == (DatasetPhase.READY, 2, 2)
    assert second.version != first.status.version
    assert [reason for _, reason in backend.events] == ["Materializing", "Materialized"] * 2


def test_an_outcome_is_not_given_to_a_namesake_created_after_a_delete(tmp_path: Path) -> None:
    materializer, backend, pool = manager(tmp_path)
    backend.put("d", directory(tmp_path / "old", old=10))
    pass_over(materializer, backend)
    backend.port.delete(Dataset, NS, "d")
    backend.put("d", directory(tmp_path / "new", a=1, b=2, c=3))
    pass_over(materializer, backend)  # the deleted one's copy still runs: the new one waits for it to end
    pool.run()
    pass_over(materializer, backend)
    assert backend.objects[(NS, "d")].status.phase == DatasetPhase.MATERIALIZING, "the old outcome was dropped"
    pool.run()
    pass_over(materializer, backend)
    status = backend.objects[(NS, "d")].status
    assert (status.phase, status.files, status.observed_generation) == (DatasetPhase.READY, 3, 1)


def test_a_refused_source_fails_its_generation_once_with_one_event(tmp_path: Path) -> None:
    materializer, backend, _pool = manager(tmp_path)
    backend.refusals["d"] = "spec.source.path: not readable here; use a URL"
    backend.put("d", directory(tmp_path / "a", one=1))
    pass_over(materializer, backend)
    pass_over(materializer, backend)
    status = backend.objects[(NS, "d")].status
    assert (status.phase, status.message, status.observed_generation) == (
        DatasetPhase.FAILED,
        "spec.source.path: not readable here; use a URL",
        1,
    )
    assert backend.events == [("d", "MaterializeFailed")]


def test_the_copies_of_a_deleted_dataset_leave_the_store(tmp_path: Path) -> None:
    materializer, backend, pool = manager(tmp_path)
    backend.put("d", directory(tmp_path / "a", one=1))
    pass_over(materializer, backend)
    pool.run()
    pass_over(materializer, backend)
    materializer.remove_deleted(frozenset(backend.objects))
    assert (tmp_path / "store" / NS / "d").is_dir()
    backend.port.delete(Dataset, NS, "d")
    materializer.remove_deleted(frozenset(backend.objects))
    assert not (tmp_path / "store" / NS / "d").exists()


def test_a_status_write_lost_to_another_writer_says_nothing_and_the_next_pass_starts(tmp_path: Path) -> None:
    materializer, backend, pool = manager(tmp_path)
    backend.put("d", directory(tmp_path / "a", one=1))
    backend.port.conflicts["write_status"] = 1  # another client wrote the Dataset first
    pass_over(materializer, backend)
    assert (backend.events, pool.queued) == ([], []), "no event and no copy for a status that was not written"
    pass_over(materializer, backend)
    assert backend.objects[(NS, "d")].status.phase == DatasetPhase.MATERIALIZING
    assert (backend.events, len(pool.queued)) == ([("d", "Materializing")], 1)
