"""``GET /metrics`` through the REST app: who may read it, and the API latency series it keeps.

Its labels name every namespace and queue, so only a token for every namespace (any role) reads it; the matrix
is test_rest_tenancy.py's callers plus a viewer of every namespace. The latency series are keyed by the route's
template, never the raw path, and count exactly the requests made.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from test_rest_tenancy import API, ML, TOKENS, Tokens, bearer, job

from phalanx.core.auth import Grant, Role
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from support.memory_backend import MemoryBackend

VIEWER_ALL = Grant(Role.VIEWER, frozenset({"*"}), "viewer-all")
CALLERS = [None, "not-a-token", *TOKENS, "viewer-all"]
ALLOWED = {"admin-all", "viewer-all"}


@pytest.fixture
def client() -> TestClient:
    tokens = Tokens()
    tokens.grants["viewer-all"] = VIEWER_ALL
    return TestClient(create_app(MemoryBackend(), authorize=token_authorizer(tokens)))  # type: ignore[arg-type]


def series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
def test_metrics_need_a_token_for_every_namespace(client: TestClient, caller: str | None) -> None:
    response = client.get("/metrics", headers=bearer(caller))
    if caller in ALLOWED:
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        assert "# TYPE phalanx_jobs gauge" in response.text
        return
    expected = 401 if caller not in TOKENS else 403
    assert response.status_code == expected, response.text
    message = response.json()["message"]
    assert "phalanx_" not in response.text  # nothing of the metrics leaks into a refusal
    if caller in TOKENS:
        assert message.startswith("/metrics names the jobs and queues of every namespace")
        assert "--namespace '*'" in message and caller in message  # the fix, and what this token reaches


def test_without_authorize_metrics_are_served_to_anyone() -> None:
    open_client = TestClient(create_app(MemoryBackend()))  # type: ignore[arg-type]
    assert open_client.get("/metrics").status_code == 200


def test_request_latency_is_counted_by_route_template_and_code(client: TestClient) -> None:
    admin = bearer("admin-all")
    assert client.post(ML, json=job("one"), headers=admin).status_code == 201
    for name in ("one", "missing-a", "missing-b"):
        client.get(f"{ML}/{name}", headers=admin)
    assert client.get(f"{API}/no-such-plural", headers=admin).status_code == 404
    assert client.get("/nowhere").status_code == 404
    text = client.get("/metrics", headers=admin).text
    counts = series(text, "phalanx_api_request_seconds_count")
    item = f"{API}/namespaces/{{namespace}}/trainingjobs/{{name}}"
    collection = f"{API}/namespaces/{{namespace}}/trainingjobs"

    def key(method: str, route: str, code: str) -> tuple[tuple[str, str], ...]:
        return (("code", code), ("method", method), ("route", route))

    assert counts[key("POST", collection, "201")] == 1.0
    assert counts[key("GET", item, "200")] == 1.0
    assert counts[key("GET", item, "404")] == 2.0  # two names, one series: the template, not the raw path
    assert counts[key("GET", f"{API}/{{rest:path}}", "404")] == 1.0
    assert counts[key("GET", "unmatched", "404")] == 1.0
    assert not any("missing-a" in route for labels in counts for _, route in labels)
    assert series(text, "phalanx_jobs") == {(("namespace", "ml"), ("phase", "Pending"), ("queue", "default")): 1.0}
