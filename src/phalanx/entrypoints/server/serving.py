"""``phalanx server``: the REST API over a state directory's store, served by uvicorn on a loopback address.

Every request needs a token of the state directory's token store (``entrypoints.server.tokens``), unless the
owner serves it with ``--no-auth``. Only loopback for now: the server speaks plain HTTP (no TLS yet), so a token
sent over a network could be read on the way; ``listen_address`` refuses any other host with a sentence that
says so.
"""

from __future__ import annotations

import ipaddress
import logging
from types import FrameType

from phalanx.adapters.store import SqliteStore
from phalanx.services.embedded.layout import StateLayout
from phalanx.services.embedded.operations import SqliteBackend

LOOPBACK_NAMES = frozenset({"localhost"})


class ListenError(ValueError):
    """A ``--listen`` value that cannot be served; the message names the problem and the fix."""


def listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port), refusing a host that is not loopback.

    Raises:
        ListenError: not HOST:PORT, a port out of range, or a host other than this machine's loopback.
    """
    host, colon, port_text = text.rpartition(":")
    if not colon or not host or not port_text:
        raise ListenError(f"--listen {text!r} is not HOST:PORT; e.g. --listen 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ListenError(f"--listen {text!r}: the port must be a number from 1 to 65535")
    if host.lower() not in LOOPBACK_NAMES and not _is_loopback(host):
        raise ListenError(
            f"--listen {text!r}: {host} is not a loopback address, and the server speaks plain HTTP (no TLS yet: "
            "tokens and jobs would cross the network readable); listen on 127.0.0.1 or ::1, and reach it from "
            "elsewhere through an SSH tunnel"
        )
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: what it resolves to may change


def serve(layout: StateLayout, host: str, port: int, *, tokens: bool = True, history_url: str | None = None) -> None:
    """Serve the REST API of ``layout``'s store until interrupted (the embedded backend).

    Args:
        layout: the state directory whose store is served and whose token store decides.
        host: the loopback address to listen on (``listen_address``).
        port: the port.
        tokens: every request needs a token of ``layout``'s token store; False serves every request (``--no-auth``).
        history_url: the job history the history routes read (default: ``layout``'s history.db, left out with a
            warning when it cannot be opened).

    Raises:
        ValueError: the history of ``history_url`` cannot be opened, with the sentence saying why.
    """
    import uvicorn

    from phalanx.adapters.auth.token_store import TokenStore
    from phalanx.entrypoints.server.app import create_app
    from phalanx.entrypoints.server.history import open_history
    from phalanx.entrypoints.server.tokens import token_authorizer

    backend = SqliteBackend(SqliteStore(layout.database), layout)
    authorize = token_authorizer(TokenStore(layout.tokens_database)) if tokens else None
    if history_url is not None:
        history = open_history(history_url)
    else:
        try:
            history = open_history(f"sqlite:///{layout.history_database}")
        except ValueError as err:  # the default one: serve the jobs anyway; the history routes say there is none
            logging.getLogger(__name__).warning("the job history is not served: %s", err)
            history = None
    app = create_app(backend, authorize=authorize, history=history)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info"))
    handle_exit = server.handle_exit

    def stop(sig: int, frame: FrameType | None) -> None:
        # Open watches would hold a graceful shutdown forever: end them first (see entrypoints.server.watch).
        app.state.stop_watches()
        handle_exit(sig, frame)

    server.handle_exit = stop  # type: ignore[method-assign]  # uvicorn calls it from its signal handlers
    server.run()
