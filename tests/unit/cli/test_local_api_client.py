"""The local API client's own HTTP: kept-alive connections, reconnecting, errors, against a stand-in server."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from phalanx.entrypoints.cli.local_api import ApiError, LocalApi


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    connections = 0
    requests: list[tuple[str, str, Any]]
    close_after_answer = False  # drop each connection after answering, as a server ending keep-alive does
    busy = 0  # answer this many requests for /v1/queues with 503 and Retry-After, as a saturated server does


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(
        self, code: int, body: dict[str, Any] | bytes, *, close: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        if self.server.close_after_answer:
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path, None))
        if self.path == "/v1/queues" and self.server.busy:
            self.server.busy -= 1
            self._answer(503, {"message": "the local API is busy"}, headers={"Retry-After": "1"})
        elif self.path == "/v1/queues/broken-store":
            self._answer(503, {"message": "the state store failed: disk I/O error"})
        elif self.path == "/v1/queues/not-json":
            self._answer(502, b"<html>bad gateway</html>")
        elif self.path == "/v1/queues":
            self._answer(200, {"items": []})
        elif self.path.startswith("/v1/namespaces/default/trainingjobs/missing"):
            self._answer(404, {"message": "job default/missing not found"})
        elif self.path.endswith("/logs"):
            self._answer(200, {"logs": [["worker-0", "/runs/worker-0/replica.log"]]}, close=True)
        else:
            self._answer(200, {"metadata": {"name": "j", "resourceVersion": "7"}, "status": {"phase": "Running"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(("POST", self.path, body))
        self._answer(200, {"created": [{"kind": "TrainingJob", "namespace": "default", "name": "j"}]})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    srv = _Server(str(tmp_path / "api.sock"), _Handler)
    srv.requests = []
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_requests_share_one_kept_alive_connection(server: _Server, tmp_path: Path) -> None:
    api = LocalApi(tmp_path / "api.sock", timeout=10)
    assert api.available()

    created = api.submit("kind: TrainingJob", submit_dir=tmp_path, namespace=None, replace_finished=True, source="j")
    job = api.job("default", "j", after="6", wait=0.5)

    assert created == [{"kind": "TrainingJob", "namespace": "default", "name": "j"}]
    assert job["metadata"]["resourceVersion"] == "7"
    assert server.connections == 1
    assert server.requests[0][2] == {
        "text": "kind: TrainingJob",
        "submitDir": str(tmp_path),
        "namespace": None,
        "replaceFinished": True,
        "source": "j",
    }
    assert server.requests[1][:2] == ("GET", "/v1/namespaces/default/trainingjobs/j?after=6&wait=0.5")


def test_an_error_answer_is_an_api_error_and_the_connection_stays_usable(server: _Server, tmp_path: Path) -> None:
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    with pytest.raises(ApiError) as caught:
        api.job("default", "missing")

    assert (caught.value.status, str(caught.value)) == (404, "job default/missing not found")
    assert api.job("default", "j")["status"]["phase"] == "Running"
    assert server.connections == 1


def test_a_connection_the_server_closed_is_replaced_once(server: _Server, tmp_path: Path) -> None:
    server.close_after_answer = True
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    phases = [api.job("default", "j")["status"]["phase"] for _ in range(3)]

    assert phases == ["Running"] * 3
    assert server.connections == 3


def test_connection_close_is_honoured(server: _Server, tmp_path: Path) -> None:
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    assert api.log_files("default", "j") == [("worker-0", Path("/runs/worker-0/replica.log"))]
    api.job("default", "j")

    assert server.connections == 2


def test_no_server_means_not_available(tmp_path: Path) -> None:
    assert not LocalApi(tmp_path / "nothing.sock").available()


def test_a_busy_server_is_asked_again(server: _Server, tmp_path: Path) -> None:
    """A 503 with Retry-After (every worker busy) is retried; the caller gets the answer that follows."""
    server.busy = 3
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    assert api.queues() == []
    assert [path for _, path, _ in server.requests] == ["/v1/queues"] * 4


def test_a_503_without_retry_after_is_an_error_at_once(server: _Server, tmp_path: Path) -> None:
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    with pytest.raises(ApiError) as caught:
        api.queue("broken-store")

    assert (caught.value.status, str(caught.value)) == (503, "the state store failed: disk I/O error")
    assert len(server.requests) == 1


def test_an_answer_that_is_not_json_is_an_api_error(server: _Server, tmp_path: Path) -> None:
    api = LocalApi(tmp_path / "api.sock", timeout=10)

    with pytest.raises(ApiError) as caught:
        api.queue("not-json")

    assert (caught.value.status, str(caught.value)) == (502, "the local API answered 502 with a body that is not JSON")
