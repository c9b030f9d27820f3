"""The dataset and cache verbs through the real CLI, against a real control plane process: `dataset create` follows
materialisation to Ready (or Failed, exit 1), `get datasets`, `describe dataset`, `delete dataset` refused while a
job reads it, `cache ls` with entries, pins and counters, `cache evict` refused while pinned and done after.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Runtime, generic_job, parse_table
from phalanx.model.datasets import Dataset, DatasetPhase
from phalanx.model.jobs import Phase
from support.waiting import wait_until

FINISHED = {Phase.SUCCEEDED, Phase.FAILED}


def dataset_file(runtime: Runtime, name: str, source: dict[str, Any]) -> Path:
    document = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": name}}
    document["spec"] = {"source": source}
    path = runtime.work_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_dataset_and_cache_verbs(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    data = tmp_path / "images"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 3000)
    (data / "b.bin").write_bytes(b"b" * 1000)
    created = runtime.cli("dataset", "create", "-f", str(dataset_file(runtime, "images", {"path": str(data)})))
    assert created.returncode == 0, created.stderr
    assert "dataset/images created" in created.stdout
    assert "dataset/images Ready: version sha256:" in created.stdout and "in 2 files" in created.stdout

    (row,) = parse_table(runtime.cli("get", "datasets", check=True).stdout)
    assert (row["NAME"], row["PHASE"], row["FILES"], row["NODES"]) == ("images", "Ready", "2", "0")
    assert row["VERSION"].startswith("sha256:") and len(row["VERSION"]) == 19

    hold = tmp_path / "release"
    job = generic_job("reader", args=["--hold", str(hold)])
    job["spec"]["datasets"] = [{"name": "images"}]
    runtime.submit(job)
    runtime.wait_phase("reader", {Phase.RUNNING})

    described = runtime.cli("describe", "dataset", "images", check=True).stdout
    assert f"path: {data}" in described and "Materialized" in described
    assert "reader" in described and "Cached on:" in described
    refused = runtime.cli("dataset", "delete", "images")
    assert refused.returncode == 1
    assert "read by unfinished jobs: reader (Running)" in refused.stderr

    listing = runtime.cli("cache", "ls", check=True).stdout
    (entry,) = parse_table(listing, "KEY")
    assert entry["DATASET"] == "default/images" and entry["PINNED BY"] == "default/reader"
    (counters,) = parse_table(listing, "DATASET")
    assert (counters["HITS"], counters["MISSES"], counters["EVICTIONS"]) == ("0", "1", "0")
    pinned = runtime.cli("cache", "evict", entry["KEY"])
    assert pinned.returncode == 1 and "in use by default/reader" in pinned.stderr

    hold.touch()
    assert runtime.wait_phase("reader", FINISHED).status.phase == Phase.SUCCEEDED
    wait_until(
        lambda: parse_table(runtime.cli("cache", "ls", check=True).stdout, "KEY")[0]["PINNED BY"] == "-",
        message="the finished job's pin to be released",
    )
    evicted = runtime.cli("cache", "evict", "--dataset", "images", check=True)
    assert evicted.stdout.startswith("evicted ") and entry["KEY"] in evicted.stdout.replace("\n", "")
    assert "(empty)" in runtime.cli("cache", "ls", check=True).stdout
    deleted = runtime.cli("delete", "dataset", "images", check=True)
    assert "dataset/images deleted" in deleted.stdout
    assert "No datasets in default" in runtime.cli("get", "datasets", check=True).stdout


def test_dataset_create_exits_1_with_the_reason_when_materialising_fails(runtime: Runtime) -> None:
    runtime.start_control_plane()
    spec = dataset_file(runtime, "gone", {"url": "http://127.0.0.1:9/train.csv"})
    result = runtime.cli("dataset", "create", "-f", str(spec))
    assert result.returncode == 1
    assert "dataset/gone Failed" in result.stdout and "spec.source.url" in result.stdout
    unknown = runtime.cli("describe", "dataset", "nope")
    assert unknown.returncode == 1 and "dataset default/nope not found; datasets in default: gone" in unknown.stderr


def test_dataset_create_on_a_changed_spec_reports_the_new_specs_outcome(runtime: Runtime, tmp_path: Path) -> None:
    """Giving an existing Dataset a new spec prints (and exits with) the new spec's outcome, not the old status.

    The old Ready (or Failed) stays in ``status`` until the control plane takes up the new generation; the CLI
    must wait for ``status.observedGeneration`` to reach it.
    """
    import sqlite3

    database = tmp_path / "rows.db"
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.executescript("CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
        connection.commit()
    url = f"sqlite:///{database}"
    runtime.start_control_plane()

    def create(query: str) -> Any:
        return runtime.cli(
            "dataset", "create", "-f", str(dataset_file(runtime, "rows", {"sql": {"url": url, "query": query}}))
        )

    first = create("SELECT a, b FROM t")
    assert first.returncode == 0 and "dataset/rows Ready" in first.stdout, first.stdout
    broken = create("SELECT a, b FROM no_such_table")
    assert "dataset/rows configured" in broken.stdout
    assert broken.returncode == 1, broken.stdout
    assert "dataset/rows Failed" in broken.stdout and "spec.source.sql" in broken.stdout
    fixed = create("SELECT a FROM t")
    assert fixed.returncode == 0, fixed.stdout
    with runtime.client() as client:
        version = client.dataset("rows").status.version
    assert version and f"dataset/rows Ready: version {version}" in fixed.stdout
    assert version not in first.stdout  # the new query's content, not the first one's


def test_a_wait_that_runs_out_says_whether_the_new_spec_was_ever_taken_up(runtime: Runtime, tmp_path: Path) -> None:
    """No control plane runs: a new Dataset stays Pending; one given a new spec keeps the old spec's Ready."""

    def document(path: Path) -> dict[str, Any]:
        spec = {"source": {"path": str(path)}}
        return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": "d"}, "spec": spec}

    with runtime.client() as client:
        client.submit([document(tmp_path / "a")])
        with pytest.raises(TimeoutError, match=r"^dataset d is still Pending after 0\.05 s$"):
            client.wait_dataset("d", timeout=0.05)
        stored = client.store.get(Dataset, "default", "d")
        ready = stored.status.model_copy(update={"phase": DatasetPhase.READY, "observed_generation": 1})
        client.store.update_status(stored.model_copy(update={"status": ready}))
        assert client.wait_dataset("d", timeout=0.05).status.phase == DatasetPhase.READY
        client.submit([document(tmp_path / "b")])
        with pytest.raises(TimeoutError) as waited:
            client.wait_dataset("d", timeout=0.05)
    assert str(waited.value) == (
        "dataset d's new spec (generation 2) was not taken up within 0.05 s; its status (Ready) is for generation 1"
    )


def test_a_one_file_dataset_reads_1_file_not_1_files(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    data = tmp_path / "one"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 2048)
    created = runtime.cli("dataset", "create", "-f", str(dataset_file(runtime, "one", {"path": str(data)})))
    assert created.returncode == 0, created.stderr
    assert "2.0Ki in 1 file;" in created.stdout, created.stdout
    described = runtime.cli("describe", "dataset", "one", check=True).stdout
    assert "2.0Ki in 1 file" in described and "1 files" not in described, described
