"""Running the REST app under uvicorn, the one way every server of Phalanx does it.

``phalanx server`` over a state directory (``serving``), ``phalanx server`` over a cluster (``cluster_serving``)
and ``phalanx up --listen`` inside the control plane (``background``) all serve through ``uvicorn_server``, so TLS
and ending the open watches on shutdown are written once. Open watches would hold uvicorn's graceful shutdown
forever (a watch is a response that never ends), so a stop first ends them (``app.state.stop_watches``, set by
``watch``), and uvicorn cancels whatever still runs ``GRACE_SECONDS`` later.
"""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Any

from phalanx.entrypoints.server.tls import TlsFiles

if TYPE_CHECKING:
    import uvicorn

#: How long a stopping server waits for the requests under way (a followed log among them) before cancelling them.
GRACE_SECONDS = 5


def uvicorn_options(tls: TlsFiles | None, *, access_log: bool = False) -> dict[str, Any]:
    """Uvicorn's TLS, shutdown and logging options.

    ``access_log``: a line per request (uvicorn's access log); off by default, as the Kubernetes API server logs
    none at its default verbosity: at hundreds of requests a second the log was 3% of a request's CPU and grew
    without end.
    """
    options: dict[str, Any] = {"timeout_graceful_shutdown": GRACE_SECONDS, "access_log": access_log}
    if tls is not None:
        options |= {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    return options


def end_watches(app: Any) -> None:
    """End the app's open watches (nothing when it serves none)."""
    stop = getattr(app.state, "stop_watches", None)
    if stop is not None:
        stop()


def uvicorn_server(app: Any, host: str, port: int, *, tls: TlsFiles | None = None, **config: Any) -> uvicorn.Server:
    """A uvicorn server of ``app`` whose stop (a signal's ``handle_exit``) ends the app's watches first."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **(uvicorn_options(tls) | config)))
    handle_exit = server.handle_exit

    def stop(sig: int, frame: FrameType | None) -> None:
        end_watches(app)
        handle_exit(sig, frame)

    server.handle_exit = stop  # type: ignore[method-assign]  # uvicorn calls it from its signal handlers
    return server


def freeze_startup_heap() -> None:
    """Keep what the process built before serving (modules, the app, its schemas) out of the collector's scans.

    Python's full collections walk every tracked object; a list page makes thousands of objects, and their
    collections walked the app's hundreds of thousands each time: every third page of 500 jobs took twice as
    long as the others. Frozen objects are never collected (they live as long as the server anyway).
    """
    import gc

    gc.collect()
    gc.freeze()


def serve_app(app: Any, host: str, port: int, *, tls: TlsFiles | None = None, access_log: bool = False) -> None:
    """Serve ``app`` in this thread until a signal stops it."""
    freeze_startup_heap()
    uvicorn_server(app, host, port, tls=tls, log_level="info", access_log=access_log).run()
