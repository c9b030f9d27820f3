"""The history routes: the tenancy matrix {own namespace, other namespace, no token, revoked token, admin} over
``GET .../namespaces/{ns}/history`` and ``GET .../history``, and what they answer: the ``phalanx history``
filters, paging by ``continue``, the per-queue summaries, and one sentence for each bad filter.

The history is a real store (a SQLite file) seeded with records; the tokens are test_rest_tenancy's stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import API, CALLERS, TOKENS, Tokens, bearer

from phalanx.adapters.history.records import JobRecord
from phalanx.adapters.history.store import HistoryStore
from phalanx.entrypoints.server.access import Access
from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.history import NO_HISTORY
from phalanx.entrypoints.server.tokens import token_authorizer
from support.memory_backend import MemoryBackend

ENDED = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def record(namespace: str, name: str, *, queue: str = "default", phase: str = "Succeeded", hours: int = 0) -> JobRecord:
    return JobRecord(
        uid=f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        queue=queue,
        job_type="generic",
        phase=phase,
        ended_at=ENDED + timedelta(hours=hours),
        queueing_seconds=float(hours + 1),
        run_seconds=10.0 * (hours + 1),
    )


@pytest.fixture
def history(tmp_path: Path) -> HistoryStore:
    store = HistoryStore.at_path(tmp_path / "history.db")
    for recorded in (
        record("ml", "a", hours=0),
        record("ml", "b", queue="gpus", phase="Failed", hours=1),
        record("ml", "c", queue="gpus", hours=2),
        record("cv", "secret-job", hours=3),
    ):
        store.record(recorded)
    return store


@pytest.fixture
def client(history: HistoryStore) -> TestClient:
    authorize = token_authorizer(Tokens())  # type: ignore[arg-type]  # authenticate is all it calls
    return TestClient(create_app(MemoryBackend(), authorize=authorize, history=history))  # type: ignore[arg-type]


ROUTES = {"own namespace": f"{API}/namespaces/ml/history", "every namespace": f"{API}/history"}
# Every token lists "every namespace" as the namespaces it reaches (a Scope): its own records only.
ALLOWED = {"own namespace": {"editor-ml", "viewer-ml", "admin-all"}, "every namespace": set(TOKENS)}


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_history_route_answers_only_callers_who_may_list_the_namespace_jobs(
    client: TestClient, route: str, caller: str | None
) -> None:
    response = client.get(ROUTES[route], headers=bearer(caller))
    if caller in ALLOWED[route]:
        assert response.status_code == 200, response.text
        names = {(item["namespace"], item["name"]) for item in response.json()["items"]}
        records = {"ml": {("ml", "a"), ("ml", "b"), ("ml", "c")}, "cv": {("cv", "secret-job")}}
        reach = set(records) if route == "every namespace" else {"ml"}
        if caller is not None and "*" not in TOKENS[caller].namespaces:
            reach &= TOKENS[caller].namespaces
        assert names == set().union(*(records[namespace] for namespace in reach))
        return
    assert response.status_code == (401 if caller not in TOKENS else 403), response.text
    assert "secret-job" not in response.text


def test_a_tenant_reads_its_own_namespace_and_never_another_ones_records(client: TestClient) -> None:
    own = client.get(f"{API}/namespaces/cv/history", headers=bearer("editor-cv"))
    assert [item["name"] for item in own.json()["items"]] == ["secret-job"]
    other = client.get(f"{API}/namespaces/cv/history", headers=bearer("editor-ml"))
    assert other.status_code == 403
    assert other.json()["message"] == (
        "the editor token editor-ml for namespaces ml cannot list trainingjobs in cv: it reaches namespaces ml only"
    )


def test_a_revoked_token_reads_no_history() -> None:
    tokens = Tokens()
    store_less = TestClient(create_app(MemoryBackend(), authorize=token_authorizer(tokens), history=None))  # type: ignore[arg-type]
    assert store_less.get(f"{API}/namespaces/ml/history", headers=bearer("viewer-ml")).status_code == 404
    del tokens.grants["viewer-ml"]
    assert store_less.get(f"{API}/namespaces/ml/history", headers=bearer("viewer-ml")).status_code == 401


def get(client: TestClient, path: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"{API}/{path}", params=params, headers=bearer("admin-all"))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_filters_of_phalanx_history_select_records_newest_first(client: TestClient) -> None:
    assert [i["name"] for i in get(client, "namespaces/ml/history")["items"]] == ["c", "b", "a"]
    assert [i["name"] for i in get(client, "namespaces/ml/history", queue="gpus")["items"]] == ["c", "b"]
    assert [i["name"] for i in get(client, "history", phase="Failed")["items"]] == ["b"]
    since = (ENDED + timedelta(hours=2)).isoformat()
    assert [i["name"] for i in get(client, "history", since=since)["items"]] == ["secret-job", "c"]
    first = get(client, "history", since="100000d")["items"][0]
    assert first["kind"] == "TrainingJob" and first["endedAt"].startswith("2026-11-01T15:00")


def test_pages_follow_the_continue_token_to_the_last(client: TestClient) -> None:
    first = get(client, "namespaces/ml/history", limit=2)
    assert [i["name"] for i in first["items"]] == ["c", "b"]
    token = first["metadata"]["continue"]
    rest = get(client, "namespaces/ml/history", limit=2, **{"continue": token})
    assert [i["name"] for i in rest["items"]] == ["a"]
    assert rest["metadata"] == {}


def test_every_answer_carries_the_summaries_per_queue_of_all_the_selected_records(client: TestClient) -> None:
    queues = get(client, "namespaces/ml/history", limit=1)["queues"]
    assert queues == [
        {"queue": "default", "count": 1, "queueingP50": 1.0, "queueingP95": 1.0, "runP50": 10.0, "runP95": 10.0},
        {"queue": "gpus", "count": 2, "queueingP50": 2.5, "queueingP95": 2.95, "runP50": 25.0, "runP95": 29.5},
    ]


@pytest.mark.parametrize(
    ("params", "sentence"),
    [
        ({"phase": "Done"}, "phase 'Done' is not a phase; write one of Pending, Queued"),
        ({"since": "yesterday"}, "since 'yesterday' is neither a duration (90s, 30m, 2h, 7d) nor a time"),
        ({"continue": "not-a-cursor"}, "continue: the page cursor 'not-a-cursor' is not one a listing returned"),
        ({"limit": "0"}, "limit"),
        ({"limit": "10001"}, "limit"),
    ],
)
def test_a_bad_filter_is_refused_with_a_sentence_naming_it(
    client: TestClient, params: dict[str, str], sentence: str
) -> None:
    response = client.get(f"{API}/namespaces/ml/history", params=params, headers=bearer("admin-all"))
    assert response.status_code == 400, response.text
    assert sentence in response.json()["message"]


def test_a_bad_namespace_in_the_path_is_refused_before_anything_is_read(client: TestClient) -> None:
    response = client.get(f"{API}/namespaces/Not_A_Namespace/history", headers=bearer("admin-all"))
    assert response.status_code == 400
    assert response.json()["message"].startswith("the path's namespace:")


def test_a_server_without_a_history_says_how_to_keep_one() -> None:
    served = TestClient(create_app(MemoryBackend(), history=None))  # type: ignore[arg-type]
    response = served.get(f"{API}/history")
    assert response.status_code == 404
    assert response.json()["message"] == NO_HISTORY


@dataclass(frozen=True)
class Scoped:
    """What a hook answers a list of every namespace with for a caller who reads some (``access.Scope``)."""

    namespaces: frozenset[str]


def test_the_history_of_every_namespace_is_narrowed_to_the_namespaces_a_hook_scopes_it_to(
    history: HistoryStore,
) -> None:
    asked: list[Access] = []

    def scoped(access: Access) -> Scoped:
        asked.append(access)
        return Scoped(frozenset({"cv"}))

    served = TestClient(create_app(MemoryBackend(), authorize=scoped, history=history))  # type: ignore[arg-type]
    answer = served.get(f"{API}/history", headers=bearer("anyone"))
    assert answer.status_code == 200, answer.text
    assert [(item["namespace"], item["name"]) for item in answer.json()["items"]] == [("cv", "secret-job")]
    assert [summary["count"] for summary in answer.json()["queues"]] == [1]
    assert asked == [Access("list", "TrainingJob", None, None, "anyone")]
