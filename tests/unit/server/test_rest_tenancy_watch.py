"""Tenancy of watches and field-selected lists: each x {own namespace, other namespace, no token, revoked token,
viewer, admin of every namespace} answers 2xx only where ``core.auth`` allows it, and a watch never shows another
tenant's objects (nor their deletions).

The tokens, the stand-in token store and the seeded job are test_rest_tenancy.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from tests.unit.server.test_rest_tenancy import API, ML, TOKENS, Tokens, bearer, job, served  # noqa: F401  # served: a fixture
from tests.unit.server.test_rest_watch import events

from phalanx.core.auth import ALL_NAMESPACES
from phalanx.entrypoints.server.access import Access, Refusal
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from support.memory_backend import MemoryBackend

ROUTES = {
    "watch a namespace": f"{ML}?watch=true&timeoutSeconds=1",
    "watch every namespace": f"{API}/trainingjobs?watch=true&timeoutSeconds=1",
    "watch queues": f"{API}/queues?watch=true&timeoutSeconds=1",
    "list by field": f"{ML}?fieldSelector=status.phase!=Running",
}
ALLOWED = {
    "watch a namespace": {"editor-ml", "viewer-ml", "admin-all"},
    "watch every namespace": set(TOKENS),  # each token watches the namespaces it reaches (a Scope)
    "watch queues": {"editor-ml", "viewer-ml", "editor-cv", "admin-all"},
    "list by field": {"editor-ml", "viewer-ml", "admin-all"},
}
CALLERS = [None, "not-a-token", *TOKENS]


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_watch_answers_2xx_only_where_the_token_allows_it(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811  # the fixture imported above
    route: str,
    caller: str | None,
) -> None:
    client, _, _ = served
    response = client.get(ROUTES[route], headers=bearer(caller))
    if caller in ALLOWED[route]:
        assert response.status_code == 200, response.text
        if "watch=true" in ROUTES[route]:
            assert response.headers["content-type"].startswith("text/event-stream")
        if route == "watch every namespace" and caller is not None and "*" not in TOKENS[caller].namespaces:
            shown = {data["metadata"]["namespace"] for _, kind, data in events(response.text) if kind != "BOOKMARK"}
            assert shown <= TOKENS[caller].namespaces, (caller, shown)
        return
    assert response.status_code == (403 if caller in TOKENS else 401), response.text
    assert response.json()["kind"] == "Status"
    if caller in TOKENS:
        assert caller in response.json()["message"]  # the sentence names the token and what it reaches
    assert "data:" not in response.text


def test_a_revoked_token_cannot_watch_from_the_next_request(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811
) -> None:
    client, _, tokens = served
    assert client.get(ROUTES["watch a namespace"], headers=bearer("viewer-ml")).status_code == 200
    del tokens.grants["viewer-ml"]
    refused = client.get(ROUTES["watch a namespace"], headers=bearer("viewer-ml"))
    assert refused.status_code == 401, refused.text


def test_a_watcher_of_one_namespace_sees_nothing_of_another(
    served: tuple[TestClient, MemoryBackend, Tokens],  # noqa: F811
) -> None:
    client, _, _ = served  # "seed" is in ml
    made = client.post(f"{API}/namespaces/cv/trainingjobs", json=job("theirs"), headers=bearer("editor-cv"))
    assert made.status_code == 201
    deleted = client.delete(f"{ML}/seed", headers=bearer("editor-ml"))
    assert deleted.status_code == 200
    mine = client.get(
        f"{API}/namespaces/cv/trainingjobs?watch=true&resourceVersion=0&timeoutSeconds=1", headers=bearer("editor-cv")
    )
    assert [(kind, data["metadata"]["name"]) for _, kind, data in events(mine.text)] == [("ADDED", "theirs")]
    resumed = client.get(
        f"{API}/namespaces/cv/trainingjobs?watch=true&resourceVersion=1&timeoutSeconds=1", headers=bearer("editor-cv")
    )
    assert [data["metadata"]["name"] for _, _, data in events(resumed.text)] == ["theirs"]  # not ml's deletion
    everything = client.get(
        f"{API}/trainingjobs?watch=true&resourceVersion=1&timeoutSeconds=1", headers=bearer("admin-all")
    )
    assert {data["metadata"]["namespace"] for _, _, data in events(everything.text)} == {"ml", "cv"}


@dataclass(frozen=True)
class Narrowed:
    """What a hook answers to serve a read of every namespace over a few (the token hook's scope)."""

    namespaces: frozenset[str]


def test_a_watch_of_every_namespace_narrowed_to_a_tokens_namespaces_shows_only_those() -> None:
    backend, tokens = MemoryBackend(), Tokens()
    decide = token_authorizer(tokens)  # type: ignore[arg-type]  # the stand-in store

    def narrowing(access: Access) -> Refusal | None:
        if access.namespace is None and access.token == "editor-ml":
            return Narrowed(frozenset({"ml"}))  # type: ignore[return-value]  # the scope a hook may answer
        return decide(access)

    client = TestClient(create_app(backend, authorize=narrowing))
    for namespace, token in (("ml", "editor-ml"), ("cv", "editor-cv")):
        made = client.post(f"{API}/namespaces/{namespace}/trainingjobs", json=job(namespace), headers=bearer(token))
        assert made.status_code == 201
    client.delete(f"{API}/namespaces/cv/trainingjobs/cv", headers=bearer("editor-cv"))
    every = f"{API}/trainingjobs?watch=true&timeoutSeconds=1"
    listed = client.get(every, headers=bearer("editor-ml"))
    assert [data["metadata"]["namespace"] for _, _, data in events(listed.text)] == ["ml"]
    resumed = client.get(f"{every}&resourceVersion=0", headers=bearer("editor-ml"))
    assert [data["metadata"]["namespace"] for _, _, data in events(resumed.text)] == ["ml"]
    changes = client.get(f"{every}&resourceVersion=1", headers=bearer("admin-all"))
    assert [(kind, data["metadata"]["namespace"]) for _, kind, data in events(changes.text)] == [
        ("ADDED", "cv"),
        ("DELETED", "cv"),
    ]
    assert ALL_NAMESPACES in TOKENS["admin-all"].namespaces
    client.app.state.stop_watches()  # type: ignore[attr-defined]
