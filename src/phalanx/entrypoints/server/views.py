"""Read-only views of the cluster the dashboard needs: nodes with their allocation, node caches, queue usage.

Routes (under ``/apis/phalanx.dev/v1alpha1``), all ``GET``:

- ``nodes``: a ``NodeList`` of every node, by name; ``nodes/{name}``: one. Each is the Node as the port lists it
  (CPUs, memory, GPUs with model, health, NVLink peers) with ``allocation``: what jobs holding their room have
  been handed (``services.node_views``) and who holds each GPU;
- ``nodes/{name}/caches``: the node's dataset cache (``OperationsBackend.cache_views``): entries, pins, counters;
- ``queues/{name}/usage``: the queue's usage against its quota and borrowing, its admitted jobs and its pending
  jobs with why they wait (``services.queue_views``, the numbers of ``phalanx get queues`` / ``describe queue``).

The views are read-only (any other verb: 405); a path name no node or queue can have is a 400 naming the rule.

Nodes and Queues are cluster-scoped: any authenticated caller reads them (``core.auth``: every role). What they
hold belongs to tenants, so each body is built for its caller (``view_bodies``): names of namespaces the caller
may not read are replaced (``in use``, ``hidden``) or counted, by ``core.auth.views``. Which namespaces the caller
reads is asked of the same ``authorize`` hook that decides every request, once per namespace per request.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from phalanx.core.auth import ALL_NAMESPACES
from phalanx.core.auth.views import NAMING_KIND, NAMING_VERB, Readable
from phalanx.core.lifecycle import HOLDING_PHASES
from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.kinds import PREFIX
from phalanx.entrypoints.server.statuses import ApiError, Status
from phalanx.entrypoints.server.view_bodies import (
    NodeCacheBody,
    NodeListBody,
    NodeView,
    QueueUsageBody,
    cache_body,
    node_body,
    queue_usage_body,
)
from phalanx.model.base import API_VERSION
from phalanx.model.errors import short
from phalanx.model.jobs import TrainingJob
from phalanx.model.names import MAX_SUBDOMAIN_LENGTH, check_dns_label
from phalanx.model.nodes import Node
from phalanx.services.node_views import node_allocations
from phalanx.services.operations import OperationError, Operations

_REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {"model": Status, "description": "Not authenticated (when the server authorizes requests)."},
    404: {"model": Status, "description": "No such node or queue (naming those there are)."},
}


def add_view_routes(app: FastAPI, ops: Operations, authorize: Authorize | None) -> None:
    """Register the view routes on ``app``, over ``ops``, each request decided by ``authorize`` (None: served)."""
    views = _Views(ops, authorize)
    for path, handler, model, summary, operation in (
        ("/nodes", views.list_nodes, NodeListBody, "List nodes with their allocation", "listNode"),
        ("/nodes/{name}", views.read_node, NodeView, "Read a node with its allocation", "readNode"),
        ("/nodes/{name}/caches", views.read_cache, NodeCacheBody, "Read a node's dataset cache", "readNodeCache"),
        ("/queues/{name}/usage", views.read_usage, QueueUsageBody, "Read a queue's usage", "readQueueUsage"),
    ):
        app.add_api_route(
            PREFIX + path,
            handler,
            methods=["GET"],
            tags=["Views"],
            summary=summary,
            responses={200: {"model": model, "description": "The view, for this caller."}, **_REFUSALS},
            operation_id=operation,
        )
        # Before the app's catch-all, which would call a node "no resource" and a queue's usage "no subresource".
        app.add_api_route(PREFIX + path, _read_only, methods=_WRITES, include_in_schema=False)


_WRITES = ["POST", "PUT", "PATCH", "DELETE"]


def _read_only(request: Request) -> JSONResponse:
    path = short(request.url.path, 200)
    raise ApiError(405, f"{request.method} is not allowed on {path}; it is a read-only view: use GET")


class _Views:
    """The handlers, over one ``Operations``."""

    def __init__(self, ops: Operations, authorize: Authorize | None) -> None:
        self.ops = ops
        self.authorize = authorize

    def list_nodes(self, request: Request) -> JSONResponse:
        readable = self._caller(request, "list", "Node", None)
        nodes = self.ops.list_nodes()
        allocations = node_allocations(self._jobs())
        items = [node_body(node, allocations.get(node.metadata.name), readable) for node in nodes]
        return JSONResponse({"apiVersion": API_VERSION, "kind": "NodeList", "items": items})

    def read_node(self, request: Request, name: str) -> JSONResponse:
        readable = self._caller(request, "get", "Node", name)
        node = self._node(name)
        allocation = node_allocations(self._jobs()).get(node.metadata.name)
        return JSONResponse(node_body(node, allocation, readable))

    def read_cache(self, request: Request, name: str) -> JSONResponse:
        readable = self._caller(request, "get", "Node", name)
        node = self._node(name)
        try:
            views = self.ops.cache_views(node.metadata.name)
        except OperationError as err:  # gone since it was listed, or the backend cannot read caches now
            raise ApiError(404, str(err), kind="Node", name=name) from None
        (view,) = views
        return JSONResponse(cache_body(view, readable))

    def read_usage(self, request: Request, name: str) -> JSONResponse:
        try:
            check_dns_label(name, "name")
        except ValueError as err:
            raise ApiError(400, f"the path's name: {err}") from None
        readable = self._caller(request, "get", "Queue", name)
        names = [queue.metadata.name for queue in self.ops.list_queues()]
        if name not in names:
            listed = f"queues: {', '.join(names[:20])}" if names else "there are no queues"
            raise ApiError(404, f"queue {short(name)} not found; {listed}", kind="Queue", name=name)
        try:
            described = self.ops.describe_queue(name)
        except OperationError as err:  # deleted since it was listed, or unreadable
            raise ApiError(404, str(err), kind="Queue", name=name) from None
        return JSONResponse(queue_usage_body(described.view, readable, self.ops.backend.pending_explanation()))

    # -- what the handlers share ------------------------------------------------------------------------------

    def _caller(self, request: Request, verb: str, kind: str, name: str | None) -> Readable:
        """Refuse the request unless its caller may ``verb`` the ``kind``; then which namespaces they read."""
        if self.authorize is None:
            return lambda namespace: True
        authorize, token = self.authorize, bearer_token(request.headers.get("authorization"))
        refusal = authorize(Access(verb, kind, None, name, token))
        if isinstance(refusal, Refusal):  # a Scope narrows only lists of every namespace
            raise ApiError(refusal.code, refusal.message, kind=kind, name=name)
        answers: dict[str, bool] = {}

        def readable(namespace: str) -> bool:
            if namespace not in answers:
                # The app's convention: a namespaced kind asked about with no namespace means every namespace.
                asked = None if namespace == ALL_NAMESPACES else namespace
                access = Access(NAMING_VERB.value, NAMING_KIND, asked, None, token)
                answers[namespace] = authorize(access) is None
            return answers[namespace]

        return readable

    def _node(self, name: str) -> Node:
        if len(name) > MAX_SUBDOMAIN_LENGTH:  # node names are DNS subdomains; others are merely not found
            raise ApiError(400, f"the path's node name is {len(name)} characters; at most {MAX_SUBDOMAIN_LENGTH}")
        nodes = self.ops.list_nodes()
        found = next((node for node in nodes if node.metadata.name == name), None)
        if found is None:
            known = ", ".join(node.metadata.name for node in nodes[:20])
            listed = f"nodes: {known}" if known else "there are no nodes (the control plane registers them)"
            raise ApiError(404, f"node {short(name)} not found; {listed}", kind="Node", name=name)
        return found

    def _jobs(self) -> list[TrainingJob]:
        """The jobs holding room, for what the nodes have handed out; none where they cannot be listed (RBAC)."""
        try:
            return self.ops.backend.list(TrainingJob, phases=HOLDING_PHASES)
        except OperationError:
            return []
