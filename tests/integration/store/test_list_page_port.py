"""``list_page`` of the port, the same on the embedded store (SQL ``LIMIT``) and in memory: pages in namespace
then name order, cursors that survive writes between pages, namespaces and labels selected, bad cursors refused.

The Kubernetes backend's (the API server's own ``limit``/``continue``) is tests/e2e/test_kube_list_pages.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.store import SqliteStore
from phalanx.model.jobs import TrainingJob
from phalanx.model.queues import Queue
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend
from phalanx.services.port import CursorError, OperationsBackend, key_cursor
from support.memory_backend import MemoryBackend


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> OperationsBackend:
    if request.param == "memory":
        return MemoryBackend()  # type: ignore[return-value]  # the port's test stand-in
    return SqliteBackend(SqliteStore(tmp_path / "state.db"), StateLayout(tmp_path))


def job(name: str, namespace: str, **labels: str) -> TrainingJob:
    template = {"command": ["true"], "resources": {"cpu": 1, "memory": "64Mi"}}
    document: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }
    return TrainingJob.model_validate(document)


def keys(items: list[Any]) -> list[str]:
    return [f"{obj.metadata.namespace}/{obj.metadata.name}" for obj in items]


def walk(backend: OperationsBackend, limit: int, **selection: Any) -> tuple[list[str], list[int | None]]:
    """Every page's objects, and the remaining count each page but the last gave."""
    seen: list[str] = []
    remaining: list[int | None] = []
    cursor = None
    while True:
        page = backend.list_page(TrainingJob, limit=limit, cursor=cursor, **selection)
        assert len(page.items) <= limit
        seen += keys(page.items)
        if page.cursor is None:
            assert page.remaining == 0
            return seen, remaining
        remaining.append(page.remaining)
        cursor = page.cursor


def test_pages_walk_every_object_once_in_namespace_then_name_order(backend: OperationsBackend) -> None:
    for namespace, name in [("ml", "b"), ("cv", "z"), ("ml", "a"), ("nlp", "c"), ("cv", "a"), ("ml", "c")]:
        backend.create(job(name, namespace))
    assert walk(backend, 2) == (["cv/a", "cv/z", "ml/a", "ml/b", "ml/c", "nlp/c"], [4, 2])
    assert walk(backend, 6) == (["cv/a", "cv/z", "ml/a", "ml/b", "ml/c", "nlp/c"], [])
    whole = backend.list_page(TrainingJob, limit=0)
    assert (len(whole.items), whole.cursor, whole.remaining) == (6, None, 0)


def test_namespaces_and_labels_select_before_paging(backend: OperationsBackend) -> None:
    for namespace in ("cv", "ml", "nlp"):
        for index in range(3):
            backend.create(job(f"j{index}", namespace, team=namespace, parity="even" if index % 2 == 0 else "odd"))
    assert walk(backend, 2, namespaces={"nlp", "ml"}) == (
        ["ml/j0", "ml/j1", "ml/j2", "nlp/j0", "nlp/j1", "nlp/j2"],
        [4, 2],
    )
    assert walk(backend, 2, namespaces={"ml", "cv"}, labels={"parity": "even"}) == (
        ["cv/j0", "cv/j2", "ml/j0", "ml/j2"],
        [2],
    )
    assert walk(backend, 2, namespaces=set()) == ([], [])
    assert walk(backend, 5, labels={"team": None, "parity": "odd"}) == (["cv/j1", "ml/j1", "nlp/j1"], [])


def test_a_cursor_goes_on_after_its_object_whatever_was_written_meanwhile(backend: OperationsBackend) -> None:
    for name in ("a", "b", "c", "d"):
        backend.create(job(name, "ml"))
    first = backend.list_page(TrainingJob, limit=2)
    assert keys(first.items) == ["ml/a", "ml/b"]
    backend.delete_job("ml", "b")  # the page's last object, gone
    backend.create(job("aa", "ml"))  # behind the cursor: not shown
    backend.create(job("ca", "ml"))  # ahead of it: shown
    second = backend.list_page(TrainingJob, limit=2, cursor=first.cursor)
    assert keys(second.items) == ["ml/c", "ml/ca"]
    assert (second.remaining, keys(backend.list_page(TrainingJob, limit=2, cursor=second.cursor).items)) == (
        1,
        ["ml/d"],
    )


def test_cluster_scoped_kinds_page_across_the_namespaces_they_are_filed_under(backend: OperationsBackend) -> None:
    for name in ("q3", "q1", "q2"):
        backend.create(Queue.model_validate({"metadata": {"name": name}, "spec": {"quota": {"gpu": 1}}}))
    first = backend.list_page(Queue, {"ml"}, limit=2)  # namespaces mean nothing to a cluster-scoped kind
    assert [q.metadata.name for q in first.items] == ["q1", "q2"]
    assert [q.metadata.name for q in backend.list_page(Queue, limit=2, cursor=first.cursor).items] == ["q3"]


@pytest.mark.parametrize("cursor", ["", "nonsense", "[1, 2]", '["only"]', "{}", key_cursor(("a", "b"))[:-1]])
def test_a_cursor_the_backend_did_not_write_is_refused(backend: OperationsBackend, cursor: str) -> None:
    backend.create(job("a", "ml"))
    with pytest.raises(CursorError, match="continue is not a token this server gave out"):
        backend.list_page(TrainingJob, limit=1, cursor=cursor)


def test_a_limit_past_any_list_is_every_object_not_a_500(tmp_path: Path) -> None:
    # Found by schemathesis (test_rest_schemathesis): limit=10**33 overflowed SQLite's 64-bit LIMIT (500).
    from fastapi.testclient import TestClient

    from phalanx.entrypoints.server.app import create_app

    backend = SqliteBackend(SqliteStore(tmp_path / "state.db"), StateLayout(tmp_path))
    for name in ("a", "b"):
        backend.create(job(name, "ml"))
    client = TestClient(create_app(backend))
    for limit in (10**33, 2**63, 2**63 - 1):
        answer = client.get("/apis/phalanx.dev/v1alpha1/namespaces/ml/trainingjobs", params={"limit": limit})
        assert answer.status_code == 200, answer.text
        assert [item["metadata"]["name"] for item in answer.json()["items"]] == ["a", "b"]
