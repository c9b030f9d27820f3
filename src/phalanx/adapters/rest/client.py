"""``RestClient``: one Phalanx server's REST API over httpx, the caller's token in the ``Authorization`` header.

It sends requests and hands back what came: a 2xx answer's body, or a ``RestError`` carrying the HTTP code and the
server's ``Status`` (its ``message``, ``reason`` and each cause's field path), or an ``UnreachableError`` when no
answer came at all (no server at that address, a name that does not resolve, a timeout). What those mean to a
caller (not found, a conflict, a spec refused at its field paths, a token refused) is the service's to decide
(``services.remote``): this module knows HTTP, not the port.

The base URL is checked once (``check_server_url``) so a mistyped ``--server`` is one sentence, not an httpx
traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

API_PREFIX = "/apis/phalanx.dev/v1alpha1"
DEFAULT_TIMEOUT = 30.0


class ServerUrlError(ValueError):
    """A server URL that cannot be used; the message names it and the fix."""


class UnreachableError(Exception):
    """No answer came from the server: the message says what happened and at which URL."""


@dataclass
class RestError(Exception):
    """The server refused a request: its HTTP code and its ``Status`` body (a dict; empty when it sent none)."""

    code: int
    status: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The server's sentence (or the code, when it sent none)."""
        text = self.status.get("message")
        return str(text) if text else f"the server answered HTTP {self.code}"

    @property
    def reason(self) -> str:
        """The Status's reason (``NotFound``, ``AlreadyExists``...), or empty."""
        return str(self.status.get("reason") or "")

    @property
    def causes(self) -> list[tuple[str, str]]:
        """(field path, message) of each problem of a refused spec."""
        details = self.status.get("details") or {}
        causes = details.get("causes") if isinstance(details, dict) else None
        return [(str(c.get("field", "")), str(c.get("message", ""))) for c in causes or [] if isinstance(c, dict)]


def check_server_url(url: str) -> str:
    """``url`` without a trailing slash, once it is an http(s) URL with a host.

    Raises:
        ServerUrlError: another scheme, no host, or a path, query or fragment (the API's paths are fixed).
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerUrlError(f"server URL {url!r} is not http(s)://HOST[:PORT]; e.g. --server http://127.0.0.1:8080")
    try:
        parts.port  # noqa: B018  (parsing it is the check: a port out of range raises)
    except ValueError:
        raise ServerUrlError(f"server URL {url!r} has a port that is not a number from 1 to 65535") from None
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ServerUrlError(f"server URL {url!r} has a path; give the server's address only, e.g. http://HOST:PORT")
    return f"{parts.scheme}://{parts.netloc}"


class RestClient:
    """Requests to one server; every answer other than 2xx raises."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Prepare the connection pool (nothing is sent yet).

        Args:
            server: the server's base URL (``check_server_url``).
            token: sent as ``Authorization: Bearer TOKEN``; None sends none.
            timeout: seconds one request may wait for an answer (a followed log waits for its next chunk without it).
            transport: what carries requests (tests: the app's own, in process); default: the network.

        Raises:
            ServerUrlError: ``server`` is not a usable URL.
        """
        self.server = check_server_url(server)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> httpx.Response:
        """Send one request to ``API_PREFIX + path``; the answer when it is 2xx.

        Raises:
            RestError: the server answered another code.
            UnreachableError: no answer came.
        """
        try:
            response = self._http.request(method, API_PREFIX + path, params=params, json=body)
        except httpx.HTTPError as err:
            raise UnreachableError(self._unreachable(err)) from None
        if not response.is_success:
            raise RestError(response.status_code, _status_of(response))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """``request``, the answer's JSON object."""
        response = self.request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            raise UnreachableError(
                f"the server at {self.server} answered {path} with no JSON; is it Phalanx?"
            ) from None
        if not isinstance(body, dict):
            raise UnreachableError(f"the server at {self.server} answered {path} with no JSON object; is it Phalanx?")
        return body

    def stream_text(self, path: str, *, params: Mapping[str, str] | None = None) -> Iterator[str]:
        """The text of a streamed answer (a followed log), chunk by chunk as the server sends it.

        Raises:
            RestError: the server refused it.
            UnreachableError: no answer came, or the stream broke off.
        """
        try:
            with self._http.stream("GET", API_PREFIX + path, params=params, timeout=httpx.Timeout(None)) as response:
                if not response.is_success:
                    response.read()
                    raise RestError(response.status_code, _status_of(response))
                yield from response.iter_text()
        except httpx.HTTPError as err:
            raise UnreachableError(self._unreachable(err)) from None

    def _unreachable(self, err: httpx.HTTPError) -> str:
        what = type(err).__name__
        detail = str(err) or what
        if isinstance(err, httpx.TimeoutException):
            return f"the server at {self.server} did not answer in time ({detail})"
        return f"cannot reach the server at {self.server} ({detail})"


def _status_of(response: httpx.Response) -> dict[str, Any]:
    """The ``Status`` a refusal carries, or an empty dict when its body is none (a proxy's page, say)."""
    try:
        body = json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}
