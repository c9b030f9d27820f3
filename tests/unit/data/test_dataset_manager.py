"""services.dataset_manager: when a Dataset is materialised and what its status says, against an in-memory backend.

The materialisations run on a pool that runs them only when the test says so, so that "while it runs" is a state
the test holds, not a race.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from phalanx.core.clock import VirtualClock
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.loading import parse_dataset
from phalanx.services.dataset_manager import DatasetMaterializer, SourceChoice, Written
from phalanx.services.dataset_store import DatasetStore, source_request

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
    """The backend: Datasets in a dict, events in a list; ``refusals`` by name."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Dataset] = {}
        self.events: list[tuple[str, str]] = []
        self.refusals: dict[str, str] = {}
        self._uids = itertools.count(1)

    def put(self, name: str, source: Path, *, generation: int = 1, new: bool = False) -> Dataset:
        old = self.objects.get((NS, name))
        document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}}
        dataset = parse_dataset({**document, "spec": {"source": {"path": str(source)}}})
        uid = f"uid-{next(self._uids)}" if old is None or new else old.metadata.uid
        metadata = dataset.metadata.model_copy(update={"uid": uid, "generation": generation})
        status = old.status if old is not None and not new else dataset.status
        self.objects[(NS, name)] = dataset.model_copy(update={"metadata": metadata, "status": status})
        return self.objects[(NS, name)]

    def current(self, namespace: str, name: str) -> Dataset | None:
        return self.objects.get((namespace, name))

    def write_status(self, dataset: Dataset, changes: Mapping[str, Any]) -> Written:
        current = self.current(dataset.metadata.namespace, dataset.metadata.name)
        if current is None or current.metadata.uid != dataset.metadata.uid:
            return Written.LOST
        status = current.status.model_copy(update=dict(changes))
        if status == current.status:
            return Written.UNCHANGED
        self.objects[(NS, dataset.metadata.name)] = current.model_copy(update={"status": status})
        return Written.WROTE

    def record(self, dataset: Dataset, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((dataset.metadata.name, reason))

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
        backend, store, pool, wake=lambda: None, clock=VirtualClock(), progress_every_s=1
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
    del backend.objects[(NS, "d")]
    backend.put("d", directory(tmp_path / "new", a=1, b=2, c=3), new=True)
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
    del backend.objects[(NS, "d")]
    materializer.remove_deleted(frozenset(backend.objects))
    assert not (tmp_path / "store" / NS / "d").exists()
