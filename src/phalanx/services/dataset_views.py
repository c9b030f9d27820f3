"""What the dataset and cache verbs show, the same for both backends.

Datasets with the jobs that read them, and node caches with their entries and counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from phalanx.core.data import DatasetCounters
from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.core.scheduling.types import DATASET_LABEL_PREFIX
from phalanx.model.datasets import Dataset
from phalanx.model.events import Event
from phalanx.model.jobs import Phase, TrainingJob


def readers(dataset: Dataset, jobs: Iterable[TrainingJob], *, active_only: bool = False) -> list[TrainingJob]:
    """The jobs of the Dataset's namespace that mount it (only unfinished ones when ``active_only``)."""
    found = []
    for job in jobs:
        if job.metadata.namespace != dataset.metadata.namespace:
            continue
        if not any(mount.dataset_name == dataset.metadata.name for mount in job.spec.datasets):
            continue
        if active_only and Phase(job.status.phase) not in ACTIVE_PHASES:
            continue
        found.append(job)
    return found


@dataclass(frozen=True)
class DatasetDescription:
    """A Dataset, the jobs that read it, and its events."""

    dataset: Dataset
    jobs: list[TrainingJob]
    events: list[Event]


@dataclass(frozen=True)
class CacheEntryView:
    """One entry of a node cache as the CLI shows it."""

    key: str
    dataset: str
    bytes: int
    state: str
    pinned_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeCacheView:
    """A node's dataset cache: capacity and use (None where the backend cannot see them), entries, counters."""

    node: str
    capacity: int | None
    used: int | None
    entries: Sequence[CacheEntryView]
    counters: dict[str, DatasetCounters] = field(default_factory=dict)


def cache_view_from_labels(node: str, labels: dict[str, str]) -> NodeCacheView:
    """What a node's labels say it caches (``dataset.phalanx.dev/<name>=<version label>``).

    Where nothing more is known: on Kubernetes the cache lives on the node, whose agent publishes the labels.
    """
    entries = [
        CacheEntryView(key=value, dataset=key[len(DATASET_LABEL_PREFIX) :], bytes=0, state="ready")
        for key, value in sorted(labels.items())
        if key.startswith(DATASET_LABEL_PREFIX)
    ]
    return NodeCacheView(node, None, None, entries)


def entries_to_evict(
    views: Iterable[NodeCacheView], key: str | None, dataset: str | None
) -> list[tuple[NodeCacheView, CacheEntryView]]:
    """What ``phalanx cache evict`` names, on every node of ``views``.

    That is the entry ``key``, or every entry of ``dataset`` (``namespace/name``, or a name in ``default``).

    Raises:
        ValueError: both or neither given; or nothing matched (the sentence says so).
    """
    if (key is None) == (dataset is None):
        raise ValueError("name one cache entry (KEY) or --dataset NAME")
    wanted = dataset if dataset is None or "/" in dataset else f"default/{dataset}"
    found = [
        (view, entry)
        for view in views
        for entry in view.entries
        if (key is None or entry.key == key) and (wanted is None or entry.dataset == wanted)
    ]
    if not found:
        raise ValueError(f"no cache holds {key or wanted}; see `phalanx cache ls`")
    return found


def eviction_failure(problems: Sequence[str], evicted: Sequence[str]) -> str | None:
    """The sentence for an eviction that left entries (naming what was evicted anyway), or None when none was."""
    if not problems:
        return None
    done = f" (evicted: {', '.join(evicted)})" if evicted else ""
    return "; ".join(problems) + done
