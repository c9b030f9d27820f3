"""The REST server on a cluster (``phalanx server --backend kubernetes``): its identity and least privilege.

Off by default (the chart's ``server.enabled``): the ServiceAccount ``phalanx-server`` and its ClusterRole. The
server acts for its callers after Kubernetes said they may (TokenReview, SubjectAccessReview:
``entrypoints.server.rbac``), so it needs to ask those two reviews, and to do on Phalanx's kinds what any caller
could be allowed: read, create and delete them, read the Pods' logs and the Events of a job, and read Nodes.
It never writes a status: that is the operator's and the scheduler's.
"""

from __future__ import annotations

from typing import Any

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.model.base import API_GROUP

SERVER_ACCOUNT = "phalanx-server"
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
