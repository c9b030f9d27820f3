"""A client of the control plane's local API (``services/api_server.py``), standard library only.

``phalanx run`` uses it so that submitting and following a job does not load the model layer in the CLI
process: the control plane validates and reads on its behalf. Responses are plain JSON (the wire form of the
API objects).
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote


class ApiError(Exception):
    """The API answered with an error; ``status`` is the HTTP code and ``body`` its JSON."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message") or f"local API error {status}")
        self.status = status
        self.body = body


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self.socket_path))
        self.sock = sock


class LocalApi:
    """Talks to one state directory's control plane over its Unix socket (one connection, kept alive)."""

    def __init__(self, socket_path: Path, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._connection: _UnixConnection | None = None

    def available(self) -> bool:
        """Whether a control plane answers on the socket."""
        try:
            self._request("GET", "/v1/ping")
        except ApiError:
            return True  # it answered, even if with "no route"
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = _UnixConnection(self.socket_path, self.timeout)
            try:
                self._connection.request(method, path, body=payload, headers=headers)
                response = self._connection.getresponse()
                data = json.loads(response.read() or b"{}")
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()  # a kept-alive connection the server closed: reconnect once
                if attempt == 2:
                    raise
            except BaseException:
                self.close()  # never reuse a connection left half-way through a request
                raise
        if response.status >= 400:
            raise ApiError(response.status, data)
        return dict(data)

    def submit(
        self,
        documents: list[dict[str, Any]] | str,
        *,
        submit_dir: Path,
        namespace: str | None,
        replace_finished: bool,
        source: str | None,
    ) -> list[dict[str, Any]]:
        """Validate and create; raises ApiError 422 with ``errors`` when a document is invalid.

        ``documents`` is a list of mappings, or the text of a YAML/JSON file that the control plane parses.
        """
        body = {
            "documents" if not isinstance(documents, str) else "text": documents,
            "submitDir": str(submit_dir),
            "namespace": namespace,
            "replaceFinished": replace_finished,
            "source": source,
        }
        return list(self._request("POST", "/v1/submit", body)["created"])

    def job(self, namespace: str, name: str, *, after: str = "", wait: float = 0.0) -> dict[str, Any]:
        """The job (wire form), once its resourceVersion differs from ``after`` or ``wait`` seconds passed."""
        path = f"/v1/namespaces/{quote(namespace)}/trainingjobs/{quote(name)}?after={quote(after)}&wait={wait}"
        return self._request("GET", path)

    def log_files(self, namespace: str, name: str) -> list[tuple[str, Path]]:
        """(replica, log path) of the latest attempt of each replica."""
        answer = self._request("GET", f"/v1/namespaces/{quote(namespace)}/trainingjobs/{quote(name)}/logs")
        return [(replica, Path(path)) for replica, path in answer["logs"]]
