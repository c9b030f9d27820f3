"""``phalanx server``: the REST API (``entrypoints.server``) of the state directory, or of a cluster.

The backend is chosen as everywhere (``--backend kubernetes``, ``--kubeconfig``, ``--context``): on a cluster
the same API is served over the Kubernetes backend, each request decided by the cluster's RBAC
(``cluster_serving``), and ``--no-auth`` is refused there.
"""

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
)
from phalanx.entrypoints.cli.output import console, fail

SERVER_EXTRA_HINT = "pip install 'phalanx[server]'"


def server(
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            help="HOST:PORT to serve on; a loopback address only, for now (plain HTTP: no TLS yet).",
        ),
    ] = "127.0.0.1:8080",
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
    state_dir: StateDirOption = None,
    backend: BackendOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Serve the REST API (Kubernetes-shaped, with an OpenAPI document) of the state directory or a cluster."""
    choice = choose(backend, kubeconfig, context)
    if choice.kubernetes and no_auth:
        fail("--no-auth is for the embedded backend: on a cluster, Kubernetes RBAC decides every request", 2)
    from phalanx.entrypoints.server.serving import ListenError, listen_address, serve
    from phalanx.services.embedded.layout import StateLayout, default_state_dir

    try:
        host, port = listen_address(listen)
    except ListenError as err:
        fail(str(err), 2)
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        fail(f"`phalanx server` needs FastAPI and uvicorn, the server extra: {SERVER_EXTRA_HINT}", 2)
    shown = f"[{host}]" if ":" in host else host
    if choice.kubernetes:
        _serve_cluster(choice.kubeconfig, choice.context, host, port, shown, history_url)
        return
    layout = StateLayout(state_dir if state_dir is not None else default_state_dir())
    layout.ensure()
    console.print(f"serving the REST API of {layout.root} on http://{shown}:{port}/apis/phalanx.dev/v1alpha1")
    console.print(f"OpenAPI document: http://{shown}:{port}/openapi.json")
    if no_auth:
        console.print("--no-auth: every request is served without a token (anyone on this machine may submit jobs)")
    else:
        console.print("every request needs a token: phalanx token create NAME --role editor --namespace NS")
    try:
        serve(layout, host, port, tokens=not no_auth, history_url=history_url)
    except ValueError as err:
        fail(str(err), 2)


def _serve_cluster(
    kubeconfig: Path | None, context: str | None, host: str, port: int, shown: str, history_url: str | None
) -> None:
    try:
        from phalanx.entrypoints.server.cluster_serving import ClusterServeError, ClusterTarget, serve_cluster
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] in ("lightkube", "httpx", "orjson"):
            from phalanx.entrypoints.client import KUBERNETES_EXTRA_HINT

            fail(KUBERNETES_EXTRA_HINT, 2)
        raise
    where = f"context {context}" if context else "the current context"
    console.print(f"serving the REST API of the cluster of {where} on http://{shown}:{port}/apis/phalanx.dev/v1alpha1")
    console.print("every request needs a Kubernetes token (kubectl create token NAME); Kubernetes RBAC decides")
    try:
        serve_cluster(ClusterTarget(kubeconfig, context), host, port, history_url=history_url)
    except ClusterServeError as err:
        fail(str(err), 2)
