"""A client of the control plane's local API (``services/embedded/api_server.py``), standard library only.

``phalanx run`` uses it so that submitting and following a job does not load the model layer in the CLI
process: the control plane validates and reads on its behalf. Responses are plain JSON (the wire form of the
API objects).

It speaks just the HTTP/1.1 that server speaks (one kept-alive connection, requests and answers with a
``Content-Length``) over a plain socket rather than through ``http.client``, whose import (``email``, ``ssl``)
costs ``phalanx run`` more than all its requests together.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

MAX_HEADER_LINE = 65536
BUSY_RETRY_SECONDS = 30.0
"""How long a request keeps retrying while the server answers 503 with Retry-After (all its workers busy)."""


class ApiError(Exception):
    """The API answered with an error; ``status`` is the HTTP code and ``body`` its JSON."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message") or f"local API error {status}")
        self.status = status
        self.body = body


class RemoteDisconnectedError(ConnectionResetError):
    """The server closed the connection without answering (it closes kept-alive connections it is done with)."""


class _Connection:
    """One kept-alive connection to the Unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.reader: BinaryIO = self.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def exchange(self, method: str, path: str, payload: bytes | None) -> tuple[int, bytes, bool, dict[str, str]]:
        """Send one request and read its answer: (status, body, whether the server keeps the connection, headers).

        Header names are lower-cased.
        """
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(payload or b'')}\r\n"
        if payload is not None:
            head += "Content-Type: application/json\r\n"
        self.sock.sendall(head.encode("ascii") + b"\r\n" + (payload or b""))
        status_line = self.reader.readline(MAX_HEADER_LINE + 1)
        if not status_line:
            raise RemoteDisconnectedError("the local API closed the connection without an answer")
        version, code, *_ = [*status_line.split(None, 2), b"", b""]
        if not version.startswith(b"HTTP/") or not code.isdigit():
            raise ConnectionError(f"not an HTTP answer from the local API: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        while True:
            line = self.reader.readline(MAX_HEADER_LINE + 1)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = version != b"HTTP/1.0" and headers.get("connection", "").lower() != "close"
        if headers.get("content-length", "").isdigit():
            length = int(headers["content-length"])
            body = self.reader.read(length)
            if len(body) < length:
                raise RemoteDisconnectedError("the local API closed the connection in the middle of an answer")
        else:
            body, keep = self.reader.read(), False  # delimited by the end of the connection
        return int(code), body, keep, headers


class LocalApi:
    """Talks to one state directory's control plane over its Unix socket (one connection, kept alive)."""

    def __init__(self, socket_path: Path, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._connection: _Connection | None = None

    def available(self) -> bool:
        """Whether a control plane listens on the socket (it serves the API only while it leads)."""
        try:
            self._connect()
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> _Connection:
        if self._connection is None:
            self._connection = _Connection(self.socket_path, self.timeout)
        return self._connection

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        busy_until = time.monotonic() + BUSY_RETRY_SECONDS
        pause = 0.05
        while True:
            status, data, headers = self._exchange(method, path, payload)
            # 503 with Retry-After: every worker is busy (the server answers at once rather than queueing).
            if status != 503 or "retry-after" not in headers or time.monotonic() > busy_until:
                break
            time.sleep(pause)
            pause = min(pause * 2, 1.0)  # Retry-After's one second at most; workers free up within milliseconds
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ApiError(status, {"message": f"the local API answered {status} with a body that is not JSON"})
        if status >= 400:
            raise ApiError(status, answer)
        return answer

    def _exchange(self, method: str, path: str, payload: bytes | None) -> tuple[int, bytes, dict[str, str]]:
        """One request on the kept-alive connection, reconnecting once if the server had closed it."""
        for attempt in (1, 2):
            try:
                status, data, keep, headers = self._connect().exchange(method, path, payload)
                break
            except (RemoteDisconnectedError, BrokenPipeError, ConnectionResetError):
                self.close()  # a kept-alive connection the server closed: reconnect once
                if attempt == 2:
                    raise
            except BaseException:
                self.close()  # never reuse a connection left half-way through a request
                raise
        if not keep:
            self.close()
        return status, data, headers

    def submit(
        self,
        documents: list[dict[str, Any]] | str,
        *,
        submit_dir: Path,
        namespace: str | None,
        replace_finished: bool,
        source: str | None,
        stand_ins: dict[str, list[str]] | None = None,
    ) -> list[dict[str, Any]]:
        """Validate and create; raises ApiError 422 with ``errors`` when a document is invalid.

        ``documents`` is a list of mappings, or the text of a YAML/JSON file that the control plane parses.
        """
        body: dict[str, Any] = {
            "documents" if not isinstance(documents, str) else "text": documents,
            "submitDir": str(submit_dir),
            "namespace": namespace,
            "replaceFinished": replace_finished,
            "source": source,
        }
        if stand_ins:
            body["standIns"] = stand_ins
        return list(self._request("POST", "/v1/submit", body)["created"])

    def job(self, namespace: str, name: str, *, after: str = "", wait: float = 0.0) -> dict[str, Any]:
        """The job (wire form), once its resourceVersion differs from ``after`` or ``wait`` seconds passed."""
        path = f"/v1/namespaces/{quote(namespace)}/trainingjobs/{quote(name)}?after={quote(after)}&wait={wait}"
        return self._request("GET", path)

    def log_files(self, namespace: str, name: str) -> list[tuple[str, Path]]:
        """(replica, log path) of the latest attempt of each replica."""
        answer = self._request("GET", f"/v1/namespaces/{quote(namespace)}/trainingjobs/{quote(name)}/logs")
        return [(replica, Path(path)) for replica, path in answer["logs"]]

    def queues(self) -> list[dict[str, Any]]:
        """Every Queue (wire form), its ``status`` computed now from the jobs."""
        return list(self._request("GET", "/v1/queues")["items"])

    def queue(self, name: str) -> dict[str, Any]:
        """One Queue with its ``admitted`` and ``pending`` jobs and the other queues of its ``cohort``."""
        return self._request("GET", f"/v1/queues/{quote(name)}")

    def delete_queue(self, name: str) -> dict[str, Any]:
        """Delete a Queue: ``{deleted, admitted}``, ``admitted`` the jobs that keep running without a quota."""
        return self._request("DELETE", f"/v1/queues/{quote(name)}")
