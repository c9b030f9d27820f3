"""The job history over the REST API: ``GET PREFIX/namespaces/{namespace}/history`` and ``GET PREFIX/history``.

The records the history keeps (finished, deleted and TTL-removed jobs; ``services.history``), newest first, with
the filters of ``phalanx history`` (``queue``, ``phase``, ``since``; ``limit`` and ``continue`` page), and, in
every answer, the queueing and run time summaries per queue of all the records the filters select (not only
this page's). Backend-agnostic: the history is a database (``adapters.history``) that the embedded control plane
or the cluster's operator writes and the server only reads.

Tenancy: reading a namespace's history is listing its TrainingJobs (the same ``authorize`` question, so the
same tokens on the embedded backend and the same RBAC on a cluster); ``GET PREFIX/history`` is listing them in
every namespace, which a caller who may read every namespace may do, and one the ``authorize`` hook scopes to
the namespaces it reads (a ``Scope``, where the hook gives one) does over those; anyone else reads theirs by
namespace.
"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

from phalanx.adapters.history.records import HistoryPage, HistoryQuery, QueueSummary, wire_form
from phalanx.adapters.lazy_imports import serially
from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.kinds import PREFIX
from phalanx.entrypoints.server.statuses import ApiError, Status
from phalanx.model.base import API_VERSION
from phalanx.model.jobs import Phase
from phalanx.model.names import check_dns_label

MAX_LIMIT = 10_000
NO_HISTORY = (
    "this server keeps no job history: start it with --history-url URL (on the embedded backend it reads the "
    "state directory's history.db, which needs the history extra: pip install 'phalanx[history]')"
)


class HistoryReader(Protocol):
    """What the routes read: a page of records and the per-queue summaries (``adapters.history.store``)."""

    def list(self, query: HistoryQuery) -> HistoryPage:
        """The records ``query`` selects, one page, newest first."""
        ...

    def summaries(self, query: HistoryQuery) -> builtins.list[QueueSummary]:
        """Queueing and run time percentiles per queue of the records ``query`` selects."""
        ...


QueueFilter = Annotated[str, Query(description="Only the jobs of this queue.")]
PhaseFilter = Annotated[str, Query(description="Only jobs that ended in this phase (Succeeded, Failed...).")]
Since = Annotated[str, Query(description="Only jobs that ended since: 90s, 30m, 2h, 7d, or an ISO 8601 time.")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many records (1 to 10000).")]
Continue = Annotated[str, Query(alias="continue", description="The metadata.continue of the previous page.")]
_REFUSALS: dict[int | str, dict[str, Any]] = {
    code: {"model": Status, "description": text}
    for code, text in (
        (400, "A bad filter (named)."),
        (401, "Not authenticated (when the server authorizes requests)."),
        (403, "Not allowed to list the namespace's TrainingJobs."),
        (404, "The server keeps no history."),
    )
}


def add_history_routes(app: FastAPI, history: HistoryReader | None, authorize: Authorize | None) -> None:
    """Serve ``history`` (None: the routes answer 404 saying how to keep one), asking ``authorize`` first."""

    def answer(
        request: Request, namespace: str | None, queue: str, phase: str, since: str, limit: int, token: str
    ) -> JSONResponse:
        if namespace is not None:
            try:
                check_dns_label(namespace, "namespace")
            except ValueError as err:
                raise ApiError(400, f"the path's namespace: {err}") from None
        scope: frozenset[str] | None = None
        if authorize is not None:
            caller = bearer_token(request.headers.get("authorization"))
            decision = authorize(Access("list", "TrainingJob", namespace, None, caller))
            if isinstance(decision, Refusal):
                raise ApiError(decision.code, decision.message, kind="TrainingJob")
            # A hook may answer a list of every namespace with the namespaces the caller reads (a Scope): the
            # history of every namespace is then the history of those.
            scope = getattr(decision, "namespaces", None)
        if history is None:
            raise ApiError(404, NO_HISTORY)
        query = HistoryQuery(
            namespace=namespace,
            namespaces=scope,
            queue=queue or None,
            phase=_phase(phase),
            since=_since(since),
            limit=limit,
            after=token or None,
        )
        return JSONResponse(_read(history, query))

    def namespaced_history(  # nosec B107  # an empty default, not a secret
        request: Request,
        namespace: str,
        queue: QueueFilter = "",
        phase: PhaseFilter = "",
        since: Since = "",
        limit: Limit = 100,
        token: Continue = "",
    ) -> JSONResponse:
        return answer(request, namespace, queue, phase, since, limit, token)

    def every_namespace_history(  # nosec B107  # an empty default, not a secret
        request: Request,
        queue: QueueFilter = "",
        phase: PhaseFilter = "",
        since: Since = "",
        limit: Limit = 100,
        token: Continue = "",
    ) -> JSONResponse:
        return answer(request, None, queue, phase, since, limit, token)

    for path, handler, summary, operation in (
        (
            f"{PREFIX}/namespaces/{{namespace}}/history",
            namespaced_history,
            "The job history of a namespace",
            "readNamespacedHistory",
        ),
        (f"{PREFIX}/history", every_namespace_history, "The job history of every namespace", "readHistory"),
    ):
        app.add_api_route(
            path,
            handler,
            methods=["GET"],
            tags=["History"],
            summary=summary,
            responses={
                200: {"description": "A page of records, newest first, and the summaries per queue."},
                **_REFUSALS,
            },
            operation_id=operation,
        )


def _read(history: HistoryReader, query: HistoryQuery) -> dict[str, Any]:
    from phalanx.adapters.history.store import HistoryError  # the history extra: present when a history is

    try:
        page = history.list(query)
        summaries = history.summaries(query)
    except HistoryError as err:  # a cursor no listing returned
        raise ApiError(400, f"continue: {err}") from None
    except Exception as err:  # the database failed: said, not a traceback
        raise ApiError(503, f"the job history cannot be read: {err}") from None
    return {
        "apiVersion": API_VERSION,
        "kind": "JobHistory",
        "metadata": {"continue": page.next} if page.next else {},
        "items": [wire_form(record) for record in page.records],
        "queues": [wire_form(summary) for summary in summaries],
    }


def _phase(text: str) -> str | None:
    if not text:
        return None
    if text not in {p.value for p in Phase}:
        phases = ", ".join(p.value for p in Phase)
        raise ApiError(400, f"phase {text!r} is not a phase; write one of {phases}")
    return text


def _since(text: str) -> datetime | None:
    if not text:
        return None
    from phalanx.entrypoints.cli.history import parse_since

    try:
        return parse_since(text, datetime.now(UTC), option="since")
    except ValueError as err:
        raise ApiError(400, str(err)) from None


def open_history(url: str | None) -> HistoryReader | None:
    """The history database at ``url`` for the routes to read; None when there is none to read.

    None for no URL, and without the ``history`` extra (the routes then say how to keep one).

    Raises:
        ValueError: the URL is not usable or the database cannot be opened, with the sentence saying why.
    """
    if url is None:
        return None
    with serially():  # SQLAlchemy and Alembic, while other threads may load them (adapters.lazy_imports)
        try:
            from phalanx.adapters.history.store import HistoryError, HistoryStore
        except ImportError:
            return None
        try:
            return HistoryStore(url)
        except HistoryError as err:
            raise ValueError(str(err)) from None
