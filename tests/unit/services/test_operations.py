"""The one operations implementation over the in-memory backend port: what is written, in which order, and said."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob, TrainingJobStatus
from phalanx.model.queues import Queue
from phalanx.services.dataset_views import CacheEntryView
from phalanx.services.operations import JobExistsError, OperationError, Operations
from support.memory_backend import MemoryBackend


def job(name: str = "train", **spec: Any) -> dict[str, Any]:
    template = {"command": ["python", "train.py"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}, **spec},
    }


def queue(name: str = "team-a", gpu: int = 4, **metadata: Any) -> dict[str, Any]:
    return {"kind": "Queue", "metadata": {"name": name, **metadata}, "spec": {"quota": {"gpu": gpu}}}


def dataset(name: str = "images", uri: str = "file:///data/images") -> dict[str, Any]:
    return {"kind": "Dataset", "metadata": {"name": name}, "spec": {"source": {"url": uri}}}


JOBTYPE = {"kind": "JobType", "metadata": {"name": "solo"}, "spec": {"roles": {"main": {}}}}


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def ops(backend: MemoryBackend) -> Operations:
    return Operations(backend)


def set_phase(backend: MemoryBackend, name: str, phase: str, **status: Any) -> TrainingJob:
    key = ("TrainingJob", "default", name)
    stored = backend.objects[key]
    backend.objects[key] = stored.model_copy(
        update={"status": TrainingJobStatus.model_validate({"phase": phase, **status})}
    )
    return backend.objects[key]  # type: ignore[no-any-return]


def creates(backend: MemoryBackend) -> list[tuple[str, str]]:
    return [(kind, name) for verb, kind, name in backend.calls if verb == "create"]


# -- submit ------------------------------------------------------------------------------------------------------


def test_every_object_exists_before_the_objects_that_name_it(ops: Operations, backend: MemoryBackend) -> None:
    reader = job("reader", datasets=[{"name": "images"}])
    submitted = ops.submit([reader, dataset(), JOBTYPE, queue()])
    assert creates(backend) == [
        ("Queue", "team-a"),
        ("JobType", "solo"),
        ("Dataset", "images"),
        ("TrainingJob", "reader"),
    ]
    assert [(s.kind, s.namespace, s.configured) for s in submitted] == [
        ("Queue", "", False),
        ("JobType", "default", False),
        ("Dataset", "default", False),
        ("TrainingJob", "default", False),
    ]


def test_a_spec_error_anywhere_creates_nothing(ops: Operations, backend: MemoryBackend) -> None:
    bad = job("bad")
    bad["spec"]["replicas"]["worker"]["count"] = 0
    with pytest.raises(SpecError) as caught:
        ops.submit([queue(), bad])
    assert "spec.replicas.worker.count" in [e.path for e in caught.value.errors]
    assert backend.calls == []


def test_a_job_reading_a_missing_dataset_creates_nothing_and_names_the_field(
    ops: Operations, backend: MemoryBackend
) -> None:
    with pytest.raises(SpecError) as caught:
        ops.submit([queue(), job("reader", datasets=[{"name": "nope"}])])
    (error,) = caught.value.errors
    assert error.path == "spec.datasets[0].name"
    assert "dataset nope does not exist in namespace default; create it first" in error.message
    assert backend.calls == []


def test_an_existing_queue_is_configured_and_an_unchanged_one_is_not_written(
    ops: Operations, backend: MemoryBackend
) -> None:
    ops.submit([queue(gpu=4, labels={"team": "a"})])
    (again,) = ops.submit([queue(gpu=8)])
    assert (again.configured, again.unchanged, again.verb) == (True, False, "configured")
    stored = backend.get(Queue, "", "team-a")
    assert stored is not None
    assert stored.spec.quota.gpu == 8
    assert stored.metadata.labels == {"team": "a"}  # a submission without labels keeps the stored ones
    writes = len(backend.calls)
    (same,) = ops.submit([queue(gpu=8)])
    assert (same.configured, same.unchanged, same.verb) == (True, True, "unchanged")  # kubectl apply's word
    assert backend.calls[writes:] == []


def test_configuring_retries_when_another_client_wrote_first(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([dataset()])
    backend.conflicts["replace"] = 2
    assert ops.submit([dataset(uri="file:///data/v2")])[0].configured
    assert [verb for verb, _, _ in backend.calls].count("replace") == 3


def test_a_job_in_the_way_creates_nothing_and_says_what_to_do(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([job()])
    set_phase(backend, "train", "Running")
    backend.calls.clear()
    with pytest.raises(JobExistsError) as caught:
        ops.submit([JOBTYPE, job()], replace_finished=True)
    assert caught.value.phase == "Running"
    assert str(caught.value).startswith("job default/train already exists (it is Running); wait until it finishes")
    assert backend.calls == []


def test_replacing_checks_every_name_before_removing_any_job(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([job("done"), job("busy")])
    set_phase(backend, "done", "Succeeded")
    set_phase(backend, "busy", "Running")
    with pytest.raises(JobExistsError, match="it is Running"):
        ops.submit([job("done"), job("busy")], replace_finished=True)
    assert ops.get_job("default", "done").status.phase == "Succeeded"


def test_run_replaces_a_finished_job(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([job()])
    old_uid = set_phase(backend, "train", "Failed").metadata.uid
    (submitted,) = ops.submit([job()], replace_finished=True)
    assert submitted.replaced
    replaced = ops.get_job("default", "train")
    assert (replaced.metadata.uid != old_uid, replaced.status.phase) == (True, "Pending")


def test_a_namespace_override_moves_jobs_and_datasets_not_queues(ops: Operations) -> None:
    submitted = ops.submit([queue(), dataset(), job("reader", datasets=[{"name": "images"}])], namespace="team-a")
    assert [(s.kind, s.namespace) for s in submitted] == [
        ("Queue", ""),
        ("Dataset", "team-a"),
        ("TrainingJob", "team-a"),
    ]


def test_annotations_reach_jobs_and_datasets(ops: Operations) -> None:
    ops.submit([dataset(), job()], annotations={"example.com/from": "here"})
    assert ops.get_job("default", "train").metadata.annotations == {"example.com/from": "here"}
    assert ops.get_dataset("default", "images").metadata.annotations == {"example.com/from": "here"}


# -- reading, halting, deleting ------------------------------------------------------------------------------------


def test_a_missing_job_names_the_others(ops: Operations) -> None:
    ops.submit([job("b"), job("a")])
    with pytest.raises(OperationError, match=r"^job default/x not found; jobs in default: a, b$"):
        ops.get_job("default", "x")
    with pytest.raises(OperationError, match=r"^job team/x not found; team has no jobs$"):
        ops.delete_job("team", "x")


def test_explain_says_why_a_job_waits(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([job()])
    backend.pending = "Pending: nobody runs"
    assert ops.explain("default", "train") == "Pending: nobody runs"
    set_phase(backend, "train", "Queued", reason="Waiting", message="needs 16 GPUs; the largest node has 8")
    assert ops.explain("default", "train") == "Queued: needs 16 GPUs; the largest node has 8"
    set_phase(backend, "train", "Queued")
    assert ops.explain("default", "train") == "Queued: waiting for the next scheduling cycle"


def test_explain_of_a_placed_job_that_does_not_start_names_the_warning_since_its_placement(
    ops: Operations, backend: MemoryBackend
) -> None:
    # On a cluster a gang whose GPU claims cannot be allocated is Downloading ("starting its replicas") while no
    # Pod is bound: only phalanx-scheduler's Warning Event says why.
    ops.submit([job()])
    before = set_phase(backend, "train", "Queued")
    backend.record(before, "Waiting", "an older warning, before the placement", warning=True)
    placed = backend.events[before.metadata.uid or ""][-1].time + timedelta(seconds=1)
    stored = set_phase(
        backend, "train", "Downloading", message="starting its replicas", admittedTime=placed.isoformat()
    )
    assert ops.explain("default", "train") == "Downloading: starting its replicas"
    backend.record(
        stored, "GPUClaimsNotAllocated", "no replica is bound: node n1 publishes no ResourceSlice", warning=True
    )
    assert ops.explain("default", "train") == (
        "Downloading: starting its replicas; not started yet: GPUClaimsNotAllocated: no replica is bound: "
        "node n1 publishes no ResourceSlice"
    )
    set_phase(backend, "train", "Running", message="all replicas running", admittedTime=placed.isoformat())
    assert ops.explain("default", "train") == "Running: all replicas running"


def test_halt_writes_suspend_on_the_version_read_and_retries_a_conflict(
    ops: Operations, backend: MemoryBackend
) -> None:
    ops.submit([job()])
    set_phase(backend, "train", "Running")
    backend.conflicts["set_suspend"] = 1
    assert ops.set_suspended("default", "train", True).spec.run_policy.suspend
    writes = len(backend.calls)
    ops.set_suspended("default", "train", True)  # already: nothing to write
    assert backend.calls[writes:] == []


def test_a_finished_job_cannot_be_halted(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([job()])
    set_phase(backend, "train", "Succeeded")
    with pytest.raises(OperationError, match=r"^job default/train is Succeeded; it cannot be halted or resumed$"):
        ops.set_suspended("default", "train", False)


def test_a_missing_queue_says_how_to_create_one(ops: Operations) -> None:
    with pytest.raises(OperationError, match=r"^queue q not found; there are no queues; create one with"):
        ops.get_queue("q")
    ops.submit([queue("b"), queue("a")])
    with pytest.raises(OperationError, match=r"^queue q not found; queues: a, b$"):
        ops.describe_queue("q")


def test_a_deleted_queue_comes_back_as_it_was(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([queue()])
    view = ops.delete_queue("team-a")
    assert view.queue.metadata.name == "team-a"
    assert ops.list_queues() == []


def test_a_dataset_read_by_an_unfinished_job_is_kept(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([dataset(), job("reader", datasets=[{"name": "images"}])])
    with pytest.raises(OperationError, match=r"is read by unfinished jobs: reader \(Pending\)"):
        ops.delete_dataset("default", "images")
    set_phase(backend, "reader", "Succeeded")
    assert ops.delete_dataset("default", "images").metadata.name == "images"
    with pytest.raises(OperationError, match=r"^dataset default/images not found; default has no datasets$"):
        ops.get_dataset("default", "images")


def test_evict_refuses_a_pinned_entry_and_names_what_it_evicted(ops: Operations, backend: MemoryBackend) -> None:
    backend.caches["gpu-0"] = [
        CacheEntryView("k1", "default/images", 10, "ready"),
        CacheEntryView("k2", "default/images", 10, "ready", ("default/train",)),
    ]
    with pytest.raises(OperationError, match=r"^k2 on node gpu-0 is in use by default/train \(evicted: gpu-0: k1\)$"):
        ops.evict(dataset="images")
    with pytest.raises(OperationError, match="name one cache entry"):
        ops.evict()
    assert [e.key for e in ops.cache_views("gpu-0")[0].entries] == ["k2"]
