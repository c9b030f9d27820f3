"""Watch: ``GET <list path>?watch=true[&resourceVersion=RV]`` answers the list's changes as server-sent events.

Every list path of ``app`` (a namespace's, every namespace's, a cluster-scoped kind's) takes ``watch=true``; the
answer is ``text/event-stream``, one event per change::

    id: <resourceVersion>
    event: ADDED | MODIFIED | DELETED | BOOKMARK
    data: <the object as JSON>

- **Where it starts**: after ``resourceVersion`` (or the ``Last-Event-ID`` header a reconnecting client sends,
  which wins); without one (or ``0``), every object the list shows comes first as ADDED, then what changes.
  A resourceVersion older than the changes the backend keeps is 410 Gone (a Status): list again.
- **What it shows**: what the same list would (the namespace of the path, ``labelSelector``, ``fieldSelector``);
  a deletion carries the object as it was last.
- **Who may**: the ``watch`` verb of ``core.auth`` (any viewer of the namespace; every namespace needs a token
  for all of them), checked before anything is read, as every route is. An ``authorize`` hook that answers a
  watch of every namespace with a scope (an object with ``namespaces``: a token for a few namespaces) narrows
  the watch to those namespaces, objects and deletions alike.
- **Keeping it open**: a BOOKMARK (``id`` the newest resourceVersion the watch has passed, ``data`` the kind and
  that resourceVersion) every ``heartbeat`` seconds while nothing is sent, so proxies keep the connection and a
  client that resumes from it skips what it was not shown anyway. ``timeoutSeconds`` ends the watch after so
  long (as on Kubernetes); the server shutting down ends every watch, each at an event's end.

It is an ASGI layer in front of the app (a route cannot tell a watch from a list by its query): the list route
itself is untouched, and the OpenAPI document gains the watch's parameters. The changes come from one
``feeds.KindFeed`` per kind, shared by every watcher. Browsers read the stream with ``fetch()`` (``EventSource``
cannot send the ``Authorization`` header).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.feeds import Delivery, Feeds, KindFeed, Subscription, sse_frame
from phalanx.entrypoints.server.fields import FieldSelector, fields_match, parse_field_selector
from phalanx.entrypoints.server.kinds import BY_PLURAL, PREFIX, Resource
from phalanx.entrypoints.server.selectors import SelectorError, parse_label_selector
from phalanx.entrypoints.server.statuses import ApiError, wire
from phalanx.model.base import API_VERSION
from phalanx.model.names import check_dns_label
from phalanx.services.port import ExpiredError, LabelSelector, ServedBackend, selects

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Seconds between BOOKMARKs on a quiet watch: well inside the minute proxies commonly allow an idle connection.
HEARTBEAT_SECONDS = 15.0
_WATCH_VALUES = frozenset({"true", "1"})


def add_watch_routes(
    app: FastAPI, backend: ServedBackend, authorize: Authorize | None, *, heartbeat: float = HEARTBEAT_SECONDS
) -> Feeds:
    """Serve ``watch=true`` on every list path of ``app``; ``app.state.stop_watches()`` ends every watch.

    ``app.state.watch_feeds`` holds the feeds; its ``heartbeat`` (seconds between BOOKMARKs) may be changed.
    """
    feeds = Feeds(backend)
    feeds.heartbeat = heartbeat
    app.state.watch_feeds = feeds
    app.state.stop_watches = feeds.close
    app.add_middleware(_WatchLayer, feeds=feeds, authorize=authorize)
    _document_watch(app)
    return feeds


@dataclass(frozen=True)
class _Request:
    """What a watch asks, once read and checked."""

    resource: Resource
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    after: int | None
    timeout: float | None
    reach: frozenset[str] | None = None
    """The only namespaces the caller may see (a watch of every namespace by a token for a few); None: all."""

    def shows(self, delivery: Delivery) -> bool:
        """Whether the list this watch follows shows the object of ``delivery``."""
        document = delivery.document or {}
        if self.resource.namespaced and not self.reaches(delivery.namespace):
            return False
        labels = (document.get("metadata") or {}).get("labels") or {}
        return selects(self.labels, labels) and fields_match(self.fields, document)

    def reaches(self, namespace: str) -> bool:
        """Whether an object of ``namespace`` is within the path's namespace and the caller's reach."""
        if self.namespace is not None and namespace != self.namespace:
            return False
        return self.reach is None or namespace in self.reach


class _WatchLayer:
    """The ASGI layer: a GET of a list path with ``watch=true`` is a watch, anything else goes to the app."""

    def __init__(self, app: ASGIApp, feeds: Feeds, authorize: Authorize | None) -> None:
        self.app = app
        self.feeds = feeds
        self.authorize = authorize

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        target = _list_path(scope["path"])
        if target is None or query.get("watch", "").lower() not in _WATCH_VALUES:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            request = await self._checked(target, query, headers)
        except ApiError as err:
            await _status(send, err)
            return
        await self._watch(request, receive, send)

    async def _checked(
        self, target: tuple[Resource, str | None], query: dict[str, str], headers: dict[str, str]
    ) -> _Request:
        resource, namespace = target
        if namespace is not None:
            try:
                check_dns_label(namespace, "namespace")
            except ValueError as err:
                raise ApiError(400, f"the path's namespace: {err}") from None
        reach: frozenset[str] | None = None
        if self.authorize is not None:
            token = bearer_token(headers.get("authorization"))
            answer = await run_in_threadpool(self.authorize, Access("watch", resource.kind, namespace, None, token))
            if isinstance(answer, Refusal):
                raise ApiError(answer.code, answer.message, kind=resource.kind)
            reach = getattr(answer, "namespaces", None)  # a scope: only the namespaces the token reaches
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(query.get("fieldSelector", ""))
        except SelectorError as err:
            raise ApiError(400, str(err)) from None
        resume = headers.get("last-event-id")
        source = "the Last-Event-ID header" if resume else "resourceVersion"
        after = _version(resume if resume else query.get("resourceVersion", ""), source)
        timeout = _timeout(query.get("timeoutSeconds", ""))
        return _Request(resource, namespace, labels, fields, after, timeout, reach)

    async def _watch(self, request: _Request, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        subscription = Subscription(loop)
        try:
            feed = await run_in_threadpool(self.feeds.of, request.resource.model)
            first = await run_in_threadpool(self._start, feed, subscription, request)
        except ApiError as err:
            await _status(send, err)
            return
        except Exception as err:  # the backend failed (a store that cannot be read, an unreachable cluster)
            await _status(send, ApiError(503, f"the watch cannot start: {err}; try again in a moment"))
            return
        try:
            await self._stream(request, feed, subscription, first, receive, send)
        finally:
            feed.unsubscribe(subscription)

    def _start(self, feed: KindFeed, subscription: Subscription, request: _Request) -> _Start:
        """Subscribe (a worker thread: a resume may read the backend); without a place, list what there is."""
        if self.feeds.closed:
            raise ApiError(503, "the server is shutting down; watch again once it is back")
        if request.after is not None:
            try:
                feed.subscribe(subscription, request.after)
            except ExpiredError as err:
                raise ApiError(410, str(err), reason="Expired", kind=request.resource.kind) from None
            return _Start(request.after, [], {})
        feed.subscribe(subscription, None)
        start = feed.position
        model = request.resource.model
        listed = feed.backend.list(model, request.namespace, labels=request.labels)  # type: ignore[type-var]  # Stored kinds are Readable
        frames: list[bytes] = []
        seen: dict[tuple[str, str], int] = {}
        for obj in sorted(listed, key=lambda o: (o.metadata.namespace, o.metadata.name)):
            document = obj.to_dict()
            if not fields_match(request.fields, document) or (
                request.resource.namespaced and not request.reaches(obj.metadata.namespace)
            ):
                continue
            frames.append(sse_frame("ADDED", start, document))
            seen[(obj.metadata.namespace, obj.metadata.name)] = int(obj.metadata.resource_version or 0)
        return _Start(start, frames, seen)

    async def _stream(
        self, request: _Request, feed: KindFeed, subscription: Subscription, first: _Start, receive: Receive, send: Send
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),  # a proxy that buffers would hold the events back
                ],
            }
        )
        gone = asyncio.Event()
        listener = asyncio.create_task(_wait_disconnect(receive, gone, subscription))
        position = first.position
        listed = first.listed
        deadline = None if request.timeout is None else asyncio.get_running_loop().time() + request.timeout
        try:
            if first.frames:
                await _body(send, b"".join(first.frames))
            while not gone.is_set():
                subscription.ready.clear()
                out: list[bytes] = []
                for delivery in subscription.drain():
                    position = max(position, delivery.resource_version)
                    if delivery.type == "BOOKMARK" or not request.shows(delivery):
                        continue
                    key = (delivery.namespace, delivery.name)
                    if listed and listed.pop(key, 0) >= delivery.resource_version:
                        continue  # the list already showed this version
                    out.append(delivery.frame)
                if out:
                    await _body(send, b"".join(out))
                    continue
                if subscription.closed:
                    break
                wait = self.feeds.heartbeat
                if deadline is not None:
                    wait = min(wait, deadline - asyncio.get_running_loop().time())
                    if wait <= 0:
                        break
                try:
                    async with asyncio.timeout(wait):  # no task per wait, unlike wait_for before 3.12
                        await subscription.ready.wait()
                except TimeoutError:
                    if deadline is None or asyncio.get_running_loop().time() < deadline:
                        await _body(send, _bookmark(request.resource, position))
        except OSError:
            pass  # the client went away mid-write
        finally:
            listener.cancel()
        if not gone.is_set():
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclass(frozen=True)
class _Start:
    """Where a watch starts: its resourceVersion, the list's ADDED frames, and each listed object's version.

    A resume lists nothing; a change at or below a listed object's version was shown by the list.
    """

    position: int
    frames: list[bytes]
    listed: dict[tuple[str, str], int]


async def _wait_disconnect(receive: Receive, gone: asyncio.Event, subscription: Subscription) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            subscription.end("the client went away")
            return


async def _body(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


def _bookmark(resource: Resource, position: int) -> bytes:
    document = {"apiVersion": API_VERSION, "kind": resource.kind, "metadata": {"resourceVersion": str(position)}}
    return sse_frame("BOOKMARK", position, document)


async def _status(send: Send, err: ApiError) -> None:
    body = json.dumps(wire(err.status)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": err.code,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _list_path(path: str) -> tuple[Resource, str | None] | None:
    """The kind and namespace of a list path (``namespaces/NS/PLURAL``, ``PLURAL``); None for any other path."""
    if not path.startswith(PREFIX + "/"):
        return None
    parts = path[len(PREFIX) + 1 :].rstrip("/").split("/")
    if len(parts) == 3 and parts[0] == "namespaces":
        resource = BY_PLURAL.get(parts[2])
        return (resource, parts[1]) if resource is not None and resource.namespaced else None
    if len(parts) == 1:
        resource = BY_PLURAL.get(parts[0])
        return (resource, None) if resource is not None else None
    return None


def _version(text: str, source: str) -> int | None:
    """The resourceVersion to start after; None to start with a list (none given, or ``0``)."""
    text = text.strip()
    if not text or text == "0":
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ApiError(
            400,
            f"{source} {text[:40]!r} is not a resourceVersion; pass the id of the last event received (a whole "
            "number), or leave it out to start with the list",
        )
    return int(text)


def _timeout(text: str) -> float | None:
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 86_400:
        raise ApiError(400, f"timeoutSeconds {text[:40]!r} is not a number of seconds from 1 to 86400; e.g. 300")
    return float(text)


def _document_watch(app: FastAPI) -> None:
    """Add the watch's query parameters and its event stream to every list operation of the OpenAPI document."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for path, item in schema.get("paths", {}).items():
            operation = item.get("get")
            if _list_path(path.replace("{namespace}", "default")) is None or operation is None:
                continue
            operation.setdefault("parameters", []).extend(_WATCH_PARAMETERS)
            content = operation.setdefault("responses", {}).setdefault("200", {}).setdefault("content", {})
            content["text/event-stream"] = {
                "schema": {"type": "string", "description": "With watch=true: id/event/data server-sent events."}
            }
            operation["responses"]["410"] = {
                "description": "The resourceVersion is older than the changes kept: list again.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Status"}}},
            }
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to change the document


_WATCH_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "watch",
        "in": "query",
        "required": False,
        "schema": {"type": "boolean", "default": False},
        "description": "Answer the list's changes as text/event-stream instead of the list.",
    },
    {
        "name": "resourceVersion",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "pattern": "^[0-9]{0,20}$"},
        "description": "With watch=true: start after this resourceVersion (the Last-Event-ID header wins).",
    },
    {
        "name": "timeoutSeconds",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 86400},
        "description": "With watch=true: end the watch after this many seconds.",
    },
]
