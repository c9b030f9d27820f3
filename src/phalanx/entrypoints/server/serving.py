"""``phalanx server``: the REST API over a state directory's store, served by uvicorn on a loopback address.

Only loopback for now: the API has no authentication yet, so anything that can reach the port may submit jobs
that run programs as this user. ``listen_address`` refuses any other host with a sentence that says so; the
``authorize`` hook of ``create_app`` is where token checks go before this opens up.
"""

from __future__ import annotations

import ipaddress

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
            f"--listen {text!r}: {host} is not a loopback address, and the API has no authentication yet (anyone "
            "who reaches the port could run programs as you); listen on 127.0.0.1 or ::1, and reach it from "
            "elsewhere through an SSH tunnel"
        )
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: what it resolves to may change


def serve(layout: StateLayout, host: str, port: int) -> None:
    """Serve the REST API of ``layout``'s store until interrupted (the embedded backend)."""
    import uvicorn

    from phalanx.entrypoints.server.app import create_app

    backend = SqliteBackend(SqliteStore(layout.database), layout)
    uvicorn.run(create_app(backend), host=host, port=port, log_level="info")
