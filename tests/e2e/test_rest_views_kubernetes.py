"""The view routes over the Kubernetes backend on a real kube-apiserver: the same app as on the embedded runtime
(written once over the port) answers a kwok GPU node with who holds its GPUs, the node's cache as its labels say,
and a queue's usage with its waiting job, as `phalanx get nodes` and `get queues --backend kubernetes` show them;
a caller of another namespace gets the numbers and none of the names.

No controller runs: the job's placement and the waiting job's reason are written through the status subresource,
as phalanx-scheduler writes them. The tokens are the unit tests' stand-in store (a dict of grants): on a cluster
the server's callers will be authenticated by TokenReview, which is another part of the work; what is checked here
is that the views' redaction holds over this backend's objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import k8s_testenv
from components import phalanx_cli as phalanx
from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.core.auth import Grant, Role
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.queues import Queue
from phalanx.services.kubernetes.operations import KubeBackend
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

API = "/apis/phalanx.dev/v1alpha1"
PRODUCT = "VIEWS-TEST-GPU"  # a product of its own: no other test's job asks for it


@pytest.fixture
def gpu_node(phalanx_installed: Any) -> Iterator[str]:
    """A kwok node with 4 GPUs, labelled as caching a version of Dataset ``images``."""
    kube = phalanx_installed
    name = kube.unique("views-gpu")
    labels = {"dataset.phalanx.dev/images": "sha256-0123456789ab"}
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name], gpus=4, product=PRODUCT, labels=labels)
    yield name
    kube.request("DELETE", f"/api/v1/nodes/{name}")


class Tokens:
    def __init__(self, namespace: str) -> None:
        self.grants = {
            "mine": Grant(Role.VIEWER, frozenset({namespace}), "mine"),
            "theirs": Grant(Role.EDITOR, frozenset({"elsewhere"}), "theirs"),
            "admin": Grant(Role.ADMIN, frozenset({"*"}), "admin"),
        }

    def authenticate(self, token: str) -> Grant | None:
        return self.grants.get(token)


def job(name: str, namespace: str, queue: str, gpus: int) -> TrainingJob:
    worker = {
        "count": 1,
        "template": {"image": "example.org/t:1", "resources": {"cpu": 1, "memory": "1Gi", "gpu": gpus}},
    }
    return TrainingJob.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "generic", "scheduling": {"queue": queue}, "replicas": {"worker": worker}},
        }
    )


def test_the_views_over_the_kubernetes_backend(
    phalanx_installed: Any, namespace: str, gpu_node: str, tmp_path: Path
) -> None:
    kube = phalanx_installed
    api = KubeApi.from_kubeconfig(kube.kubeconfig)
    backend = KubeBackend(api)
    queue = kube.unique("views-queue")
    backend.create(
        Queue.model_validate({"metadata": {"name": queue}, "spec": {"quota": {"gpu": 2}, "cohort": "views"}})
    )
    for made in (job("big", namespace, queue, 3), job("waiter", namespace, queue, 2)):
        backend.create(made)

    def stored(name: str) -> TrainingJob:
        found = backend.get(TrainingJob, namespace, name)
        assert found is not None
        return found

    placement = ReplicaPlacement(node=gpu_node, gpus=[0, 1, 2])
    backend.write_status(stored("big"), {"phase": Phase.RUNNING, "placements": {"big-worker-0": placement}})
    reason = "needs 2 GPUs on one node; quota of queue views is used"
    backend.write_status(stored("waiter"), {"phase": Phase.QUEUED, "reason": "Waiting", "message": reason})
    client = TestClient(create_app(backend, authorize=token_authorizer(Tokens(namespace))))  # type: ignore[arg-type]

    def get(path: str, token: str) -> dict[str, Any]:
        answer = client.get(f"{API}{path}", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    node = get(f"/nodes/{gpu_node}", "mine")
    gpus = node["status"]["gpus"]
    assert [(g["index"], g["model"], g["healthy"]) for g in gpus] == [(i, PRODUCT, True) for i in range(4)]
    assert {int(peer) for peer in gpus[0]["nvlinks"]} == {1, 2, 3}  # the node's topology annotation
    allocation = node["allocation"]
    assert (allocation["gpus"], allocation["cpuMilli"]) == (3, 1000)
    holders = {g["index"]: [h["job"] for h in g["holders"]] for g in allocation["gpuHolders"]}
    assert holders == {0: [f"{namespace}/big"], 1: [f"{namespace}/big"], 2: [f"{namespace}/big"]}
    assert "dataset.phalanx.dev/images" not in node["metadata"]["labels"]  # it names a Dataset of some namespace
    assert node in get("/nodes", "mine")["items"]

    rows = phalanx(kube, namespace, tmp_path, "get", "nodes")
    assert rows.returncode == 0, rows.stderr
    (row,) = [line.split() for line in rows.stdout.splitlines() if line.startswith(gpu_node)]
    assert f"{allocation['gpus']}/4" in row

    cache = get(f"/nodes/{gpu_node}/caches", "admin")
    assert [(e["key"], e["dataset"]) for e in cache["entries"]] == [("sha256-0123456789ab", "images")]
    assert cache["capacity"] is None and cache["used"] is None  # a label says what is held, not how much
    assert [e["dataset"] for e in get(f"/nodes/{gpu_node}/caches", "mine")["entries"]] == ["hidden"]

    usage = get(f"/queues/{queue}/usage", "mine")
    gpu = usage["resources"]["gpu"]
    assert (gpu["used"], gpu["quota"], gpu["borrowed"], usage["fromStatus"]) == (3000, 2000, 1000, False)
    assert [(j["name"], j["waitingFor"]) for j in usage["pendingJobs"]] == [("waiter", reason)]
    queues = phalanx(kube, namespace, tmp_path, "get", "queues")
    assert queues.returncode == 0, queues.stderr
    (queue_row,) = [line for line in queues.stdout.splitlines() if line.startswith(queue)]
    assert "3/2 (+1)" in queue_row

    theirs = get(f"/queues/{queue}/usage", "theirs")
    assert (theirs["pendingJobs"], theirs["otherPending"], theirs["otherAdmitted"]) == ([], 1, 1)
    their_node = get(f"/nodes/{gpu_node}", "theirs")["allocation"]
    assert {h["job"] for g in their_node["gpuHolders"] for h in g["holders"]} == {"in use"}
    assert client.get(f"{API}/nodes/{gpu_node}").status_code == 401
    backend.delete(Queue, "", queue)
    wait_until(lambda: backend.get(Queue, "", queue) is None, 30, "the queue to be deleted")
    api.close()
