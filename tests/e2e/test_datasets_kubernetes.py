"""Datasets on Kubernetes: the operator materialises them, node agents stage them, Pods start only once staged.

A real control plane with phalanx-operator (``--dataset-store``: a temporary directory standing for the
ReadWriteMany volume), phalanx-scheduler and one phalanx-node-agent process per kwok node (each with its own
cache directory, standing for the node's hostPath), all under their own ServiceAccounts. Two fresh kwok nodes
with one GPU each of a model only they have, so that a 2-replica job of one GPU per replica spans both.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Component, Components, wait_alive
from phalanx.model.datasets import version_label
from phalanx.services.operations import OperationError
from support.sim_jobs import gpu_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
DATASETS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/datasets"
CACHE_ANNOTATION = "phalanx.dev/dataset-cache"
# Sizes chosen so that a split by bytes is uneven in files: 40 KiB alone against 5 smaller files.
FILES = {
    "a.bin": 40 << 10,
    "b.bin": 12 << 10,
    "c.bin": 9 << 10,
    "d.bin": 8 << 10,
    "sub/e.bin": 6 << 10,
    "f.bin": 4 << 10,
}


@dataclass
class Cluster:
    nodes: tuple[str, str]
    model: str
    store: Path
    caches: dict[str, Path]
    samples: dict[str, Path]
    inventory: Path
    source: Path


def inventory(path: Path, model: str) -> Path:
    """A simulated node of 2 CPUs and one GPU of ``model``, for the agents' GPU discovery."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "phalanx.dev/v1alpha1",
                "kind": "Node",
                "metadata": {"name": "sim"},
                "status": {
                    "source": "simulated",
                    "memory": 1 << 30,
                    "cpus": [
                        {"id": 0, "core": 0, "socket": 0, "numa": 0},
                        {"id": 1, "core": 1, "socket": 0, "numa": 0},
                    ],
                    "gpus": [{"index": 0, "uuid": "GPU-sim-0", "model": model, "memory": 1 << 30, "numa": 0}],
                },
            }
        )
    )
    return path


@pytest.fixture
def cluster(components: Components, tmp_path: Path) -> Iterator[Cluster]:
    kube = components.kube
    nodes = (kube.unique("data-a"), kube.unique("data-b"))
    model = kube.unique("T4-DATA")
    k8s_testenv.create_fake_gpu_nodes(kube.env, list(nodes), gpus=1, product=model, numa_nodes=1)
    source = tmp_path / "source"
    for name, size in FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(bytes([len(name)]) * size)
    yield Cluster(
        nodes=nodes,
        model=model,
        store=tmp_path / "store",
        caches={node: tmp_path / f"cache-{node}" for node in nodes},
        samples={node: tmp_path / f"samples-{node}" for node in nodes},
        inventory=inventory(tmp_path / "inventory.json", model),
        source=source,
    )
    for name in nodes:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def start_agent(components: Components, cluster: Cluster, node: str) -> Component:
    agent = components.node_agent(
        node,
        "--inventory",
        str(cluster.inventory),
        "--interval",
        "0.5",
        "--dataset-store",
        str(cluster.store),
        "--cache-dir",
        str(cluster.caches[node]),
        "--cache-size",
        "10Mi",
        "--sample-dir",
        str(cluster.samples[node]),
    )
    wait_alive(agent)
    return agent


def dataset(name: str, source: dict[str, Any], distribution: str = "replicate") -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": name},
        "spec": {"source": source, "distribution": distribution},
    }


def job(name: str, model: str, workers: int, datasets: list[dict[str, Any]]) -> dict[str, Any]:
    return gpu_job(name, model, workers=workers, datasets=datasets)


def phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


def report(kube: Any, node: str) -> dict[str, Any]:
    annotations = kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
    return dict(json.loads(annotations.get(CACHE_ANNOTATION) or "{}"))


def events(kube: Any, namespace: str, name: str, reason: str) -> list[str]:
    selector = f"involvedObject.name={name},reason={reason}"
    found = kube.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")["items"]
    return [str(event["message"]) for event in found]


def files_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def test_a_sharded_dataset_is_materialised_then_staged_on_both_nodes_before_the_pods_start(
    components: Components, namespace: str, cluster: Cluster
) -> None:
    kube = components.kube
    first, second = cluster.nodes
    components.operator("--dataset-store", str(cluster.store), "--allow-path-under", str(cluster.source))
    components.scheduler()
    start_agent(components, cluster, first)

    # The operator materialises the Dataset into the store and says so in its status.
    datasets = DATASETS.format(ns=namespace)
    kube.create(datasets, dataset("train", {"path": str(cluster.source)}, "shard"))
    ready = kube.wait_for(f"{datasets}/train", lambda d: phase(d) == "Ready", 30, "dataset train Ready")
    status = ready["status"]
    assert status["files"] == len(FILES) and status["bytes"] == sum(FILES.values())
    assert status["version"].startswith("sha256:") and status["observedGeneration"] == ready["metadata"]["generation"]
    label = version_label(status["version"])
    materialised = cluster.store / namespace / "train" / label
    assert files_under(materialised) == set(FILES)
    assert (cluster.store / namespace / "train" / f"{label}.json").is_file()

    # A job of two replicas, one per node: the first node's agent stages its shard; the second node has no agent
    # yet, so the job waits in Downloading without Pods.
    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("reader", cluster.model, 2, [{"name": "train"}]))
    waiting = wait_until(
        lambda: [m for m in events(kube, namespace, "reader", "StagingWaits") if second in m and first not in m],
        30,
        f"the operator waiting for {second} only",
    )
    assert "has no dataset cache report" in waiting[0]
    assert phase(kube.get(f"{jobs}/reader")) == "Downloading"
    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=reader"
    assert kube.get(pods)["items"] == [], "no Pod before every node has staged its shard"
    first_report = report(kube, first)
    assert first_report["jobs"][f"{namespace}/reader"]["state"] == "ready"

    # The second agent stages the other shard: now the Pods are created and the job runs.
    start_agent(components, cluster, second)
    kube.wait_for(f"{jobs}/reader", lambda j: phase(j) == "Running", 30, "job reader Running")
    found = kube.get(pods)["items"]
    assert len(found) == 2
    seen: dict[int, tuple[str, Path]] = {}
    for pod in found:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        index, count = int(env["PHALANX_DATASET_TRAIN_SHARD_INDEX"]), int(env["PHALANX_DATASET_TRAIN_SHARD_COUNT"])
        assert count == 2
        key = f"{label}.shard-{index}-of-2"
        assert env["PHALANX_DATASET_TRAIN_PATH"] == f"/var/cache/phalanx/datasets/{key}"
        assert env["PHALANX_DATASET_TRAIN_CACHE_POLICY"] == "noReplacement"
        node = pod["spec"]["nodeName"]
        volumes = {v["name"]: v["hostPath"] for v in pod["spec"]["volumes"] if "hostPath" in v}
        assert volumes["dataset-0"] == {"path": f"{cluster.caches[node]}/{key}", "type": "Directory"}
        mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        inside = env["PHALANX_DATASET_TRAIN_PATH"]
        assert mounts["dataset-0"] == {"name": "dataset-0", "mountPath": inside, "readOnly": True}
        # The in-job sample cache: the agent's directory for the namespace, shared by the node's replicas.
        samples = cluster.samples[node] / namespace
        assert volumes["samples"] == {"path": str(samples), "type": "Directory"} and samples.is_dir()
        assert samples.stat().st_mode & 0o1777 == 0o1777
        assert env["PHALANX_SAMPLE_CACHE_DIR"] == mounts["samples"]["mountPath"] == "/var/cache/phalanx/samples"
        assert not mounts["samples"].get("readOnly")
        seen[index] = (node, cluster.caches[node] / key)
    assert sorted(seen) == [0, 1] and {node for node, _ in seen.values()} == set(cluster.nodes)

    # Each node's cache holds its shard only; the two are disjoint and make up the dataset, byte for byte.
    for node, directory in seen.values():
        held = {child.name for child in cluster.caches[node].iterdir() if child.is_dir()}
        assert held == {directory.name}, f"{node} caches {held}"
    shards = [files_under(directory) for _, directory in seen.values()]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == set(FILES)
    for _, directory in seen.values():
        for name in files_under(directory):
            assert (directory / name).read_bytes() == (cluster.source / name).read_bytes()

    # `phalanx cache ls` (the SDK's caches()) reads each agent's report: the shard, its bytes, the job pinning
    # it, and one miss (the copy) for the dataset on each node.
    from phalanx import Client

    with Client.kubernetes(kubeconfig=kube.kubeconfig, namespace=namespace) as client:
        views = {view.node: view for view in client.caches() if view.node in cluster.nodes}
    for node, directory in seen.values():
        view = views[node]
        assert view.capacity == 10 << 20
        (entry,) = view.entries
        assert (entry.key, entry.dataset, entry.state) == (directory.name, f"{namespace}/train", "ready")
        assert entry.bytes == sum(FILES[name] for name in files_under(directory)) == view.used
        assert entry.pinned_by == (f"{namespace}/reader",)
        counters = view.counters[f"{namespace}/train"]
        assert (counters.misses, counters.hits, counters.bytes_fetched) == (1, 0, entry.bytes)

    # Both nodes carry the dataset's label, and the Dataset lists them.
    for node in cluster.nodes:
        labels = kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
        assert labels["dataset.phalanx.dev/train"] == label
    kube.wait_for(f"{datasets}/train", lambda d: d["status"].get("nodes") == sorted(cluster.nodes), 15, "status.nodes")

    # `phalanx cache evict` refuses what the running job reads, naming it; once the job is gone the agents evict
    # on request: the caches are empty, the labels gone.
    with Client.kubernetes(kubeconfig=kube.kubeconfig, namespace=namespace) as client:
        with pytest.raises(OperationError, match=f"in use by {namespace}/reader"):
            client.evict(dataset=f"{namespace}/train")
        assert all(any(cluster.caches[node].glob("sha256-*")) for node in cluster.nodes), "nothing evicted"
        kube.request("DELETE", f"{jobs}/reader")
        for node in cluster.nodes:
            wait_until(lambda node=node: not report(kube, node)["held"].popitem()[1].get("pins"), 30, f"{node} unpins")
        evicted = client.evict(dataset=f"{namespace}/train")
    assert sorted(evicted) == sorted(f"{node}: {directory.name}" for node, directory in seen.values())
    for node in cluster.nodes:
        assert not any(cluster.caches[node].glob("sha256-*")), f"{node}'s cache still holds the dataset"
        after = kube.get(f"/api/v1/nodes/{node}")["metadata"]
        assert "dataset.phalanx.dev/train" not in after["labels"]
        assert "phalanx.dev/dataset-cache-evict" not in (after.get("annotations") or {})


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_job_reading_an_unreachable_dataset_fails_with_staging_failed(
    components: Components, namespace: str, cluster: Cluster
) -> None:
    kube = components.kube
    components.operator("--dataset-store", str(cluster.store))
    components.scheduler()
    datasets = DATASETS.format(ns=namespace)
    url = f"http://127.0.0.1:{closed_port()}/data.csv"
    kube.create(datasets, dataset("gone", {"url": url}))
    # The operator reads local files only under the directories it was given (none here).
    kube.create(datasets, dataset("secret", {"path": str(cluster.source)}))
    failed = kube.wait_for(f"{datasets}/gone", lambda d: phase(d) == "Failed", 60, "dataset gone Failed")
    assert "spec.source.url" in failed["status"]["message"]
    refused = kube.wait_for(f"{datasets}/secret", lambda d: phase(d) == "Failed", 30, "dataset secret Failed")
    assert refused["status"]["message"].startswith("spec.source.path: ")
    assert "--allow-path-under" in refused["status"]["message"]
    assert not (cluster.store / namespace / "secret").exists()
    wait_until(lambda: events(kube, namespace, "gone", "MaterializeFailed"), 10, "a MaterializeFailed event")

    jobs = JOBS.format(ns=namespace)
    kube.create(jobs, job("reader", cluster.model, 1, [{"name": "gone"}]))
    done = kube.wait_for(f"{jobs}/reader", lambda j: phase(j) == "Failed", 30, "job reader Failed")
    assert done["status"]["reason"] == "StagingFailed"
    message = done["status"]["message"]
    assert "spec.datasets[0]" in message and "dataset gone failed to materialise" in message
    assert "spec.source.url" in message
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job=reader")["items"]
    assert pods == []


def test_waiting_on_a_dataset_given_a_new_spec_returns_the_new_specs_outcome(
    components: Components, namespace: str, cluster: Cluster, tmp_path: Path
) -> None:
    """What `phalanx dataset create -f` waits for on a cluster: the new spec's Ready or Failed, not the old one's."""
    from phalanx import Client

    components.operator("--dataset-store", str(cluster.store), "--allow-path-under", str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "one.bin").write_bytes(b"1" * 100)
    with Client.kubernetes(kubeconfig=components.kube.kubeconfig, namespace=namespace) as client:
        client.submit([dataset("moving", {"path": str(cluster.source)})])
        first = client.wait_dataset("moving", timeout=60)
        assert (first.status.phase, first.status.files) == ("Ready", len(FILES))
        client.submit([dataset("moving", {"path": str(tmp_path / "missing")})])
        broken = client.wait_dataset("moving", timeout=60)
        assert broken.status.phase == "Failed", broken.status
        assert broken.status.observed_generation == broken.metadata.generation == 2
        client.submit([dataset("moving", {"path": str(other)})])
        fixed = client.wait_dataset("moving", timeout=60)
        assert (fixed.status.phase, fixed.status.files, fixed.status.observed_generation) == ("Ready", 1, 3)
