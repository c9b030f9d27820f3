"""Who may read a component's /metrics on a cluster: ``metrics_access.reviewed_by`` over the two reviews.

The API server here is a stand-in answering TokenReview from a table of tokens and SubjectAccessReview from the
set of users RBAC lets ``get /metrics``; it records what it was asked. The real kube-apiserver with a real
ClusterRole and ServiceAccounts is tests/e2e/test_component_metrics_kubernetes.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import KubeApiError
from phalanx.adapters.kubernetes.manifests import METRICS_READER_ROLE
from phalanx.adapters.kubernetes.reviews import KubeReviewer
from phalanx.entrypoints.kubernetes.common import ComponentOptions, metrics_guard
from phalanx.entrypoints.kubernetes.metrics_access import NO_TOKEN, UNKNOWN_TOKEN, reviewed_by

TOKENS = {"prom-token": "system:serviceaccount:monitoring:prometheus", "tenant-token": "system:serviceaccount:ml:a"}
READERS = {"system:serviceaccount:monitoring:prometheus"}


class Cluster:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.unreachable = False

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert method == "POST"
        self.sent.append((path, body))
        if self.unreachable:
            raise KubeApiError(0, "Unreachable", f"POST {path}: connection refused")
        spec = body["spec"]
        if path.endswith("/tokenreviews"):
            user = TOKENS.get(spec["token"])
            if user is None:
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": user}}}
        assert "resourceAttributes" not in spec
        return {"status": {"allowed": spec["user"] in READERS and spec["nonResourceAttributes"] == WANTED}}


WANTED = {"path": "/metrics", "verb": "get"}


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def test_only_an_account_rbac_lets_get_metrics_is_served(cluster: Cluster) -> None:
    check = reviewed_by(KubeReviewer(cluster, ttl=0))  # type: ignore[arg-type]  # request is all it calls
    assert check("Bearer prom-token") is None
    assert check(None) == (401, NO_TOKEN)
    assert check("Basic cHJvbTpwcm9t") == (401, NO_TOKEN)
    assert check("Bearer stolen") == (401, UNKNOWN_TOKEN)
    status, message = check("Bearer tenant-token") or (0, "")
    assert status == 403
    assert message.startswith("system:serviceaccount:ml:a cannot get /metrics: Kubernetes RBAC does not allow it")
    assert f"--clusterrole {METRICS_READER_ROLE} --serviceaccount NAMESPACE:ACCOUNT" in message
    # The access review asks exactly the non-resource URL, as the API server's own /metrics is asked.
    asked = [body["spec"] for path, body in cluster.sent if path.endswith("/subjectaccessreviews")]
    assert {spec["user"] for spec in asked} == set(TOKENS.values())
    assert all(spec["nonResourceAttributes"] == WANTED for spec in asked)


def test_an_api_server_that_cannot_be_asked_serves_nothing(cluster: Cluster) -> None:
    cluster.unreachable = True
    status, message = reviewed_by(KubeReviewer(cluster, ttl=0))("Bearer prom-token") or (0, "")  # type: ignore[arg-type]
    assert status == 503
    assert "could not answer a TokenReview" in message


def test_answers_are_cached_so_a_scrape_every_interval_costs_two_reviews_at_most(cluster: Cluster) -> None:
    check = reviewed_by(KubeReviewer(cluster, ttl=60))  # type: ignore[arg-type]
    for _ in range(5):
        assert check("Bearer prom-token") is None
    assert len(cluster.sent) == 2


def test_access_open_serves_everyone_and_rbac_is_the_default(cluster: Cluster) -> None:
    options = ComponentOptions(
        kubeconfig=None, context=None, namespace="ns", identity="x", health_port=0, log_level="INFO"
    )
    assert options.metrics_access == "rbac"
    guard = metrics_guard(options, cluster)  # type: ignore[arg-type]
    assert guard is not None and guard(None) == (401, NO_TOKEN)
    opened = ComponentOptions(**{**options.__dict__, "metrics_access": "open"})
    assert metrics_guard(opened, cluster) is None  # type: ignore[arg-type]
