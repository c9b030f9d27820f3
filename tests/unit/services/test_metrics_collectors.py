"""services.metrics over the in-memory backend port: the state collector at scrape time, and the scheduler's counts.

Each value asserted is one the objects put there make (jobs by namespace, queue and phase; GPUs of each node and
model and how many placed replicas hold; GPU health; the caches' bytes and counters), read back through
prometheus_client's own text format parser, as Prometheus would.
"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.core.data import DatasetCounters
from phalanx.core.lifecycle import HOLDING_PHASES, transition
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.nodes import Node
from phalanx.services.dataset_views import CacheEntryView, NodeCacheView
from phalanx.services.metrics import SchedulerMetrics, state_registry
from phalanx.services.operations import OperationError
from phalanx.services.port import count_jobs_of
from support.memory_backend import MemoryBackend

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(registry: CollectorRegistry) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


def put_job(backend: MemoryBackend, name: str, namespace: str, queue: str, **status: Any) -> TrainingJob:
    backend.create(
        TrainingJob.model_validate(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "type": "generic",
                    "scheduling": {"queue": queue},
                    "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}},
                },
            }
        )
    )
    job = backend.get(TrainingJob, namespace, name)
    assert job is not None
    if status:
        backend.write_status(job, status)
        job = backend.get(TrainingJob, namespace, name)
        assert job is not None
    return job


def put_node(backend: MemoryBackend, name: str, gpus: list[dict[str, Any]]) -> None:
    backend.objects[("Node", "", name)] = Node.model_validate(
        {"metadata": {"name": name}, "status": {"gpus": gpus, "source": "simulated"}}
    )


def test_jobs_are_counted_by_namespace_queue_and_phase() -> None:
    backend = MemoryBackend()
    put_job(backend, "a", "ml", "gpu")
    put_job(backend, "b", "ml", "gpu")
    put_job(backend, "c", "ml", "gpu", phase=Phase.RUNNING)
    put_job(backend, "d", "cv", "default", phase=Phase.FAILED)
    found = scrape(state_registry(backend))
    assert found["phalanx_jobs"] == {
        labels(namespace="ml", queue="gpu", phase="Pending"): 2.0,
        labels(namespace="ml", queue="gpu", phase="Running"): 1.0,
        labels(namespace="cv", queue="default", phase="Failed"): 1.0,
    }
    assert "phalanx_metrics_read_errors" not in found  # no part failed: the family has no samples


def test_gpus_total_allocated_and_health_by_node_and_model() -> None:
    backend = MemoryBackend()
    put_node(
        backend,
        "n1",
        [
            {"index": 0, "model": "H100"},
            {"index": 1, "model": "H100"},
            {"index": 2, "model": "A100", "healthy": False, "problem": "Xid 79"},
        ],
    )
    put_node(backend, "n2", [{"index": 0, "model": "H100"}])
    holds = {"worker-0": ReplicaPlacement(node="n1", gpus=[0, 2]), "worker-1": ReplicaPlacement(node="n2", gpus=[0])}
    put_job(backend, "running", "ml", "gpu", phase=Phase.RUNNING, placements=holds)
    # A finished job's placements are history: they hold nothing.
    put_job(
        backend, "done", "ml", "gpu", phase=Phase.SUCCEEDED, placements={"w": ReplicaPlacement(node="n1", gpus=[1])}
    )
    found = scrape(state_registry(backend))
    assert found["phalanx_gpus"] == {
        labels(node="n1", model="H100"): 2.0,
        labels(node="n1", model="A100"): 1.0,
        labels(node="n2", model="H100"): 1.0,
    }
    assert found["phalanx_gpus_allocated"] == {
        labels(node="n1", model="H100"): 1.0,
        labels(node="n1", model="A100"): 1.0,
        labels(node="n2", model="H100"): 1.0,
    }
    assert found["phalanx_gpu_healthy"] == {
        labels(node="n1", gpu="0", model="H100"): 1.0,
        labels(node="n1", gpu="1", model="H100"): 1.0,
        labels(node="n1", gpu="2", model="A100"): 0.0,
        labels(node="n2", gpu="0", model="H100"): 1.0,
    }


class CountingCaches(MemoryBackend):
    """The memory backend with each node cache's counters, as the embedded cache ledger keeps them."""

    def __init__(self) -> None:
        super().__init__()
        self.counters: dict[str, dict[str, DatasetCounters]] = {}

    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        views = super().cache_views(node)
        return [NodeCacheView(v.node, v.capacity, v.used, v.entries, self.counters.get(v.node, {})) for v in views]


def test_caches_bytes_capacity_and_counters_by_node_and_dataset() -> None:
    backend = CountingCaches()
    backend.caches["n1"] = [
        CacheEntryView("k1", "ml/imagenet", 300, "ready"),
        CacheEntryView("k2", "ml/c4", 200, "ready"),
    ]
    backend.counters["n1"] = {
        "ml/imagenet": DatasetCounters(hits=3, misses=1, bytes_from_cache=900, bytes_fetched=300, evictions=2)
    }
    found = scrape(state_registry(backend))
    assert found["phalanx_dataset_cache_bytes"] == {labels(node="n1"): 500.0}
    assert found["phalanx_dataset_cache_capacity_bytes"] == {labels(node="n1"): float(1 << 30)}
    where = labels(node="n1", dataset="ml/imagenet")
    assert found["phalanx_dataset_cache_hits_total"] == {where: 3.0}
    assert found["phalanx_dataset_cache_misses_total"] == {where: 1.0}
    assert found["phalanx_dataset_cache_evictions_total"] == {where: 2.0}
    assert found["phalanx_dataset_cache_read_bytes_total"] == {where: 900.0}
    assert found["phalanx_dataset_cache_fetched_bytes_total"] == {where: 300.0}


class BrokenCaches(MemoryBackend):
    def cache_views(self, node: str | None) -> builtins.list[NodeCacheView]:
        raise OperationError("the cache ledger is locked")


def test_a_part_that_cannot_be_read_is_left_out_and_said_the_rest_is_served() -> None:
    backend = BrokenCaches()
    put_job(backend, "a", "ml", "gpu")
    found = scrape(state_registry(backend))
    assert found["phalanx_metrics_read_errors"] == {labels(part="caches"): 1.0}
    assert "phalanx_dataset_cache_bytes" not in found
    assert found["phalanx_jobs"] == {labels(namespace="ml", queue="gpu", phase="Pending"): 1.0}


def test_an_admission_counts_once_with_its_latency_and_its_queueing_time() -> None:
    backend = MemoryBackend()
    job = put_job(backend, "a", "ml", "gpu")
    created = job.metadata.creation_timestamp
    assert created is not None
    queued_at = created + timedelta(seconds=40)
    queued = transition(job.status, Phase.QUEUED, reason="Queued", message="", now=queued_at)
    job = job.model_copy(update={"status": queued})
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    metrics.admitted(job, created + timedelta(seconds=100))
    metrics.preempted(job)
    metrics.cycle_took(0.003)
    metrics.cycle_took(0.2)
    found = scrape(registry)
    assert found["phalanx_admissions_total"] == {labels(queue="gpu"): 1.0}
    assert found["phalanx_preemptions_total"] == {labels(queue="gpu"): 1.0}
    assert found["phalanx_admission_latency_seconds_sum"] == {labels(queue="gpu"): 100.0}
    assert found["phalanx_queueing_seconds_sum"] == {labels(queue="gpu"): 60.0}
    assert found["phalanx_admission_latency_seconds_count"] == {labels(queue="gpu"): 1.0}
    # 60 s falls in the 60 s bucket, not the 30 s one.
    assert found["phalanx_queueing_seconds_bucket"][labels(queue="gpu", le="30.0")] == 0.0
    assert found["phalanx_queueing_seconds_bucket"][labels(queue="gpu", le="60.0")] == 1.0
    assert found["phalanx_scheduling_cycle_seconds_count"] == {(): 2.0}
    assert found["phalanx_scheduling_cycle_seconds_bucket"][labels(le="0.005")] == 1.0


class CountingLists(MemoryBackend):
    def __init__(self, fail_jobs: bool = False) -> None:
        super().__init__()
        self.job_lists: builtins.list[Any] = []  # the phases each list of jobs asked for
        self.counts = 0
        self.fail_jobs = fail_jobs

    def list(self, kind: Any, namespace: str | None = None, **selection: Any) -> builtins.list[Any]:
        if kind is TrainingJob:
            self.job_lists.append(selection.get("phases"))
            if self.fail_jobs:
                raise OperationError("the store is locked")
        return super().list(kind, namespace, **selection)

    def count_jobs(self) -> dict[Any, int]:
        self.counts += 1
        if self.fail_jobs:
            raise OperationError("the store is locked")
        return count_jobs_of(super().list(TrainingJob))  # not a list of the scrape's


def test_a_scrape_counts_the_jobs_and_reads_only_those_holding_room() -> None:
    backend = CountingLists()
    put_job(backend, "a", "ml", "gpu")
    put_job(backend, "b", "ml", "gpu", phase="Succeeded")
    found = scrape(state_registry(backend))
    # Parsing every job is most of a scrape of a long-lived store: jobs are counted, and the GPUs read from the
    # few that hold them, never from every finished one.
    assert backend.counts == 1
    assert backend.job_lists == [HOLDING_PHASES]
    assert found["phalanx_jobs"] == {
        labels(namespace="ml", queue="gpu", phase="Pending"): 1.0,
        labels(namespace="ml", queue="gpu", phase="Succeeded"): 1.0,
    }


def test_gpus_allocated_are_not_reported_as_zero_when_the_jobs_cannot_be_read() -> None:
    backend = CountingLists(fail_jobs=True)
    put_node(backend, "n1", [{"index": 0, "model": "H100"}])
    found = scrape(state_registry(backend))
    assert found["phalanx_metrics_read_errors"] == {labels(part="jobs"): 1.0, labels(part="nodes"): 1.0}
    assert "phalanx_gpus_allocated" not in found
