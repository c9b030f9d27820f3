"""The REST API's ``authorize`` hook on a cluster: Kubernetes authenticates the caller and RBAC decides.

Each request's bearer token goes to TokenReview; SubjectAccessReview then says whether that user and their groups
may do what the request does (``core.auth.rbac`` maps a verb on a kind to RBAC's verb, resource and subresource in
group ``phalanx.dev``). Nothing is decided here: a Role or ClusterRole bound to the caller is what lets them in,
the same permission ``kubectl`` would need for the same objects. 401 without a token the API server knows, 403
with the permission that was missing, 503 when the API server could not be asked (nothing is served unchecked).
"""

from __future__ import annotations

from phalanx.adapters.kubernetes.crds import KINDS
from phalanx.adapters.kubernetes.reviews import KubeReviewer, ReviewError
from phalanx.core.auth import Verb
from phalanx.core.auth.rbac import review_attributes
from phalanx.entrypoints.server.access import Access, Authorize, Refusal

#: What a request without a token (or with one the API server does not know) is told.
NO_TOKEN = (
    "this server needs a Kubernetes token: send 'Authorization: Bearer <token>', e.g. of a ServiceAccount "  # nosec B105  # a name or message, not a secret
    "(kubectl create token NAME -n NAMESPACE); Kubernetes RBAC decides what it may do"
)
UNKNOWN_TOKEN = "the API server does not know this token (invalid, expired, or its account was deleted); " + (
    "send a current one (kubectl create token NAME -n NAMESPACE)"
)

#: Resource names and scopes by kind: the CRDs' own table, and the cluster's Nodes.
_RESOURCES: dict[str, tuple[str, bool]] = {
    **{kind.model.__name__: (kind.plural, kind.scope == "Namespaced") for kind in KINDS},
    "Node": ("nodes", False),
    "Token": ("tokens", False),  # none on a cluster: review_attributes says so
}


def rbac_authorizer(reviewer: KubeReviewer) -> Authorize:
    """Decide each request by TokenReview and SubjectAccessReview through ``reviewer``."""

    def decide(access: Access) -> Refusal | None:
        if access.token is None:
            return Refusal(401, NO_TOKEN)
        plural, namespaced = _RESOURCES.get(access.kind, ("", True))
        try:
            if not plural:
                return Refusal(403, f"{access.kind!r} is no kind this server knows on a cluster")
            attributes = review_attributes(
                Verb(access.verb), access.kind, plural, access.namespace, namespaced=namespaced, name=access.name
            )
        except ValueError as err:
            return Refusal(403, str(err))
        try:
            identity = reviewer.authenticate(access.token)
            if identity is None:
                return Refusal(401, UNKNOWN_TOKEN)
            verdict = reviewer.allowed(identity, attributes)
        except ReviewError as err:
            return Refusal(503, str(err))
        if verdict.allowed:
            return None
        because = f" ({verdict.reason})" if verdict.reason else ""
        return Refusal(
            403,
            f"{identity.username} cannot {attributes.describe()}: Kubernetes RBAC does not allow it{because}; a Role "
            "or ClusterRole granting it, bound to this user or one of their groups, would",
        )

    return decide
