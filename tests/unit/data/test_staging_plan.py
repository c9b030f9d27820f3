"""core.data.plan_staging: which cache entries each node holds and what each replica of a job sees."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.data import DatasetFiles, entry_key, plan_staging
from phalanx.core.scheduling.types import DatasetNeed
from phalanx.model.datasets import Distribution, version_label

VERSION = "sha256:" + "ab" * 32
FILES = (("a.bin", 500), ("b.bin", 300), ("c.bin", 200), ("d.bin", 100))


def files_of(distribution: Distribution, files: tuple[tuple[str, int], ...] = FILES) -> DatasetFiles:
    return DatasetFiles("train", "default/train", VERSION, distribution, files)


def test_version_label_is_a_valid_label_value_and_idempotent() -> None:
    label = version_label(VERSION)
    assert label == "sha256-" + ("ab" * 32)[:56] and len(label) == 63 and ":" not in label
    assert version_label(label) == label
    assert DatasetNeed("train", VERSION, 1).cached_on({"dataset.phalanx.dev/train": label})
    assert not DatasetNeed("train", VERSION, 1).cached_on({"dataset.phalanx.dev/train": "sha256-" + "cd" * 28})


def test_replicated_data_is_one_entry_per_node_seen_whole_by_every_replica() -> None:
    plan = plan_staging([files_of(Distribution.REPLICATE)], [("w-0", "n1", 0), ("w-1", "n1", 1), ("w-2", "n2", 2)])
    key = entry_key(VERSION)
    assert {node: [e.key for e in entries] for node, entries in plan.entries.items()} == {"n1": [key], "n2": [key]}
    assert plan.entries["n1"][0].bytes == 1100
    for replica in ("w-0", "w-1", "w-2"):
        (mount,) = plan.mounts[replica]
        assert mount.key == key and mount.env("/c/" + key) == {"PHALANX_DATASET_TRAIN_PATH": "/c/" + key}


def test_shards_follow_rank_and_land_on_the_node_of_their_replica() -> None:
    # Listed out of rank order: rank decides the shard, not the listing.
    plan = plan_staging([files_of(Distribution.SHARD)], [("w-1", "n2", 1), ("w-0", "n1", 0), ("ps-0", "n1", None)])
    (shard0,) = [e for e in plan.entries["n1"] if "shard" in e.key]
    (shard1,) = plan.entries["n2"]
    assert shard0.key == entry_key(VERSION, 0, 2) == version_label(VERSION) + ".shard-0-of-2"
    assert shard1.key.endswith(".shard-1-of-2")
    assert {p for p, _ in shard0.files} | {p for p, _ in shard1.files} == {p for p, _ in FILES}
    assert not {p for p, _ in shard0.files} & {p for p, _ in shard1.files}
    assert plan.mounts["w-1"][0].env("/x") == {
        "PHALANX_DATASET_TRAIN_PATH": "/x",
        "PHALANX_DATASET_TRAIN_SHARD_INDEX": "1",
        "PHALANX_DATASET_TRAIN_SHARD_COUNT": "2",
    }
    # A replica without a rank (a parameter server) reads the whole version.
    assert plan.mounts["ps-0"][0].key == entry_key(VERSION)
    assert entry_key(VERSION) in plan.keys_on("n1")


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=40),
    nodes=st.lists(st.sampled_from(["n1", "n2", "n3"]), min_size=1, max_size=8),
)
def test_shards_are_disjoint_and_cover_the_files_for_any_placement(sizes: list[int], nodes: list[str]) -> None:
    files = tuple((f"f{i:03d}", size) for i, size in enumerate(sizes))
    replicas = [(f"w-{rank}", node, rank) for rank, node in enumerate(nodes)]
    plan = plan_staging([files_of(Distribution.SHARD, files)], replicas)
    seen: list[str] = []
    for node, entries in plan.entries.items():
        for entry in entries:
            seen += [path for path, _ in entry.files]
            placed_here = {name for name, where, _ in replicas if where == node}
            assert any(plan.mounts[name][0].key == entry.key for name in placed_here)
    assert sorted(seen) == sorted(path for path, _ in files)
