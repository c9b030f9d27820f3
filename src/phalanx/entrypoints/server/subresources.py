"""A job's subresources: its events, replicas, log (read or followed), why it waits, halt and resume.

Paths under ``/apis/phalanx.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/``:

- ``GET events`` -> ``{"kind": "EventList", "items": [...]}``, oldest first;
- ``GET replicas`` -> ``{"kind": "ReplicaList", "items": [...]}``: where each replica runs (``describe`` shows it);
- ``GET log?replica=R[&follow=true]`` -> ``text/plain``: the replica's log (its latest attempt). Following, it
  is sent in chunks as it is written, read with the port's ``read_log`` cursor, until the job stops (finished
  or halted) or is deleted, when what is left (a last line without a newline too) is sent and the body ends;
- ``GET explain`` -> ``{"message": "<the one sentence why it is where it is>"}``;
- ``POST halt`` and ``POST resume`` -> the job as written (``Operations.set_suspended``).

Tenancy is ``core.auth``'s: the read verbs (events, logs, explain; replicas are read as ``get``) need a viewer of
the namespace, halt and resume an editor. Every route is a plain function run in the thread pool, as the kinds'
routes are: the port is synchronous. A followed log holds one pool thread while it lasts, polling the port every
``FOLLOW_POLL_SECONDS``: the port has no log watch (a file on the embedded runtime, a Pod log on a cluster).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from phalanx.entrypoints.server.access import Access, Authorize, Refusal, bearer_token
from phalanx.entrypoints.server.kinds import PREFIX
from phalanx.entrypoints.server.statuses import ApiError, Status
from phalanx.model.jobs import STOPPED_PHASES, Phase, TrainingJob
from phalanx.model.names import check_dns_label
from phalanx.services.operations import OperationError, Operations, no_replica_logs
from phalanx.services.port import LogCursor

#: How often a followed log is read again while the job runs (seconds).
FOLLOW_POLL_SECONDS = 0.25
#: The phases past which a followed log ends: nothing more is written until the job is resumed or restarted.
#: The subresources served, by plural: a path naming another is answered with these (``fallbacks``).
SUBRESOURCES = {"trainingjobs": ("events", "replicas", "log", "explain", "halt", "resume")}
JOB_PATH = f"{PREFIX}/namespaces/{{namespace}}/trainingjobs/{{name}}"
KIND = "TrainingJob"

_REFUSALS: dict[int | str, dict[str, Any]] = {
    code: {"model": Status, "description": text}
    for code, text in (
        (400, "A bad query parameter or path segment (named)."),
        (401, "Not authenticated (when the server authorizes requests)."),
        (403, "Not allowed (when the server authorizes requests)."),
        (404, "No such job (or replica)."),
    )
}

Replica = Annotated[str, Query(min_length=1, description="The replica, ROLE-INDEX (e.g. worker-0).")]
Follow = Annotated[bool, Query(description="Keep sending what is written until the job stops.")]


def add_subresource_routes(app: FastAPI, ops: Operations, authorize: Authorize | None) -> None:
    """Register the job subresources' routes on ``app`` (before its catch-all), over ``ops``."""
    routes = _JobRoutes(ops, authorize)
    tags: list[str | Enum] = [KIND]
    app.add_api_route(
        f"{JOB_PATH}/events",
        routes.events,
        methods=["GET"],
        tags=tags,
        summary="The job's events, oldest first",
        responses=_REFUSALS,
        operation_id="readTrainingJobEvents",
    )
    app.add_api_route(
        f"{JOB_PATH}/replicas",
        routes.replicas,
        methods=["GET"],
        tags=tags,
        summary="The job's replicas: where each runs, and how it is doing",
        responses=_REFUSALS,
        operation_id="readTrainingJobReplicas",
    )
    app.add_api_route(
        f"{JOB_PATH}/log",
        routes.log,
        methods=["GET"],
        tags=tags,
        summary="A replica's log (latest attempt); with follow=true, streamed until the job stops",
        responses={200: {"content": {"text/plain": {}}, "description": "The log text."}, **_REFUSALS},
        response_class=PlainTextResponse,
        operation_id="readTrainingJobLog",
    )
    app.add_api_route(
        f"{JOB_PATH}/explain",
        routes.explain,
        methods=["GET"],
        tags=tags,
        summary="One sentence: why the job is where it is",
        responses=_REFUSALS,
        operation_id="explainTrainingJob",
    )
    for verb in ("halt", "resume"):
        app.add_api_route(
            f"{JOB_PATH}/{verb}",
            routes.halt if verb == "halt" else routes.resume,
            methods=["POST"],
            tags=tags,
            summary="Stop every replica, keeping outputs" if verb == "halt" else "Queue a halted job again",
            responses={
                200: {"model": TrainingJob, "description": "The job as written."},
                **_REFUSALS,
                409: {"model": Status, "description": "The job is finished, or kept changing."},
            },
            operation_id=f"{verb}TrainingJob",
        )


class _JobRoutes:
    """The handlers, over one ``Operations``."""

    def __init__(self, ops: Operations, authorize: Authorize | None) -> None:
        self.ops = ops
        self.authorize = authorize

    def events(self, request: Request, namespace: str, name: str) -> JSONResponse:
        """``GET .../events``."""
        job = self._job(request, "events", namespace, name)
        items = [event.to_dict() for event in self.ops.backend.events_of(job)]
        return JSONResponse({"apiVersion": "v1", "kind": "EventList", "items": items})

    def replicas(self, request: Request, namespace: str, name: str) -> JSONResponse:
        """``GET .../replicas``."""
        job = self._job(request, "get", namespace, name)
        items = [replica.to_dict() for replica in self.ops.replicas_of(job)]
        return JSONResponse({"apiVersion": "phalanx.dev/v1alpha1", "kind": "ReplicaList", "items": items})

    def log(self, request: Request, namespace: str, name: str, replica: Replica, follow: Follow = False) -> Any:
        """``GET .../log?replica=R[&follow=true]``."""
        job = self._job(request, "logs", namespace, name)
        if not _is_replica_of(job, replica):
            raise ApiError(404, str(no_replica_logs(job, replica, "no log")), kind=KIND, name=name)
        if not follow:
            chunk = self.ops.backend.read_log(job, replica)
            text = "" if chunk is None else chunk.text + chunk.partial
            return PlainTextResponse(text)
        return StreamingResponse(self._following(job, replica), media_type="text/plain; charset=utf-8")

    def explain(self, request: Request, namespace: str, name: str) -> JSONResponse:
        """``GET .../explain``."""
        self._job(request, "explain", namespace, name)
        try:
            message = self.ops.explain(namespace, name)
        except OperationError as err:  # deleted since it was read
            raise ApiError(404, str(err), kind=KIND, name=name) from None
        return JSONResponse({"message": message})

    def halt(self, request: Request, namespace: str, name: str) -> JSONResponse:
        """``POST .../halt``."""
        return self._suspend(request, "halt", namespace, name, suspend=True)

    def resume(self, request: Request, namespace: str, name: str) -> JSONResponse:
        """``POST .../resume``."""
        return self._suspend(request, "resume", namespace, name, suspend=False)

    # -- what the handlers share ------------------------------------------------------------------------------

    def _suspend(self, request: Request, verb: str, namespace: str, name: str, *, suspend: bool) -> JSONResponse:
        self._job(request, verb, namespace, name)
        try:
            written = self.ops.set_suspended(namespace, name, suspend)
        except OperationError as err:  # finished (cannot be halted or resumed), or kept changing
            raise ApiError(409, str(err), kind=KIND, name=name) from None
        return JSONResponse(written.to_dict())

    def _following(self, job: TrainingJob, replica: str) -> Iterator[bytes]:
        """The log's chunks as they are written, until the job stops or is gone; then what is left."""
        cursor: LogCursor | None = None
        backend = self.ops.backend
        meta = job.metadata
        while True:
            current = backend.get(TrainingJob, meta.namespace, meta.name)
            stopped = (
                current is None or current.metadata.uid != meta.uid or Phase(current.status.phase) in STOPPED_PHASES
            )
            # Read after the job was looked at: what the replica wrote before it stopped is in this read.
            chunk = backend.read_log(job, replica, cursor)
            if chunk is not None:
                text = chunk.text + (chunk.partial if stopped else "")
                if text:
                    yield text.encode()
                cursor = chunk.cursor
            if stopped:
                return
            time.sleep(FOLLOW_POLL_SECONDS)

    def _job(self, request: Request, verb: str, namespace: str, name: str) -> TrainingJob:
        """The job the path names, once the caller may ``verb`` it (404 naming the others when there is none)."""
        for value, what in ((namespace, "namespace"), (name, "name")):
            try:
                check_dns_label(value, what)
            except ValueError as err:
                raise ApiError(400, f"the path's {what}: {err}") from None
        if self.authorize is not None:
            token = bearer_token(request.headers.get("authorization"))
            refusal = self.authorize(Access(verb, KIND, namespace, name, token))
            if isinstance(refusal, Refusal):  # a Scope narrows only lists of every namespace
                raise ApiError(refusal.code, refusal.message, kind=KIND, name=name)
        try:
            return self.ops.get_job(namespace, name)
        except OperationError as err:
            raise ApiError(404, str(err), kind=KIND, name=name) from None


def _is_replica_of(job: TrainingJob, replica: str) -> bool:
    """Whether ``replica`` (ROLE-INDEX) is one of the job's replicas by its spec."""
    role, _, index = replica.rpartition("-")
    spec = job.spec.replicas.get(role)
    return spec is not None and index.isdigit() and int(index) < spec.count
