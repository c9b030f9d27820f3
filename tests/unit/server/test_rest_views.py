"""The view routes' values over the in-memory port, served without authorization: nodes with who holds each GPU,
a node's cache with entries, pins and counters, a queue's usage against quota with pending jobs and their reasons.

What a caller of another tenant sees of the same objects is tests/unit/server/test_rest_tenancy_views.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.core.data import DatasetCounters
from phalanx.entrypoints.server.app import create_app
from phalanx.model.jobs import TrainingJob
from phalanx.model.nodes import Node
from phalanx.model.queues import Queue
from phalanx.services.dataset_views import CacheEntryView
from support.memory_backend import MemoryBackend

API = "/apis/phalanx.dev/v1alpha1"
GIB = 1 << 30


def node(name: str, gpus: int = 4, *, labels: dict[str, str] | None = None) -> Node:
    """A node with 8 CPUs, 64 GiB, and ``gpus`` A100s linked in pairs (0-1, 2-3) by NVLink; GPU 3 unhealthy."""
    return Node.model_validate(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "status": {
                "cpus": [{"id": i, "numa": i // 4} for i in range(8)],
                "memory": 64 * GIB,
                "source": "simulated",
                "gpus": [
                    {
                        "index": i,
                        "model": "A100",
                        "memory": 80 * GIB,
                        "nvlinks": {i ^ 1: 4},
                        "healthy": i != 3,
                        "problem": "" if i != 3 else "Xid 79: fell off the bus",
                    }
                    for i in range(gpus)
                ],
            },
        }
    )


def placed_job(
    name: str,
    namespace: str,
    *,
    phase: str = "Running",
    gpus: dict[int, list[int]] | None = None,
    queue: str = "default",
    message: str = "",
    gpu_milli: int = 0,
) -> TrainingJob:
    """A job of ``len(gpus)`` workers on node n1, worker i holding GPUs ``gpus[i]`` (1 CPU, 2 GiB each)."""
    placements = {
        f"{name}-worker-{i}": {"node": "n1", "gpus": held, "gpuMilli": gpu_milli} for i, held in (gpus or {}).items()
    }
    per_worker = len(next(iter(gpus.values()))) if gpus else 1
    resources: dict[str, Any] = {"cpu": 1, "memory": "2Gi"}
    if gpu_milli:
        resources["gpuMilli"] = gpu_milli
    else:
        resources["gpu"] = per_worker
    return TrainingJob.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "type": "generic",
                "scheduling": {"queue": queue},
                "replicas": {
                    "worker": {
                        "count": max(1, len(gpus or {})),
                        "template": {"command": ["true"], "resources": resources},
                    }
                },
            },
            "status": {"phase": phase, "placements": placements, "message": message},
        }
    )


def gpu_queue(name: str = "default", *, gpus: int = 2, cohort: str | None = "lab", limit: int | None = 2) -> Queue:
    spec: dict[str, Any] = {"quota": {"gpu": gpus, "cpu": 8, "memory": "16Gi"}}
    if cohort:
        spec["cohort"] = cohort
        if limit is not None:
            spec["borrowingLimit"] = {"gpu": limit}
    return Queue.model_validate({"metadata": {"name": name}, "spec": spec})


def cluster() -> MemoryBackend:
    """Node n1 (4 GPUs) and n2 (2 GPUs); ml/train on GPUs 0,1 (two workers) and cv/other on GPU 2 of n1;
    ml/waits and cv/waits Queued, ml/done Succeeded (holds nothing); n1's cache holds an ml and a cv Dataset."""
    backend = MemoryBackend()
    for made in (
        node("n1", labels={"dataset.phalanx.dev/images": "sha256-aaa", "zone": "a"}),
        node("n2", gpus=2),
        gpu_queue(),
        placed_job("train", "ml", gpus={0: [0], 1: [1]}),
        placed_job("other", "cv", gpus={0: [2]}),
        placed_job("waits", "ml", phase="Queued", message="needs 2 GPUs on one node; largest free block is 1"),
        placed_job("waits", "cv", phase="Queued", message="cv waits"),
        placed_job("done", "ml", phase="Succeeded", gpus={0: [3]}),
        placed_job("fresh", "ml", phase="Pending"),
    ):
        backend.create(made)  # type: ignore[arg-type]  # a Node too: the memory port keeps any kind
    backend.caches["n1"] = [
        CacheEntryView("sha256-aaa", "ml/images", 3000, "ready", ("ml/train",)),
        CacheEntryView("sha256-bbb", "cv/scans", 5000, "ready", ("cv/other", "cv/more")),
    ]
    backend.caches["n2"] = []
    backend.counters["n1"] = {
        "ml/images": DatasetCounters(hits=2, misses=1, bytes_from_cache=6000, bytes_fetched=3000),
        "cv/scans": DatasetCounters(hits=1, misses=1, bytes_from_cache=5000, bytes_fetched=5000, evictions=1),
        "nlp/text": DatasetCounters(misses=1, bytes_fetched=10, evictions=2),
    }
    backend.pending = "Pending: accepted; the control plane has not looked at it yet."
    return backend


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app(cluster()))


def test_nodes_list_each_node_with_its_gpus_and_who_holds_them(client: TestClient) -> None:
    listed = client.get(f"{API}/nodes")
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert (body["kind"], [item["metadata"]["name"] for item in body["items"]]) == ("NodeList", ["n1", "n2"])
    n1 = body["items"][0]
    gpus = n1["status"]["gpus"]
    assert [(g["index"], g["model"], g["healthy"], g["nvlinks"]) for g in gpus] == [
        (0, "A100", True, {"1": 4}),
        (1, "A100", True, {"0": 4}),
        (2, "A100", True, {"3": 4}),
        (3, "A100", False, {"2": 4}),
    ]
    assert gpus[3]["problem"] == "Xid 79: fell off the bus"
    assert len(n1["status"]["cpus"]) == 8
    # Three replicas hold their room (two of ml/train, one of cv/other); the Succeeded job holds nothing.
    assert n1["allocation"] == {
        "cpuMilli": 3000,
        "memory": 3 * 2 * GIB,
        "gpus": 3,
        "gpuHolders": [
            {"index": 0, "holders": [{"job": "ml/train", "replica": "train-worker-0", "gpuMilli": 1000}]},
            {"index": 1, "holders": [{"job": "ml/train", "replica": "train-worker-1", "gpuMilli": 1000}]},
            {"index": 2, "holders": [{"job": "cv/other", "replica": "other-worker-0", "gpuMilli": 1000}]},
        ],
    }
    assert body["items"][1]["allocation"] == {"cpuMilli": 0, "memory": 0, "gpus": 0, "gpuHolders": []}
    assert client.get(f"{API}/nodes/n1").json() == n1


def test_gpu_shares_list_every_holder_of_the_gpu() -> None:
    backend = MemoryBackend()
    backend.create(node("n1"))  # type: ignore[arg-type]
    for name in ("half-a", "half-b"):
        backend.create(placed_job(name, "ml", gpus={0: [1]}, gpu_milli=500))
    (held,) = TestClient(create_app(backend)).get(f"{API}/nodes/n1").json()["allocation"]["gpuHolders"]
    assert held == {
        "index": 1,
        "holders": [
            {"job": "ml/half-a", "replica": "half-a-worker-0", "gpuMilli": 500},
            {"job": "ml/half-b", "replica": "half-b-worker-0", "gpuMilli": 500},
        ],
    }


def test_a_node_that_is_not_there_is_404_naming_those_there_are(client: TestClient) -> None:
    for path in (f"{API}/nodes/n9", f"{API}/nodes/n9/caches"):
        missing = client.get(path)
        assert missing.status_code == 404, missing.text
        assert missing.json()["message"] == "node 'n9' not found; nodes: n1, n2"
    empty = TestClient(create_app(MemoryBackend())).get(f"{API}/nodes/n1")
    assert empty.json()["message"] == "node 'n1' not found; there are no nodes (the control plane registers them)"


def test_a_nodes_cache_lists_entries_pins_and_counters(client: TestClient) -> None:
    cache = client.get(f"{API}/nodes/n1/caches")
    assert cache.status_code == 200, cache.text
    body = cache.json()
    assert (body["kind"], body["node"], body["capacity"], body["used"]) == ("NodeCache", "n1", GIB, 8000)
    assert body["entries"] == [
        {"key": "sha256-aaa", "dataset": "ml/images", "bytes": 3000, "state": "ready", "pinnedBy": ["ml/train"]},
        {
            "key": "sha256-bbb",
            "dataset": "cv/scans",
            "bytes": 5000,
            "state": "ready",
            "pinnedBy": ["cv/more", "cv/other"],
        },
    ]
    assert body["counters"]["ml/images"] == {
        "hits": 2,
        "misses": 1,
        "bytesFromCache": 6000,
        "bytesFetched": 3000,
        "evictions": 0,
    }
    assert set(body["counters"]) == {"ml/images", "cv/scans", "nlp/text"}
    assert client.get(f"{API}/nodes/n2/caches").json()["entries"] == []


def test_a_queues_usage_is_usage_against_quota_with_what_is_borrowed_and_why_jobs_wait(client: TestClient) -> None:
    usage = client.get(f"{API}/queues/default/usage")
    assert usage.status_code == 200, usage.text
    body = usage.json()
    assert (body["kind"], body["name"], body["cohort"], body["fromStatus"]) == ("QueueUsage", "default", "lab", False)
    # Three GPUs held against a quota of two: one borrowed from the cohort, within the limit of two.
    assert body["resources"]["gpu"] == {
        "unit": "milliGPU",
        "used": 3000,
        "quota": 2000,
        "borrowed": 1000,
        "borrowingLimit": 2000,
    }
    assert body["resources"]["cpu"] == {
        "unit": "millicores",
        "used": 3000,
        "quota": 8000,
        "borrowed": 0,
        "borrowingLimit": None,
    }
    assert body["resources"]["memory"]["used"] == 6 * GIB
    assert (body["admitted"], body["pending"], body["otherAdmitted"], body["otherPending"]) == (2, 3, 0, 0)
    assert [(j["namespace"], j["name"], j["gpuMilli"]) for j in body["admittedJobs"]] == [
        ("ml", "train", 2000),
        ("cv", "other", 1000),
    ]
    assert [(j["namespace"], j["name"], j["phase"], j["waitingFor"]) for j in body["pendingJobs"]] == [
        ("ml", "waits", "Queued", "needs 2 GPUs on one node; largest free block is 1"),
        ("cv", "waits", "Queued", "cv waits"),
        ("ml", "fresh", "Pending", "Pending: accepted; the control plane has not looked at it yet."),
    ]


def test_the_usage_of_a_queue_that_is_not_there_is_404_naming_those_there_are(client: TestClient) -> None:
    missing = client.get(f"{API}/queues/gpus/usage")
    assert missing.status_code == 404, missing.text
    assert missing.json()["message"] == "queue 'gpus' not found; queues: default"


def test_the_views_are_in_the_openapi_document_with_their_schemas(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path, schema in (
        ("/nodes", "NodeListBody"),
        ("/nodes/{name}", "NodeView"),
        ("/nodes/{name}/caches", "NodeCacheBody"),
        ("/queues/{name}/usage", "QueueUsageBody"),
    ):
        answer = spec["paths"][API + path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{schema}"}
    assert "allocation" in spec["components"]["schemas"]["NodeView"]["properties"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/nodes", "/nodes/n1", "/nodes/n1/caches", "/queues/default/usage"])
def test_a_view_takes_only_get(client: TestClient, path: str, method: str) -> None:
    refused = client.request(method, f"{API}{path}")
    assert refused.status_code == 405, refused.text
    assert refused.json()["message"] == f"{method} is not allowed on '{API}{path}'; it is a read-only view: use GET"


def test_a_name_no_node_or_queue_can_have_is_400_naming_the_rule(client: TestClient) -> None:
    long = client.get(f"{API}/nodes/{'n' * 254}/caches")
    assert long.status_code == 400, long.text
    assert long.json()["message"] == "the path's node name is 254 characters; at most 253"
    spaced = client.get(f"{API}/queues/Big Queue/usage")
    assert spaced.status_code == 400, spaced.text
    assert spaced.json()["message"].startswith("the path's name: name 'Big Queue' is not a DNS-1123 label")
