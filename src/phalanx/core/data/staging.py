"""What staging a job's datasets means, pure: which cache entries each node needs and what each replica sees.

A node cache holds entries named by content: a whole dataset version (``sha256-<hex>``, replicated datasets)
or one shard of it (``sha256-<hex>.shard-1-of-4``). Planning is deterministic, so every backend (the embedded
runtime, the Kubernetes operator and node agent) computes the same entries and the same environment:

- ``replicate``: every node of the job holds the whole version; every replica sees it.
- ``shard``: the job's ranked replicas, in rank order, each get shard ``rank`` of ``count`` (``count``: the
  ranked replicas placed), split by ``sharding.shard_files``; a node holds the shards of the replicas placed
  on it. A replica outside the ranked roles (a parameter server) sees the whole version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from phalanx.core.data.sharding import dataset_env, shard_files
from phalanx.model.datasets import Distribution, version_label


@dataclass(frozen=True, slots=True)
class DatasetFiles:
    """A materialised dataset version a job mounts: its files (``(relative path, bytes)``, sorted by path)."""

    mount: str
    dataset: str
    version: str
    distribution: Distribution
    files: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One content-addressed entry of a node cache: a dataset version or one shard of it."""

    key: str
    dataset: str
    version: str
    files: tuple[tuple[str, int], ...]

    @property
    def bytes(self) -> int:
        """The entry's size: its files' bytes."""
        return sum(size for _, size in self.files)


@dataclass(frozen=True, slots=True)
class ReplicaMount:
    """What one replica sees of one dataset: the cache entry and, for a shard, its index and the count."""

    mount: str
    key: str
    shard_index: int | None = None
    shard_count: int | None = None

    def env(self, path: str) -> dict[str, str]:
        """``PHALANX_DATASET_<MOUNT>_PATH`` (and the shard's index and count) with the entry at ``path``."""
        return dataset_env(self.mount, path, self.shard_index, self.shard_count)


@dataclass(frozen=True, slots=True)
class StagingPlan:
    """Per node the entries to hold, per replica what it mounts."""

    entries: Mapping[str, tuple[CacheEntry, ...]]
    mounts: Mapping[str, tuple[ReplicaMount, ...]]

    def keys_on(self, node: str) -> frozenset[str]:
        """The entry keys ``node`` must hold for this job."""
        return frozenset(entry.key for entry in self.entries.get(node, ()))


def entry_key(version: str, shard_index: int | None = None, shard_count: int | None = None) -> str:
    """The cache key of a version (``sha256-<hex>``) or of one of its shards (``<key>.shard-<i>-of-<n>``)."""
    key = version_label(version)
    if shard_index is None or shard_count is None:
        return key
    return f"{key}.shard-{shard_index}-of-{shard_count}"


def plan_staging(
    datasets: Sequence[DatasetFiles],
    replicas: Sequence[tuple[str, str, int | None]],
) -> StagingPlan:
    """Plan where a job's datasets go.

    Args:
        datasets: the job's mounts, resolved to materialised versions.
        replicas: the placed replicas as ``(name, node, rank)``, ranked ones in rank order; rank None for a
            replica outside the ranked roles.

    Returns:
        Entries by node (each key once per node, sorted) and mounts by replica (in the order of ``datasets``).
    """
    ranked = [(name, node) for name, node, rank in sorted(replicas, key=lambda r: r[2] or 0) if rank is not None]
    entries: dict[str, dict[str, CacheEntry]] = {}
    mounts: dict[str, list[ReplicaMount]] = {name: [] for name, _, _ in replicas}
    for data in datasets:
        whole = CacheEntry(entry_key(data.version), data.dataset, data.version, data.files)
        shards: dict[str, CacheEntry] = {}
        if data.distribution == Distribution.SHARD and ranked:
            count = len(ranked)
            sizes = dict(data.files)
            split = shard_files(data.files, count)
            for index, (name, node) in enumerate(ranked):
                files = tuple((path, sizes[path]) for path in split[index])
                entry = CacheEntry(entry_key(data.version, index, count), data.dataset, data.version, files)
                shards[name] = entry
                entries.setdefault(node, {})[entry.key] = entry
                mounts[name].append(ReplicaMount(data.mount, entry.key, index, count))
        for name, node, _rank in replicas:
            if name in shards:
                continue
            entries.setdefault(node, {})[whole.key] = whole
            mounts[name].append(ReplicaMount(data.mount, whole.key))
    return StagingPlan(
        entries={node: tuple(held[key] for key in sorted(held)) for node, held in sorted(entries.items())},
        mounts={name: tuple(held) for name, held in mounts.items()},
    )
