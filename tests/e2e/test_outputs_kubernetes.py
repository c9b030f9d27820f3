"""Outputs collected on Kubernetes: a job's replicas write to the artifact store's claim, the operator stores them
once the job succeeded, says where, and a Dataset ``fromJob`` reads them; on a real control plane.

What is real: the API server (and its controller manager), the CRDs and RBAC of deploy/, phalanx-operator
(``--artifact-volume-claim``, ``--dataset-store``) and phalanx-scheduler as local processes under their own
ServiceAccounts, the TrainingJob and its Pods (bound by phalanx-scheduler to kwok's nodes, finished by kwok), the
PersistentVolumeClaim object, the operator's storing (the copy, ``metrics.json`` into ``status.metrics``, the
record), and its materialising of the Dataset from the stored outputs.

What the test plays: kwok runs no container, so the test plays the replicas. Their Pods hang
(``phalanx.dev/sim-hang``) until the test has written their files where each Pod mounts its outputs volume: the
claim's ``subPath``, read from the Pod as created, under the operator's store directory (the claim's root where the
operator mounts it; on a cluster the kubelet mounts the same folder of the claim into the container). Then the test
lifts the hang and kwok ends the Pods with exit code 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Components, create_claim, wait_alive
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

GROUP = "/apis/phalanx.dev/v1alpha1"
CLAIM = "job-outputs"
HANG = "phalanx.dev/sim-hang"


@dataclass
class Cluster:
    namespace: str
    kube: Any
    store: Path  # the operator's artifact store: the claim's root, as the operator mounts it
    datasets: Path

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.kube.get(f"{GROUP}/namespaces/{self.namespace}/{plural}/{name}")  # type: ignore[no-any-return]

    def create(self, plural: str, body: dict[str, Any]) -> None:
        self.kube.create(f"{GROUP}/namespaces/{self.namespace}/{plural}", body)

    def pods_of(self, job: str) -> list[dict[str, Any]]:
        listed = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector=phalanx.dev/job={job}")
        return list(listed["items"])

    def release(self, pod: str) -> None:
        response = self.kube.http.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}",
            content=json.dumps({"metadata": {"annotations": {HANG: None}}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        response.raise_for_status()


@pytest.fixture
def cluster(components: Components, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    kube = components.kube
    nodes = [kube.unique("outputs")]
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, product=kube.unique("OUT-GPU"))
    create_claim(kube, namespace, CLAIM)
    state = tmp_path / "operator-state"
    datasets = tmp_path / "dataset-store"
    datasets.mkdir()
    operator = components.operator(
        "--state-dir", str(state), "--artifact-volume-claim", CLAIM, "--dataset-store", str(datasets)
    )
    scheduler = components.scheduler("--lease-duration", "3")
    wait_alive(operator)
    wait_alive(scheduler)
    try:
        yield Cluster(namespace, kube, (state / "artifacts").absolute(), datasets)
    finally:
        for name in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{name}")


def job_document(name: str, replicas: int, outputs: dict[str, str] | None = None) -> dict[str, Any]:
    template = {
        "image": "example.org/trainer:1",
        "command": ["python", "train.py"],
        "metadata": {"annotations": {HANG: "true"}},
    }
    spec: dict[str, Any] = {"type": "generic", "replicas": {"worker": {"count": replicas, "template": template}}}
    if outputs is not None:
        spec["outputs"] = outputs
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


def outputs_folder(cluster: Cluster, pod: dict[str, Any]) -> Path:
    """Where this Pod's container writes its outputs: its outputs volume's claim and subPath."""
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "outputs"]
    [mount] = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "outputs"]
    assert volume["persistentVolumeClaim"]["claimName"] == CLAIM, volume
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["PHALANX_OUTPUT_DIR"] == mount["mountPath"]
    return cluster.store / mount["subPath"]


def run_as_replicas(cluster: Cluster, job: str, replicas: int, files: dict[int, dict[str, str]]) -> dict[str, Any]:
    """Wait for the job's Pods to run, write each one's files in its outputs folder, end them; the final status."""

    def running() -> list[dict[str, Any]]:
        pods = cluster.pods_of(job)
        ready = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        return ready if len(ready) == replicas else []

    pods = wait_until(running, 90, f"the {replicas} Pod(s) of {job} running", interval=0.2)
    for pod in pods:
        index = int(pod["metadata"]["labels"]["phalanx.dev/replica-index"])
        folder = outputs_folder(cluster, pod)
        assert folder.is_dir(), "the operator made the folder before the Pods"
        for relative, text in files.get(index, {}).items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(text)
    for pod in pods:
        cluster.release(pod["metadata"]["name"])

    def ended() -> dict[str, Any] | None:
        status = cluster.get("trainingjobs", job).get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return wait_until(ended, 90, f"{job} ended", interval=0.2)  # type: ignore[no-any-return]


def test_a_jobs_outputs_are_stored_from_the_claim_and_a_dataset_reads_them(cluster: Cluster) -> None:
    cluster.create("trainingjobs", job_document("train", 2))
    files = {
        0: {"model/weights.bin": "w" * 100, "metrics.json": json.dumps({"accuracy": 0.93, "loss": 0.2})},
        1: {"model/shard-1.bin": "s" * 50},
    }
    status = run_as_replicas(cluster, "train", 2, files)
    stored = cluster.store / cluster.namespace / "train"
    assert status["phase"] == "Succeeded", status
    assert status["message"] == f"outputs stored at {stored}", status
    assert status["artifacts"] == str(stored)
    assert status["metrics"] == {"accuracy": 0.93, "loss": 0.2}
    assert (stored / "model" / "weights.bin").read_text() == "w" * 100
    assert (stored / "model" / "shard-1.bin").read_text() == "s" * 50, "every replica's files, in one folder"

    cluster.create(
        "datasets",
        {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "Dataset",
            "metadata": {"name": "trained-model"},
            "spec": {"source": {"fromJob": {"job": "train", "output": "model"}}},
        },
    )

    def materialised() -> dict[str, Any] | None:
        status = cluster.get("datasets", "trained-model").get("status") or {}
        return status if status.get("phase") in ("Ready", "Failed") else None

    dataset = wait_until(materialised, 60, "the Dataset fromJob materialised", interval=0.2)
    assert dataset["phase"] == "Ready", dataset
    assert dataset["files"] == 2 and dataset["bytes"] == 150, dataset


def test_store_to_a_url_is_copied_by_the_operator_and_a_bad_store_to_fails_naming_the_field(
    cluster: Cluster, tmp_path: Path
) -> None:
    target = tmp_path / "bucket" / "run-7"
    cluster.create("trainingjobs", job_document("to-url", 1, {"storeTo": f"file://{target}"}))
    cluster.create("trainingjobs", job_document("escape", 1, {"storeTo": "../other-team/x"}))
    status = run_as_replicas(cluster, "to-url", 1, {0: {"result.txt": "42"}})
    assert status["phase"] == "Succeeded", status
    assert status["artifacts"] == f"file://{target}"
    assert (target / "result.txt").read_text() == "42"

    status = run_as_replicas(cluster, "escape", 1, {0: {"result.txt": "42"}})
    assert status["phase"] == "Failed" and status["reason"] == "StoringFailed", status
    assert "outputs.storeTo: '../other-team/x' is not a folder of the artifact store" in status["message"]
    assert not (cluster.store / "other-team").exists()


def test_a_namespace_without_the_claim_runs_its_jobs_and_is_told_how_to_store_their_outputs(cluster: Cluster) -> None:
    kube = cluster.kube
    other = kube.unique("no-claim")
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        elsewhere = Cluster(other, kube, cluster.store, cluster.datasets)
        elsewhere.create("trainingjobs", job_document("plain", 1))

        def running() -> list[dict[str, Any]]:
            pods = elsewhere.pods_of("plain")
            return [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]

        [pod] = wait_until(running, 90, "the job's Pod running (no claim to wait for)", interval=0.2)
        assert {"name": "outputs", "emptyDir": {}} in pod["spec"]["volumes"]
        elsewhere.release(pod["metadata"]["name"])

        def ended() -> dict[str, Any] | None:
            status = elsewhere.get("trainingjobs", "plain").get("status") or {}
            return status if status.get("phase") in ("Succeeded", "Failed") else None

        status = wait_until(ended, 90, "the job ended", interval=0.2)
        assert status["phase"] == "Succeeded", status
        assert status["message"].startswith(
            f"outputs not stored: namespace {other} has no PersistentVolumeClaim {CLAIM}"
        )
        assert not status.get("artifacts")
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{other}")
