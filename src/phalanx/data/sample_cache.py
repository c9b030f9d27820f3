"""A sample cache on a node's disk, shared by every replica (process) on that node.

Samples are files named by the SHA-256 of their key (``<dir>/<2 hex>/<64 hex>``), written to a temporary file in
the same directory and renamed into place (``os.replace``), so a reader never sees half a sample.

What the cache holds, its size in bytes and the order of last use are kept in a small SQLite index,
``index.sqlite``, in the same directory. Why SQLite rather than an ``fcntl``-locked index file of our own: the
replicas need one read-modify-write at a time across processes (is it held? is there room? which samples
make room?), and SQLite gives exactly that (``BEGIN IMMEDIATE`` takes the write lock; WAL lets readers carry on
meanwhile) and survives a replica killed mid-update (its journal rolls the half-done transaction back), with
nothing beyond the standard library. A hand-rolled index would have to rewrite a whole file under a lock per
sample, or re-invent a journal. The index keeps:

- ``samples(name, size, used)``: one row per file held; ``used`` is a logical clock (the largest ``used`` plus
  one), not a wall or monotonic time, so the LRU order survives reboots and clock steps;
- ``meta('used_bytes')``: the bytes held, kept up to date in the same transaction as the rows, so checking for
  room costs one lookup, not a sum over every sample.

The policy is the node cache's (``core.data.cache``):

- ``noReplacement`` (default): once the cache is full, new samples are not admitted and nothing is evicted,
  which keeps the hit ratio of shuffled epochs at the cache's share of the dataset. Once full, a miss costs
  one read of ``used_bytes`` and takes no write lock;
- ``lru``: the least recently used samples make room; every hit records its use (a short write).

The index is written with ``synchronous=NORMAL`` (WAL): a commit is not flushed to disk at once, so a power
loss may forget the last few commits, never corrupt the index (a killed process forgets nothing). Forgetting
an insert leaves a file nobody names; forgetting an eviction leaves a row whose file is gone, which reads as a
miss and is replaced by the next admission of that sample. Flushing every sample's row would cost a disk flush
per read under ``lru``, for a cache whose content can always be read again from the source.

Consistency: a row is inserted only after its file was completely written and renamed into place; evicted rows
are deleted in the transaction and their files removed after it commits. So the index never names a missing
file, whatever process dies where; the worst a crash leaves is a file the index does not name (disk space, not
a wrong sample), or a ``.partial-*`` temporary file.

Writes that fail (``OSError``: disk full, the directory removed, permissions) go through one seam,
``SampleCache._write_file``, which tests override. The temporary file is removed and the index is not touched;
then, with ``on_write_error="raise"`` (default), ``SampleCacheWriteError`` names the directory, the error and
the fix; with ``on_write_error="skip"`` the sample is still returned, the failure is counted in
``write_errors``, kept in ``last_error``, and warned about once.

A ``SampleCache`` may be created before a fork or pickled to a spawned worker (a ``DataLoader``'s workers): each
process opens its own connection to the index on first use.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sqlite3
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from phalanx.adapters.sqlite_wal import switch_to_wal
from phalanx.core.data.cache import CachePolicy
from phalanx.core.data.sharding import env_name

INDEX_NAME = "index.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (name TEXT PRIMARY KEY, size INTEGER NOT NULL, used INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS samples_used ON samples (used);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('used_bytes', (SELECT COALESCE(SUM(size), 0) FROM samples));
"""
_TICK = "(SELECT COALESCE(MAX(used), 0) + 1 FROM samples)"
_WRITE_ERROR_MODES = ("raise", "skip")
#: Set by the runtime in every replica: the node's directory for sample caches.
SAMPLE_CACHE_DIR_ENV = "PHALANX_SAMPLE_CACHE_DIR"


class SampleCacheError(Exception):
    """The cache cannot be opened, is misconfigured, or cannot write a sample."""


class SampleCacheWriteError(SampleCacheError):
    """A sample could not be written into the cache (``on_write_error="raise"``); the cache is unchanged."""


class SampleCache:
    """Samples by key, on disk, shared by the processes that open the same directory.

    Args:
        directory: the cache's directory (created if missing); every replica of the node passes the same one.
        capacity_bytes: the most the samples may hold together; every process should pass the same value.
        policy: ``noReplacement`` (default) or ``lru``.
        on_write_error: ``raise`` (default) a ``SampleCacheWriteError`` when a sample cannot be written, or
            ``skip``: return the sample uncached and count the failure.
    """

    @classmethod
    def for_dataset(cls, name: str, capacity_bytes: int, *, on_write_error: str = "raise") -> SampleCache:
        """The cache the replicas of this node share for the dataset mounted as ``name``, inside a Phalanx job.

        The directory is ``$PHALANX_SAMPLE_CACHE_DIR/<name>/<version label>`` (one per node and dataset version;
        the runtime sets the variable and the dataset's staged path, whose name holds the version) and the policy
        the Dataset's ``spec.cache.policy`` (``PHALANX_DATASET_<NAME>_CACHE_POLICY``; noReplacement by default).

        Raises:
            SampleCacheError: not inside a Phalanx job (``PHALANX_SAMPLE_CACHE_DIR`` is not set).
        """
        root = os.environ.get(SAMPLE_CACHE_DIR_ENV)
        if not root:
            raise SampleCacheError(
                f"{SAMPLE_CACHE_DIR_ENV} is not set, so this is not a replica of a Phalanx job; give the directory "
                "yourself: SampleCache('/scratch/samples/<name>', capacity_bytes=...)"
            )
        policy = os.environ.get(f"{env_name(name)}_CACHE_POLICY", CachePolicy.NO_REPLACEMENT.value)
        directory = Path(root) / name
        # One directory per dataset version (the staged entry's name up to its shard suffix): a later job that
        # reads another version under the same mount name must not be served the samples of this one.
        staged = os.environ.get(f"{env_name(name)}_PATH")
        if staged:
            directory /= Path(staged).name.partition(".")[0]
        return cls(directory, capacity_bytes, policy, on_write_error=on_write_error)

    def __init__(
        self,
        directory: str | os.PathLike[str],
        capacity_bytes: int,
        policy: str = "noReplacement",
        *,
        on_write_error: str = "raise",
    ) -> None:
        if capacity_bytes < 0:
            raise SampleCacheError(f"capacity_bytes must be at least 0, not {capacity_bytes}")
        try:
            self.policy = CachePolicy(policy)
        except ValueError:
            raise SampleCacheError(f"policy {policy!r} is not one of: noReplacement, lru") from None
        if on_write_error not in _WRITE_ERROR_MODES:
            raise SampleCacheError(f"on_write_error {on_write_error!r} is not one of: raise, skip")
        self.directory = Path(directory)
        self.capacity = capacity_bytes
        self.on_write_error = on_write_error
        self.hits = 0
        self.misses = 0
        self.write_errors = 0
        self.last_error: str | None = None
        self._db: sqlite3.Connection | None = None
        self._pid = 0
        self._connection()  # open now: a bad directory fails here, not at the first sample

    # -- the index, one connection per process ---------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is not None and self._pid == os.getpid():
            return self._db
        # A connection inherited through fork is never used (nor closed) in the child: SQLite forbids it.
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.directory / INDEX_NAME, timeout=_BUSY_SECONDS, isolation_level=None)
            switch_to_wal(db, timeout_s=_BUSY_SECONDS)
            db.execute("PRAGMA synchronous=NORMAL")  # see the module's docstring: no fsync per sample
            db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as error:
            raise SampleCacheError(f"cannot open the sample cache in {self.directory}: {error}") from error
        self._db, self._pid = db, os.getpid()
        return db

    def close(self) -> None:
        """Close this process's connection to the index (the files stay)."""
        if self._db is not None and self._pid == os.getpid():
            self._db.close()
        self._db = None

    def __enter__(self) -> SampleCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_db"], state["_pid"] = None, 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- reading -------------------------------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        """Bytes the cache holds, across every process."""
        row = self._connection().execute("SELECT value FROM meta WHERE key = 'used_bytes'").fetchone()
        return int(row[0])

    @property
    def hit_ratio(self) -> float:
        """Hits over reads through this handle; 0 before any read."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else 0.0

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        row = self._connection().execute("SELECT 1 FROM samples WHERE name = ?", (_name(key),)).fetchone()
        return row is not None

    def get_or_load(self, key: str, loader: Callable[[str], bytes]) -> bytes:
        """The sample: from the cache when it holds it, else ``loader(key)`` (then cached if the policy admits it).

        Raises:
            SampleCacheWriteError: the sample could not be written (only with ``on_write_error="raise"``).
        """
        db = self._connection()
        name = _name(key)
        path = self._path(name)
        if db.execute("SELECT 1 FROM samples WHERE name = ?", (name,)).fetchone() is not None:
            try:
                data = path.read_bytes()
            except OSError:
                data = None  # evicted by another process between the lookup and the read
            if data is not None:
                self.hits += 1
                if self.policy == CachePolicy.LRU:
                    db.execute(f"UPDATE samples SET used = {_TICK} WHERE name = ?", (name,))  # nosec B608  # only ? marks and constants are formatted in; values are parameters
                return data
        self.misses += 1
        data = loader(key)
        self._admit(db, name, path, data)
        return data

    # -- admitting -------------------------------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.directory / name[:2] / name

    def _admit(self, db: sqlite3.Connection, name: str, path: Path, data: bytes) -> None:
        size = len(data)
        if size > self.capacity:
            return
        if self.policy == CachePolicy.NO_REPLACEMENT and self.used_bytes + size > self.capacity:
            return  # full for good: no write lock needed to find that out
        db.execute("BEGIN IMMEDIATE")
        committed = False
        wrote = False
        victims: list[tuple[str, int]] = []
        try:
            row = db.execute("SELECT size FROM samples WHERE name = ?", (name,)).fetchone()
            if row is not None:
                if path.exists():
                    return  # another replica cached it meanwhile
                db.execute("DELETE FROM samples WHERE name = ?", (name,))  # its file was removed behind our back
                db.execute("UPDATE meta SET value = value - ? WHERE key = 'used_bytes'", (row[0],))
            free = self.capacity - int(db.execute("SELECT value FROM meta WHERE key = 'used_bytes'").fetchone()[0])
            if size > free:
                if self.policy == CachePolicy.NO_REPLACEMENT:
                    return
                for victim, victim_size in db.execute("SELECT name, size FROM samples ORDER BY used"):
                    if free >= size:
                        break
                    victims.append((victim, int(victim_size)))
                    free += victim_size
            try:
                self._write_file(path, data)
            except OSError as error:
                self._write_failed(error)
                return
            wrote = True
            for victim, _ in victims:
                db.execute("DELETE FROM samples WHERE name = ?", (victim,))
            freed = sum(victim_size for _, victim_size in victims)
            db.execute(f"INSERT INTO samples (name, size, used) VALUES (?, ?, {_TICK})", (name, size))  # nosec B608  # only ? marks and constants are formatted in; values are parameters
            db.execute("UPDATE meta SET value = value + ? WHERE key = 'used_bytes'", (size - freed,))
            db.execute("COMMIT")
            committed = True
        finally:
            if not committed:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                if wrote:  # written, but the index does not name it: take it back
                    with contextlib.suppress(OSError):
                        path.unlink()
        for victim, _ in victims:  # only once the index no longer names them
            with contextlib.suppress(OSError):
                self._path(victim).unlink()

    def _write_failed(self, error: OSError) -> None:
        self.write_errors += 1
        self.last_error = (
            f"cannot cache a sample in {self.directory}: {error.strerror or error}; free space there, lower "
            "capacity_bytes, or pass on_write_error='skip' to read through without caching"
        )
        if self.on_write_error == "raise":
            raise SampleCacheWriteError(self.last_error) from error
        if self.write_errors == 1:
            warnings.warn(self.last_error + " (further failures are counted in write_errors)", stacklevel=4)

    def _write_file(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically: a temporary file beside it, then a rename.

        The seam for failures: a subclass (or a test) may raise ``OSError`` here, as a full disk would. Whatever
        raises, the temporary file is removed.
        """
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


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class CachedDataset:
    """Samples by index or in a shuffled epoch order, read through a ``SampleCache``.

    ``loader(key) -> bytes`` reads a sample from the slow source; it is called only on a miss.
    """

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
        random.Random(seed).shuffle(order)  # nosec B311  # a sample order, not security
        return (self[index] for index in order)


#: How long opening the index waits for other processes' locks.
_BUSY_SECONDS = 60
