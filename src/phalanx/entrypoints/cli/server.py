"""``phalanx server``: the REST API of the embedded runtime's state directory (``entrypoints.server``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phalanx.entrypoints.cli.options import (
    BackendOption,
    ContextOption,
    KubeconfigOption,
    StateDirOption,
    choose,
    embedded_only,
)
from phalanx.entrypoints.cli.output import console, fail

SERVER_EXTRA_HINT = "pip install 'phalanx[server]'"


def server(
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            help="HOST:PORT to serve on; an address beyond loopback needs --tls-cert and --tls-key.",
        ),
    ] = "127.0.0.1:8080",
    tls_cert: Annotated[
        Path | None,
        typer.Option("--tls-cert", help="Serve HTTPS with this PEM certificate (its chain may follow it)."),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", help="The unencrypted PEM private key of --tls-cert."),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Serve every request without a token (by default each needs one: phalanx token create).",
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            help="Server processes sharing the port (about one per CPU core it may use); 1 by default.",
        ),
    ] = 1,
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Serve the REST API (Kubernetes-shaped, with an OpenAPI document) of the state directory until Ctrl-C."""
    embedded_only(
        choose(backend, kubeconfig, context),
        "server",
        "the cluster's API server serves the Phalanx resources (kubectl get trainingjobs)",
    )
    from phalanx.entrypoints.server.serving import ListenError, check_workers, listen_address, serve
    from phalanx.entrypoints.server.tls import TlsError, tls_files
    from phalanx.services.embedded.layout import StateLayout, default_state_dir

    try:
        tls = tls_files(tls_cert, tls_key)
        host, port = listen_address(listen, tls=tls is not None, tokens=not no_auth)
        check_workers(workers)
    except (ListenError, TlsError) as err:
        fail(str(err), 2)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        fail(f"`phalanx server` needs FastAPI and uvicorn, the server extra: {SERVER_EXTRA_HINT}", 2)
    layout = StateLayout(state_dir if state_dir is not None else default_state_dir())
    layout.ensure()
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if tls is not None else "http"
    console.print(f"serving the REST API of {layout.root} on {scheme}://{shown}:{port}/apis/phalanx.dev/v1alpha1")
    console.print(f"OpenAPI document: {scheme}://{shown}:{port}/openapi.json")
    if no_auth:
        console.print("--no-auth: every request is served without a token (anyone on this machine may submit jobs)")
    else:
        console.print("every request needs a token: phalanx token create NAME --role editor --namespace NS")
    serve(layout, host, port, tokens=not no_auth, tls=tls, workers=workers)
