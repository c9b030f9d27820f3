"""The artifact store: instance folders, content digests, staging through fsspec, the cache index written whole."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from phalanx.adapters.artifacts import ArtifactStore, ArtifactStoreError, local_tree_digest
from phalanx.core.pipelines.plan import OutputValue


def test_a_digest_depends_on_the_contents_and_relative_paths_only(tmp_path: Path) -> None:
    for root in ("a", "b"):
        (tmp_path / root / "sub").mkdir(parents=True)
        (tmp_path / root / "sub" / "x.txt").write_text("x")
        (tmp_path / root / "y.txt").write_text("y")
    assert local_tree_digest(tmp_path / "a") == local_tree_digest(tmp_path / "b")
    (tmp_path / "b" / "y.txt").write_text("changed")
    assert local_tree_digest(tmp_path / "a") != local_tree_digest(tmp_path / "b")
    assert local_tree_digest(tmp_path / "missing") is None
    assert local_tree_digest(tmp_path / "a" / "y.txt") != local_tree_digest(tmp_path / "a")


def test_each_attempt_of_an_instance_has_its_own_folder(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    first = store.instance("default", "run", "0123456789", "train", 2, 1)
    second = store.instance("default", "run", "0123456789", "train", 2, 2)
    assert first.location != second.location
    assert first.location == str(tmp_path / "_runs/default/run/01234567/train/2/a1")
    assert first.local == Path(first.location)  # a local store is its own staging


def test_the_cache_index_round_trips_and_a_torn_entry_is_a_miss(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    key = "ab" * 32
    store.cache_put(key, {"model": OutputValue("/x/model", "d1"), "acc": OutputValue("0.9")}, source="default/j")
    found = store.cache_get(key)
    assert found is not None and found.outputs == {"model": OutputValue("/x/model", "d1"), "acc": OutputValue("0.9")}
    assert store.cache_view().get(key) == found
    assert [p.name for p in (tmp_path / "_cache").iterdir()] == [f"{key}.json"]  # nothing left aside
    (tmp_path / "_cache" / f"{key}.json").write_text('{"outputs": ')
    assert store.cache_get(key) is None
    assert store.cache_get("../../etc/passwd") is None
    store.cache_forget(key)
    assert store.cache_view().get(key) is None


def test_an_object_store_stages_inputs_in_and_publishes_outputs(tmp_path: Path) -> None:
    url = f"memory://phalanx-test-{uuid.uuid4().hex[:8]}"
    store = ArtifactStore(url, staging=tmp_path / "staging")
    producer = store.instance("default", "run", "uid12345", "make", None, 1)
    assert producer.location.startswith(url) and producer.local.is_relative_to(tmp_path / "staging")
    store.prepare(producer)
    (producer.outputs / "data").mkdir()
    (producer.outputs / "data" / "rows.csv").write_text("1,2\n")
    store.publish(producer)
    location = store.output_location(producer, "data")
    consumer = store.instance("default", "run", "uid12345", "use", None, 1)
    staged = store.stage_input(location, consumer.inputs / "data")
    assert (staged / "rows.csv").read_text() == "1,2\n"
    assert local_tree_digest(staged) == local_tree_digest(producer.outputs / "data")
    store.copy(location, f"{url}/copied")
    assert store.stage_input(f"{url}/copied", tmp_path / "back").joinpath("rows.csv").read_text() == "1,2\n"
    key = "cd" * 32
    store.cache_put(key, {"data": OutputValue(location, "d")}, source="default/j")
    assert store.cache_get(key) is not None
    with pytest.raises(ArtifactStoreError, match="is gone"):
        store.stage_input(f"{url}/nothing", tmp_path / "x")


def test_copying_within_a_local_store_links_the_files_and_keeps_the_digest(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    source = tmp_path / "a" / "model"
    source.mkdir(parents=True)
    (source / "weights.bin").write_bytes(b"w" * 100)
    store.copy(str(source), str(tmp_path / "b" / "model"))
    store.copy(str(source), str(tmp_path / "b" / "model"))  # again, as after a crash mid-copy: same result
    copied = tmp_path / "b" / "model" / "weights.bin"
    assert copied.read_bytes() == b"w" * 100
    assert copied.stat().st_ino == (source / "weights.bin").stat().st_ino
    assert local_tree_digest(tmp_path / "b" / "model") == local_tree_digest(source)
    with pytest.raises(ArtifactStoreError, match="is gone"):
        store.copy(str(tmp_path / "nothing"), str(tmp_path / "c"))
