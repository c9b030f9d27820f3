"""The bodies of the read-only views (``views``): nodes with their allocation, a node's cache, a queue's usage.

Each body is built for one caller: names of namespaces the caller does not read are replaced or counted, by the
rule of ``core.auth.views`` (``readable`` says which namespaces the caller reads). Amounts are integers in the
units the scheduler counts in: CPU in millicores, memory in bytes, GPUs in thousandths (a GPU share is a
fraction of a GPU), so a dashboard divides, and nothing is rounded twice.

The models are for the OpenAPI document and the shape of the JSON; a Node is the model's own, with
``allocation`` added beside its ``status`` (what is handed out is not the node's observed state, and is computed
at the moment of asking).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from phalanx.core.auth import ALL_NAMESPACES
from phalanx.core.auth.views import HIDDEN, IN_USE, Readable, shown_name
from phalanx.core.scheduling.types import DATASET_LABEL_PREFIX
from phalanx.model.base import API_VERSION
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.nodes import Node
from phalanx.services.dataset_views import NodeCacheView
from phalanx.services.node_views import NodeAllocation
from phalanx.services.queue_views import QueueView, job_usage

GPU = "gpu"
RESOURCES = ("gpu", "cpu", "memory")
UNITS = {"gpu": "milliGPU", "cpu": "millicores", "memory": "bytes"}


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class GpuHolderBody(_Wire):
    """A replica holding (a share of) a GPU; ``job`` is ``in use`` and ``replica`` absent for another tenant's."""

    job: str
    replica: str | None = None
    gpu_milli: int


class GpuAllocationBody(_Wire):
    """One GPU that is held, and by whom."""

    index: int
    holders: list[GpuHolderBody]


class NodeAllocationBody(_Wire):
    """What a node has handed out to jobs that hold their room now."""

    cpu_milli: int = 0
    memory: int = 0
    gpus: int = 0
    gpu_holders: list[GpuAllocationBody] = []


class NodeView(Node):
    """A Node as the API shows it: the model's object, and ``allocation``."""

    allocation: NodeAllocationBody


class NodeListBody(_Wire):
    """Every node, by name."""

    api_version: str = API_VERSION
    kind: Literal["NodeList"] = "NodeList"
    items: list[NodeView]


class CacheEntryBody(_Wire):
    """One entry of a node's cache: its key (a content digest), its Dataset, size, state and who pins it."""

    key: str
    dataset: str
    bytes: int
    state: str
    pinned_by: list[str]


class CacheCountersBody(_Wire):
    """What reads of one Dataset through this cache came to."""

    hits: int
    misses: int
    bytes_from_cache: int
    bytes_fetched: int
    evictions: int


class NodeCacheBody(_Wire):
    """A node's dataset cache: capacity and use in bytes (null where unknown), entries, counters by Dataset.

    The counters of Datasets of namespaces the caller does not read are summed under ``hidden``.
    """

    api_version: str = API_VERSION
    kind: Literal["NodeCache"] = "NodeCache"
    node: str
    capacity: int | None
    used: int | None
    entries: list[CacheEntryBody]
    counters: dict[str, CacheCountersBody]


class ResourceUsageBody(_Wire):
    """One resource of a queue: used by its admitted jobs, its quota (null: none), what is borrowed above it."""

    unit: str
    used: int
    quota: int | None
    borrowed: int
    borrowing_limit: int | None


class QueuedJobBody(_Wire):
    """A job of the queue the caller may name: its phase, priority class, age and what it waits for or holds."""

    namespace: str
    name: str
    phase: str
    priority_class: str | None = None
    created: datetime | None = None
    waiting_for: str | None = None
    gpu_milli: int | None = None
    cpu_milli: int | None = None
    memory: int | None = None


class QueueUsageBody(_Wire):
    """A queue's usage against its quota, its admitted and pending jobs (others' counted, not named)."""

    api_version: str = API_VERSION
    kind: Literal["QueueUsage"] = "QueueUsage"
    name: str
    cohort: str | None
    weight: float
    from_status: bool
    """The jobs could not be read: the counts and usage are those the scheduler last wrote, and no job is named."""
    resources: dict[str, ResourceUsageBody]
    admitted: int
    pending: int
    admitted_jobs: list[QueuedJobBody]
    pending_jobs: list[QueuedJobBody]
    other_admitted: int
    """Admitted jobs of namespaces the caller does not read."""
    other_pending: int
    """Pending jobs of namespaces the caller does not read."""


def node_body(node: Node, allocation: NodeAllocation | None, readable: Readable) -> dict[str, Any]:
    """The Node and its allocation, as ``readable``'s caller may see them."""
    body = node.to_dict()
    labels = body.get("metadata", {}).get("labels") or {}
    if labels and not readable(ALL_NAMESPACES):  # a cached Dataset's label names it without its namespace
        body["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith(DATASET_LABEL_PREFIX)}
    held = allocation or NodeAllocation()
    gpus = [
        GpuAllocationBody(
            index=index,
            holders=[
                GpuHolderBody(job=holder.job, replica=holder.replica, gpu_milli=holder.gpu_milli)
                if shown_name(holder.job, readable) == holder.job
                else GpuHolderBody(job=IN_USE, gpu_milli=holder.gpu_milli)
                for holder in held.holders[index]
            ],
        )
        for index in sorted(held.holders)
    ]
    body["allocation"] = NodeAllocationBody(
        cpu_milli=held.cpu_milli, memory=held.memory, gpus=held.gpus, gpu_holders=gpus
    ).model_dump(mode="json", by_alias=True, exclude_none=True)  # no ``replica`` for a holder not named
    return body


_NO_COUNTS = CacheCountersBody(hits=0, misses=0, bytes_from_cache=0, bytes_fetched=0, evictions=0)


def cache_body(view: NodeCacheView, readable: Readable) -> dict[str, Any]:
    """A node's cache as ``readable``'s caller may see it: others' Datasets ``hidden``, their jobs ``in use``."""
    entries = [
        CacheEntryBody(
            key=entry.key,
            dataset=shown_name(entry.dataset, readable, hidden=HIDDEN),
            bytes=entry.bytes,
            state=entry.state,
            pinned_by=sorted({shown_name(holder, readable) for holder in entry.pinned_by}),
        )
        for entry in view.entries
    ]
    counters: dict[str, CacheCountersBody] = {}
    for dataset, counted in sorted(view.counters.items()):
        shown = shown_name(dataset, readable, hidden=HIDDEN)
        before = counters.get(shown, _NO_COUNTS)
        counters[shown] = CacheCountersBody(
            hits=before.hits + counted.hits,
            misses=before.misses + counted.misses,
            bytes_from_cache=before.bytes_from_cache + counted.bytes_from_cache,
            bytes_fetched=before.bytes_fetched + counted.bytes_fetched,
            evictions=before.evictions + counted.evictions,
        )
    body = NodeCacheBody(node=view.node, capacity=view.capacity, used=view.used, entries=entries, counters=counters)
    return body.model_dump(mode="json", by_alias=True)


def queue_usage_body(view: QueueView, readable: Readable, pending_explanation: str) -> dict[str, Any]:
    """A queue's usage as ``readable``'s caller may see it.

    Args:
        view: the queue with its jobs (``services.queue_views``).
        readable: which namespaces the caller reads.
        pending_explanation: why a job still Pending (not yet seen by the scheduler) waits, on this backend.
    """
    spec = view.queue.spec
    quota = spec.quota.named()
    limits = spec.borrowing_limit.named() if spec.borrowing_limit is not None else {}
    resources = {}
    for resource in RESOURCES:
        scale = 1000 if resource == GPU else 1
        used = view.usage.amount(resource)
        limit = quota[resource] * scale if resource in quota else None
        resources[resource] = ResourceUsageBody(
            unit=UNITS[resource],
            used=used,
            quota=limit,
            borrowed=max(0, used - limit) if limit is not None else 0,
            borrowing_limit=limits[resource] * scale if resource in limits else None,
        )
    admitted = [job for job in view.admitted if _named(job, readable)]
    pending = [job for job in view.pending if _named(job, readable)]
    body = QueueUsageBody(
        name=view.name,
        cohort=spec.cohort,
        weight=spec.weight,
        from_status=view.from_status,
        resources=resources,
        admitted=view.admitted_count,
        pending=view.pending_count,
        admitted_jobs=[_admitted(job) for job in admitted],
        pending_jobs=[_pending(job, pending_explanation) for job in pending],
        other_admitted=0 if view.from_status else len(view.admitted) - len(admitted),
        other_pending=0 if view.from_status else len(view.pending) - len(pending),
    )
    return body.model_dump(mode="json", by_alias=True)


def _named(job: TrainingJob, readable: Readable) -> bool:
    return shown_name(job.key, readable) == job.key


def _admitted(job: TrainingJob) -> QueuedJobBody:
    used = job_usage(job)
    return QueuedJobBody(
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        phase=Phase(job.status.phase).value,
        priority_class=job.spec.scheduling.priority_class,
        created=job.metadata.creation_timestamp,
        gpu_milli=used.gpu_milli,
        cpu_milli=used.cpu_milli,
        memory=used.memory,
    )


def _pending(job: TrainingJob, pending_explanation: str) -> QueuedJobBody:
    # What `describe queue` shows as WAITING FOR: the scheduler's reason; a job it has not seen yet is Pending.
    unseen = pending_explanation if Phase(job.status.phase) is Phase.PENDING else ""
    why = job.status.message or job.status.reason or unseen
    return QueuedJobBody(
        namespace=job.metadata.namespace,
        name=job.metadata.name,
        phase=Phase(job.status.phase).value,
        priority_class=job.spec.scheduling.priority_class,
        created=job.metadata.creation_timestamp,
        waiting_for=why,
    )
