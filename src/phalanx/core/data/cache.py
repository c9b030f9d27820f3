"""The ledger of a content-addressed node cache: what it holds, what it may admit, what it evicts.

Entries are keyed by content hash (a dataset version, or a sample's hash) with their size and the dataset
they belong to. Two policies:

- ``lru``: to admit an entry, evict the least recently used unpinned entries until it fits;
- ``noReplacement`` (CoorDL's MinIO cache): once full, admit nothing more and evict nothing. With every
  sample read once per epoch in a fresh random order, every cached item is as likely to be read next as any
  other, so which items stay does not matter; what LRU loses is evicting items before their turn comes, and
  its hit ratio falls below the cache's share of the dataset while no-replacement holds exactly that share.

Pinned entries (datasets in use by a job) are never evicted, under either policy; an insert that only
evicting pinned entries could make room for is refused and says so. A pinned insert may evict unpinned
entries under ``noReplacement`` too: a job's data must land. Per-dataset counters record hits, misses,
bytes served from the cache and fetched, and evictions. Pure: no I/O; callers move the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class CachePolicy(StrEnum):
    """What the cache does when it is full."""

    LRU = "lru"
    NO_REPLACEMENT = "noReplacement"


class Admission(StrEnum):
    """The outcome of offering an entry to the cache."""

    ADMITTED = "admitted"
    ALREADY_CACHED = "already-cached"
    FULL = "full"  # noReplacement: the cache keeps what it has
    BLOCKED_BY_PINNED = "blocked-by-pinned"  # only evicting pinned entries would make room
    TOO_LARGE = "too-large"  # larger than the whole cache


@dataclass
class DatasetCounters:
    """What one dataset's reads through the cache came to."""

    hits: int = 0
    misses: int = 0
    bytes_from_cache: int = 0
    bytes_fetched: int = 0
    evictions: int = 0

    @property
    def hit_ratio(self) -> float:
        """Hits over reads; 0 before any read."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0


@dataclass(frozen=True, slots=True)
class AdmitResult:
    """What ``admit`` did: the outcome and the keys it evicted to make room."""

    outcome: Admission
    evicted: tuple[str, ...] = ()

    @property
    def cached(self) -> bool:
        """Whether the entry is in the cache now."""
        return self.outcome in (Admission.ADMITTED, Admission.ALREADY_CACHED)


@dataclass
class _Entry:
    size: int
    dataset: str
    pins: int = 0


@dataclass
class CacheLedger:
    """A cache of ``capacity`` bytes under ``policy``; entries in least- to most-recently-used order."""

    capacity: int
    policy: CachePolicy = CachePolicy.NO_REPLACEMENT
    used: int = field(default=0, init=False)
    _entries: dict[str, _Entry] = field(default_factory=dict, init=False, repr=False)
    _counters: dict[str, DatasetCounters] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError(f"cache capacity must be at least 0 bytes, not {self.capacity}")
        self.policy = CachePolicy(self.policy)

    @property
    def free(self) -> int:
        """Bytes not held by any entry."""
        return self.capacity - self.used

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def lru_order(self) -> list[str]:
        """The cached keys, least recently used first."""
        return list(self._entries)

    def pinned(self, key: str) -> bool:
        """Whether the entry is cached and pinned."""
        entry = self._entries.get(key)
        return entry is not None and entry.pins > 0

    def counters(self, dataset: str) -> DatasetCounters:
        """The dataset's counters (zero for a dataset never read)."""
        return self._counters.setdefault(dataset, DatasetCounters())

    def lookup(self, key: str, dataset: str, size: int) -> bool:
        """Record a read of ``size`` bytes: a hit (and a use, for LRU) when cached, else a miss to fetch."""
        counters = self.counters(dataset)
        entry = self._entries.get(key)
        if entry is None:
            counters.misses += 1
            counters.bytes_fetched += size
            return False
        counters.hits += 1
        counters.bytes_from_cache += size
        self._entries[key] = self._entries.pop(key)  # most recently used goes last
        return True

    def admit(self, key: str, size: int, dataset: str, *, pin: bool = False) -> AdmitResult:
        """Offer an entry; under LRU (or for a pinned insert) evict unpinned entries as needed."""
        if size < 0:
            raise ValueError(f"entry size must be at least 0 bytes, not {size}")
        entry = self._entries.get(key)
        if entry is not None:
            entry.pins += 1 if pin else 0
            return AdmitResult(Admission.ALREADY_CACHED)
        if size > self.capacity:
            return AdmitResult(Admission.TOO_LARGE)
        evicted: tuple[str, ...] = ()
        if size > self.free:
            if self.policy == CachePolicy.NO_REPLACEMENT and not pin:
                return AdmitResult(Admission.FULL)
            victims = self._victims(size - self.free)
            if victims is None:
                return AdmitResult(Admission.BLOCKED_BY_PINNED)
            for victim in victims:
                self._drop(victim)
            evicted = tuple(victims)
        self._entries[key] = _Entry(size=size, dataset=dataset, pins=1 if pin else 0)
        self.used += size
        return AdmitResult(Admission.ADMITTED, evicted)

    def pin(self, key: str) -> bool:
        """Pin a cached entry (once more); False when it is not cached."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        entry.pins += 1
        return True

    def unpin(self, key: str) -> None:
        """Release one pin of the entry (no-op when not cached or not pinned)."""
        entry = self._entries.get(key)
        if entry is not None and entry.pins > 0:
            entry.pins -= 1

    def evict(self, key: str) -> bool:
        """Remove an unpinned entry on request (``phalanx cache evict``); False when absent or pinned."""
        entry = self._entries.get(key)
        if entry is None or entry.pins > 0:
            return False
        self._drop(key)
        return True

    def _victims(self, needed: int) -> list[str] | None:
        """The least recently used unpinned entries whose sizes add up to ``needed``; None if there are not enough."""
        chosen, freed = [], 0
        for key, entry in self._entries.items():
            if freed >= needed:
                break
            if entry.pins == 0:
                chosen.append(key)
                freed += entry.size
        return chosen if freed >= needed else None

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        self.used -= entry.size
        self.counters(entry.dataset).evictions += 1
