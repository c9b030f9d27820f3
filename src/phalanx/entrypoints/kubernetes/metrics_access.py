"""Who may read a cluster component's ``/metrics``: Kubernetes authenticates the caller and RBAC decides.

The operator's metrics name every namespace and queue with jobs in them; the scheduler's and the node agents' name
queues too. Served to anyone who reaches the Pod, they would tell any tenant what the others run. So, as the API
server guards its own ``/metrics`` (and as controller-runtime's secure metrics and kube-rbac-proxy do), each
scrape's bearer token goes to TokenReview, and SubjectAccessReview says whether that user may ``get`` the
non-resource URL ``/metrics``. The install's ClusterRole ``phalanx-metrics-reader`` grants exactly that; bind it to
the ServiceAccount of the Prometheus that scrapes (docs/install.md#metrics). ``/healthz`` and ``/readyz`` stay
open: the kubelet probes them without a token, and they say nothing but "ok".

``--metrics-access open`` (``$PHALANX_METRICS_ACCESS``) serves ``/metrics`` to anyone, for a cluster of one team.
Answers: 401 without a token the API server knows, 403 naming the missing permission and the ClusterRole, 503
when the API server could not be asked (nothing is served unchecked). Reviews are cached briefly
(``adapters.kubernetes.reviews``), so a scrape every 30 s costs two reviews at most.
"""

from __future__ import annotations

from collections.abc import Callable

from phalanx.adapters.kubernetes.manifests import METRICS_READER_ROLE
from phalanx.adapters.kubernetes.reviews import KubeReviewer, ReviewError
from phalanx.core.auth.rbac import NonResourceAttributes
from phalanx.entrypoints.server.access import bearer_token

METRICS_PATH = "/metrics"
RBAC, OPEN = "rbac", "open"
ACCESS_CHOICES = (RBAC, OPEN)

#: A scrape's ``Authorization`` header -> None to serve it, or the HTTP status and the sentence to answer.
MetricsGuard = Callable[[str | None], tuple[int, str] | None]

NO_TOKEN = (
    "/metrics needs a Kubernetes token: send 'Authorization: Bearer <token>' of an account bound to the "
    f"ClusterRole {METRICS_READER_ROLE} (a Prometheus: its ServiceAccount's token file)"
)
UNKNOWN_TOKEN = (
    "the API server does not know this token (invalid, expired, or its account was deleted); send a current one"  # nosec B105  # a name or message, not a secret
)


def reviewed_by(reviewer: KubeReviewer) -> MetricsGuard:
    """Serve ``/metrics`` to the callers RBAC lets ``get /metrics``, as TokenReview and SubjectAccessReview say."""
    wanted = NonResourceAttributes(METRICS_PATH)

    def check(authorization: str | None) -> tuple[int, str] | None:
        token = bearer_token(authorization)
        if token is None:
            return 401, NO_TOKEN
        try:
            identity = reviewer.authenticate(token)
            if identity is None:
                return 401, UNKNOWN_TOKEN
            verdict = reviewer.allowed(identity, wanted)
        except ReviewError as error:
            return 503, str(error)
        if verdict.allowed:
            return None
        because = f" ({verdict.reason})" if verdict.reason else ""
        return 403, (
            f"{identity.username} cannot {wanted.describe()}: Kubernetes RBAC does not allow it{because}; bind the "
            f"ClusterRole {METRICS_READER_ROLE} to this account (kubectl create clusterrolebinding NAME "
            f"--clusterrole {METRICS_READER_ROLE} --serviceaccount NAMESPACE:ACCOUNT)"
        )

    return check
