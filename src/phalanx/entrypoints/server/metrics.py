"""``GET /metrics``: the REST server's Prometheus metrics, and the latency of every request it answers.

``add_metrics_routes`` registers, in the registry it is given (``phalanx up --listen`` passes the control
plane's, which holds the scheduler's counts; ``phalanx server`` a new one):

- the state of the objects over the port (``services.metrics.StateCollector``): jobs by phase and queue, GPUs,
  GPU health, dataset caches;
- ``phalanx_api_request_seconds{method,route,code}``: how long each request took until its response began
  (a watch or a followed log streams for as long as it likes: what the caller waited for is the first byte).
  ``route`` is the route's template (``/apis/phalanx.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}``),
  never the raw path, so a caller cannot make one series per name it tries; ``unmatched`` where no route took it.

The metrics' labels name every namespace and queue, so ``/metrics`` needs a token that may list jobs in every
namespace (``--namespace '*'``, any role): a token for fewer namespaces gets 403 with a sentence saying so, none
401, as any other route. Without ``authorize`` (``--no-auth``) it is served to anyone who can connect.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.statuses import ApiError
from phalanx.services.metrics import state_registry
from phalanx.services.port import OperationsBackend

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Histogram

#: The route label of a request no route matched (an unknown path), so unknown paths share one series.
UNMATCHED = "unmatched"
#: Buckets of the request latency (seconds): a get answers in milliseconds, a page of 10,000 jobs in tenths.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Why /metrics needs a token for every namespace, said before what the token lacks.
NEEDS_ALL_NAMESPACES = (
    "/metrics names the jobs and queues of every namespace, so it needs a token for all namespaces "
    "(phalanx token create NAME --role viewer --namespace '*')"
)


class RequestLatency:
    """ASGI middleware: observe each HTTP request's latency by method, route template and status code."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request, observing when its response starts (or that it failed before one did)."""
        """Run the request, observing when its response starts (or that it failed before one did)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        observed = False

        def observe(code: int) -> None:
            nonlocal observed
            if observed:
                return
            observed = True
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            self.histogram.labels(scope["method"], template, str(code)).observe(time.perf_counter() - started)

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                observe(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            observe(500)  # no response began: the server answers 500
            raise


def add_metrics_routes(
    app: FastAPI, backend: OperationsBackend, authorize: Authorize | None, registry: CollectorRegistry | None = None
) -> CollectorRegistry:
    """Serve ``GET /metrics`` from ``registry`` (new when None) and time every request; the registry served."""
    from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest

    registry = state_registry(backend, registry)
    histogram = Histogram(
        "phalanx_api_request_seconds",
        "REST API requests: seconds until the response began, by method, route template and status code.",
        ["method", "route", "code"],
        buckets=REQUEST_BUCKETS,
        registry=registry,
    )
    app.add_middleware(RequestLatency, histogram=histogram)

    async def metrics(request: Request) -> Response:
        if authorize is not None:
            token = bearer_token(request.headers.get("authorization"))
            # A read of every namespace's jobs, not a list: a list may be narrowed to a token's namespaces (a
            # Scope), and these labels name them all.
            answer = authorize(Access("get", "TrainingJob", None, None, token))
            if isinstance(answer, Refusal):
                message = answer.message if answer.code != 403 else f"{NEEDS_ALL_NAMESPACES}: {answer.message}"
                raise ApiError(answer.code, message)
        body = await run_in_threadpool(generate_latest, registry)  # the collector reads the store: not on the loop
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.add_api_route(
        "/metrics",
        metrics,
        methods=["GET"],
        tags=["Metrics"],
        summary="Prometheus metrics (text format); needs a token for every namespace",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "The metrics, Prometheus' text format."}},
        operation_id="readMetrics",
    )
    return registry
