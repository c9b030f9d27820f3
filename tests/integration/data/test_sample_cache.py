"""phalanx.data.SampleCache on a real directory, shared by real processes; a failed write leaves it consistent."""

from __future__ import annotations

import errno
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from phalanx.data import CachedDataset, SampleCache, SampleCacheError

SIZE = 2048


def payload(key: str) -> bytes:
    return key.encode().ljust(SIZE, b".")


def reader(directory: str, capacity: int, policy: str, seed: int, keys: list[str], out: multiprocessing.Queue) -> None:
    with SampleCache(directory, capacity, policy) as cache:
        dataset = CachedDataset(keys, payload, cache)
        wrong = 0
        for epoch in range(3):
            for sample in dataset.shuffled(seed=seed * 100 + epoch):
                if sample != payload(sample[: sample.index(b".")].decode()):
                    wrong += 1
        out.put((cache.hits, cache.misses, wrong))


def index_rows(directory: Path) -> dict[str, int]:
    with sqlite3.connect(directory / "index.sqlite") as db:
        return dict(db.execute("SELECT name, size FROM samples").fetchall())


@pytest.mark.parametrize("policy", ["noReplacement", "lru"])
def test_processes_share_one_cache_within_its_capacity_and_never_see_a_torn_sample(tmp_path: Path, policy: str) -> None:
    keys = [f"s{i:04d}" for i in range(300)]
    capacity = 150 * SIZE
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [
        context.Process(target=reader, args=(str(tmp_path), capacity, policy, seed, keys, out)) for seed in range(3)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert all(wrong == 0 for _, _, wrong in results)
    assert all(hits + misses == 3 * len(keys) for hits, misses, _ in results)
    rows = index_rows(tmp_path)
    assert sum(rows.values()) <= capacity
    files = {path.name: path.stat().st_size for path in tmp_path.glob("??/*") if not path.name.startswith(".")}
    assert files == rows, "the index names exactly the files on disk"
    if policy == "noReplacement":
        assert len(rows) == 150  # filled once, then kept
        total_hits = sum(hits for hits, _, _ in results)
        assert total_hits >= 3 * 2 * 150 - 3 * 150  # every epoch after a process's first hits the 150 it keeps
    assert not list(tmp_path.glob("??/.partial-*"))


class FullDisk(SampleCache):
    """A cache whose writes fail as on a full disk (the write seam)."""

    def _write_file(self, path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_that_fails_returns_the_sample_counts_the_error_and_leaves_the_cache_as_it_was(tmp_path: Path) -> None:
    with SampleCache(tmp_path, 10 * SIZE) as cache:
        assert cache.get_or_load("kept", payload) == payload("kept")
    with FullDisk(tmp_path, 10 * SIZE) as cache:
        assert cache.get_or_load("new", payload) == payload("new")
        assert cache.write_errors == 1 and cache.last_error is not None and "No space left" in cache.last_error
        assert str(tmp_path) in cache.last_error
        assert cache.get_or_load("kept", payload) == payload("kept") and cache.hits == 1
    assert len(index_rows(tmp_path)) == 1
    assert len(list(tmp_path.glob("??/*"))) == 1


def test_lru_evicts_files_with_their_rows_and_bad_settings_are_refused(tmp_path: Path) -> None:
    with SampleCache(tmp_path, 2 * SIZE, "lru") as cache:
        for key in ("a", "b", "a", "c"):
            cache.get_or_load(key, payload)
        assert (cache.hits, cache.misses) == (1, 3)
        assert cache.used_bytes == 2 * SIZE
    assert len(index_rows(tmp_path)) == 2 and len(list(tmp_path.glob("??/*"))) == 2
    with pytest.raises(SampleCacheError, match="policy 'fifo'"):
        SampleCache(tmp_path, SIZE, "fifo")
    with pytest.raises(SampleCacheError, match="capacity_bytes"):
        SampleCache(tmp_path, -1)
