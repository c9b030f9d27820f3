"""``phalanx server`` on a cluster: the same REST API over the Kubernetes backend, RBAC deciding every request.

The server reads and writes the cluster's objects with its own identity (the kubeconfig's user, or its
ServiceAccount in a Pod), after asking the API server whether the *caller* may (``rbac``: TokenReview, then
SubjectAccessReview), so a caller can do through it exactly what their RBAC lets them do with kubectl. The job
history is the operator's database, given by ``--history-url``; without one the history routes say so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from phalanx.adapters.kubernetes.api import KubeApi, KubeApiError, load_kubeconfig
from phalanx.adapters.kubernetes.reviews import DEFAULT_TTL_S, KubeReviewer
from phalanx.entrypoints.server.history import open_history
from phalanx.entrypoints.server.rbac import rbac_authorizer
from phalanx.entrypoints.server.tls import TlsFiles
from phalanx.services.kubernetes.operations import KubeBackend


class ClusterServeError(Exception):
    """The cluster or the history cannot be used; the message says which and what to do."""


@dataclass(frozen=True)
class ClusterTarget:
    """Which cluster to serve: a kubeconfig file and context (None: in-cluster, ``$KUBECONFIG``, ~/.kube/config)."""

    kubeconfig: str | os.PathLike[str] | None = None
    context: str | None = None


def serve_cluster(
    target: ClusterTarget,
    host: str,
    port: int,
    *,
    history_url: str | None = None,
    review_ttl: float = DEFAULT_TTL_S,
    tls: TlsFiles | None = None,
    access_log: bool = False,
) -> None:
    """Serve the REST API of the cluster ``target`` selects until interrupted.

    Raises:
        ClusterServeError: no usable kubeconfig or context, or a history URL that cannot be opened.
    """
    from phalanx.entrypoints.server.app import create_app
    from phalanx.entrypoints.server.running import serve_app

    try:
        selected = load_kubeconfig(target.kubeconfig, target.context)
        api = KubeApi.from_kubeconfig(target.kubeconfig, target.context)
    except KubeApiError as error:
        raise ClusterServeError(f"{error.message}; pass --kubeconfig FILE and --context NAME") from None
    try:
        history = open_history(history_url)
    except ValueError as err:
        raise ClusterServeError(str(err)) from None
    backend = KubeBackend(api, server=str(selected.cluster.server))
    authorize = rbac_authorizer(KubeReviewer(api, ttl=review_ttl))
    try:
        serve_app(create_app(backend, authorize=authorize, history=history), host, port, tls=tls, access_log=access_log)
    finally:
        api.close()
