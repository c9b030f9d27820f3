"""Tenancy of the view routes (nodes, node caches, queue usage) and of every namespaced kind's generic routes
(Dataset, Sweep, a Katib Experiment posted as a Sweep, Pipeline, PipelineRun): each route x {no token, an unknown
token, own namespace, other namespace, viewer writing, admin of every namespace} answers 2xx only where
``core.auth`` allows it, and a refused call changes nothing. Then what the views leave out for another tenant:
who holds a GPU, which Dataset a node caches, which jobs wait in a queue (``core.auth.views``).

The callers and the stand-in token store are those of test_rest_tenancy.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from test_rest_tenancy import API, TOKENS, Tokens, bearer
from test_rest_views import cluster

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from support.kind_samples import pipeline_document, pipeline_run_document, sweep_document
from support.memory_backend import MemoryBackend

EXPERIMENT = Path(__file__).resolve().parents[2] / "data" / "katib" / "random.yaml"
ML = f"{API}/namespaces/ml"


def experiment(name: str) -> dict[str, Any]:
    """A Katib Experiment (random search) without a namespace: the path gives it one."""
    document: dict[str, Any] = yaml.safe_load(EXPERIMENT.read_text())
    document["metadata"] = {"name": name}
    return document


def dataset(name: str) -> dict[str, Any]:
    return {
        "kind": "Dataset",
        "metadata": {"name": name},
        "spec": {"source": {"url": "https://u:pw@example.org/d.tar"}},
    }


#: plural -> a document of that kind named NAME, in no namespace (the path gives it).
DOCUMENTS = {
    "datasets": dataset,
    "sweeps": lambda name: {**sweep_document(name, "ml"), "metadata": {"name": name}},
    "experiments": experiment,
    "pipelines": lambda name: {**pipeline_document(name, "ml"), "metadata": {"name": name}},
    "pipelineruns": lambda name: {
        **pipeline_run_document(name, "ml", pipeline="seed"),
        "metadata": {"name": name},
    },
}
#: Where each document is posted: a Katib Experiment goes to the sweeps path, and becomes a Sweep.
PATHS = {"experiments": "sweeps"}


@pytest.fixture(scope="module")
def seeded() -> tuple[TestClient, MemoryBackend, Tokens, dict[Any, Any]]:
    """One app for the module (building one takes half a second), and what its backend holds once seeded."""
    backend, tokens = cluster(), Tokens()
    client = TestClient(create_app(backend, authorize=token_authorizer(tokens)))  # type: ignore[arg-type]
    for plural, make in DOCUMENTS.items():
        for name in ("seed", "doomed"):
            if plural == "experiments":
                name = f"katib-{name}"
            path = f"{ML}/{PATHS.get(plural, plural)}"
            made = client.post(path, json=make(name), headers=bearer("editor-ml"))
            assert made.status_code == 201, made.text
    return client, backend, tokens, copy.deepcopy(backend.objects)


@pytest.fixture
def served(
    seeded: tuple[TestClient, MemoryBackend, Tokens, dict[Any, Any]],
) -> tuple[TestClient, MemoryBackend, Tokens]:
    """The module's app with its objects and tokens as seeded: each test starts from the same state."""
    client, backend, tokens, objects = seeded
    backend.objects = copy.deepcopy(objects)
    tokens.grants = dict(TOKENS)
    return client, backend, tokens


EVERYONE = set(TOKENS)
READERS = {"editor-ml", "viewer-ml", "admin-all"}
WRITERS = {"editor-ml", "admin-all"}
ROUTES: dict[str, tuple[str, str, Any, set[str]]] = {
    "list nodes": ("GET", f"{API}/nodes", None, EVERYONE),
    "read a node": ("GET", f"{API}/nodes/n1", None, EVERYONE),
    "read a node's cache": ("GET", f"{API}/nodes/n1/caches", None, EVERYONE),
    "read a queue's usage": ("GET", f"{API}/queues/default/usage", None, EVERYONE),
}
for plural in DOCUMENTS:
    path = f"{ML}/{PATHS.get(plural, plural)}"
    seed, doomed, new = (f"katib-{n}" if plural == "experiments" else n for n in ("seed", "doomed", "new"))
    ROUTES |= {
        f"list {plural}": ("GET", path, None, READERS),
        f"get {plural}": ("GET", f"{path}/{seed}", None, READERS),
        f"create {plural}": ("POST", path, DOCUMENTS[plural](new), WRITERS),
        f"delete {plural}": ("DELETE", f"{path}/{doomed}", None, WRITERS),
        # Every token that reads lists "every namespace" as the namespaces it reaches (checked below).
        f"list {plural} of every namespace": ("GET", f"{API}/{PATHS.get(plural, plural)}", None, set(TOKENS)),
    }
CALLERS = [None, "not-a-token", *TOKENS]


def stored(backend: MemoryBackend) -> list[tuple[str, str, str]]:
    return sorted(backend.objects)


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_route_answers_2xx_only_where_the_token_allows_it(
    served: tuple[TestClient, MemoryBackend, Tokens], route: str, caller: str | None
) -> None:
    client, backend, _ = served
    method, path, body, allowed = ROUTES[route]
    before = stored(backend)
    response = client.request(method, path, json=body, headers=bearer(caller))
    if caller in allowed:
        assert 200 <= response.status_code < 300, response.text
        if "datasets" in route and method != "DELETE":
            assert "pw@" not in response.text  # masked, as the CLI does
            assert "u:***@example.org" in response.text or response.json().get("items") == []  # (cv has none)
        if route.endswith("of every namespace") and caller is not None:
            reach = TOKENS[caller].namespaces
            shown = {item["metadata"]["namespace"] for item in response.json()["items"]}
            assert "*" in reach or shown <= reach, (caller, shown)
        return
    expected = 401 if caller not in TOKENS else 403
    assert response.status_code == expected, response.text
    message = response.json()["message"]
    if caller is None:
        assert "send 'Authorization: Bearer <token>'" in message
    elif caller in TOKENS:
        assert caller in message  # the sentence names the token and what it reaches
    assert stored(backend) == before


def test_a_revoked_token_is_refused_the_views_from_the_next_request(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, _, tokens = served
    assert client.get(f"{API}/nodes", headers=bearer("viewer-ml")).status_code == 200
    del tokens.grants["viewer-ml"]
    for path in (f"{API}/nodes", f"{API}/nodes/n1/caches", f"{API}/queues/default/usage"):
        assert client.get(path, headers=bearer("viewer-ml")).status_code == 401


def test_a_katib_experiment_posted_to_sweeps_is_stored_as_a_sweep(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, _, _ = served
    sweep = client.get(f"{ML}/sweeps/katib-seed", headers=bearer("viewer-ml")).json()
    assert sweep["kind"] == "Sweep"
    assert sweep["metadata"]["annotations"]["phalanx.dev/converted-from"] == "Experiment.kubeflow.org/v1beta1"
    elsewhere = client.post(f"{ML}/pipelines", json=experiment("lost"), headers=bearer("editor-ml"))
    assert elsewhere.status_code == 422, elsewhere.text
    assert elsewhere.json()["details"]["causes"][0]["field"] == "kind"


def gpu_holders(client: TestClient, caller: str) -> dict[int, list[dict[str, Any]]]:
    n1 = client.get(f"{API}/nodes/n1", headers=bearer(caller)).json()
    return {gpu["index"]: gpu["holders"] for gpu in n1["allocation"]["gpuHolders"]}


def test_a_node_names_only_the_callers_jobs_and_shows_the_others_in_use(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, _, _ = served
    mine = {"job": "ml/train", "replica": "train-worker-0", "gpuMilli": 1000}
    theirs = {"job": "cv/other", "replica": "other-worker-0", "gpuMilli": 1000}
    in_use = {"job": "in use", "gpuMilli": 1000}
    assert (gpu_holders(client, "viewer-ml")[0], gpu_holders(client, "viewer-ml")[2]) == ([mine], [in_use])
    assert (gpu_holders(client, "editor-cv")[0], gpu_holders(client, "editor-cv")[2]) == ([in_use], [theirs])
    assert (gpu_holders(client, "admin-all")[0], gpu_holders(client, "admin-all")[2]) == ([mine], [theirs])
    listed = client.get(f"{API}/nodes", headers=bearer("editor-cv")).text
    assert "ml/train" not in listed and "train-worker" not in listed
    # The totals are the node's, whoever asks: what is free is the same for everyone.
    allocations = {c: client.get(f"{API}/nodes/n1", headers=bearer(c)).json()["allocation"] for c in TOKENS}
    assert {(a["gpus"], a["cpuMilli"]) for a in allocations.values()} == {(3, 3000)}


def test_a_nodes_dataset_labels_are_shown_only_to_a_caller_of_every_namespace(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, _, _ = served

    def labels(caller: str) -> dict[str, str]:
        labelled: dict[str, str] = client.get(f"{API}/nodes/n1", headers=bearer(caller)).json()["metadata"]["labels"]
        return labelled

    assert labels("viewer-ml") == {"zone": "a"}  # the label names a Dataset, not its namespace
    assert labels("admin-all") == {"zone": "a", "dataset.phalanx.dev/images": "sha256-aaa"}


def test_a_nodes_cache_hides_other_tenants_datasets_and_jobs(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, _, _ = served
    cache = client.get(f"{API}/nodes/n1/caches", headers=bearer("viewer-ml")).json()
    assert [(e["dataset"], e["pinnedBy"], e["bytes"]) for e in cache["entries"]] == [
        ("ml/images", ["ml/train"], 3000),
        ("hidden", ["in use"], 5000),
    ]
    # cv/scans and nlp/text are summed, unnamed.
    assert cache["counters"]["hidden"] == {
        "hits": 1,
        "misses": 2,
        "bytesFromCache": 5000,
        "bytesFetched": 5010,
        "evictions": 3,
    }
    assert set(cache["counters"]) == {"ml/images", "hidden"}
    assert cache["used"] == 8000  # the cache's own numbers are the node's
    everything = client.get(f"{API}/nodes/n1/caches", headers=bearer("admin-all")).json()
    assert set(everything["counters"]) == {"ml/images", "cv/scans", "nlp/text"}


def test_a_queues_usage_names_only_the_callers_jobs_and_counts_the_others(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, _, _ = served
    usage = client.get(f"{API}/queues/default/usage", headers=bearer("viewer-ml")).json()
    assert [j["name"] for j in usage["admittedJobs"]] == ["train"]
    assert [(j["namespace"], j["name"]) for j in usage["pendingJobs"]] == [("ml", "waits"), ("ml", "fresh")]
    assert (usage["admitted"], usage["pending"], usage["otherAdmitted"], usage["otherPending"]) == (2, 3, 1, 1)
    assert usage["resources"]["gpu"]["used"] == 3000  # the queue's usage is everyone's
    assert "cv waits" not in client.get(f"{API}/queues/default/usage", headers=bearer("viewer-ml")).text
    admin = client.get(f"{API}/queues/default/usage", headers=bearer("admin-all")).json()
    assert (admin["otherAdmitted"], admin["otherPending"], len(admin["pendingJobs"])) == (0, 0, 3)
