"""Shards: disjoint, covering, balanced by bytes, the same on every replica; the environment a replica sees."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.data import dataset_env, shard_files

FILES = st.dictionaries(st.text("abcdefgh/._-", min_size=1, max_size=12), st.integers(0, 10**9), max_size=60)


@given(FILES, st.integers(1, 9))
def test_shards_are_disjoint_cover_every_file_and_stay_within_one_file_of_balance(
    files: dict[str, int], count: int
) -> None:
    shards = shard_files(list(files.items()), count)
    assert len(shards) == count
    flat = [path for shard in shards for path in shard]
    assert sorted(flat) == sorted(files) and len(flat) == len(set(flat))
    loads = [sum(files[path] for path in shard) for shard in shards]
    biggest = max(files.values(), default=0)
    assert max(loads) - min(loads) <= biggest  # greedy largest-first onto the lightest shard


def test_the_split_is_deterministic_whatever_the_listing_order() -> None:
    files = [("a.bin", 50), ("b.bin", 40), ("c.bin", 30), ("d.bin", 30), ("e.bin", 10)]
    assert shard_files(files, 2) == shard_files(list(reversed(files)), 2)
    assert shard_files(files, 2) == [["a.bin", "d.bin"], ["b.bin", "c.bin", "e.bin"]]


def test_more_shards_than_files_leaves_some_empty_and_bad_input_is_refused() -> None:
    assert shard_files([("only", 5)], 3) == [["only"], [], []]
    with pytest.raises(ValueError, match="at least 1"):
        shard_files([("x", 1)], 0)
    with pytest.raises(ValueError, match="listed twice"):
        shard_files([("x", 1), ("x", 2)], 2)
    with pytest.raises(ValueError, match="'x' has a negative size"):
        shard_files([("x", -1)], 2)


def test_a_replica_sees_its_path_and_for_a_shard_its_index_and_count() -> None:
    assert dataset_env("imagenet-1k", "/cache/v1") == {"PHALANX_DATASET_IMAGENET_1K_PATH": "/cache/v1"}
    assert dataset_env("train.v2", "/cache/s/1", 1, 4) == {
        "PHALANX_DATASET_TRAIN_V2_PATH": "/cache/s/1",
        "PHALANX_DATASET_TRAIN_V2_SHARD_INDEX": "1",
        "PHALANX_DATASET_TRAIN_V2_SHARD_COUNT": "4",
    }


@given(FILES, st.integers(1, 6))
def test_rank_i_gets_shard_i_and_every_rank_computes_the_same_split(files: dict[str, int], count: int) -> None:
    listing = list(files.items())
    split = shard_files(listing, count)
    for rank in range(count):  # each replica lists the files in its own order and keeps its own shard
        assert shard_files(listing[rank:] + listing[:rank], count)[rank] == split[rank]


@pytest.mark.parametrize(
    ("index", "count", "message"),
    [(4, 4, r"in 0\.\.3"), (-1, 2, r"in 0\.\.1"), (1, None, "both shard_index and shard_count")],
    ids=["index-past-the-end", "negative-index", "index-without-count"],
)
def test_a_shard_index_outside_the_count_is_refused(index: int, count: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataset_env("train", "/cache/s", index, count)
