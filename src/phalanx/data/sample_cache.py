"""A sample cache on a node's disk, shared by every replica (process) on that node.

Samples are files named by the SHA-256 of their key, written to a temporary file and renamed into place, so a
reader never sees half a sample. What the cache holds, and in which order it was last used, is kept in a small
SQLite index in the same directory: SQLite gives the replicas one transaction at a time across processes
(file locks), survives a replica killed mid-write (a journal, not a half-written index), and needs nothing
beyond the standard library. The policy is the node cache's (``core.data.cache``):

- ``noReplacement`` (default): once the cache is full, new samples are not admitted and nothing is evicted,
  which keeps the hit ratio of shuffled epochs at the cache's share of the dataset;
- ``lru``: the least recently used samples make room.

A sample that cannot be written (disk full, the directory gone) is still returned to the caller; the failure
is counted in ``write_errors`` and kept in ``last_error``, and the cache stays as it was: the temporary file is
removed and the index never names a file that was not completely written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from phalanx.core.data.cache import CachePolicy

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (name TEXT PRIMARY KEY, size INTEGER NOT NULL, used REAL NOT NULL);
CREATE INDEX IF NOT EXISTS samples_used ON samples (used);
"""


class SampleCacheError(Exception):
    """The cache cannot be opened or is misconfigured."""


class SampleCache:
    """Samples by key, on disk, shared by the processes that open the same directory."""

    def __init__(self, directory: str | os.PathLike[str], capacity_bytes: int, policy: str = "noReplacement") -> None:
        if capacity_bytes < 0:
            raise SampleCacheError(f"capacity_bytes must be at least 0, not {capacity_bytes}")
        try:
            self.policy = CachePolicy(policy)
        except ValueError:
            raise SampleCacheError(f"policy {policy!r} is not one of: noReplacement, lru") from None
        self.directory = Path(directory)
        self.capacity = capacity_bytes
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.directory / "index.sqlite", timeout=60, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as error:
            raise SampleCacheError(f"cannot open the sample cache in {self.directory}: {error}") from error
        self.hits = 0
        self.misses = 0
        self.write_errors = 0
        self.last_error: str | None = None

    def close(self) -> None:
        """Close the index (the files stay)."""
        self._db.close()

    def __enter__(self) -> SampleCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def used_bytes(self) -> int:
        """Bytes the cache holds, across every process."""
        return int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM samples").fetchone()[0])

    @property
    def hit_ratio(self) -> float:
        """Hits over reads through this handle; 0 before any read."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0

    def get_or_load(self, key: str, loader: Callable[[str], bytes]) -> bytes:
        """The sample: from the cache when it holds it, else from ``loader(key)`` (then cached if admitted)."""
        name = hashlib.sha256(key.encode()).hexdigest()
        path = self.directory / name[:2] / name
        row = self._db.execute("SELECT size FROM samples WHERE name = ?", (name,)).fetchone()
        if row is not None:
            try:
                data = path.read_bytes()
            except OSError:
                data = None  # evicted by another process between the lookup and the read
            if data is not None:
                self.hits += 1
                if self.policy == CachePolicy.LRU:
                    self._db.execute("UPDATE samples SET used = ? WHERE name = ?", (time.monotonic_ns(), name))
                return data
        self.misses += 1
        data = loader(key)
        self._admit(name, path, data)
        return data

    def _admit(self, name: str, path: Path, data: bytes) -> None:
        size = len(data)
        if size > self.capacity:
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if self._db.execute("SELECT 1 FROM samples WHERE name = ?", (name,)).fetchone() is not None:
                self._db.execute("COMMIT")
                return  # another replica cached it meanwhile
            free = self.capacity - int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM samples").fetchone()[0])
            victims: list[tuple[str, int]] = []
            if size > free:
                if self.policy == CachePolicy.NO_REPLACEMENT:
                    self._db.execute("COMMIT")
                    return
                for victim, victim_size in self._db.execute("SELECT name, size FROM samples ORDER BY used"):
                    if free >= size:
                        break
                    victims.append((victim, victim_size))
                    free += victim_size
            try:
                self._write_file(path, data)
            except OSError as error:
                self.write_errors += 1
                self.last_error = f"cannot cache a sample in {self.directory}: {error.strerror or error}"
                self._db.execute("ROLLBACK")
                return
            for victim, _ in victims:
                self._db.execute("DELETE FROM samples WHERE name = ?", (victim,))
                with contextlib.suppress(OSError):
                    (self.directory / victim[:2] / victim).unlink()
            self._db.execute(
                "INSERT INTO samples (name, size, used) VALUES (?, ?, ?)", (name, size, time.monotonic_ns())
            )
            self._db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise

    def _write_file(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically (the seam tests use to make a write fail)."""
        path.parent.mkdir(exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


class CachedDataset:
    """Samples by index or in a shuffled epoch order, read through a ``SampleCache``."""

    def __init__(self, keys: Sequence[str], loader: Callable[[str], bytes], cache: SampleCache) -> None:
        self.keys = list(keys)
        self.loader = loader
        self.cache = cache

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> bytes:
        return self.cache.get_or_load(self.keys[index], self.loader)

    def __iter__(self) -> Iterator[bytes]:
        return (self[index] for index in range(len(self)))

    def shuffled(self, seed: int) -> Iterator[bytes]:
        """Every sample once, in a random order fixed by ``seed`` (a fresh order per epoch: seed=epoch)."""
        order = list(range(len(self)))
        random.Random(seed).shuffle(order)
        return (self[index] for index in order)
