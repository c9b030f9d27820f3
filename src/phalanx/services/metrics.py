"""Phalanx's Prometheus metrics, written once for both backends: what the schedulers count, and what the port shows.

Two sources, so that each number is taken where it is true:

- ``SchedulerMetrics``: events only the process doing the work sees as they happen (an admission and how long
  the job waited for it, a preemption, how long a scheduling cycle took). The embedded scheduler
  (``services.embedded.scheduler``) and phalanx-scheduler (``services.kubernetes.scheduler``) call it after a
  status write went through, so a lost write is never counted.
- ``StateCollector``: what the objects say at scrape time, read over the backend port (``services.port``), so it
  is the same on the embedded store and on a cluster: jobs by namespace, queue and phase, GPUs per node and
  model (and how many a placed replica holds), each GPU's health, and each node's dataset cache (bytes held,
  capacity, and the cache's own counters of hits, misses and evictions, which it keeps across restarts).

Both register in a ``prometheus_client.CollectorRegistry`` passed in (never the library's global one: two
servers in one process, the tests', must not collide). ``prometheus_client`` is imported only when metrics are
made: the base install runs jobs without it. The names, types and labels are listed in docs/server.md#metrics.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.nodes import Node
from phalanx.services.port import OperationsBackend

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

log = logging.getLogger(__name__)

#: Buckets of the waiting-time histograms (seconds): from a job admitted at once to one that waited a day.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)
#: Buckets of the scheduling cycle's duration (seconds): a few jobs take milliseconds, thousands a second or more.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _seconds_since(start: datetime | None, now: datetime) -> float | None:
    if start is None:
        return None
    return max(0.0, (now - start).total_seconds())


def queued_since(job: TrainingJob) -> datetime | None:
    """When the job last entered Queued (its Queued condition's time); None when it never did."""
    for condition in job.status.conditions:
        if condition.type == Phase.QUEUED:
            return condition.last_transition_time
    return None


class SchedulerMetrics:
    """What a scheduler counts as it decides: admissions, their waits, preemptions, cycle durations."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter as PromCounter
        from prometheus_client import Histogram

        self.admissions = PromCounter(
            "phalanx_admissions", "Jobs admitted (placed) by the scheduler.", ["queue"], registry=registry
        )
        self.admission_latency = Histogram(
            "phalanx_admission_latency_seconds",
            "From a job's creation to its admission (every admission of it: after a preemption too).",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.queueing = Histogram(
            "phalanx_queueing_seconds",
            "From the moment a job last entered Queued to its admission: the wait of this admission alone.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.preemptions = PromCounter(
            "phalanx_preemptions", "Jobs preempted (moved to Preempted) to make room.", ["queue"], registry=registry
        )
        self.cycles = Histogram(
            "phalanx_scheduling_cycle_seconds",
            "How long one scheduling cycle took, for the cycles that had queued jobs to decide on.",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )

    def admitted(self, job: TrainingJob, now: datetime) -> None:
        """Count an admission written for ``job`` (as it was read, still Queued) at ``now``."""
        queue = job.spec.scheduling.queue
        self.admissions.labels(queue).inc()
        latency = _seconds_since(job.metadata.creation_timestamp, now)
        if latency is not None:
            self.admission_latency.labels(queue).observe(latency)
        waited = _seconds_since(queued_since(job), now)
        if waited is not None:
            self.queueing.labels(queue).observe(waited)

    def preempted(self, job: TrainingJob) -> None:
        """Count a preemption written for ``job``."""
        self.preemptions.labels(job.spec.scheduling.queue).inc()

    def cycle_took(self, seconds: float) -> None:
        """Record one scheduling cycle's duration."""
        self.cycles.observe(seconds)


class StateCollector:
    """A ``prometheus_client`` collector over the port: the objects' state, read when Prometheus scrapes.

    A part that cannot be read (the store is busy, the API server unreachable) is left out of that scrape and
    logged, and ``phalanx_metrics_read_errors`` says which: the other parts are still served.
    """

    def __init__(self, backend: OperationsBackend) -> None:
        self.backend = backend

    def collect(self) -> Iterator[Metric]:
        """The state metrics now (called by the registry at each scrape)."""
        from prometheus_client.core import GaugeMetricFamily

        failed = GaugeMetricFamily(
            "phalanx_metrics_read_errors",
            "1 for each part of the state this scrape could not read (its metrics are missing from it).",
            labels=["part"],
        )
        # Counted, and the few jobs holding room read: a scrape of a store of many finished jobs parses none.
        parts: tuple[tuple[str, Callable[[], Iterator[Metric]]], ...] = (
            ("jobs", lambda: self._jobs(self.backend.count_jobs())),
            ("nodes", lambda: self._nodes(self.backend.list(TrainingJob, phases=HOLDING_PHASES))),
            ("caches", self._caches),
        )
        for part, read in parts:
            try:
                families = list(read())
            except Exception as error:  # a scrape must answer with what it could read
                log.warning("metrics: cannot read the %s: %s", part, error)
                failed.add_metric([part], 1.0)
                continue
            yield from families
        yield failed

    def _jobs(self, counts: Mapping[tuple[str, str, str], int]) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "phalanx_jobs", "TrainingJobs by namespace, queue and phase.", labels=["namespace", "queue", "phase"]
        )
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        yield family

    def _nodes(self, jobs: list[TrainingJob]) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        nodes = self.backend.list(Node)
        held = _held_gpus(jobs)
        total = GaugeMetricFamily("phalanx_gpus", "GPUs of each node, by model.", labels=["node", "model"])
        allocated = GaugeMetricFamily(
            "phalanx_gpus_allocated",
            "GPUs of each node, by model, that a placed replica holds (whole or a share).",
            labels=["node", "model"],
        )
        healthy = GaugeMetricFamily(
            "phalanx_gpu_healthy", "1 when the GPU is healthy, 0 when not.", labels=["node", "gpu", "model"]
        )
        for node in sorted(nodes, key=lambda n: n.metadata.name):
            name = node.metadata.name
            models: Counter[str] = Counter()
            taken: Counter[str] = Counter()
            for gpu in node.status.gpus:
                models[gpu.model] += 1
                if gpu.index in held.get(name, ()):
                    taken[gpu.model] += 1
                healthy.add_metric([name, str(gpu.index), gpu.model], 1.0 if gpu.healthy else 0.0)
            for model, count in sorted(models.items()):
                total.add_metric([name, model], count)
                allocated.add_metric([name, model], taken[model])
        yield from (total, allocated, healthy)

    def _caches(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        used = GaugeMetricFamily("phalanx_dataset_cache_bytes", "Bytes a node's dataset cache holds.", labels=["node"])
        capacity = GaugeMetricFamily(
            "phalanx_dataset_cache_capacity_bytes", "Bytes a node's dataset cache may hold.", labels=["node"]
        )
        counters = {
            name: CounterMetricFamily(f"phalanx_dataset_cache_{name}", text, labels=["node", "dataset"])
            for name, text in (
                ("hits", "Stagings of a dataset a node's cache served."),
                ("misses", "Stagings of a dataset a node's cache had to fetch."),
                ("evictions", "Entries of a dataset evicted from a node's cache."),
                ("read_bytes", "Bytes of a dataset staged from a node's cache."),
                ("fetched_bytes", "Bytes of a dataset fetched into a node's cache."),
            )
        }
        for view in sorted(self.backend.cache_views(None), key=lambda v: v.node):
            if view.used is not None:
                used.add_metric([view.node], view.used)
            if view.capacity is not None:
                capacity.add_metric([view.node], view.capacity)
            for dataset, seen in sorted(view.counters.items()):
                labels = [view.node, dataset]
                counters["hits"].add_metric(labels, seen.hits)
                counters["misses"].add_metric(labels, seen.misses)
                counters["evictions"].add_metric(labels, seen.evictions)
                counters["read_bytes"].add_metric(labels, seen.bytes_from_cache)
                counters["fetched_bytes"].add_metric(labels, seen.bytes_fetched)
        yield from (used, capacity, *counters.values())


def _held_gpus(jobs: list[TrainingJob]) -> dict[str, set[int]]:
    """Per node, the indices of the GPUs the replicas of jobs holding room are placed on."""
    held: dict[str, set[int]] = {}
    for job in jobs:
        if Phase(job.status.phase) not in HOLDING_PHASES:
            continue
        for placement in job.status.placements.values():
            held.setdefault(placement.node, set()).update(placement.gpus)
    return held


def state_registry(backend: OperationsBackend, registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """``registry`` (a new one when None) with a ``StateCollector`` over ``backend`` registered in it."""
    from prometheus_client import CollectorRegistry

    registry = registry if registry is not None else CollectorRegistry()
    registry.register(StateCollector(backend))
    return registry
