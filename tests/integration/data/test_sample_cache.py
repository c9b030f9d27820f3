"""phalanx.data.SampleCache on a real directory, shared by real processes; a failed write leaves it consistent."""

from __future__ import annotations

import errno
import multiprocessing
import multiprocessing.synchronize
import os
import pickle
import sqlite3
from pathlib import Path

import pytest

from phalanx.data import CachedDataset, SampleCache, SampleCacheError, SampleCacheWriteError

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
    with SampleCache(tmp_path, capacity, policy) as cache:
        assert cache.used_bytes == sum(rows.values()), "the running total agrees with the rows"
    if policy == "noReplacement":
        assert len(rows) == 150  # filled once, then kept
        total_hits = sum(hits for hits, _, _ in results)
        assert total_hits >= 3 * 2 * 150 - 3 * 150  # every epoch after a process's first hits the 150 it keeps
    assert not list(tmp_path.glob("??/.partial-*"))


class FullDisk(SampleCache):
    """A cache whose writes fail as on a full disk, through the documented seam (``_write_file``)."""

    def _write_file(self, path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class FullDiskAfterTheTemporaryFile(SampleCache):
    """The real write, but the disk fills up after the temporary file was created (the rename never happens)."""

    def _write_file(self, path: Path, data: bytes) -> None:
        def fail(*_: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        real_replace = os.replace
        os.replace = fail  # type: ignore[assignment]
        try:
            super()._write_file(path, data)
        finally:
            os.replace = real_replace


def cache_state(directory: Path) -> tuple[dict[str, int], dict[str, int], list[Path]]:
    files = {path.name: path.stat().st_size for path in directory.glob("??/*") if not path.name.startswith(".")}
    return index_rows(directory), files, list(directory.glob("??/.partial-*"))


@pytest.mark.parametrize("failing", [FullDisk, FullDiskAfterTheTemporaryFile])
def test_a_write_that_fails_raises_naming_the_directory_and_leaves_the_cache_as_it_was(
    tmp_path: Path, failing: type[SampleCache]
) -> None:
    with SampleCache(tmp_path, 10 * SIZE) as cache:
        assert cache.get_or_load("kept", payload) == payload("kept")
    before = cache_state(tmp_path)
    with failing(tmp_path, 10 * SIZE) as cache:
        with pytest.raises(SampleCacheWriteError) as caught:
            cache.get_or_load("new", payload)
        message = str(caught.value)
        assert str(tmp_path) in message and "No space left on device" in message and "capacity_bytes" in message
        assert cache.write_errors == 1 and cache.used_bytes == SIZE
        assert cache.get_or_load("kept", payload) == payload("kept") and cache.hits == 1
    assert cache_state(tmp_path) == before
    assert before[2] == [], "no temporary file is left behind"
    with SampleCache(tmp_path, 10 * SIZE) as cache:  # the cache works on once the disk has room again
        cache.get_or_load("new", payload)
        assert "new" in cache and cache.used_bytes == 2 * SIZE


def test_on_write_error_skip_returns_the_sample_warns_once_and_counts(tmp_path: Path) -> None:
    with FullDisk(tmp_path, 10 * SIZE, on_write_error="skip") as cache:
        with pytest.warns(UserWarning, match="cannot cache a sample in"):
            assert cache.get_or_load("a", payload) == payload("a")
        assert cache.get_or_load("b", payload) == payload("b")
        assert cache.write_errors == 2 and cache.last_error is not None and str(tmp_path) in cache.last_error
        assert cache.used_bytes == 0 and "a" not in cache
    assert index_rows(tmp_path) == {} and not list(tmp_path.glob("??/*"))


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
    with pytest.raises(SampleCacheError, match="on_write_error"):
        SampleCache(tmp_path, SIZE, on_write_error="ignore")
    with pytest.raises(SampleCacheError, match="cannot open the sample cache in"):
        SampleCache(tmp_path / "index.sqlite" / "below-a-file", SIZE)


def test_the_lru_order_is_shared_by_processes_and_kept_when_reopened(tmp_path: Path) -> None:
    with SampleCache(tmp_path, 3 * SIZE, "lru") as first:
        for key in ("a", "b", "c"):
            first.get_or_load(key, payload)
    with SampleCache(tmp_path, 3 * SIZE, "lru") as second:  # another process, or after a reboot
        second.get_or_load("a", payload)  # a is now the most recent
        second.get_or_load("d", payload)  # evicts b, the least recent
        assert ["a" in second, "b" in second, "c" in second, "d" in second] == [True, False, True, True]


def test_a_row_whose_file_was_removed_is_a_miss_and_gets_cached_again(tmp_path: Path) -> None:
    with SampleCache(tmp_path, 4 * SIZE) as cache:
        cache.get_or_load("a", payload)
        for path in tmp_path.glob("??/*"):
            path.unlink()
        assert cache.get_or_load("a", payload) == payload("a") and (cache.hits, cache.misses) == (0, 2)
        assert cache.get_or_load("a", payload) == payload("a") and cache.hits == 1
        assert cache.used_bytes == SIZE


def forked_reader(cache: SampleCache, keys: list[str], out: multiprocessing.Queue) -> None:
    dataset = CachedDataset(keys, payload, cache)
    out.put(sum(1 for sample in dataset if sample == payload(sample[: sample.index(b".")].decode())))
    out.put((cache.hits, cache.misses))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_cache_made_in_the_parent_works_in_forked_and_spawned_workers(tmp_path: Path, method: str) -> None:
    keys = [f"s{i:03d}" for i in range(20)]
    with SampleCache(tmp_path, 100 * SIZE) as cache:
        cache.get_or_load(keys[0], payload)  # the parent's connection is open when the workers start
        assert pickle.loads(pickle.dumps(cache)).capacity == cache.capacity
        context = multiprocessing.get_context(method)
        out = context.Queue()
        worker = context.Process(target=forked_reader, args=(cache, keys, out))
        worker.start()
        assert out.get(timeout=60) == len(keys)
        assert out.get(timeout=60) == (1, 1 + 19)  # the parent's counters travel along (1 miss), then 1 hit, 19 misses
        worker.join(60)
        assert worker.exitcode == 0
        assert cache.get_or_load(keys[5], payload) == payload(keys[5]) and cache.hits == 1
        assert cache.used_bytes == len(keys) * SIZE


def test_for_dataset_keeps_one_directory_per_dataset_version_and_refuses_outside_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PHALANX_SAMPLE_CACHE_DIR", raising=False)
    with pytest.raises(SampleCacheError, match="PHALANX_SAMPLE_CACHE_DIR is not set"):
        SampleCache.for_dataset("train", capacity_bytes=1000)
    monkeypatch.setenv("PHALANX_SAMPLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PHALANX_DATASET_TRAIN_CACHE_POLICY", "lru")
    monkeypatch.setenv("PHALANX_DATASET_TRAIN_PATH", "/cache/sha256-aa.shard-1-of-2")
    first = SampleCache.for_dataset("train", capacity_bytes=1000)
    assert first.directory == tmp_path / "train" / "sha256-aa" and first.policy.value == "lru"
    first.get_or_load("k", lambda key: b"old")
    # Another job on the node reads a new version under the same name: its own directory, no old sample.
    monkeypatch.setenv("PHALANX_DATASET_TRAIN_PATH", "/cache/sha256-bb")
    second = SampleCache.for_dataset("train", capacity_bytes=1000)
    assert second.directory == tmp_path / "train" / "sha256-bb"
    assert second.get_or_load("k", lambda key: b"new") == b"new"


def opener(directory: str, start: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    start.wait()
    try:
        with SampleCache(directory, 1 << 20, "lru") as cache:
            cache.get_or_load("k", lambda key: b"v")
        out.put("ok")
    except Exception as error:  # every failure is an answer: the test names it
        out.put(f"{type(error).__name__}: {error}")


def test_processes_opening_a_new_cache_at_once_all_open_it(tmp_path: Path) -> None:
    # Two connections switching a new index to WAL at the same moment: SQLite answers one "database is locked"
    # at once rather than wait (its busy handler could deadlock there), so opening retries that step.
    context = multiprocessing.get_context("spawn")
    for round_number in range(8):
        directory = tmp_path / f"round-{round_number}"
        start, out = context.Barrier(10), context.Queue()
        workers = [context.Process(target=opener, args=(str(directory), start, out)) for _ in range(10)]
        for worker in workers:
            worker.start()
        answers = [out.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
        assert answers == ["ok"] * 10, answers
