"""KubeApi's plumbing: one connection pool per thread, JSON in and out, watch lines split across chunks."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson
import pytest

from phalanx.adapters.kubernetes.api import PODS, ConflictError, KubeApi, _lines


def _api(handler: Any, made: list[httpx.Client] | None = None) -> KubeApi:
    def connect() -> httpx.Client:
        client = httpx.Client(base_url="https://api.test", transport=httpx.MockTransport(handler))
        if made is not None:
            made.append(client)
        return client

    return KubeApi(connect)


def test_each_thread_gets_its_own_client_and_close_closes_them_all() -> None:
    made: list[httpx.Client] = []
    api = _api(lambda request: httpx.Response(200, json={}), made)
    seen: list[httpx.Client] = []
    first = api.http
    assert api.http is first  # one per thread, kept

    def other() -> None:
        seen.append(api.http)
        seen.append(api.http)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen[0] is seen[1] and seen[0] is not first
    api.close()
    assert first.is_closed
    assert api.http is not first  # a new client after close


def test_requests_send_and_read_json() -> None:
    received: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        received.append(orjson.loads(request.content))
        assert request.headers["Content-Type"] == "application/json"
        return httpx.Response(201, content=b'{"metadata":{"name":"p","uid":"u1"}}')

    api = _api(handler)
    created = api.create(PODS, {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"n": 1.5, "ok": True}})
    assert created["metadata"]["uid"] == "u1"
    assert received == [{"metadata": {"name": "p", "namespace": "ns"}, "spec": {"n": 1.5, "ok": True}}]


def test_errors_carry_the_status_reason_or_the_text() -> None:
    status = {"kind": "Status", "reason": "Conflict", "message": "the object has been modified", "code": 409}
    api = _api(lambda request: httpx.Response(409, json=status))
    with pytest.raises(ConflictError, match="modified"):
        api.get(PODS, "p", "ns")
    api = _api(lambda request: httpx.Response(500, content=b"upstream broke"))
    with pytest.raises(Exception, match="upstream broke"):
        api.get(PODS, "p", "ns")


def test_watch_lines_survive_any_chunking() -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"pod-{i}"}}} for i in range(5)]
    stream = b"".join(orjson.dumps(event) + b"\n" for event in events)
    for size in (1, 3, 7, 64, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert [orjson.loads(line) for line in _lines(iter(chunks))] == events
    # A last line without its newline still counts; blank lines do not.
    assert list(_lines(iter([b'{"a":1}\n\n', b'{"b":2}']))) == [b'{"a":1}', b'{"b":2}']
