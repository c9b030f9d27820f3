"""Datasets on the embedded runtime, end to end: a real control plane materialises Datasets from real sources (a
directory, an HTTP server that counts its requests), stages them into node caches and starts replicas that see them.

Covers issue 5's acceptance: shards are disjoint and cover the dataset; a replicated dataset read by three trials
is fetched from its source once; a second job on the node does not download again; a small cache under pressure
never evicts a pinned dataset; and bad input fails the job with the reason, losing nothing else.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Runtime, generic_job, read_envs
from phalanx.adapters.datacache import NodeDataCache
from phalanx.model.datasets import Dataset, DatasetPhase, version_label
from phalanx.model.jobs import Phase
from phalanx.model.nodes import Node
from phalanx.model.sweeps import Sweep, SweepPhase
from support.waiting import wait_until

FINISHED = {Phase.SUCCEEDED, Phase.FAILED}


def dataset_doc(name: str, source: dict[str, Any], distribution: str = "replicate") -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": name},
        "spec": {"source": source, "distribution": distribution},
    }


def data_job(name: str, mounts: list[dict[str, Any]], *, replicas: int = 1, args: list[str] | None = None) -> dict:
    job = generic_job(name, replicas=replicas, args=args)
    job["spec"]["datasets"] = mounts
    return job


def wait_dataset(runtime: Runtime, name: str, phases: set[DatasetPhase], timeout: float = 60.0) -> Dataset:
    """The dataset once in one of ``phases``; on a timeout, the test fails with its phase, message and the log then.

    (A gate timed out on a PostgreSQL dataset twice with nothing to go on: the log in the message had been read
    when the wait began.)
    """
    with runtime.client() as client:
        deadline = time.monotonic() + timeout
        while True:
            found = client.store.try_get(Dataset, "default", name)
            if found is not None and found.status.phase in phases:
                return found
            if time.monotonic() > deadline:
                where = "missing" if found is None else f"{found.status.phase}: {found.status.message}"
                pytest.fail(
                    f"timed out after {timeout:.0f}s waiting for dataset {name} to reach {sorted(phases)}; it is "
                    f"{where}; logs:\n{runtime.planes[-1].log()[-3000:]}"
                )
            time.sleep(0.05)  # polling the store: the control plane's writes signal nothing a test can await


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path, with its sha256."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def node_cache(runtime: Runtime) -> NodeDataCache:
    with runtime.client() as client:
        (node,) = client.store.list(Node)
    return NodeDataCache(runtime.state_dir / "cache" / node.metadata.name)


def events(runtime: Runtime, kind: str, name: str) -> list[str]:
    with runtime.client() as client:
        return [f"{e.reason}: {e.message}" for e in client.store.list_events(kind, "default", name)]


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    root = tmp_path / "source"
    (root / "nested").mkdir(parents=True)
    for index, size in enumerate([9000, 7000, 5000, 3000, 2000, 1000, 700, 300]):
        folder = root / "nested" if index % 3 == 0 else root
        (folder / f"part-{index}.bin").write_bytes(bytes([index]) * size)
    return root


class CountingServer:
    """An HTTP server on loopback serving one payload and counting the GETs it answered."""

    def __init__(self, payload: bytes) -> None:
        self.gets = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.gets += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/train.bin"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_source() -> Iterator[CountingServer]:
    server = CountingServer(bytes(range(256)) * 400)
    try:
        yield server
    finally:
        server.close()


def test_shards_are_disjoint_and_cover_the_dataset(runtime: Runtime, source_dir: Path, tmp_path: Path) -> None:
    runtime.start_control_plane()
    env_dir = tmp_path / "envs"
    runtime.submit(dataset_doc("train", {"path": str(source_dir)}, distribution="shard"))
    dataset = wait_dataset(runtime, "train", {DatasetPhase.READY})
    assert dataset.status.files == 8 and dataset.status.bytes == sum([9000, 7000, 5000, 3000, 2000, 1000, 700, 300])
    assert dataset.status.version and dataset.status.version.startswith("sha256:")
    assert f"path: {source_dir}" in (dataset.status.lineage or "")

    runtime.submit(data_job("sharded", [{"name": "train"}], replicas=2, args=["--env-dir", str(env_dir)]))
    job = runtime.wait_phase("sharded", FINISHED)
    assert job.status.phase == Phase.SUCCEEDED, job.status.message
    envs = read_envs(env_dir)
    assert sorted(envs) == ["worker-0", "worker-1"]
    seen: dict[str, str] = {}
    for replica, index in (("worker-0", "0"), ("worker-1", "1")):
        env = envs[replica]
        assert env["PHALANX_DATASET_TRAIN_SHARD_INDEX"] == index
        assert env["PHALANX_DATASET_TRAIN_SHARD_COUNT"] == "2"
        files = tree(Path(env["PHALANX_DATASET_TRAIN_PATH"]))
        assert files, f"{replica} sees an empty shard"
        assert not set(files) & set(seen), "shards overlap"
        seen.update(files)
    assert seen == tree(source_dir), "the shards together are exactly the dataset"
    shard_sizes = [
        sum(p.stat().st_size for p in Path(envs[r]["PHALANX_DATASET_TRAIN_PATH"]).rglob("*") if p.is_file())
        for r in ("worker-0", "worker-1")
    ]
    assert abs(shard_sizes[0] - shard_sizes[1]) <= 9000, f"shards not balanced by bytes: {shard_sizes}"


def test_replicated_dataset_is_read_from_its_source_once(
    runtime: Runtime, http_source: CountingServer, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    runtime.submit(dataset_doc("shared", {"url": http_source.url}))
    wait_dataset(runtime, "shared", {DatasetPhase.READY})
    env_dirs = [tmp_path / f"env-{trial}" for trial in range(3)]
    for trial, env_dir in enumerate(env_dirs):
        runtime.submit(data_job(f"trial-{trial}", [{"name": "shared"}], args=["--env-dir", str(env_dir)]))
    expected = hashlib.sha256(bytes(range(256)) * 400).hexdigest()
    for trial, env_dir in enumerate(env_dirs):
        job = runtime.wait_phase(f"trial-{trial}", FINISHED)
        assert job.status.phase == Phase.SUCCEEDED, job.status.message
        path = Path(read_envs(env_dir)["worker-0"]["PHALANX_DATASET_SHARED_PATH"])
        assert tree(path) == {"train.bin": expected}
    assert http_source.gets == 1, "the source was read more than once"
    counters = node_cache(runtime).counters()["default/shared"]
    assert counters.misses == 1, "the node cache copied the dataset more than once"
    assert counters.hits == 2 and counters.bytes_from_cache == 2 * 256 * 400


def test_a_second_job_on_the_node_does_not_download_again(runtime: Runtime, source_dir: Path, tmp_path: Path) -> None:
    runtime.start_control_plane()
    runtime.submit(dataset_doc("mnist", {"path": str(source_dir)}))
    wait_dataset(runtime, "mnist", {DatasetPhase.READY})
    runtime.submit(data_job("first", [{"name": "mnist"}], args=["--env-dir", str(tmp_path / "a")]))
    assert runtime.wait_phase("first", FINISHED).status.phase == Phase.SUCCEEDED
    path = Path(read_envs(tmp_path / "a")["worker-0"]["PHALANX_DATASET_MNIST_PATH"])
    inode = (path / "part-1.bin").stat().st_ino
    runtime.submit(data_job("second", [{"name": "mnist"}], args=["--env-dir", str(tmp_path / "b")]))
    assert runtime.wait_phase("second", FINISHED).status.phase == Phase.SUCCEEDED
    assert read_envs(tmp_path / "b")["worker-0"]["PHALANX_DATASET_MNIST_PATH"] == str(path)
    assert (path / "part-1.bin").stat().st_ino == inode, "the cached copy was written again"
    staged = [e for e in events(runtime, "TrainingJob", "second") if e.startswith("Staged")]
    assert staged and "cache hit" in staged[0]
    assert node_cache(runtime).counters()["default/mnist"].misses == 1
    with runtime.client() as client:
        (node,) = client.store.list(Node)
        dataset = client.store.get(Dataset, "default", "mnist")
    assert dataset.status.version is not None
    label = node.metadata.labels.get("dataset.phalanx.dev/mnist")
    assert label == dataset.status.version.replace(":", "-")[:63], "the node is not labelled with what it caches"
    assert dataset.status.nodes == [node.metadata.name]


def test_a_small_cache_under_pressure_never_evicts_a_pinned_dataset(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane(extra=["--cache-size", "3Mi"])
    sources = {}
    for name in ("held", "idle", "newcomer"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.bin").write_bytes(name.encode() * (1_400_000 // len(name)))
        sources[name] = folder
        runtime.submit(dataset_doc(name, {"path": str(folder)}))
    for name in sources:
        wait_dataset(runtime, name, {DatasetPhase.READY})
    release = tmp_path / "release"
    runtime.submit(data_job("holder", [{"name": "held"}], args=["--hold", str(release)]))
    runtime.wait_phase("holder", {Phase.RUNNING})
    runtime.submit(data_job("passing", [{"name": "idle"}]))
    assert runtime.wait_phase("passing", FINISHED).status.phase == Phase.SUCCEEDED
    cache = node_cache(runtime)
    assert {e.dataset for e in cache.entries()} == {"default/held", "default/idle"}
    # 2 x 1.4 MB are cached in 3 MiB; the newcomer needs room: only the unpinned "idle" may go.
    runtime.submit(data_job("newcomer", [{"name": "newcomer"}]))
    assert runtime.wait_phase("newcomer", FINISHED).status.phase == Phase.SUCCEEDED
    held = {e.dataset: e for e in cache.entries()}
    assert set(held) == {"default/held", "default/newcomer"}, "the pinned dataset was evicted"
    assert held["default/held"].pinned_by == ("default/holder",)
    assert cache.counters()["default/idle"].evictions == 1
    assert tree(cache.path(held["default/held"].key)) == tree(sources["held"])
    # With "held" pinned and "newcomer" cached, a job needing 2.8 MB must wait, not evict "held".
    big = tmp_path / "big"
    big.mkdir()
    (big / "data.bin").write_bytes(b"b" * 2_800_000)
    runtime.submit(dataset_doc("big", {"path": str(big)}))
    wait_dataset(runtime, "big", {DatasetPhase.READY})
    runtime.submit(data_job("waiter", [{"name": "big"}]))
    with runtime.client() as client:
        wait_until(
            lambda: any(
                e.startswith("StagingWaits: waiting for room") for e in events(runtime, "TrainingJob", "waiter")
            ),
            message="the waiter to say it waits for room in the cache",
        )
        assert client.get("waiter").status.phase == Phase.DOWNLOADING
    assert "default/held" in {e.dataset for e in cache.entries()}, "a pinned dataset was evicted"
    release.touch()
    assert runtime.wait_phase("holder", FINISHED).status.phase == Phase.SUCCEEDED
    assert runtime.wait_phase("waiter", FINISHED).status.phase == Phase.SUCCEEDED


def test_bad_sources_fail_the_dataset_and_its_jobs_with_the_reason(runtime: Runtime, source_dir: Path) -> None:
    runtime.start_control_plane()
    runtime.submit(dataset_doc("good", {"path": str(source_dir)}))
    good = wait_dataset(runtime, "good", {DatasetPhase.READY})
    runtime.submit(dataset_doc("gone", {"url": "http://127.0.0.1:9/nothing.csv"}))
    runtime.submit(dataset_doc("badsql", {"sql": {"url": f"sqlite:///{source_dir}/none.db", "query": "SELEC x"}}))
    gone = wait_dataset(runtime, "gone", {DatasetPhase.FAILED})
    assert gone.status.message and gone.status.message.startswith("spec.source.url:")
    bad_sql = wait_dataset(runtime, "badsql", {DatasetPhase.FAILED})
    assert bad_sql.status.message and "spec.source.sql" in bad_sql.status.message
    runtime.submit(data_job("reads-gone", [{"name": "gone"}]))
    job = runtime.wait_phase("reads-gone", FINISHED)
    assert job.status.phase == Phase.FAILED and job.status.reason == "StagingFailed"
    assert "dataset gone failed to materialise: spec.source.url" in (job.status.message or "")
    # Nothing else was touched: the good dataset and its files are as they were.
    with runtime.client() as client:
        assert client.store.get(Dataset, "default", "good").status == good.status
    label = (good.status.version or "").replace(":", "-")[:63]
    assert tree(runtime.state_dir / "datasets" / "default" / "good" / label) == tree(source_dir)
    manifest = json.loads((runtime.state_dir / "datasets" / "default" / "good" / f"{label}.json").read_text())
    assert len(manifest["files"]) == 8


def test_parent_steps_and_unknown_datasets_are_refused_before_anything_is_created(
    runtime: Runtime, source_dir: Path
) -> None:
    runtime.start_control_plane()
    bad = runtime.write_job("bad", dataset_doc("escape", {"path": "../etc"}))
    result = runtime.cli("submit", "-f", str(bad))
    assert result.returncode != 0
    assert "spec.source.path" in result.stderr + result.stdout and "'..'" in result.stderr + result.stdout
    orphan = runtime.write_job("orphan", data_job("orphan", [{"name": "missing"}]))
    result = runtime.cli("submit", "-f", str(orphan))
    assert result.returncode != 0
    assert "spec.datasets[0].name" in result.stderr + result.stdout
    with runtime.client() as client:
        assert client.store.list(Dataset) == []
        assert client.list() == []


def python_job(name: str, code: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    job = data_job(name, mounts)
    job["spec"]["replicas"]["worker"]["template"]["command"] = ["python", "-c", code]
    return job


def test_sql_dataset_from_a_real_postgresql(runtime: Runtime, postgres_url: str, tmp_path: Path) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("DROP TABLE IF EXISTS runtime_orders"))
        connection.execute(sqlalchemy.text("CREATE TABLE runtime_orders (id int PRIMARY KEY, amount numeric(8, 2))"))
        connection.execute(
            sqlalchemy.text("INSERT INTO runtime_orders SELECT g, g * 1.5 FROM generate_series(1, 500) AS g")
        )
    engine.dispose()
    runtime.start_control_plane()
    query = "SELECT id, amount FROM runtime_orders WHERE id % 2 = 0 ORDER BY id"
    runtime.submit(dataset_doc("orders", {"sql": {"url": postgres_url, "query": query}}))
    dataset = wait_dataset(runtime, "orders", {DatasetPhase.READY})
    assert dataset.status.files == 1
    assert dataset.status.lineage and dataset.status.lineage.endswith("(250 rows)") and "***" in dataset.status.lineage
    out = tmp_path / "rows.json"
    code = (
        "import json, os, pyarrow.parquet as pq; "
        "t = pq.read_table(os.path.join(os.environ['PHALANX_DATASET_ORDERS_PATH'], 'data.parquet')); "
        f"open({str(out)!r}, 'w').write(json.dumps([t.num_rows, t.column('id').to_pylist()[:3]]))"
    )
    runtime.submit(python_job("reader", code, [{"name": "orders"}]))
    job = runtime.wait_phase("reader", FINISHED)
    assert job.status.phase == Phase.SUCCEEDED, job.status.message
    assert json.loads(out.read_text()) == [250, [2, 4, 6]]


def test_a_dataset_made_from_a_jobs_outputs(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    producer = (
        "import os, pathlib; p = pathlib.Path(os.environ['PHALANX_OUTPUT_DIR'], 'model'); "
        "p.mkdir(parents=True); (p / 'weights.bin').write_bytes(b'w' * 4096)"
    )
    runtime.submit(python_job("producer", producer, []))
    runtime.submit(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Dataset",
            "metadata": {"name": "weights"},
            "spec": {"source": {"fromJob": {"job": "producer", "output": "model"}}},
        }
    )
    assert runtime.wait_phase("producer", FINISHED).status.phase == Phase.SUCCEEDED
    dataset = wait_dataset(runtime, "weights", {DatasetPhase.READY})
    assert dataset.status.files == 1 and dataset.status.bytes == 4096
    runtime.submit(data_job("consumer", [{"name": "weights"}], args=["--env-dir", str(tmp_path / "env")]))
    assert runtime.wait_phase("consumer", FINISHED).status.phase == Phase.SUCCEEDED
    path = Path(read_envs(tmp_path / "env")["worker-0"]["PHALANX_DATASET_WEIGHTS_PATH"])
    assert (path / "weights.bin").read_bytes() == b"w" * 4096


def _tmpfs_prefix(mount_point: Path, size: str) -> list[str]:
    """Run the control plane in its own user and mount namespaces with a small tmpfs at ``mount_point``."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    probe = subprocess.run(
        [unshare or "unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {mount_point}"],
        capture_output=True,
        text=True,
    )
    if unshare is None or probe.returncode != 0:
        pytest.fail(
            "this test fills a real disk: it needs `unshare -rm` (util-linux) and user namespaces to mount a small "
            f"tmpfs; the probe said: {probe.stderr.strip()}",
            pytrace=False,
        )
    script = f'mount -t tmpfs -o size={size} tmpfs {mount_point} && exec "$0" "$@"'
    return [unshare, "-rm", "sh", "-c", script]


def test_a_full_disk_fails_the_job_and_corrupts_nothing(runtime: Runtime, tmp_path: Path) -> None:
    cache_root = runtime.state_dir / "cache"
    cache_root.mkdir(parents=True)
    plane = runtime.start_control_plane(extra=["--cache-size", "64Mi"], prefix=_tmpfs_prefix(cache_root, "1m"))
    inside = Path(f"/proc/{plane.process.pid}/root") / cache_root.relative_to("/")
    for name, size in (("small", 200_000), ("large", 3_000_000)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.bin").write_bytes(name[0].encode() * size)
        runtime.submit(dataset_doc(name, {"path": str(folder)}))
        wait_dataset(runtime, name, {DatasetPhase.READY})
    runtime.submit(data_job("fits", [{"name": "small"}]))
    assert runtime.wait_phase("fits", FINISHED).status.phase == Phase.SUCCEEDED
    runtime.submit(data_job("too-big", [{"name": "large"}]))
    job = runtime.wait_phase("too-big", FINISHED)
    assert job.status.phase == Phase.FAILED and job.status.reason == "StagingFailed"
    assert "no space left on the disk holding node" in (job.status.message or ""), job.status.message
    # Nothing half-written is left, the ledger still names only what is complete, and the data already cached
    # (and the materialised copies outside the cache) are intact.
    (node_dir,) = [d for d in inside.iterdir() if d.is_dir()]
    assert not [d for d in node_dir.iterdir() if d.name.startswith(".incoming-")]
    ledger = json.loads((node_dir / "ledger.json").read_text())
    assert {e["dataset"] for e in ledger["entries"].values()} == {"default/small"}
    (key,) = ledger["entries"]
    assert (node_dir / key / "data.bin").read_bytes() == b"s" * 200_000
    with runtime.client() as client:
        large = client.store.get(Dataset, "default", "large")
    assert large.status.phase == DatasetPhase.READY
    label = (large.status.version or "").replace(":", "-")[:63]
    assert (runtime.state_dir / "datasets" / "default" / "large" / label / "data.bin").stat().st_size == 3_000_000
    runtime.submit(data_job("again", [{"name": "small"}]))
    assert runtime.wait_phase("again", FINISHED).status.phase == Phase.SUCCEEDED


def test_replicas_of_a_node_share_one_sample_cache_with_the_datasets_policy(
    runtime: Runtime, source_dir: Path, tmp_path: Path
) -> None:
    runtime.start_control_plane()
    doc = dataset_doc("train", {"path": str(source_dir)})
    doc["spec"]["cache"] = {"policy": "lru"}
    runtime.submit(doc)
    wait_dataset(runtime, "train", {DatasetPhase.READY})
    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import json, os, pathlib\n"
        "from phalanx.data import CachedDataset, SampleCache\n"
        "root = pathlib.Path(os.environ['PHALANX_DATASET_TRAIN_PATH'])\n"
        "keys = sorted(str(p.relative_to(root)) for p in root.rglob('*') if p.is_file())\n"
        "cache = SampleCache.for_dataset('train', capacity_bytes=10**6)\n"
        "data = CachedDataset(keys, lambda key: (root / key).read_bytes(), cache)\n"
        "total = sum(len(sample) for epoch in range(2) for sample in data.shuffled(seed=epoch))\n"
        f"pathlib.Path({str(out)!r}, os.environ['PHALANX_REPLICA_INDEX'] + '.json').write_text(json.dumps("
        "{'dir': str(cache.directory), 'policy': cache.policy.value, 'bytes': total, 'hits': cache.hits}))\n"
    )
    job_doc = python_job("loop", code, [{"name": "train"}])
    job_doc["spec"]["replicas"]["worker"]["count"] = 2
    runtime.submit(job_doc)
    job = runtime.wait_phase("loop", FINISHED)
    assert job.status.phase == Phase.SUCCEEDED, job.status.message
    reports = [json.loads((out / f"{index}.json").read_text()) for index in ("0", "1")]
    size = sum(p.stat().st_size for p in source_dir.rglob("*") if p.is_file())
    with runtime.client() as client:
        (node,) = client.store.list(Node)
        (dataset,) = client.datasets()
    samples = runtime.state_dir / "samples" / node.metadata.name / "train" / version_label(dataset.status.version)
    assert {r["dir"] for r in reports} == {str(samples)}, "one directory per node and dataset version"
    assert all(r["policy"] == "lru" and r["bytes"] == 2 * size for r in reports)
    assert all(r["hits"] >= 8 for r in reports), "the second epoch should be served by the shared cache"


def test_a_control_plane_killed_mid_materialisation_leaves_nothing_behind(runtime: Runtime, tmp_path: Path) -> None:
    release = tmp_path / "release"
    script = (
        "import os, pathlib, time\n"
        "pathlib.Path(os.environ['PHALANX_DATASET_OUTPUT'], 'data.bin').write_bytes(b'd' * 1000)\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
    )
    first = runtime.start_control_plane()
    runtime.submit(dataset_doc("slow", {"script": {"command": ["python", "-c", script]}}))
    wait_dataset(runtime, "slow", {DatasetPhase.MATERIALIZING})
    dataset_dir = runtime.state_dir / "datasets" / "default" / "slow"
    wait_until(lambda: any(p.name.startswith(".") for p in dataset_dir.iterdir()), message="a partial copy")
    first.kill9()
    runtime.start_control_plane()
    release.touch()
    dataset = wait_dataset(runtime, "slow", {DatasetPhase.READY})
    assert dataset.status.files == 1 and dataset.status.bytes == 1000
    wait_until(
        lambda: not [p for p in dataset_dir.iterdir() if p.name.startswith(".")],
        message="the interrupted copy's leftovers to go",
    )
    label = (dataset.status.version or "").replace(":", "-")[:63]
    assert sorted(p.name for p in dataset_dir.iterdir()) == [label, f"{label}.json"]


def test_a_restarted_replica_reads_the_version_its_job_started_with(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    first, second = tmp_path / "v1", tmp_path / "v2"
    for folder, content in ((first, b"one"), (second, b"two")):
        folder.mkdir()
        (folder / "data.txt").write_bytes(content)
    runtime.submit(dataset_doc("moving", {"path": str(first)}))
    v1 = wait_dataset(runtime, "moving", {DatasetPhase.READY}).status.version
    out, go = tmp_path / "seen", tmp_path / "go"
    out.mkdir()
    code = (
        "import os, pathlib, sys, time\n"
        f"out = pathlib.Path({str(out)!r})\n"
        "data = pathlib.Path(os.environ['PHALANX_DATASET_MOVING_PATH'], 'data.txt').read_text()\n"
        "first = not any(out.iterdir())\n"
        "(out / str(len(list(out.iterdir())))).write_text(data)\n"
        f"while first and not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "sys.exit(3 if first else 0)\n"
    )
    job = python_job("restarts", code, [{"name": "moving"}])
    job["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 2}
    runtime.submit(job)
    wait_until(lambda: (out / "0").exists(), message="the first attempt to read its data")
    changed = dataset_doc("moving", {"path": str(second)})
    runtime.submit(changed)
    with runtime.client() as client:
        wait_until(
            lambda: (
                (d := client.store.get(Dataset, "default", "moving")).status.phase == DatasetPhase.READY
                and d.status.version != v1
            ),
            message="the changed Dataset to be materialised again",
        )
    go.touch()
    finished = runtime.wait_phase("restarts", FINISHED)
    assert finished.status.phase == Phase.SUCCEEDED and finished.status.restarts == 1, finished.status.message
    assert (out / "0").read_text() == (out / "1").read_text() == "one", "the restarted replica read another version"
    runtime.submit(data_job("later", [{"name": "moving"}], args=["--env-dir", str(tmp_path / "env")]))
    assert runtime.wait_phase("later", FINISHED).status.phase == Phase.SUCCEEDED
    later = Path(read_envs(tmp_path / "env")["worker-0"]["PHALANX_DATASET_MOVING_PATH"])
    assert (later / "data.txt").read_text() == "two", "a new job reads the Dataset's latest version"


def test_a_dataset_deleted_and_created_again_mid_materialisation_gets_its_own_data(
    runtime: Runtime, source_dir: Path, tmp_path: Path
) -> None:
    """The outcome of a materialisation belongs to the Dataset object it started for (its uid), not to its name.

    A Dataset deleted while its script runs and created again from a directory must end with the directory's
    files, not with what the deleted one's script wrote.
    """
    release = tmp_path / "release"
    script = (
        "import os, pathlib, time\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        "pathlib.Path(os.environ['PHALANX_DATASET_OUTPUT'], 'script.bin').write_bytes(b's' * 7)\n"
    )
    runtime.start_control_plane()
    runtime.submit(dataset_doc("again", {"script": {"command": ["python", "-c", script]}}))
    old = wait_dataset(runtime, "again", {DatasetPhase.MATERIALIZING})
    runtime.cli("delete", "dataset", "again", check=True)
    runtime.submit(dataset_doc("again", {"path": str(source_dir)}))
    with runtime.client() as client:
        new_uid = client.dataset("again").metadata.uid
    assert new_uid != old.metadata.uid
    release.touch()
    with runtime.client() as client:
        dataset = client.wait_dataset("again", timeout=60)
    assert dataset.metadata.uid == new_uid
    assert dataset.status.phase == DatasetPhase.READY, dataset.status.message
    assert dataset.status.files == len(tree(source_dir)), dataset.status.lineage
    assert "script" not in (dataset.status.lineage or "")


TRIAL_READS_DATASET = """
import hashlib, os, pathlib, sys
root = pathlib.Path(os.environ["PHALANX_DATASET_SHARED_PATH"])
digest = hashlib.sha256((root / "train.bin").read_bytes()).hexdigest()
pathlib.Path(sys.argv[1], sys.argv[2]).write_text(digest)
print(f"phalanx-metric step=1 loss={float(sys.argv[3]):.3f}", flush=True)
"""


def test_a_sweeps_trials_share_a_replicated_dataset_fetched_and_cached_once(
    runtime: Runtime, http_source: CountingServer, tmp_path: Path
) -> None:
    # Issue 17: trials are TrainingJobs, so the Dataset their template reads is materialised once and staged into
    # the node's cache once, whichever trial comes first.
    program, seen = tmp_path / "trial.py", tmp_path / "seen"
    program.write_text(TRIAL_READS_DATASET)
    seen.mkdir()
    runtime.start_control_plane()
    runtime.submit(dataset_doc("shared", {"url": http_source.url}))
    runtime.submit(
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Sweep",
            "metadata": {"name": "data-sweep"},
            "spec": {
                "parameters": [{"name": "x", "type": "discrete", "values": [3, 1, 2]}],
                "algorithm": {"name": "grid"},
                "objective": {"metric": "loss", "direction": "minimize"},
                "maxTrials": 3,
                "parallelTrials": 2,
                "trial": {
                    "spec": {
                        "type": "generic",
                        "datasets": [{"name": "shared"}],
                        "replicas": {
                            "worker": {
                                "count": 1,
                                "template": {
                                    "command": ["python", str(program), str(seen), "${trial.name}", "${params.x}"],
                                    "resources": {"cpu": "100m", "memory": "64Mi"},
                                },
                            }
                        },
                    }
                },
            },
        }
    )
    with runtime.client() as client:
        sweep = wait_until(
            lambda: (
                (s := client.store.try_get(Sweep, "default", "data-sweep")) is not None
                and s.status.phase in (SweepPhase.SUCCEEDED, SweepPhase.FAILED)
                and s
            ),
            timeout=120,
            message=f"the sweep to finish; logs:\n{runtime.planes[-1].log()[-3000:]}",
        )
    assert sweep.status.phase == SweepPhase.SUCCEEDED, sweep.status.message
    assert sweep.status.best_trial is not None and sweep.status.best_trial.parameters == {"x": 1}
    expected = hashlib.sha256(bytes(range(256)) * 400).hexdigest()
    assert {path.name: path.read_text() for path in seen.iterdir()} == {
        f"data-sweep-{n}": expected for n in range(3)
    }, "every trial read the whole dataset"
    assert http_source.gets == 1, "the source was read more than once"
    counters = node_cache(runtime).counters()["default/shared"]
    assert counters.misses == 1, "the node cache copied the dataset more than once"
    assert counters.hits == 2
