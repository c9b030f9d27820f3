"""``phalanx server``: the REST API over a state directory's store, served by uvicorn.

Every request needs a token of the state directory's token store (``entrypoints.server.tokens``), unless the
owner serves it with ``--no-auth``. Plain HTTP is served on a loopback address only: a token sent over a network
in the clear could be read on the way. Any other address needs TLS (``--tls-cert``/``--tls-key``, ``tls``), and
tokens: ``--no-auth`` beyond loopback would hand the state directory to anyone who can reach the port.
``listen_address`` refuses the rest with a sentence that says why and what to do.
"""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

from phalanx.adapters.store import SqliteStore
from phalanx.entrypoints.server.tls import TlsFiles
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend

LOOPBACK_NAMES = frozenset({"localhost"})


class ListenError(ValueError):
    """A ``--listen`` value that cannot be served; the message names the problem and the fix."""


def listen_address(text: str, *, tls: bool = False, tokens: bool = True) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); a host beyond loopback only with TLS and tokens.

    Args:
        text: the ``--listen`` value.
        tls: the server has a certificate (``--tls-cert``/``--tls-key``).
        tokens: every request needs a token (False: ``--no-auth``).

    Raises:
        ListenError: not HOST:PORT, a port out of range, or a host other than this machine's loopback without
            TLS, or with ``--no-auth``.
    """
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text:
        raise ListenError(f"--listen {text!r} is not HOST:PORT; e.g. --listen 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ListenError(f"--listen {text!r}: the port must be a number from 1 to 65535")
    if host.lower() in LOOPBACK_NAMES or _is_loopback(host):
        return host, int(port_text)
    if not tls:
        raise ListenError(
            f"--listen {text!r}: {host} is not a loopback address, and without TLS the server speaks plain HTTP "
            "(tokens and jobs would cross the network readable); give --tls-cert and --tls-key, or listen on "
            "127.0.0.1 or ::1 and reach it from elsewhere through an SSH tunnel"
        )
    if not tokens:
        raise ListenError(
            f"--listen {text!r}: --no-auth serves on a loopback address only ({host} is not one: anyone who "
            "reaches the port could submit jobs); drop --no-auth and give each user a token (phalanx token create)"
        )
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: what it resolves to may change


#: Where ``app_from_environment`` finds what to serve in a worker process (``--workers``): set by ``serve``.
STATE_DIR_ENV = "PHALANX_SERVER_STATE_DIR"
NO_AUTH_ENV = "PHALANX_SERVER_NO_AUTH"
HISTORY_URL_ENV = "PHALANX_SERVER_HISTORY_URL"
MAX_WORKERS = 64


def check_workers(workers: int) -> int:
    """``--workers`` as given, when it is one a machine can run.

    Raises:
        ListenError: below 1 or above ``MAX_WORKERS``.
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise ListenError(
            f"--workers {workers}: give 1 to {MAX_WORKERS} server processes (about one per CPU core the server may use)"
        )
    return workers


def serve(
    layout: StateLayout,
    host: str,
    port: int,
    *,
    tokens: bool = True,
    tls: TlsFiles | None = None,
    workers: int = 1,
    history_url: str | None = None,
    access_log: bool = False,
) -> None:
    """Serve the REST API of ``layout``'s store until interrupted (the embedded backend).

    Args:
        layout: the state directory whose store is served and whose token store decides.
        host: the address to listen on (``listen_address``).
        port: the port.
        tokens: every request needs a token of ``layout``'s token store; False serves every request (``--no-auth``).
        tls: serve HTTPS with this certificate and key (checked: ``tls.tls_files``); None: plain HTTP.
        workers: server processes sharing the port (uvicorn's): one process serves requests on one core at a
            time (the GIL), and the store and token store are built for several processes at once.
        history_url: the job history the history routes read (default: ``layout``'s history.db, left out with a
            warning when it cannot be opened).
        access_log: log a line per request (``running.uvicorn_options``).

    Raises:
        ValueError: the history of ``history_url`` cannot be opened, with the sentence saying why.
    """
    import os

    import uvicorn

    from phalanx.entrypoints.server.running import serve_app, uvicorn_options

    if workers == 1:
        serve_app(_app(layout, tokens=tokens, history_url=history_url), host, port, tls=tls, access_log=access_log)
        return
    # Worker processes are started afresh (spawn) and build their own app: they read what to serve from here.
    # Each ends its open watches only by uvicorn's grace period (running.GRACE_SECONDS).
    os.environ[STATE_DIR_ENV] = str(layout.root)
    os.environ[NO_AUTH_ENV] = "" if tokens else "1"
    if history_url is not None:
        os.environ[HISTORY_URL_ENV] = history_url
    uvicorn.run(
        f"{__name__}:app_from_environment",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level="info",
        **uvicorn_options(tls, access_log=access_log),
    )


def app_from_environment() -> Any:
    """The app of one worker process of ``serve``, from the state directory and auth ``serve`` put in the env."""
    import os

    from phalanx.entrypoints.server.running import freeze_startup_heap

    _end_with_supervisor()
    app = _app(
        StateLayout(Path(os.environ[STATE_DIR_ENV])),
        tokens=not os.environ.get(NO_AUTH_ENV),
        history_url=os.environ.get(HISTORY_URL_ENV),
    )
    freeze_startup_heap()
    return app


def _end_with_supervisor() -> None:
    """Ask Linux to end this worker when its supervisor process dies, even by SIGKILL (``PR_SET_PDEATHSIG``).

    uvicorn's supervisor stops its workers when it is stopped; killed outright, it would leave them serving the
    port with nobody to stop them. Elsewhere than Linux this does nothing.
    """
    import ctypes
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the supervisor died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


#: prctl's option number (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def _app(layout: StateLayout, *, tokens: bool, history_url: str | None) -> Any:
    from phalanx.adapters.auth.token_store import TokenStore
    from phalanx.entrypoints.server.app import create_app
    from phalanx.entrypoints.server.tokens import token_authorizer

    backend = SqliteBackend(SqliteStore(layout.database), layout)
    authorize = token_authorizer(TokenStore(layout.tokens_database)) if tokens else None
    # One create thread: the store's writes take one lock, and more threads only contend for the GIL (create_app).
    return create_app(backend, authorize=authorize, history=served_history(layout, history_url), create_threads=1)


def served_history(layout: StateLayout, url: str | None) -> Any:
    """The history the history routes read: ``url``'s, else the state directory's (None, logged, if unreadable).

    Raises:
        ValueError: the history of ``url`` cannot be opened, with the sentence saying why.
    """
    from phalanx.entrypoints.server.history import open_history

    if url is not None:
        return open_history(url)
    try:
        return open_history(f"sqlite:///{layout.history_database}")
    except ValueError as err:  # the default one: serve the jobs anyway; the history routes say there is none
        logging.getLogger(__name__).warning("the job history is not served: %s", err)
        return None
