"""The REST API on a cluster: TokenReview and SubjectAccessReview decide, through ``rbac_authorizer``.

The API server here is a stand-in that answers the two reviews from a table (a token -> a user; a user -> the
(verb, resource, subresource, namespace) RBAC would allow), recording what it was asked. What it shows: each
route asks the attributes ``core.auth.rbac`` maps it to, 2xx only where the table allows (the tenancy matrix),
the answers are cached for a while and bounded, and a review that fails answers 503, never the request. The real
kube-apiserver with real ServiceAccounts and Roles is tests/e2e/test_server_rbac_kubernetes.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import API, bearer, job, queue

from phalanx.adapters.kubernetes.api import KubeApiError
from phalanx.adapters.kubernetes.reviews import Identity, KubeReviewer
from phalanx.core.auth import Verb
from phalanx.core.auth.rbac import NO_TOKENS_ON_A_CLUSTER, ResourceAttributes, review_attributes
from phalanx.entrypoints.server.access import Access
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.rbac import NO_TOKEN, UNKNOWN_TOKEN, rbac_authorizer
from phalanx.model.jobs import TrainingJob
from support.memory_backend import MemoryBackend

USERS = {
    "ml-editor": "system:serviceaccount:ml:editor",
    "ml-viewer": "system:serviceaccount:ml:viewer",
    "cv-editor": "system:serviceaccount:cv:editor",
    "cluster-admin": "admin",
}
READ = {"get", "list", "watch"}
WRITE = {"create", "delete", "update"}
#: What RBAC allows each user: (verb, resource, namespace); "" is every namespace (a ClusterRole).
ALLOWS: dict[str, set[tuple[str, str, str]]] = {
    USERS["ml-editor"]: {(v, "trainingjobs", "ml") for v in READ | WRITE},
    USERS["ml-viewer"]: {(v, "trainingjobs", "ml") for v in READ},
    USERS["cv-editor"]: {(v, "trainingjobs", "cv") for v in READ | WRITE},
    USERS["cluster-admin"]: {(v, r, "") for v in READ | WRITE for r in ("trainingjobs", "queues")},
}


class Cluster:
    """The API server's two reviews, from the tables above; every request it was sent is kept."""

    def __init__(self) -> None:
        self.tokens = dict(USERS)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.unreachable = False

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert method == "POST"
        self.sent.append((path, body))
        if self.unreachable:
            raise KubeApiError(0, "Unreachable", f"POST {path}: connection refused")
        spec = body["spec"]
        if path.endswith("/tokenreviews"):
            user = self.tokens.get(spec["token"])
            if user is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": ["system:authenticated"]}}}
        assert path.endswith("/subjectaccessreviews")
        attributes = spec["resourceAttributes"]
        assert attributes["group"] == "phalanx.dev"
        wanted = (attributes["verb"], attributes["resource"], attributes.get("namespace", ""))
        if attributes["resource"] == "queues" and attributes["verb"] in READ:
            return {"status": {"allowed": True}}  # as a ClusterRole every authenticated user is bound to
        grants = ALLOWS.get(spec["user"], set())
        allowed = "subresource" not in attributes and (wanted in grants or (*wanted[:2], "") in grants)
        return {"status": {"allowed": allowed}}

    def reviews(self, kind: str) -> int:
        return sum(path.endswith(kind) for path, _ in self.sent)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def served(cluster: Cluster) -> tuple[TestClient, MemoryBackend]:
    backend = MemoryBackend()
    authorize = rbac_authorizer(KubeReviewer(cluster, ttl=0))  # type: ignore[arg-type]  # request is all it calls
    client = TestClient(create_app(backend, authorize=authorize))  # type: ignore[arg-type]
    seeded = client.post(f"{API}/namespaces/ml/trainingjobs", json=job("seed"), headers=bearer("ml-editor"))
    assert seeded.status_code == 201, seeded.text
    return client, backend


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
ALLOWED = {
    "list": {"ml-editor", "ml-viewer", "cluster-admin"},
    "get": {"ml-editor", "ml-viewer", "cluster-admin"},
    "create": {"ml-editor", "cluster-admin"},
    "delete": {"ml-editor", "cluster-admin"},
    "list all namespaces": {"cluster-admin"},
    "read a queue": set(USERS),
    "create a queue": {"cluster-admin"},
}
CALLERS = [None, "not-a-token", *USERS]


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_route_answers_2xx_only_where_rbac_allows_it(
    served: tuple[TestClient, MemoryBackend], route: str, caller: str | None
) -> None:
    client, backend = served
    method, path, body = ROUTES[route]
    before = sorted(j.metadata.name for j in backend.list(TrainingJob))
    response = client.request(method, path, json=body, headers=bearer(caller))
    if caller in ALLOWED[route]:
        assert 200 <= response.status_code < 300, response.text
        return
    assert response.status_code == (403 if caller in USERS else 401), response.text
    message = response.json()["message"]
    if caller is None:
        assert message == NO_TOKEN
    elif caller not in USERS:
        assert message == UNKNOWN_TOKEN
    else:
        assert message.startswith(f"{USERS[caller]} cannot ")
        assert "Kubernetes RBAC does not allow it" in message
    assert sorted(j.metadata.name for j in backend.list(TrainingJob)) == before


def test_a_refusal_names_the_permission_that_was_missing(served: tuple[TestClient, MemoryBackend]) -> None:
    client, _ = served
    refused = client.delete(f"{ML}/seed", headers=bearer("ml-viewer"))
    assert refused.json()["message"] == (
        "system:serviceaccount:ml:viewer cannot delete trainingjobs.phalanx.dev in namespace ml: Kubernetes RBAC "
        "does not allow it; a Role or ClusterRole granting it, bound to this user or one of their groups, would"
    )


def test_the_review_asks_for_the_caller_not_the_server(
    served: tuple[TestClient, MemoryBackend], cluster: Cluster
) -> None:
    client, _ = served
    client.get(f"{ML}/seed", headers=bearer("ml-viewer"))
    path, body = cluster.sent[-1]
    assert path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    assert body["spec"] == {
        "user": "system:serviceaccount:ml:viewer",
        "groups": ["system:authenticated"],
        "resourceAttributes": {
            "verb": "get",
            "group": "phalanx.dev",
            "resource": "trainingjobs",
            "namespace": "ml",
            "name": "seed",
        },
    }


class Ticking:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_answers_are_cached_for_the_ttl_then_asked_again(cluster: Cluster) -> None:
    clock = Ticking()
    reviewer = KubeReviewer(cluster, ttl=10, clock=clock)  # type: ignore[arg-type]
    authorize = rbac_authorizer(reviewer)
    ask = Access("get", "TrainingJob", "ml", "seed", "ml-viewer")
    for _ in range(5):
        assert authorize(ask) is None
    assert (cluster.reviews("tokenreviews"), cluster.reviews("subjectaccessreviews")) == (1, 1)
    del cluster.tokens["ml-viewer"]  # the ServiceAccount is deleted: its token stops working after the ttl
    clock.now = 9.9
    assert authorize(ask) is None
    clock.now = 10.0
    refused = authorize(ask)
    assert refused is not None and refused.code == 401
    assert (cluster.reviews("tokenreviews"), cluster.reviews("subjectaccessreviews")) == (2, 1)


def test_the_cache_is_bounded_oldest_first(cluster: Cluster) -> None:
    reviewer = KubeReviewer(cluster, ttl=60, size=2, clock=Ticking())  # type: ignore[arg-type]
    for token in ("ml-editor", "ml-viewer", "cv-editor"):
        reviewer.authenticate(token)
    reviewer.authenticate("cv-editor")
    reviewer.authenticate("ml-viewer")
    assert cluster.reviews("tokenreviews") == 3
    reviewer.authenticate("ml-editor")  # dropped when the third came in
    assert cluster.reviews("tokenreviews") == 4


def test_a_review_that_fails_answers_503_and_is_not_cached(cluster: Cluster) -> None:
    authorize = rbac_authorizer(KubeReviewer(cluster, ttl=60, clock=Ticking()))  # type: ignore[arg-type]
    ask = Access("list", "TrainingJob", "ml", None, "ml-viewer")
    cluster.unreachable = True
    refused = authorize(ask)
    assert refused is not None and refused.code == 503
    assert refused.message.startswith("the API server could not answer a TokenReview: POST ")
    cluster.unreachable = False
    assert authorize(ask) is None


def test_a_token_is_kept_only_as_its_hash(cluster: Cluster) -> None:
    reviewer = KubeReviewer(cluster, ttl=60, clock=Ticking())  # type: ignore[arg-type]
    reviewer.authenticate("ml-viewer")
    assert "ml-viewer" not in repr(reviewer._identities._items)
    assert reviewer.authenticate("ml-viewer") == Identity(
        "system:serviceaccount:ml:viewer", groups=("system:authenticated",)
    )


@pytest.mark.parametrize(
    ("verb", "kind", "plural", "namespace", "expected"),
    [
        (Verb.LIST, "TrainingJob", "trainingjobs", None, ResourceAttributes("list", "trainingjobs")),
        (Verb.LIST, "TrainingJob", "trainingjobs", "*", ResourceAttributes("list", "trainingjobs")),
        (
            Verb.LOGS,
            "TrainingJob",
            "trainingjobs",
            "ml",
            ResourceAttributes("get", "trainingjobs", namespace="ml", subresource="log"),
        ),
        (
            Verb.EVENTS,
            "TrainingJob",
            "trainingjobs",
            "ml",
            ResourceAttributes("get", "trainingjobs", namespace="ml", subresource="events"),
        ),
        (
            Verb.EXPLAIN,
            "TrainingJob",
            "trainingjobs",
            "ml",
            ResourceAttributes("get", "trainingjobs", namespace="ml", subresource="explain"),
        ),
        (
            Verb.HALT,
            "TrainingJob",
            "trainingjobs",
            "ml",
            ResourceAttributes("create", "trainingjobs", namespace="ml", subresource="halt"),
        ),
        (
            Verb.RESUME,
            "TrainingJob",
            "trainingjobs",
            "ml",
            ResourceAttributes("create", "trainingjobs", namespace="ml", subresource="resume"),
        ),
        (Verb.CREATE, "Queue", "queues", "ml", ResourceAttributes("create", "queues")),
        (Verb.GET, "Node", "nodes", None, ResourceAttributes("get", "nodes", group="")),
    ],
)
def test_each_verb_asks_rbac_what_the_api_server_would(
    verb: Verb, kind: str, plural: str, namespace: str | None, expected: ResourceAttributes
) -> None:
    namespaced = kind == "TrainingJob"
    assert review_attributes(verb, kind, plural, namespace, namespaced=namespaced) == expected


def test_tokens_are_no_kind_on_a_cluster(served: tuple[TestClient, MemoryBackend]) -> None:
    with pytest.raises(ValueError, match="there are no Phalanx tokens on a cluster"):
        review_attributes(Verb.LIST, "Token", "tokens", None, namespaced=False)
    authorize = rbac_authorizer(KubeReviewer(Cluster()))  # type: ignore[arg-type]
    refused = authorize(Access("list", "Token", None, None, "cluster-admin"))
    assert refused is not None and (refused.code, refused.message) == (403, NO_TOKENS_ON_A_CLUSTER)
