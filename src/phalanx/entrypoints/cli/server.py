"""``phalanx server``: the REST API (``entrypoints.server``) of the state directory, or of a cluster.

The backend is chosen as everywhere (``--backend kubernetes``, ``--kubeconfig``, ``--context``): on a cluster
the same API is served over the Kubernetes backend, each request decided by the cluster's RBAC
(``cluster_serving``), and ``--no-auth`` is refused there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from phalanx.entrypoints.cli.options import (
    BackendOption,
    ContextOption,
    KubeconfigOption,
    StateDirOption,
    choose,
)
from phalanx.entrypoints.cli.output import console, fail

if TYPE_CHECKING:
    from phalanx.entrypoints.server.tls import TlsFiles

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
    history_url: Annotated[
        str | None,
        typer.Option(
            "--history-url",
            envvar="PHALANX_HISTORY_URL",
            help="The job history the history routes read (default: the state directory's history.db; on a "
            "cluster, the operator's --history-url; none: the routes say there is no history).",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            help="Server processes sharing the port (about one per CPU core it may use); 1 by default.",
        ),
    ] = 1,
    access_log: Annotated[
        bool,
        typer.Option("--access-log", help="Log a line per request (method, path, status); off by default."),
    ] = False,
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Serve the REST API (Kubernetes-shaped, with an OpenAPI document) of the state directory or a cluster."""
    choice = choose(backend, kubeconfig, context)
    if choice.kubernetes and no_auth:
        fail("--no-auth is for the embedded backend: on a cluster, Kubernetes RBAC decides every request", 2)
    if choice.kubernetes and workers != 1:
        fail("--workers is for the embedded backend: on a cluster, run more replicas of the server instead", 2)
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
    shown = f"[{host}]" if ":" in host else host
    if choice.kubernetes:
        _serve_cluster(choice.kubeconfig, choice.context, host, port, shown, history_url, tls, access_log)
        return
    layout = StateLayout(state_dir if state_dir is not None else default_state_dir())
    layout.ensure()
    scheme = "https" if tls is not None else "http"
    console.print(f"serving the REST API of {layout.root} on {scheme}://{shown}:{port}/apis/phalanx.dev/v1alpha1")
    console.print(f"OpenAPI document: {scheme}://{shown}:{port}/openapi.json")
    if no_auth:
        console.print("--no-auth: every request is served without a token (anyone on this machine may submit jobs)")
    else:
        console.print("every request needs a token: phalanx token create NAME --role editor --namespace NS")
    try:
        serve(
            layout,
            host,
            port,
            tokens=not no_auth,
            tls=tls,
            workers=workers,
            history_url=history_url,
            access_log=access_log,
        )
    except ValueError as err:
        fail(str(err), 2)


def _serve_cluster(
    kubeconfig: Path | None,
    context: str | None,
    host: str,
    port: int,
    shown: str,
    history_url: str | None,
    tls: TlsFiles | None,
    access_log: bool,
) -> None:
    try:
        from phalanx.entrypoints.server.cluster_serving import ClusterServeError, ClusterTarget, serve_cluster
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] in ("lightkube", "httpx", "orjson"):
            from phalanx.entrypoints.client import KUBERNETES_EXTRA_HINT

            fail(KUBERNETES_EXTRA_HINT, 2)
        raise
    where = f"context {context}" if context else "the current context"
    scheme = "https" if tls is not None else "http"
    console.print(
        f"serving the REST API of the cluster of {where} on {scheme}://{shown}:{port}/apis/phalanx.dev/v1alpha1"
    )
    console.print("every request needs a Kubernetes token (kubectl create token NAME); Kubernetes RBAC decides")
    try:
        serve_cluster(
            ClusterTarget(kubeconfig, context), host, port, history_url=history_url, tls=tls, access_log=access_log
        )
    except ClusterServeError as err:
        fail(str(err), 2)
