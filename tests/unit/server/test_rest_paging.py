"""``limit`` and ``continue``: pages in namespace and name order that survive writes between them; tokens checked."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.paging import PagingError, read_token, write_token
from phalanx.model.queues import Queue
from phalanx.services.port import page_in_memory
from support.memory_backend import MemoryBackend

API = "/apis/phalanx.dev/v1alpha1"


def queue(name: str) -> Queue:
    return Queue.model_validate({"metadata": {"name": name}, "spec": {"quota": {"gpu": 1}}})


def test_a_page_is_in_name_order_whatever_order_the_backend_gave() -> None:
    objects = [queue(n) for n in ("c", "a", "e", "b", "d")]
    first = page_in_memory(objects, limit=2, cursor=None)
    assert [q.metadata.name for q in first.items] == ["a", "b"]
    assert first.remaining == 3 and first.cursor is not None
    second = page_in_memory(objects, limit=2, cursor=first.cursor)
    assert [q.metadata.name for q in second.items] == ["c", "d"]
    last = page_in_memory(objects, limit=2, cursor=second.cursor)
    assert ([q.metadata.name for q in last.items], last.cursor, last.remaining) == (["e"], None, 0)


def test_no_limit_is_every_object_and_no_cursor() -> None:
    page = page_in_memory([queue("b"), queue("a")], limit=0, cursor=None)
    assert ([q.metadata.name for q in page.items], page.cursor) == (["a", "b"], None)


def test_a_page_goes_on_after_its_last_object_even_when_that_was_deleted() -> None:
    objects = [queue(n) for n in ("a", "b", "c", "d")]
    first = page_in_memory(objects, limit=2, cursor=None)
    without_b = [q for q in objects if q.metadata.name != "b"]
    assert first.cursor is not None
    assert [q.metadata.name for q in page_in_memory(without_b, limit=2, cursor=first.cursor).items] == ["c", "d"]


def test_a_token_reads_back_as_written() -> None:
    assert read_token(write_token('["ml","train-7"]')) == '["ml","train-7"]'


def forged(document: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode()


@pytest.mark.parametrize(
    "token",
    [
        "not a token",
        "%%%",
        forged([1, 2]),
        forged({"v": 1, "after": ["a", "b"]}),
        forged({"v": 2}),
        forged({"v": 2, "c": ["a", "b"]}),
        "A" * 5000,
    ],
    ids=["words", "not-base64", "a-list", "the-first-version", "no-cursor", "not-a-string", "long"],
)
def test_a_token_this_server_did_not_write_is_refused(token: str) -> None:
    with pytest.raises(PagingError, match="continue is not a token this server gave out"):
        read_token(token)


@pytest.fixture
def client() -> TestClient:
    client = TestClient(create_app(MemoryBackend()))
    for index in range(7):
        body = {"kind": "Queue", "metadata": {"name": f"q{index}"}, "spec": {"quota": {"gpu": 1}}}
        assert client.post(f"{API}/queues", json=body).status_code == 201
    return client


def test_walking_the_pages_sees_every_object_once(client: TestClient) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    remaining = []
    while True:
        body = client.get(f"{API}/queues", params=params).json()
        seen += [item["metadata"]["name"] for item in body["items"]]
        token = body["metadata"].get("continue")
        if token is None:
            break
        remaining.append(body["metadata"]["remainingItemCount"])
        params = {"limit": 3, "continue": token}
    assert seen == [f"q{index}" for index in range(7)]
    assert remaining == [4, 1]


def test_a_forged_continue_is_a_400_status(client: TestClient) -> None:
    response = client.get(f"{API}/queues", params={"limit": 3, "continue": "nonsense"})
    body = response.json()
    assert (response.status_code, body["kind"], body["reason"]) == (400, "Status", "BadRequest")
    assert "list again from the start without continue" in body["message"]


@pytest.mark.parametrize("cursor", ["nonsense", '["only-one"]', "[1, 2]", "{}"])
def test_a_well_wrapped_token_with_a_cursor_the_backend_did_not_write_is_a_400_status(
    client: TestClient, cursor: str
) -> None:
    response = client.get(f"{API}/queues", params={"limit": 3, "continue": write_token(cursor)})
    assert response.status_code == 400, response.text
    assert "continue is not a token this server gave out" in response.json()["message"]
