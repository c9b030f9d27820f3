"""The embedded control plane's local API: JSON over HTTP on a Unix socket in the state directory.

It lets thin clients (``phalanx run``) submit and follow jobs without loading the model layer themselves: the
control plane, which has it loaded already, validates, creates and reads. Requests share one store, which keeps a
connection per thread. Routes:

- ``POST /v1/submit`` ``{documents | text, submitDir, namespace?, replaceFinished?, source?}`` (``text``: the
  YAML/JSON file's content, parsed here) → ``200 {created: [...]}``,
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

The socket is created with mode 0600: only the owner of the state directory may talk to it.

The control plane hands the server its own store: a long poll then wakes the moment the control plane writes
(the store wakes same-process waiters through a condition variable), not at the next check of the file. In
turn the server calls ``on_write`` after it has written, so the control plane wakes for a submitted job at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from phalanx.adapters.store import SqliteStore, StoreError, StoreUnavailableError
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import parse_documents
from phalanx.services.layout import StateLayout
from phalanx.services.operations import OperationError, Operations
from phalanx.services.queue_views import QueueView

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 16 * 2**20
MAX_WAIT_SECONDS = 30.0


def store_failure(err: StoreError) -> dict[str, str]:
    """The 503 body for a store failure; a passing one (locked, disk full) says so, for clients to retry."""
    if isinstance(err, StoreUnavailableError):
        return {"message": str(err), "reason": "StoreUnavailable"}
    return {"message": f"the state store failed: {err}"}


class _UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, path: Path, layout: StateLayout, store: SqliteStore | None, on_write: Callable[[], None]
    ) -> None:
        self.layout = layout
        self.on_write = on_write
        # One store for every request thread: it keeps a connection per thread itself, and opening it once
        # spares each request the schema check. A store of our own (no control plane's to share) checks for
        # changes every 2-5 ms rather than backing off to 20: someone waits on every long poll.
        self.ops = Operations(store or SqliteStore(layout.database, max_change_poll_interval=0.005), layout)
        path.unlink(missing_ok=True)
        super().__init__(str(path), _Handler)
        os.chmod(path, 0o600)
        self.inode = os.stat(path).st_ino  # to tell our socket file from a later leader's at the same path

    def operations(self) -> Operations:
        return self.ops


class _Handler(BaseHTTPRequestHandler):
    server: _UnixHttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("api: " + format, *args)

    def address_string(self) -> str:
        return "local"

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        if urlparse(self.path).path != "/v1/submit":
            self._reply(404, {"message": f"no route {self.path}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._reply(413, {"message": f"request larger than {MAX_BODY_BYTES} bytes"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
            submit_dir = Path(request["submitDir"])
            text = request.get("text")
            documents = request["documents"] if text is None else None
        except (ValueError, KeyError, TypeError) as err:
            self._reply(400, {"message": f"bad request: {err}"})
            return
        try:
            if documents is None:
                # Parsing here spares thin clients the YAML library; errors name the line, as locally.
                documents = parse_documents(str(text), source=request.get("source") or "<input>")
            created = self.server.operations().submit(
                documents,
                submit_dir=submit_dir,
                namespace=request.get("namespace"),
                replace_finished=bool(request.get("replaceFinished")),
                source=request.get("source"),
            )
        except SpecError as err:
            errors = [{"path": e.path, "message": e.message} for e in err.errors]
            self._reply(422, {"errors": errors, "source": err.source})
            return
        except OperationError as err:
            self._reply(409, {"message": str(err)})
            return
        except StoreError as err:
            self._reply(503, store_failure(err))
            return
        finally:
            self.server.on_write()  # even a failed submit may have written some of its documents
        items = [
            {
                "kind": c.kind,
                "namespace": c.namespace,
                "name": c.name,
                "replaced": c.replaced,
                "configured": c.configured,
            }
            for c in created
        ]
        self._reply(200, {"created": items})

    def _queues(self, method: str, parts: list[str]) -> None:
        """``/v1/queues`` and ``/v1/queues/NAME``."""
        ops = self.server.operations()
        try:
            if len(parts) == 2 and method == "GET":
                self._reply(200, {"items": [queue_wire(view) for view in ops.queue_views()]})
            elif len(parts) == 3 and method == "GET":
                described = ops.describe_queue(parts[2])
                body = queue_wire(described.view, jobs=True)
                body["cohort"] = [queue_wire(view) for view in described.cohort]
                self._reply(200, body)
            elif len(parts) == 3 and method == "DELETE":
                try:
                    deleted = ops.delete_queue(parts[2])
                finally:
                    self.server.on_write()
                self._reply(200, {"deleted": deleted.name, "admitted": [job.key for job in deleted.admitted]})
            else:
                self._reply(405, {"message": f"{method} is not allowed on {self.path}"})
        except OperationError as err:
            self._reply(404, {"message": str(err)})
        except StoreError as err:
            self._reply(503, store_failure(err))

    def do_DELETE(self) -> None:
        parts = urlparse(self.path).path.strip("/").split("/")
        if parts[:2] == ["v1", "queues"] and len(parts) == 3:
            self._queues("DELETE", parts)
            return
        self._reply(404, {"message": f"no route {self.path}"})

    def do_GET(self) -> None:
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        if parts[:2] == ["v1", "queues"] and len(parts) in (2, 3):
            self._queues("GET", parts)
            return
        if len(parts) in (5, 6) and parts[:2] == ["v1", "namespaces"] and parts[3] == "trainingjobs":
            namespace, name = parts[2], parts[4]
            ops = self.server.operations()
            try:
                if len(parts) == 6 and parts[5] == "logs":
                    files = ops.log_files(namespace, name)
                    self._reply(200, {"logs": [[replica, str(path)] for replica, path in files]})
                    return
                if len(parts) == 5:
                    query = parse_qs(url.query)
                    after = query.get("after", [""])[0]
                    wait = min(float(query.get("wait", ["0"])[0] or 0), MAX_WAIT_SECONDS)
                    self._reply(200, _job_after(ops, namespace, name, after, wait).to_dict())
                    return
            except OperationError as err:
                self._reply(404, {"message": str(err)})
                return
            except ValueError as err:
                self._reply(400, {"message": f"bad request: {err}"})
                return
            except StoreError as err:
                # Typically the control plane stopping under a long poll: its store is closed.
                self._reply(503, store_failure(err))
                return
        self._reply(404, {"message": f"no route {self.path}"})


def _job_after(ops: Operations, namespace: str, name: str, after: str, wait: float) -> TrainingJob:
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

    """

    def __init__(
        self,
        layout: StateLayout,
        *,
        store: SqliteStore | None = None,
        on_write: Callable[[], None] | None = None,
    ) -> None:
        self.layout = layout
        self.store = store
        self.on_write = on_write or (lambda: None)
        self._server: _UnixHttpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind the socket and serve in a daemon thread."""
        path = self.layout.api_socket
        if len(str(path).encode()) >= 104:
            log.warning("state directory path too long for a Unix socket; the local API is off")
            return
        try:
            self._server = _UnixHttpServer(path, self.layout, self.store, self.on_write)
        except OSError as err:
            log.warning("cannot serve the local API on %s: %s", path, err)
            return
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-api", daemon=True)
        self._thread.start()
        log.info("local API on %s", path)

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            # A control plane stepping down must not remove the socket of the one that took over from it.
            with contextlib.suppress(OSError):
                if os.stat(self.layout.api_socket).st_ino == self._server.inode:
                    self.layout.api_socket.unlink()
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
