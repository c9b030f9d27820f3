"""Lists of every namespace (``GET PREFIX/{plural}``) by a token that reaches a few: only its namespaces' objects,
for every namespaced kind, paged, with a selector; the rest of the tenancy matrix for those routes.

Objects of three namespaces (ml, cv, nlp) are stored directly in a ``MemoryBackend``; the token store is the
stand-in of ``test_rest_tenancy``.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import TOKENS, Tokens, bearer

from phalanx.core.auth import Grant, Role
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.kinds import PREFIX, RESOURCES
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.model.pipelines import Pipeline, PipelineRun
from phalanx.model.sweeps import Sweep
from support.kind_samples import pipeline_document, pipeline_run_document, sweep_document
from support.memory_backend import MemoryBackend

NAMESPACES = ("cv", "ml", "nlp")
GRANTS = {
    **TOKENS,
    "viewer-ml-nlp": Grant(Role.VIEWER, frozenset({"ml", "nlp"}), "viewer-ml-nlp"),
    "editor-empty": Grant(Role.EDITOR, frozenset({"audio"}), "editor-empty"),
}


def job_document(name: str, namespace: str) -> dict[str, Any]:
    template = {"command": ["true"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": namespace}},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def dataset_document(name: str, namespace: str) -> dict[str, Any]:
    return {
        "kind": "Dataset",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"url": "file:///data/images"}},
    }


SAMPLES = {
    TrainingJob: job_document,
    Dataset: dataset_document,
    Sweep: sweep_document,
    Pipeline: pipeline_document,
    PipelineRun: pipeline_run_document,
}
PLURALS = {resource.model: resource.plural for resource in RESOURCES}


@pytest.fixture
def served() -> tuple[TestClient, Tokens]:
    backend, tokens = MemoryBackend(), Tokens()
    tokens.grants = dict(GRANTS)
    for model, sample in SAMPLES.items():
        for namespace in NAMESPACES:
            for index in range(3):
                backend.create(model.model_validate(sample(f"{namespace}-{index}", namespace)))
    return TestClient(create_app(backend, authorize=token_authorizer(tokens))), tokens  # type: ignore[arg-type]


def names(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [f"{item['metadata']['namespace']}/{item['metadata']['name']}" for item in response.json()["items"]]


def every(*namespaces: str) -> list[str]:
    return [f"{namespace}/{namespace}-{index}" for namespace in namespaces for index in range(3)]


@pytest.mark.parametrize("model", list(SAMPLES), ids=[model.__name__ for model in SAMPLES])
@pytest.mark.parametrize(
    ("caller", "seen"),
    [
        ("editor-ml", ("ml",)),
        ("viewer-ml", ("ml",)),
        ("editor-cv", ("cv",)),
        ("viewer-ml-nlp", ("ml", "nlp")),
        ("editor-empty", ()),
        ("admin-all", NAMESPACES),
    ],
)
def test_a_list_of_every_namespace_shows_the_namespaces_the_token_reaches(
    served: tuple[TestClient, Tokens], model: type, caller: str, seen: tuple[str, ...]
) -> None:
    client, _ = served
    assert names(client.get(f"{PREFIX}/{PLURALS[model]}", headers=bearer(caller))) == every(*seen)


@pytest.mark.parametrize("caller", [None, "not-a-token"])
def test_a_list_of_every_namespace_without_a_valid_token_is_401(
    served: tuple[TestClient, Tokens], caller: str | None
) -> None:
    client, _ = served
    response = client.get(f"{PREFIX}/trainingjobs", headers=bearer(caller))
    assert response.status_code == 401, response.text
    assert response.json()["kind"] == "Status"


def test_a_revoked_token_lists_nothing(served: tuple[TestClient, Tokens]) -> None:
    client, tokens = served
    assert names(client.get(f"{PREFIX}/trainingjobs", headers=bearer("viewer-ml"))) == every("ml")
    del tokens.grants["viewer-ml"]
    assert client.get(f"{PREFIX}/trainingjobs", headers=bearer("viewer-ml")).status_code == 401


def test_pages_of_every_namespace_stay_in_the_tokens_namespaces(served: tuple[TestClient, Tokens]) -> None:
    client, _ = served
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    remaining: list[int] = []
    while True:
        body = client.get(f"{PREFIX}/trainingjobs", params=params, headers=bearer("viewer-ml-nlp")).json()
        seen += [f"{item['metadata']['namespace']}/{item['metadata']['name']}" for item in body["items"]]
        if "continue" not in body["metadata"]:
            break
        remaining.append(body["metadata"]["remainingItemCount"])
        params = {"limit": 2, "continue": body["metadata"]["continue"]}
    assert seen == every("ml", "nlp")
    assert remaining == [4, 2]


def test_a_selector_narrows_the_tokens_namespaces_further(served: tuple[TestClient, Tokens]) -> None:
    client, _ = served
    mine = client.get(f"{PREFIX}/trainingjobs", params={"labelSelector": "team=nlp"}, headers=bearer("viewer-ml-nlp"))
    assert names(mine) == every("nlp")
    theirs = client.get(f"{PREFIX}/trainingjobs", params={"labelSelector": "team=cv"}, headers=bearer("viewer-ml-nlp"))
    assert names(theirs) == []


def test_writing_across_namespaces_is_still_refused(served: tuple[TestClient, Tokens]) -> None:
    # There is no write of every namespace; a namespaced path of another namespace stays 403.
    client, _ = served
    refused = client.get(f"{PREFIX}/namespaces/cv/trainingjobs", headers=bearer("viewer-ml-nlp"))
    assert refused.status_code == 403, refused.text
    assert "reaches namespaces ml, nlp only" in refused.json()["message"]
