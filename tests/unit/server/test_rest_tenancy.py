"""Tenancy through the REST API: every route x {own namespace, other namespace, no token, revoked token, viewer
writing, admin of every namespace} answers 2xx only where ``core.auth`` allows it, and a refused call changes nothing.

The token store is a stand-in here (a dict from token to grant: ``authenticate`` is all the hook calls); the real
store behind a real ``phalanx server`` is tests/integration/runtime/test_rest_server_e2e.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.core.auth import Grant, Role
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.jobs import TrainingJob
from support.memory_backend import MemoryBackend

API = "/apis/phalanx.dev/v1alpha1"
TOKENS = {
    "editor-ml": Grant(Role.EDITOR, frozenset({"ml"}), "editor-ml"),
    "viewer-ml": Grant(Role.VIEWER, frozenset({"ml"}), "viewer-ml"),
    "editor-cv": Grant(Role.EDITOR, frozenset({"cv"}), "editor-cv"),
    "admin-all": Grant(Role.ADMIN, frozenset({"*"}), "admin-all"),
}


class Tokens:
    """``authenticate`` as the token store does it: a grant, or None for an unknown or revoked token."""

    def __init__(self) -> None:
        self.grants = dict(TOKENS)

    def authenticate(self, token: str) -> Grant | None:
        return self.grants.get(token)


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}},
    }


def queue(name: str) -> dict[str, Any]:
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": {}}


@pytest.fixture
def served() -> tuple[TestClient, MemoryBackend, Tokens]:
    backend, tokens = MemoryBackend(), Tokens()
    client = TestClient(create_app(backend, authorize=token_authorizer(tokens)))  # type: ignore[arg-type]
    seeded = client.post(f"{API}/namespaces/ml/trainingjobs", json=job("seed"), headers=bearer("editor-ml"))
    assert seeded.status_code == 201, seeded.text
    return client, backend, tokens


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


ML = f"{API}/namespaces/ml/trainingjobs"
ROUTES = {
    "list": ("GET", ML, None),
    "get": ("GET", f"{ML}/seed", None),
    "create": ("POST", ML, job("new")),
    "delete": ("DELETE", f"{ML}/seed", None),
    "list all namespaces": ("GET", f"{API}/trainingjobs", None),
    "read a queue": ("GET", f"{API}/queues", None),
    "create a queue": ("POST", f"{API}/queues", queue("gpus")),
}
#: Which tokens each route serves (everything else: 401 without a valid token, else 403).
ALLOWED = {
    "list": {"editor-ml", "viewer-ml", "admin-all"},
    "get": {"editor-ml", "viewer-ml", "admin-all"},
    "create": {"editor-ml", "admin-all"},
    "delete": {"editor-ml", "admin-all"},
    "list all namespaces": {"editor-ml", "viewer-ml", "editor-cv", "admin-all"},  # each sees its namespaces
    "read a queue": {"editor-ml", "viewer-ml", "editor-cv", "admin-all"},
    "create a queue": {"admin-all"},
}
CALLERS = [None, "not-a-token", *TOKENS]


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_route_answers_2xx_only_where_the_token_allows_it(
    served: tuple[TestClient, MemoryBackend, Tokens], route: str, caller: str | None
) -> None:
    client, backend, _ = served
    method, path, body = ROUTES[route]
    before = sorted(job.metadata.name for job in backend.list(TrainingJob))
    response = client.request(method, path, json=body, headers=bearer(caller))
    if caller in ALLOWED[route]:
        assert 200 <= response.status_code < 300, response.text
        return
    expected = 401 if caller not in TOKENS else 403
    assert response.status_code == expected, response.text
    message = response.json()["message"]
    if caller is None:
        assert "send 'Authorization: Bearer <token>'" in message
    elif caller in TOKENS:
        assert caller in message  # the sentence names the token and what it reaches
    assert sorted(job.metadata.name for job in backend.list(TrainingJob)) == before


def test_a_revoked_token_is_refused_from_the_next_request(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, _, tokens = served
    assert client.get(f"{ML}/seed", headers=bearer("viewer-ml")).status_code == 200
    del tokens.grants["viewer-ml"]
    refused = client.get(f"{ML}/seed", headers=bearer("viewer-ml"))
    assert refused.status_code == 401, refused.text


def test_a_viewer_writing_is_told_it_needs_an_editor(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, _, _ = served
    refused = client.delete(f"{ML}/seed", headers=bearer("viewer-ml"))
    assert refused.json()["message"] == (
        "the viewer token viewer-ml for namespaces ml cannot delete trainingjobs in ml: needs editor"
    )
