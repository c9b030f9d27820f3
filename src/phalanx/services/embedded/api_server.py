"""The embedded control plane's local API: JSON over HTTP on a Unix socket in the state directory.

It lets thin clients (``phalanx run``) submit and follow jobs without loading the model layer themselves: the
control plane, which has it loaded already, validates, creates and reads. Requests share one store, which keeps a
connection per thread. Routes:

- ``POST /v1/submit`` ``{documents | text, submitDir, namespace?, replaceFinished?, source?, standIns?}``
  (``text``: the YAML/JSON file's content, parsed here; ``standIns``: image -> the words of the local program that
  plays it, ``core.stand_ins``) → ``200 {created: [...]}``,
  ``422 {errors: [{path, message}], source}`` (nothing created), ``409 {message}``.
- ``GET /v1/namespaces/NS/trainingjobs/NAME?after=RV&wait=S`` → ``200`` the job (wire form) once its
  resourceVersion differs from ``RV`` or ``S`` seconds have passed; ``404 {message}``.
- ``GET /v1/namespaces/NS/trainingjobs/NAME/logs`` → ``200 {logs: [[replica, path], ...]}``.
- Queues (cluster-scoped, created and replaced through ``/v1/submit`` like every object):
  ``GET /v1/queues`` → ``200 {items: [queue, ...]}``, each with ``status`` as computed now from the jobs
  (``services.queue_views``); ``GET /v1/queues/NAME`` → ``200`` the queue with its ``admitted`` and
  ``pending`` jobs (``namespace/name``) and the other queues of its ``cohort``, ``404 {message}``;
  ``DELETE /v1/queues/NAME`` → ``200 {deleted: NAME, admitted: [...]}`` (the jobs that keep running, no longer
  limited by a quota), ``404 {message}``.

The socket is created with mode 0600: only the owner of the state directory may talk to it. The transport
(``api_http.py``) bounds what a client may send and answers every request, or hangs up in time; the routes
here check each request's fields before anything else, and answer a malformed one with ``400`` and one
sentence naming the field: ``wait`` must be a number of seconds from 0 to ``MAX_WAIT_SECONDS``, ``after`` a
resourceVersion (or empty), a submit body a JSON object of the fields above, nested at most
``MAX_JSON_DEPTH`` deep. Errors are ``{message}``, or ``{errors, source}`` for invalid documents.

The control plane hands the server its own store: a long poll then wakes the moment the control plane writes
(the store wakes same-process waiters through a condition variable), not at the next check of the file. In
turn the server calls ``on_write`` after it has written, so the control plane wakes for a submitted job at once.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from phalanx.adapters.store import SqliteStore, StoreError, StoreUnavailableError
from phalanx.model.errors import FieldError, SpecError, from_validation_error
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import parse_documents
from phalanx.model.meta import check_dns_label
from phalanx.services.embedded.api_http import MAX_BODY_BYTES, HttpError, HttpLimits, HttpServer, Request, Response
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import EmbeddedOperations
from phalanx.services.operations import OperationError
from phalanx.services.queue_views import QueueView

log = logging.getLogger(__name__)
__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "MAX_WAIT_SECONDS", "HttpLimits", "LocalApiServer", "socket_accepts"]
MAX_WAIT_SECONDS = 30.0
"""The longest long poll; below the client's 60 s socket timeout, so an answer always comes first."""
MAX_JSON_DEPTH = 100
"""How deep a submit body may nest (as YAML in a spec file): far past any spec, far from a RecursionError."""
MAX_RESOURCE_VERSION_DIGITS = 20
_SUBMIT_FIELDS = ("documents", "text", "submitDir", "namespace", "replaceFinished", "source", "standIns")


def store_failure(err: StoreError) -> dict[str, str]:
    """The 503 body for a store failure; a passing one (locked, disk full) says so, for clients to retry."""
    if isinstance(err, StoreUnavailableError):
        return {"message": str(err), "reason": "StoreUnavailable"}
    return {"message": f"the state store failed: {err}"}


class _Routes:
    """The API's routes over one ``EmbeddedOperations``; called in the transport's worker threads."""

    def __init__(self, ops: EmbeddedOperations, on_write: Callable[[], None]) -> None:
        self.ops = ops
        self.on_write = on_write

    def __call__(self, request: Request) -> Response:
        parts = request.segments
        try:
            if parts == ["v1", "submit"]:
                _allow(request, "POST")
                return self._submit(request)
            if parts[:2] == ["v1", "queues"] and len(parts) in (2, 3):
                return self._queues(request)
            if len(parts) in (5, 6) and parts[:2] == ["v1", "namespaces"] and parts[3] == "trainingjobs":
                if len(parts) == 5:
                    _allow(request, "GET")
                    return self._job(request, parts[2], parts[4])
                if parts[5] == "logs":
                    _allow(request, "GET")
                    files = self.ops.log_files(parts[2], parts[4])
                    return Response(200, {"logs": [[replica, str(path)] for replica, path in files]})
        except OperationError as err:
            return Response(409 if parts == ["v1", "submit"] else 404, {"message": str(err)})
        except SpecError as err:
            return _invalid(err.errors, err.source)
        except ValidationError as err:  # a model built past the spec door: still the caller's input
            return _invalid(from_validation_error(err), None)
        except StoreError as err:
            # Typically the control plane stopping under a long poll: its store is closed.
            return Response(503, store_failure(err))
        return Response(404, {"message": f"no route {request.path[:200]}"})

    def _submit(self, request: Request) -> Response:
        fields = _submit_fields(request.body)
        namespace = fields.get("namespace")
        if namespace is not None:
            try:
                check_dns_label(namespace, "namespace")
            except ValueError as err:
                return _invalid([FieldError("metadata.namespace", str(err))], fields.get("source"))
        try:
            documents = fields.get("documents")
            if documents is None:
                # Parsing here spares thin clients the YAML library; errors name the line, as locally.
                documents = parse_documents(fields["text"], source=fields.get("source") or "<input>")
            created = self.ops.submit(
                documents,
                submit_dir=Path(fields["submitDir"]),
                namespace=namespace,
                replace_finished=bool(fields.get("replaceFinished")),
                source=fields.get("source"),
                stand_ins=fields.get("standIns"),
            )
        finally:
            self.on_write()  # even a failed submit may have written some of its documents
        items = [
            {"kind": c.kind, "namespace": c.namespace, "name": c.name}
            | {"replaced": c.replaced, "configured": c.configured, "unchanged": c.unchanged}
            for c in created
        ]
        return Response(200, {"created": items})

    def _job(self, request: Request, namespace: str, name: str) -> Response:
        after = _query_value(request, "after", "")
        if not (after == "" or (after.isascii() and after.isdigit() and len(after) <= MAX_RESOURCE_VERSION_DIGITS)):
            raise HttpError(400, f"after must be a resourceVersion (an integer) or empty, got {after[:40]!r}")
        text = _query_value(request, "wait", "0") or "0"
        try:
            wait = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            wait = math.nan
        if not 0 <= wait <= MAX_WAIT_SECONDS:  # False for nan too
            raise HttpError(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}, got {text[:40]!r}")
        return Response(200, _job_after(self.ops, namespace, name, after, wait).to_dict())

    def _queues(self, request: Request) -> Response:
        """``/v1/queues`` and ``/v1/queues/NAME``."""
        parts = request.segments
        if len(parts) == 2 and request.method == "GET":
            return Response(200, {"items": [queue_wire(view) for view in self.ops.queue_views()]})
        if len(parts) == 3 and request.method == "GET":
            described = self.ops.describe_queue(parts[2])
            body = queue_wire(described.view, jobs=True)
            body["cohort"] = [queue_wire(view) for view in described.cohort]
            return Response(200, body)
        if len(parts) == 3 and request.method == "DELETE":
            try:
                deleted = self.ops.delete_queue(parts[2])
            finally:
                self.on_write()
            return Response(200, {"deleted": deleted.name, "admitted": [job.key for job in deleted.admitted]})
        raise HttpError(405, f"{request.method} is not allowed on {request.path[:200]}")


def _allow(request: Request, method: str) -> None:
    if request.method != method:
        raise HttpError(405, f"{request.method} is not allowed on {request.path[:200]}; use {method}")


def _invalid(errors: list[FieldError], source: str | None) -> Response:
    return Response(422, {"errors": [{"path": e.path, "message": e.message} for e in errors], "source": source})


def _query_value(request: Request, name: str, default: str) -> str:
    values = request.query.get(name, [default])
    if len(values) > 1:
        raise HttpError(400, f"the query gives {name} {len(values)} times; give it once")
    return values[0]


def _submit_fields(body: bytes) -> dict[str, Any]:
    """The fields of a submit body, each of the right type, or ``HttpError`` 400 naming the first that is not."""
    try:
        fields = json.loads(body)
    except RecursionError:
        raise HttpError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as err:  # UnicodeDecodeError and JSONDecodeError included
        raise HttpError(400, f"the request body is not JSON: {str(err)[:200]}") from None
    if _depth(fields) > MAX_JSON_DEPTH:
        raise HttpError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
    example = '{"documents": [...], "submitDir": "/abs/dir"}'
    if not isinstance(fields, dict):
        raise HttpError(400, f"the request body must be a JSON object like {example}, got {type(fields).__name__}")
    if unknown := sorted(set(fields) - set(_SUBMIT_FIELDS)):
        known = ", ".join(_SUBMIT_FIELDS)
        raise HttpError(400, f"unknown field {unknown[0][:60]!r} in the request body; the fields are {known}")
    expected: dict[str, tuple[type, str]] = {
        "submitDir": (str, "a string, the absolute directory relative paths start from"),
        "text": (str, "a string, the content of a YAML or JSON spec file"),
        "documents": (list, "a list of objects, the documents of a spec"),
        "namespace": (str, "a string, a namespace name"),
        "replaceFinished": (bool, "true or false"),
        "source": (str, "a string, the spec file's name"),
        "standIns": (dict, "an object of image -> the words of the program that plays it"),
    }
    for name, (kind, what) in expected.items():
        value = fields.get(name)
        if value is not None and not isinstance(value, kind):
            raise HttpError(400, f"{name} must be {what}, got {type(value).__name__}")
    if not fields.get("submitDir") or not Path(fields["submitDir"]).is_absolute() or "\0" in fields["submitDir"]:
        raise HttpError(400, f"submitDir must be an absolute directory path; the body is like {example}")
    stand_ins = fields.get("standIns") or {}
    if not all(isinstance(p, list) and all(isinstance(w, str) for w in p) for p in stand_ins.values()):
        raise HttpError(400, "standIns must map each image to a list of strings, the words of its program")
    if (fields.get("documents") is None) == (fields.get("text") is None):
        given = "both" if fields.get("documents") is not None else "neither"
        raise HttpError(400, f"give documents (a list of objects) or text (a spec file's content); got {given}")
    for index, document in enumerate(fields.get("documents") or []):
        if not isinstance(document, dict):
            raise HttpError(400, f"documents[{index}] must be an object (one document), got {type(document).__name__}")
    return fields


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_JSON_DEPTH:
                    return depth + 1
                stack.append((child, depth + 1))
        deepest = max(deepest, depth if isinstance(item, dict | list) else 0)
    return deepest


def _job_after(ops: EmbeddedOperations, namespace: str, name: str, after: str, wait: float) -> TrainingJob:
    """The job once its resourceVersion is not ``after`` (a long poll), or as it is when ``wait`` runs out."""
    deadline = time.monotonic() + wait
    while True:
        seq = ops.store.latest_seq()
        job = ops.get_job(namespace, name)
        remaining = deadline - time.monotonic()
        if job.metadata.resource_version != after or remaining <= 0:
            return job
        ops.store.wait_for_change(seq, remaining)


def queue_wire(view: QueueView, *, jobs: bool = False) -> dict[str, Any]:
    """The Queue's wire form with ``status`` as computed now; with ``jobs``, its admitted and pending jobs."""
    body = view.current().to_dict()
    if jobs:
        body["admitted"] = [job.key for job in view.admitted]
        body["pending"] = [{"job": job.key, "message": job.status.message} for job in view.pending]
    return body


class LocalApiServer:
    """Serves the local API from a background thread while the control plane leads.

    Args:
        layout: the state directory.
        store: the store to serve from (the control plane's own); by default one of the server's.
        on_write: called after a request that may have written to the store.
        limits: the transport's timeouts and bounds (the documented limits by default).

    """

    def __init__(
        self,
        layout: StateLayout,
        *,
        store: SqliteStore | None = None,
        on_write: Callable[[], None] | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self.layout = layout
        self.store = store
        self.on_write = on_write or (lambda: None)
        self.limits = limits or HttpLimits()
        self._server: HttpServer | None = None

    def start(self) -> None:
        """Bind the socket and serve from background threads."""
        path = self.layout.api_socket
        if len(str(path).encode()) >= 104:
            log.warning("state directory path too long for a Unix socket; the local API is off")
            return
        # One store for every worker thread: it keeps a connection per thread itself, and opening it once
        # spares each request the schema check. A store of our own (no control plane's to share) checks for
        # changes every 2-5 ms rather than backing off to 20: someone waits on every long poll.
        store = self.store or SqliteStore(self.layout.database, max_change_poll_interval=0.005)
        server = HttpServer(path, _Routes(EmbeddedOperations(store, self.layout), self.on_write), self.limits)
        try:
            server.start()
        except OSError as err:
            server.stop()
            log.warning("cannot serve the local API on %s: %s", path, err)
            return
        self._server = server
        log.info("local API on %s", path)

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        if self._server is not None:
            self._server.stop()
            self._server = None


def socket_accepts(path: Path, timeout: float = 0.5) -> bool:
    """Whether something listens on the Unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
