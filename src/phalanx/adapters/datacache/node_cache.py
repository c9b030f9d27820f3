"""A node's dataset cache on disk: entries by content key, a capacity, pins by the jobs using them, counters.

Layout of one cache directory::

    <root>/ledger.json        what is held: entries (dataset, version, bytes, state, last use, pinned by), the
                              capacity, a logical clock and per-dataset counters; replaced atomically
    <root>/.lock              flock(2) taken around every read-modify-write of the ledger
    <root>/<key>/             one entry's files (``sha256-<hex>`` or ``sha256-<hex>.shard-<i>-of-<n>``)
    <root>/.incoming-<key>-*  an entry being copied in; renamed to ``<key>`` only when complete

Admission and eviction are ``core.data.CacheLedger``'s: staging an entry for a job is a pinned insert, which
evicts the least recently used unpinned entries to make room and never a pinned one. The lock is held only to
decide and to record; copying happens outside it, with the entry reserved as ``staging`` (so two stagers of one
key do not both copy and nobody evicts it mid-copy). A ledger entry is ``ready`` only once its directory is in
place, and an evicted directory is removed only after its entry left the ledger, so a reader that trusts the
ledger never finds a missing or half-written entry. Readers (``entries``, ``counters``) do not lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from phalanx.core.data import Admission, CacheEntry, CacheLedger, CachePolicy, DatasetCounters

LEDGER = "ledger.json"
LOCK = ".lock"
INCOMING = ".incoming-"
_COPY_CHUNK = 16 << 20

#: ``progress(bytes copied, bytes in all)``.
Progress = Callable[[int, int], None]


class CacheError(Exception):
    """A cache operation failed in a way the user can act on; the message says what and how to fix it."""


class StageOutcome(StrEnum):
    """What staging an entry came to."""

    HIT = "hit"  # already cached: nothing moved
    COPIED = "copied"  # fetched into the cache now
    IN_PROGRESS = "in-progress"  # another stager is copying it
    WAITING = "waiting"  # no room until pinned entries are released


#: How many readers (job uids) an entry remembers, so that their hits count once: enough for the jobs that can
#: run on one node at once, bounded so the ledger stays small.
_READERS_KEPT = 256


def in_use_sentence(key: str, dataset: str, cache: str, users: Sequence[str]) -> str:
    """Why an entry cannot be evicted: the jobs using it (none: a copy into it is under way)."""
    who = ", ".join(users) or "a staging in progress"
    return f"entry {key} of {dataset} on {cache} is in use by {who}; delete or wait for those jobs, then evict it"


@dataclass(frozen=True, slots=True)
class CachedEntry:
    """One entry as the ledger records it."""

    key: str
    dataset: str
    version: str
    bytes: int
    files: int
    state: str
    last_used: int
    pinned_by: tuple[str, ...]
    staged_time: str | None = None

    @property
    def ready(self) -> bool:
        """Whether the entry's files are all in place."""
        return self.state == "ready"


@dataclass
class _Ledger:
    capacity: int
    clock: int = 0
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def count(self, dataset: str, name: str, amount: int = 1) -> None:
        counters = self.counters.setdefault(dataset, {})
        counters[name] = counters.get(name, 0) + amount


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


class NodeDataCache:
    """The dataset cache of one node, in one directory (see the module docstring for the layout).

    Args:
        root: the cache directory; created if missing.
        capacity: its size limit in bytes. None keeps the capacity recorded in the ledger (for readers such as
            ``phalanx cache ls``), or, for a new cache, half of the free space of the filesystem holding it.
        name: the node, for messages.
        write_limit: the most bytes copies into this cache may write in all before failing as a full disk does
            (``ENOSPC``); None for no limit. A seam for tests, like the sources' ``max_bytes``.
    """

    def __init__(
        self, root: Path, *, capacity: int | None = None, name: str = "this node", write_limit: int | None = None
    ) -> None:
        self.root = Path(root)
        self.name = name
        self._write_limit = write_limit
        self._written = 0
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked() as ledger:
            if capacity is not None:
                if capacity < 0:
                    raise CacheError(f"cache capacity must be 0 bytes or more, not {capacity}")
                ledger.capacity = capacity

    # -- reading, no lock -----------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """The size limit in bytes."""
        return self._read().capacity

    def entries(self) -> list[CachedEntry]:
        """Every entry, least recently used first."""
        ledger = self._read()
        return sorted((self._entry(key, data) for key, data in ledger.entries.items()), key=lambda e: e.last_used)

    def entry(self, key: str) -> CachedEntry | None:
        """The entry named ``key``, if held or being staged."""
        data = self._read().entries.get(key)
        return None if data is None else self._entry(key, data)

    def has_ready(self, key: str) -> bool:
        """Whether ``key`` is cached completely."""
        entry = self.entry(key)
        return entry is not None and entry.ready and (self.root / key).is_dir()

    def path(self, key: str) -> Path:
        """Where the entry's files are."""
        return self.root / key

    def used(self) -> int:
        """Bytes held or reserved by entries."""
        return sum(int(data["bytes"]) for data in self._read().entries.values())

    def counters(self) -> dict[str, DatasetCounters]:
        """Per dataset: hits (stagings served by the cache), misses (copied in), bytes, evictions."""
        return {
            dataset: DatasetCounters(
                hits=values.get("hits", 0),
                misses=values.get("misses", 0),
                bytes_from_cache=values.get("bytesFromCache", 0),
                bytes_fetched=values.get("bytesFetched", 0),
                evictions=values.get("evictions", 0),
            )
            for dataset, values in self._read().counters.items()
        }

    # -- changing, under the lock ---------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Drop what a stager that died left: entries still ``staging``, incoming directories, stray directories.

        Call once when the cache's owner (the control plane, the node agent) starts, before staging anything.
        Returns the keys of the entries dropped.
        """
        with self._locked() as ledger:
            dropped = [key for key, data in ledger.entries.items() if data["state"] != "ready"]
            dropped += [
                key
                for key, data in ledger.entries.items()
                if data["state"] == "ready" and not (self.root / key).is_dir()
            ]
            for key in dropped:
                ledger.entries.pop(key, None)
        held = self._read().entries
        for child in self.root.iterdir():
            if child.name in (LEDGER, LOCK) or not child.is_dir():
                continue
            if child.name.startswith(INCOMING) or child.name not in held:
                shutil.rmtree(child, ignore_errors=True)
        return dropped

    def stage(
        self,
        entry: CacheEntry,
        source: Path,
        holder: str,
        progress: Progress | None = None,
        *,
        reader: str | None = None,
    ) -> StageOutcome:
        """Make ``entry`` ready in this cache, pinned for ``holder``, copying its files from ``source`` if needed.

        Args:
            entry: the entry; its ``files`` are paths relative to ``source``.
            source: the materialised dataset version's directory.
            holder: who uses it (``namespace/job``); it stays pinned for them until ``set_pins`` says otherwise.
            progress: called as bytes are copied.
            reader: the job's uid: a cache hit counts once per reader, so a restarted manager or agent that
                stages a running job's entry again does not count it again. None: every hit counts.

        Raises:
            CacheError: the entry is larger than the whole cache, a file is missing from ``source``, or the disk
                filled up; nothing is left half-written and the ledger is as before.
        """
        outcome, evicted = self._reserve(entry, holder, reader)
        self._remove_dirs(evicted)
        if outcome != StageOutcome.COPIED:
            return outcome
        try:
            self._copy_in(entry, source, progress)
        except BaseException:
            with self._locked() as ledger:
                ledger.entries.pop(entry.key, None)
            raise
        with self._locked() as ledger:
            data = ledger.entries.get(entry.key)
            if data is not None:
                data["state"] = "ready"
                data["stagedTime"] = datetime.now(UTC).isoformat()
        return StageOutcome.COPIED

    def set_pins(self, pins: Mapping[str, set[str]]) -> None:
        """Record who uses each entry now; entries not named are unpinned (and become evictable)."""
        with self._locked() as ledger:
            for key, data in ledger.entries.items():
                data["pinnedBy"] = sorted(pins.get(key, set()))

    def evict(self, key: str) -> CachedEntry:
        """Remove an unpinned entry on request (``phalanx cache evict``).

        Raises:
            CacheError: no such entry, or a job uses it (the message names the jobs).
        """
        with self._locked() as ledger:
            data = ledger.entries.get(key)
            if data is None:
                held = ", ".join(sorted(ledger.entries)) or "nothing"
                raise CacheError(f"{self.name}'s cache holds no entry {key!r} (it holds: {held})")
            if data["pinnedBy"] or data["state"] != "ready":
                raise CacheError(in_use_sentence(key, data["dataset"], self.name, data["pinnedBy"]))
            removed = self._entry(key, data)
            ledger.entries.pop(key)
            ledger.count(data["dataset"], "evictions")
        self._remove_dirs([key])
        return removed

    # -- internals ------------------------------------------------------------------------------------------
    def _reserve(self, entry: CacheEntry, holder: str, reader: str | None) -> tuple[StageOutcome, list[str]]:
        with self._locked() as ledger:
            data = ledger.entries.get(entry.key)
            if data is not None:
                if data["state"] != "ready":
                    return StageOutcome.IN_PROGRESS, []
                if (self.root / entry.key).is_dir():
                    data["lastUsed"] = ledger.tick()
                    data["pinnedBy"] = sorted({*data["pinnedBy"], holder})
                    served = data.setdefault("readers", [])
                    if reader is None or reader not in served:
                        ledger.count(entry.dataset, "hits")
                        ledger.count(entry.dataset, "bytesFromCache", entry.bytes)
                    if reader is not None and reader not in served:
                        served[:] = [*served, reader][-_READERS_KEPT:]
                    return StageOutcome.HIT, []
                ledger.entries.pop(entry.key)  # its directory went missing: fetch it again
            size = entry.bytes
            held_bytes = sum(int(d["bytes"]) for d in ledger.entries.values())
            planner = CacheLedger(capacity=max(ledger.capacity, held_bytes), policy=CachePolicy.LRU)
            for key, held in sorted(ledger.entries.items(), key=lambda item: item[1]["lastUsed"]):
                in_use = bool(held["pinnedBy"]) or held["state"] != "ready"
                planner.admit(key, int(held["bytes"]), held["dataset"], pin=in_use)
            planner.capacity = ledger.capacity
            result = planner.admit(entry.key, size, entry.dataset, pin=True)
            if result.outcome == Admission.TOO_LARGE:
                raise CacheError(
                    f"{entry.dataset} needs {_human(size)} on {self.name} but its dataset cache holds "
                    f"{_human(ledger.capacity)} in all: raise the cache size, or shard the dataset over more replicas"
                )
            if result.outcome == Admission.BLOCKED_BY_PINNED:
                return StageOutcome.WAITING, []
            for key in result.evicted:
                gone = ledger.entries.pop(key)
                ledger.count(gone["dataset"], "evictions")
            ledger.entries[entry.key] = {
                "dataset": entry.dataset,
                "version": entry.version,
                "bytes": size,
                "files": len(entry.files),
                "state": "staging",
                "lastUsed": ledger.tick(),
                "pinnedBy": [holder],
                "readers": [reader] if reader is not None else [],
                "stagedTime": None,
            }
            ledger.count(entry.dataset, "misses")
            ledger.count(entry.dataset, "bytesFetched", size)
            return StageOutcome.COPIED, list(result.evicted)

    def why_waiting(self, entry: CacheEntry) -> str:
        """The sentence a job waiting for room in this cache gets."""
        pinned = [e for e in self.entries() if e.pinned_by or not e.ready]
        users = sorted({user for e in pinned for user in e.pinned_by})
        return (
            f"waiting for room in {self.name}'s dataset cache: {entry.dataset} needs {_human(entry.bytes)}, the cache "
            f"holds {_human(self.capacity)} and {_human(sum(e.bytes for e in pinned))} of it is in use by "
            f"{', '.join(users) or 'stagings in progress'}; it goes on when they finish (or raise the cache size)"
        )

    def _copy_in(self, entry: CacheEntry, source: Path, progress: Progress | None) -> None:
        incoming = self.root / f"{INCOMING}{entry.key}-{uuid.uuid4().hex[:8]}"
        incoming.mkdir()
        done, total = 0, entry.bytes
        try:
            for relative, _size in entry.files:
                origin = source / relative
                if not origin.is_file():
                    raise CacheError(
                        f"{entry.dataset}: file {relative} of version {entry.version} is missing from {source}; "
                        "the materialised copy was changed or removed: delete and re-create the dataset"
                    )
                target = incoming / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with origin.open("rb") as reader, target.open("wb") as writer:
                    for copied in self._copy_file(reader.fileno(), writer.fileno()):
                        done += copied
                        if progress is not None:
                            progress(done, total)
            os.rename(incoming, self.root / entry.key)
        except OSError as exc:
            shutil.rmtree(incoming, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CacheError(
                    f"no space left on the disk holding {self.name}'s dataset cache while staging {entry.dataset} "
                    f"({_human(done)} of {_human(total)} copied): free space there or lower the cache size"
                ) from exc
            raise CacheError(f"staging {entry.dataset} into {self.name}'s dataset cache failed: {exc}") from exc
        except BaseException:
            shutil.rmtree(incoming, ignore_errors=True)
            raise

    def _copy_file(self, source: int, target: int) -> Iterator[int]:
        """Copy one open file to another in chunks, yielding each chunk's size.

        ``copy_file_range`` lets the kernel move the bytes (no trip through this process, and reflinks on
        filesystems that share extents); where it is refused, a plain read and write does the same.
        """
        kernel = hasattr(os, "copy_file_range")
        while True:
            if kernel:
                try:
                    copied = os.copy_file_range(source, target, _COPY_CHUNK)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    kernel = False
                    continue
            else:
                chunk = os.read(source, _COPY_CHUNK)
                copied = len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(target, view) :]
            if copied == 0:
                return
            self._charge(copied)
            yield copied

    def _charge(self, amount: int) -> None:
        if self._write_limit is not None:
            self._written += amount
            if self._written > self._write_limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def _remove_dirs(self, keys: list[str]) -> None:
        for key in keys:
            shutil.rmtree(self.root / key, ignore_errors=True)

    @staticmethod
    def _entry(key: str, data: Mapping[str, Any]) -> CachedEntry:
        return CachedEntry(
            key=key,
            dataset=str(data["dataset"]),
            version=str(data["version"]),
            bytes=int(data["bytes"]),
            files=int(data["files"]),
            state=str(data["state"]),
            last_used=int(data["lastUsed"]),
            pinned_by=tuple(data["pinnedBy"]),
            staged_time=data.get("stagedTime"),
        )

    def _read(self) -> _Ledger:
        try:
            raw = json.loads((self.root / LEDGER).read_text())
        except FileNotFoundError:
            return _Ledger(capacity=self._default_capacity())
        except (OSError, ValueError) as exc:
            raise CacheError(
                f"{self.root / LEDGER} cannot be read ({exc}); remove the cache directory {self.root} to start afresh"
            ) from exc
        return _Ledger(
            capacity=int(raw["capacity"]),
            clock=int(raw.get("clock", 0)),
            entries=dict(raw.get("entries", {})),
            counters=dict(raw.get("counters", {})),
        )

    @staticmethod
    def _dump(ledger: _Ledger) -> str:
        document = {
            "capacity": ledger.capacity,
            "clock": ledger.clock,
            "entries": ledger.entries,
            "counters": ledger.counters,
        }
        return json.dumps(document, sort_keys=True, indent=1)

    def _default_capacity(self) -> int:
        return shutil.disk_usage(self.root).free // 2

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Ledger]:
        with open(self.root / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ledger = self._read()
            before = self._dump(ledger)
            yield ledger
            after = self._dump(ledger)
            if after != before or not (self.root / LEDGER).exists():
                temporary = self.root / f"{LEDGER}.{uuid.uuid4().hex[:8]}"
                temporary.write_text(after)
                os.replace(temporary, self.root / LEDGER)
