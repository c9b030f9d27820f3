"""The REST server on a cluster (``phalanx server --backend kubernetes``): its identity, privileges and workload.

Off by default (the chart's ``server.enabled``): the ServiceAccount ``phalanx-server``, its ClusterRole and a
Deployment of one replica. The server listens on the Pod's loopback address (plain HTTP: no TLS yet), which
``kubectl port-forward deployment/phalanx-server 8080`` reaches and nothing else does; it has no probes, since the
kubelet probes the Pod's address, not its loopback. The job history it serves is the operator's: the storage
Secret's ``history-url`` key. The
server acts for its callers after Kubernetes said they may (TokenReview, SubjectAccessReview:
``entrypoints.server.rbac``), so it needs to ask those two reviews, and to do on Phalanx's kinds what any caller
could be allowed: read, create and delete them, read the Pods' logs and the Events of a job, and read Nodes.
It never writes a status: that is the operator's and the scheduler's.
"""

from __future__ import annotations

from typing import Any

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.adapters.kubernetes.manifests import (
    OPERATOR_STORAGE_SECRET,
    InstallParameters,
    _Component,
    _deployment,
    _secret_env,
)
from phalanx.model.base import API_GROUP

SERVER = _Component("server", "phalanx", cpu="100m", memory="256Mi", memory_limit="1Gi")
SERVER_ACCOUNT = SERVER.account
SERVER_PORT = 8080
_READ = ["get", "list", "watch"]
_LABELS = {"app.kubernetes.io/part-of": "phalanx"}


def server_rules() -> list[dict[str, Any]]:
    """The server's cluster-wide rules."""
    plurals = [kind.plural for kind in KINDS]
    return [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": [API_GROUP], "resources": plurals, "verbs": [*_READ, "create", "update", "patch", "delete"]},
        # A job's replicas (their Pods), logs and Events, for the job's subresources (log, events, explain).
        {"apiGroups": [""], "resources": ["pods", "events", "nodes"], "verbs": _READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]


def server_rbac(namespace: str) -> list[dict[str, Any]]:
    """The server's ServiceAccount in ``namespace``, its ClusterRole and the binding between them."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVER_ACCOUNT, "namespace": namespace, "labels": dict(_LABELS)},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": SERVER_ACCOUNT, "labels": dict(_LABELS)},
            "rules": server_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SERVER_ACCOUNT, "labels": dict(_LABELS)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVER_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": SERVER_ACCOUNT, "namespace": namespace}],
        },
    ]


def server_deployment(image: str, namespace: str, storage_secret: str = OPERATOR_STORAGE_SECRET) -> dict[str, Any]:
    """The server's Deployment: ``phalanx server`` over the cluster, as its own ServiceAccount, on loopback."""
    history = _secret_env("PHALANX_HISTORY_URL", storage_secret, "history-url")
    deployment = _deployment(
        SERVER, InstallParameters(image=image, namespace=namespace), [history], strategy="RollingUpdate"
    )
    template = deployment["spec"]["template"]
    template["metadata"].pop("annotations", None)  # no /metrics port of its own to scrape
    container = template["spec"]["containers"][0]
    container["args"] = ["server", "--backend", "kubernetes", "--listen", f"127.0.0.1:{SERVER_PORT}"]
    container["env"] = [e for e in container["env"] if e["name"] in ("POD_NAME", "POD_NAMESPACE") or e is history]
    for field in ("ports", "livenessProbe", "readinessProbe"):
        container.pop(field)
    return deployment
