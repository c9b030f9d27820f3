"""The REST app served from a thread of another process: ``phalanx up --listen`` inside the control plane.

The same ``create_app`` and the same token check as ``phalanx server`` (``serving``), over the state directory's
store, with the control plane's metrics registry: its ``/metrics`` then has the scheduler's counts (admissions,
their waits, preemptions, cycle durations) beside the state's and the API's, which a separate ``phalanx server``
process cannot see. ``start`` returns once the socket listens, or raises with the reason it could not.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from phalanx.adapters.store import SqliteStore
from phalanx.entrypoints.server.running import end_watches
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend

if TYPE_CHECKING:
    import uvicorn
    from prometheus_client import CollectorRegistry


class ServeError(RuntimeError):
    """The server could not start (the address is taken, not this machine's...); the message says which."""


class BackgroundServer:
    """uvicorn in a daemon thread; ``stop`` ends it and waits for the thread."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, app: Any) -> None:
        self._server = server
        self._thread = thread
        self._app = app

    def stop(self, timeout: float = 10.0) -> None:
        """End the open watches, stop accepting, let requests under way finish (up to ``timeout`` seconds)."""
        end_watches(self._app)
        self._server.should_exit = True
        self._thread.join(timeout)


def start(
    store: SqliteStore,
    layout: StateLayout,
    host: str,
    port: int,
    *,
    registry: CollectorRegistry,
    tokens: bool = True,
    history_url: str | None = None,
    timeout: float = 30.0,
) -> BackgroundServer:
    """Serve ``layout``'s REST API on ``host:port`` from a thread; return once it listens.

    The history routes read the history the control plane records into: ``history_url``, or the state
    directory's history.db (left out with a warning when it cannot be opened, as ``phalanx server`` does).

    ``store`` is the control plane's own: one ``SqliteStore`` per file in a process, as its local API shares it
    (a second one on the same file, in a process that also forks replicas' shims, saw SQLite's "disk I/O error").

    Raises:
        ServeError: it did not start within ``timeout`` seconds or stopped at once (the address is in use).
    """
    from phalanx.adapters.auth.token_store import TokenStore
    from phalanx.entrypoints.server.app import create_app
    from phalanx.entrypoints.server.running import uvicorn_server
    from phalanx.entrypoints.server.serving import served_history
    from phalanx.entrypoints.server.tokens import token_authorizer

    backend = SqliteBackend(store, layout)
    authorize = token_authorizer(TokenStore(layout.tokens_database)) if tokens else None
    history = served_history(layout, history_url)
    app = create_app(backend, authorize=authorize, registry=registry, history=history)
    server = uvicorn_server(app, host, port, log_level="warning", lifespan="off")
    failure: list[BaseException] = []

    def run() -> None:
        # Not the main thread: uvicorn leaves the signals to the control plane, which stops it with ``stop``.
        try:
            asyncio.run(server.serve())
        except BaseException as error:  # SystemExit too: uvicorn exits when it cannot bind
            failure.append(error)

    thread = threading.Thread(target=run, name="rest-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            reason = f": {failure[0]}" if failure and str(failure[0]) not in ("", "1") else ""
            raise ServeError(f"cannot serve the REST API on {host}:{port} (is the port in use?){reason}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise ServeError(f"the REST API did not start listening on {host}:{port} within {timeout:.0f}s")
        thread.join(0.01)  # wakes at once if it ended, and looks at started again after 10 ms
    return BackgroundServer(server, thread, app)
