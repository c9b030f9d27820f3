"""The local API's HTTP/1.1 transport: a bounded server on a Unix socket that always answers or hangs up in time.

It owns the wire, not the routes (``api_server.py``): it reads a request, hands it to a route function in a
worker thread, and writes the route's JSON answer. Whatever a client sends, the server stays up and keeps
answering other clients:

- one asyncio loop in a daemon thread reads and writes every connection, so a connection that sends nothing,
  or a request one byte at a time, costs a few kilobytes and no thread;
- the request head must arrive within ``timeout`` seconds of the connection being ready for it, and the body
  within ``timeout`` more (a connection idle that long is closed, one half-way through a request gets ``408``);
- the head is at most ``MAX_HEAD_BYTES``; a body needs a valid ``Content-Length`` of at most
  ``MAX_BODY_BYTES`` (``411`` without one or with ``Transfer-Encoding``, ``400`` for one that is not a
  non-negative integer, ``413`` past the limit), and is not read otherwise;
- routes run in ``workers`` daemon threads, with at most ``backlog`` requests waiting for one; past that a request
  gets ``503`` with ``Retry-After`` at once rather than waiting for a thread;
- past ``max_connections`` open connections a new one gets ``503`` and is closed, and past
  ``MAX_BUFFERED_BODY_BYTES`` of bodies held at once a new body gets ``503`` unread;
- a route that raises gets ``500`` with one sentence, and the exception is logged.

Every error answer is ``{"message": "<one sentence>"}``, as the routes' own errors are. After an error that leaves
the request's end unknown (a bad head, a body not read) the connection is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 2**20
"""The largest request body read; a spec file is at most 4 MiB, and JSON adds its escapes."""
MAX_HEAD_BYTES = 64 * 2**10
"""The largest request line plus headers; our client sends about 100 bytes."""
MAX_BUFFERED_BODY_BYTES = 4 * MAX_BODY_BYTES
"""Request bodies held at once, over all connections: past it a new large body gets 503 rather than memory."""
MAX_LEADING_EMPTY_LINES = 16
"""Empty lines (CRLF) tolerated before a request line (RFC 9112 allows some); more is a client stalling."""
MAX_QUERY_FIELDS = 100
"""The most ``name=value`` pairs a query string may hold (each route reads one or two)."""
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: a method or header name
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(frozen=True)
class HttpLimits:
    """How much the server takes from clients; the defaults are the documented limits (docs/limits.md).

    Attributes:
        timeout: seconds for a request's head to arrive once the connection is ready for one, and again for
            its body; also for a client to take an answer.
        workers: threads that run routes (each keeps its own store connection).
        backlog: requests that may wait for a worker; past that, ``503`` at once.
        max_connections: connections open at once; past that, ``503`` and close.
        listen_backlog: connections the kernel queues before the server accepts them (a burst of clients).
    """

    timeout: float = 30.0
    workers: int = 16
    backlog: int = 64
    max_connections: int = 512
    listen_backlog: int = 512


@dataclass(frozen=True)
class Request:
    """One parsed request: ``segments`` are the path's parts, percent-decoded; ``query`` as ``parse_qs`` gives it."""

    method: str
    path: str
    segments: list[str]
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Response:
    """A JSON answer; ``close`` asks to close the connection after it, ``retry_after`` to try again in 1 s."""

    status: int
    body: dict[str, Any]
    close: bool = False
    retry_after: bool = False
    data: bytes | None = field(default=None, repr=False)  # ``body`` encoded, by the worker that answered


class HttpError(Exception):
    """A request the server answers with ``status`` and one sentence, closing the connection when ``close``."""

    def __init__(self, status: int, message: str, *, close: bool = False, retry_after: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close
        self.retry_after = retry_after

    def response(self) -> Response:
        """The error as an answer."""
        return Response(self.status, {"message": self.message}, close=self.close, retry_after=self.retry_after)


Route = Callable[[Request], Response]


class _Workers:
    """A fixed set of daemon threads running routes (daemon: a long poll in flight never delays the exit)."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Response], Callable[[], Response]] | None]
        self._jobs = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"local-api-{i}", daemon=True) for i in range(max(1, count))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[], Response]) -> concurrent.futures.Future[Response]:
        future: concurrent.futures.Future[Response] = concurrent.futures.Future()
        self._jobs.put((future, call))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, call = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as err:  # only what ``_answer`` lets through: SystemExit and the like
                    future.set_exception(err)


class HttpServer:
    """Serves ``route`` on the Unix socket at ``path`` (mode 0600) from a background thread.

    Args:
        path: where to bind; a stale socket there is replaced.
        route: answers one request; runs in a worker thread and may block (a long poll).
        limits: timeouts and bounds.
    """

    def __init__(self, path: Path, route: Route, limits: HttpLimits | None = None) -> None:
        self.path = path
        self.route = route
        self.limits = limits or HttpLimits()
        self._loop = asyncio.new_event_loop()
        self._workers: _Workers | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._waiting = 0  # requests handed to the workers and not answered yet
        self._buffered = 0  # bytes of the request bodies being read or answered
        self._inode: int | None = None

    def start(self) -> None:
        """Bind the socket and serve.

        Raises:
            OSError: the socket cannot be bound.
        """
        listener = _bind_private(self.path, self.limits.listen_backlog)
        self._inode = os.stat(self.path).st_ino  # to tell our socket file from a later leader's at the same path
        self._workers = _Workers(self.limits.workers)
        self._server = self._loop.run_until_complete(
            asyncio.start_unix_server(
                self._serve_connection, sock=listener, limit=MAX_HEAD_BYTES + 2, backlog=self.limits.listen_backlog
            )
        )
        self._thread = threading.Thread(target=self._loop.run_forever, name="local-api", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, drop open connections, stop the workers and remove the socket."""
        if self._thread is not None:
            done = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                done.result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._thread = None
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        if not self._loop.is_running():
            self._loop.close()
        # A control plane stepping down must not remove the socket of the one that took over from it.
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._inode:
                self.path.unlink()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a connection callback always runs as a task
        try:
            if len(self._connections) >= self.limits.max_connections:
                busy = HttpError(
                    503, "the local API has too many open connections; try again in a moment", retry_after=True
                )
                await self._write(writer, busy.response(), close=True)
                return
            self._connections.add(task)
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nobody is left to answer
        except asyncio.CancelledError:
            pass  # the server is stopping (``_shutdown``); the connection ends here
        except Exception:  # a bug here must cost one connection, never the server
            log.exception("local API: a connection failed")
        finally:
            self._connections.discard(task)
            await _close(writer)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read one request and answer it; whether the connection stays open for another."""
        try:
            request = await self._read_request(reader, writer)
        except HttpError as err:
            await self._write(writer, err.response())
            return not err.close
        if request is None:
            return False  # closed, or idle for too long, before a request began
        try:
            if self._waiting >= self.limits.workers + self.limits.backlog:
                busy = HttpError(
                    503, "the local API is busy with other requests; try again in a moment", retry_after=True
                )
                await self._write(writer, busy.response())
                return True
            assert self._workers is not None  # started before the server accepts
            self._waiting += 1
            try:
                response = await asyncio.wrap_future(self._workers.submit(lambda: self._answer(request)))
            except asyncio.CancelledError:
                stopping = HttpError(503, "the control plane is stopping; try again once it is up", close=True)
                with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                    await self._write(writer, stopping.response())
                raise
            finally:
                self._waiting -= 1
            close = response.close or "close" in request.headers.get("connection", "").lower()
            await self._write(writer, response, close=close)
            return not close
        finally:
            self._buffered -= len(request.body)

    def _answer(self, request: Request) -> Response:
        """The route's answer; any exception it raises becomes a 500 naming it (and goes to the log)."""
        try:
            response = self.route(request)
            # Encoded here, so that a body JSON cannot hold is a 500 too, and the loop thread stays light.
            return replace(response, data=json.dumps(response.body).encode())
        except HttpError as err:
            return err.response()
        except Exception as err:  # no request may take the server down
            log.exception("local API: %s %s failed", request.method, request.path[:200])
            what = f"{type(err).__name__}: {err}"[:500]
            return Response(
                500,
                {
                    "message": f"the control plane failed to answer {request.method} {request.path[:200]} ({what}); "
                    "see its log"
                },
            )

    async def _read_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
        """The next request; ``None`` when the client closed or stayed idle; ``HttpError`` for a bad one."""
        timeout = self.limits.timeout
        start, skipped = b"\n", -1
        while start in (b"\n", b"\r"):  # empty lines before a request are allowed (RFC 9112)
            skipped += 1
            if skipped > 2 * MAX_LEADING_EMPTY_LINES:
                raise HttpError(400, "the request starts with too many empty lines", close=True)
            try:
                async with asyncio.timeout(timeout):
                    start = await reader.read(1)
            except TimeoutError:
                return None
            if not start:
                return None
        try:
            async with asyncio.timeout(timeout):
                method, target, headers = await _read_head(reader, start)
                length = _body_length(method, headers)
                if length and headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = await self._read_body(reader, length)
        except TimeoutError:
            raise HttpError(408, f"the request did not arrive within {timeout:g} seconds", close=True) from None
        url = urlsplit(target)
        try:
            segments = [unquote(part, errors="strict") for part in url.path.strip("/").split("/")]
            query = parse_qs(url.query, keep_blank_values=True, errors="strict", max_num_fields=MAX_QUERY_FIELDS)
        except ValueError as err:  # UnicodeDecodeError included
            raise HttpError(400, f"the request target is malformed: {err}") from None
        return Request(method, url.path, segments, query, headers, body)

    async def _read_body(self, reader: asyncio.StreamReader, length: int) -> bytes:
        """``length`` bytes within the timeout, counted in ``_buffered`` until the answer is written."""
        if not length:
            return b""
        if self._buffered + length > MAX_BUFFERED_BODY_BYTES:
            # The body stays unread: close the connection after the answer.
            raise HttpError(
                503,
                "the local API is receiving too many large requests; try again in a moment",
                close=True,
                retry_after=True,
            )
        self._buffered += length
        try:
            async with asyncio.timeout(self.limits.timeout):
                return await reader.readexactly(length)
        except BaseException:
            self._buffered -= length
            raise

    async def _write(self, writer: asyncio.StreamWriter, response: Response, *, close: bool = False) -> None:
        data = response.data if response.data is not None else json.dumps(response.body).encode()
        lines = [
            f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Unknown')}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
            *(["Retry-After: 1"] if response.retry_after else []),
            *(["Connection: close"] if close or response.close else []),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + data)
        try:
            async with asyncio.timeout(self.limits.timeout):
                await writer.drain()
        except TimeoutError:
            writer.transport.abort()  # a client that does not take its answer
            raise ConnectionResetError("the client did not take its answer") from None


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    except (TimeoutError, OSError):
        writer.transport.abort()


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One line of the head, with its end; a head cut short by the client is a bad request."""
    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise HttpError(400, "the connection ended in the middle of the request head", close=True) from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes", close=True) from None


async def _read_head(reader: asyncio.StreamReader, start: bytes) -> tuple[str, str, dict[str, str]]:
    """Method, target and headers (names lower-cased) of a head of at most ``MAX_HEAD_BYTES``."""
    first = start + await _read_line(reader)
    try:
        line = first.decode("ascii").rstrip("\r\n")
    except UnicodeDecodeError:
        raise HttpError(400, "the request line is not ASCII", close=True) from None
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1].startswith("/"):
        example = "'GET /v1/queues HTTP/1.1'"
        raise HttpError(400, f"malformed request line {line[:100]!r}; expected e.g. {example}", close=True)
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported protocol {version[:20]!r}; use HTTP/1.1", close=True)
    headers: dict[str, str] = {"connection": "close"} if version == "HTTP/1.0" else {}
    size = len(first)
    while True:
        raw = await _read_line(reader)
        size += len(raw)
        if size > MAX_HEAD_BYTES:
            raise HttpError(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes", close=True)
        if raw in (b"\r\n", b"\n"):
            return method, target, headers
        text = raw.decode("latin-1").rstrip("\r\n")
        name, colon, value = text.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, f"malformed header line {text[:100]!r}; expected 'Name: value'", close=True)
        name, value = name.lower(), value.strip(" \t")
        if name == "content-length" and headers.get(name, value) != value:
            raise HttpError(400, "the request has two different Content-Length headers", close=True)
        headers[name] = f"{headers[name]}, {value}" if name in headers and name != "content-length" else value


def _body_length(method: str, headers: dict[str, str]) -> int:
    """The body's size from ``Content-Length``, refusing what cannot be read safely."""
    if "transfer-encoding" in headers:
        raise HttpError(
            411, "Transfer-Encoding is not supported; send the body with a Content-Length header", close=True
        )
    value = headers.get("content-length")
    if value is None:
        if method == "POST":
            raise HttpError(411, "a POST needs a Content-Length header giving the body's size in bytes", close=True)
        return 0
    if not (value.isascii() and value.isdigit()):
        raise HttpError(
            400, f"Content-Length must be a non-negative integer number of bytes, got {value[:40]!r}", close=True
        )
    length = int(value) if len(value) <= 20 else MAX_BODY_BYTES + 1  # int() of a long string is slow, or refused
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"the request body is {length} bytes; at most {MAX_BODY_BYTES} are accepted", close=True)
    return length


def _bind_private(path: Path, backlog: int) -> socket.socket:
    """A listening Unix socket at ``path`` with mode 0600, made private before it listens."""
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)  # before listen(): nobody can connect while it is still open to others
        listener.listen(backlog)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener
