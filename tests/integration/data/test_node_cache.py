"""adapters.datacache.NodeDataCache on a real directory: staging, hits, pins, eviction, recovery, full disks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.adapters.datacache import CacheError, NodeDataCache, StageOutcome
from phalanx.core.data import CacheEntry


def source(tmp_path: Path, name: str, size: int) -> tuple[Path, CacheEntry]:
    folder = tmp_path / "src" / name
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "data.bin").write_bytes(name[0].encode() * size)
    return folder, CacheEntry(f"sha256-{name}", f"default/{name}", f"sha256:{name}", (("sub/data.bin", size),))


def test_stage_copies_once_then_hits_and_counts(tmp_path: Path) -> None:
    cache = NodeDataCache(tmp_path / "cache", capacity=10_000, name="node a")
    folder, entry = source(tmp_path, "alpha", 1000)
    assert cache.stage(entry, folder, "default/job-1") == StageOutcome.COPIED
    assert (cache.path(entry.key) / "sub" / "data.bin").read_bytes() == b"a" * 1000
    assert cache.stage(entry, folder, "default/job-2") == StageOutcome.HIT
    counters = cache.counters()["default/alpha"]
    assert (counters.misses, counters.hits, counters.bytes_fetched, counters.bytes_from_cache) == (1, 1, 1000, 1000)
    (held,) = cache.entries()
    assert held.ready and held.pinned_by == ("default/job-1", "default/job-2")
    # Another process (the CLI) sees the same ledger.
    assert NodeDataCache(tmp_path / "cache").entries() == [held]


def test_a_hit_counts_once_per_reader_so_staging_a_running_job_again_counts_nothing(tmp_path: Path) -> None:
    folder, entry = source(tmp_path, "alpha", 1000)
    assert NodeDataCache(tmp_path / "cache", capacity=10_000).stage(entry, folder, "ns/a", reader="uid-a") == (
        StageOutcome.COPIED
    )
    # A restarted manager (a new instance on the same ledger) stages the running job's entry again.
    again = NodeDataCache(tmp_path / "cache")
    assert again.stage(entry, folder, "ns/a", reader="uid-a") == StageOutcome.HIT
    counters = again.counters()["default/alpha"]
    assert (counters.misses, counters.hits) == (1, 0), "the job's own entry is no hit for it"
    # Another job, and a later incarnation of the first under the same name, are served by the cache.
    assert again.stage(entry, folder, "ns/b", reader="uid-b") == StageOutcome.HIT
    assert again.stage(entry, folder, "ns/a", reader="uid-a2") == StageOutcome.HIT
    assert again.stage(entry, folder, "ns/b", reader="uid-b") == StageOutcome.HIT
    counters = again.counters()["default/alpha"]
    assert (counters.misses, counters.hits, counters.bytes_from_cache) == (1, 2, 2000)


def test_pinned_entries_are_never_evicted_and_lru_unpinned_ones_are(tmp_path: Path) -> None:
    cache = NodeDataCache(tmp_path / "cache", capacity=2500)
    (a_dir, a), (b_dir, b), (c_dir, c) = (source(tmp_path, n, 1000) for n in ("alpha", "beta", "gamma"))
    cache.stage(a, a_dir, "default/holder")
    cache.stage(b, b_dir, "default/done")
    cache.set_pins({a.key: {"default/holder"}})
    assert cache.stage(c, c_dir, "default/new") == StageOutcome.COPIED
    assert {e.key for e in cache.entries()} == {a.key, c.key}
    assert not cache.path(b.key).exists()
    assert cache.counters()["default/beta"].evictions == 1
    # Both remaining are pinned: a fourth must wait, and evicts nothing.
    d_dir, d = source(tmp_path, "delta", 1000)
    assert cache.stage(d, d_dir, "default/late") == StageOutcome.WAITING
    assert {e.key for e in cache.entries()} == {a.key, c.key}
    assert "in use by default/holder, default/new" in cache.why_waiting(d)
    with pytest.raises(CacheError, match="in use by default/holder"):
        cache.evict(a.key)
    cache.set_pins({})
    assert cache.evict(a.key).key == a.key and not cache.path(a.key).exists()
    assert cache.stage(d, d_dir, "default/late") == StageOutcome.COPIED


def test_too_large_and_full_disk_leave_the_cache_as_it_was(tmp_path: Path) -> None:
    cache = NodeDataCache(tmp_path / "cache", capacity=5000, write_limit=1500)
    (a_dir, a), (b_dir, b) = source(tmp_path, "alpha", 1000), source(tmp_path, "beta", 1000)
    huge_dir, huge = source(tmp_path, "huge", 6000)
    with pytest.raises(CacheError, match=r"holds 4\.9 KiB in all: raise the cache size"):
        cache.stage(huge, huge_dir, "default/x")
    cache.stage(a, a_dir, "default/x")
    before = json.loads((tmp_path / "cache" / "ledger.json").read_text())["entries"]
    with pytest.raises(CacheError, match="no space left on the disk holding"):
        cache.stage(b, b_dir, "default/y")  # 1000 + 1000 bytes pass the 1500-byte write limit
    after = json.loads((tmp_path / "cache" / "ledger.json").read_text())["entries"]
    assert after == before
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([".lock", a.key, "ledger.json"])


def test_recover_drops_what_a_dead_stager_left(tmp_path: Path) -> None:
    cache = NodeDataCache(tmp_path / "cache", capacity=10_000)
    a_dir, a = source(tmp_path, "alpha", 100)
    cache.stage(a, a_dir, "default/x")
    ledger_path = tmp_path / "cache" / "ledger.json"
    ledger = json.loads(ledger_path.read_text())
    ledger["entries"]["sha256-half"] = {**ledger["entries"][a.key], "state": "staging"}
    ledger_path.write_text(json.dumps(ledger))
    (tmp_path / "cache" / ".incoming-sha256-half-1234").mkdir()
    (tmp_path / "cache" / "stray").mkdir()
    assert cache.recover() == ["sha256-half"]
    assert [e.key for e in cache.entries()] == [a.key]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([".lock", a.key, "ledger.json"])


def test_a_missing_source_file_is_named(tmp_path: Path) -> None:
    cache = NodeDataCache(tmp_path / "cache", capacity=10_000)
    a_dir, a = source(tmp_path, "alpha", 100)
    (a_dir / "sub" / "data.bin").unlink()
    with pytest.raises(CacheError, match=r"file sub/data\.bin of version sha256:alpha is missing"):
        cache.stage(a, a_dir, "default/x")
    assert cache.entries() == []
