"""What a REST request asks Kubernetes RBAC: the SubjectAccessReview attributes of a verb on a kind, pure.

On a cluster, ``phalanx server`` decides nothing itself: it asks the API server (SubjectAccessReview) whether the
caller may do what the request does, so the cluster's Roles and bindings are the one source of truth. This module
only translates, as the API server itself maps an HTTP request to RBAC attributes:

- get, list, watch, create, update, delete: that verb on the kind's resource (``trainingjobs`` in group
  ``phalanx.dev``), in the request's namespace; a namespaced kind listed across every namespace asks with no
  namespace, which only a ClusterRole (bound cluster-wide) grants.
- logs, events, explain (reads of one job): ``get`` on the subresources ``log``, ``events``, ``explain``
  (``trainingjobs/log``, as ``pods/log``).
- halt, resume (a POST to a job's subresource): ``create`` on ``trainingjobs/halt``, ``trainingjobs/resume``
  (as a POST to ``pods/eviction`` is ``create``).
- Nodes are the cluster's own (``nodes`` in the core group); Tokens do not exist on a cluster (its
  ServiceAccount tokens take their place), so no attributes ask for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.core.auth.grants import Verb
from phalanx.model.base import API_GROUP

#: Verbs that read or act on one object through a subresource: (the RBAC verb, the subresource).
SUBRESOURCE_VERBS: dict[Verb, tuple[str, str]] = {
    Verb.LOGS: ("get", "log"),
    Verb.EVENTS: ("get", "events"),
    Verb.EXPLAIN: ("get", "explain"),
    Verb.HALT: ("create", "halt"),
    Verb.RESUME: ("create", "resume"),
}

NO_TOKENS_ON_A_CLUSTER = (
    "there are no Phalanx tokens on a cluster: Kubernetes authenticates callers (a ServiceAccount token: "
    "kubectl create token NAME) and RBAC decides what they may do"
)


@dataclass(frozen=True)
class ResourceAttributes:
    """A SubjectAccessReview's ``resourceAttributes``: may the caller ``verb`` ``resource`` in ``namespace``?"""

    verb: str
    resource: str
    group: str = API_GROUP
    namespace: str = ""
    """Empty: every namespace (for a namespaced kind), or none (for a cluster-scoped one)."""
    subresource: str = ""
    name: str = ""

    #: The key of the review's ``spec`` these attributes go in.
    SPEC_KEY = "resourceAttributes"

    def to_dict(self) -> dict[str, str]:
        """The JSON form the API server reads (empty fields left out)."""
        out = {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "subresource": self.subresource,
            "namespace": self.namespace,
            "name": self.name,
        }
        return {key: value for key, value in out.items() if value or key == "group"}

    def describe(self) -> str:
        """``create trainingjobs.phalanx.dev in namespace ml``, as a sentence names the permission."""
        resource = self.resource + (f"/{self.subresource}" if self.subresource else "")
        resource += f".{self.group}" if self.group else ""
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {resource} {where}"


@dataclass(frozen=True)
class NonResourceAttributes:
    """A SubjectAccessReview's ``nonResourceAttributes``: may the caller ``verb`` the URL ``path``?

    What a component's ``/metrics`` asks (``get /metrics``), as the API server asks for its own ``/metrics``; a
    ClusterRole's ``nonResourceURLs`` grants it.
    """

    path: str
    verb: str = "get"

    SPEC_KEY = "nonResourceAttributes"

    def to_dict(self) -> dict[str, str]:
        """The JSON form the API server reads."""
        return {"path": self.path, "verb": self.verb}

    def describe(self) -> str:
        """``get /metrics``, as a sentence names the permission."""
        return f"{self.verb} {self.path}"


def review_attributes(
    verb: Verb, kind: str, plural: str, namespace: str | None, *, namespaced: bool, name: str | None = None
) -> ResourceAttributes:
    """The attributes RBAC decides ``verb`` on ``kind`` (whose resource is ``plural``) in ``namespace`` by.

    Args:
        verb: what the request does.
        kind: the kind (``TrainingJob``, ``Node``...).
        plural: its resource name (``trainingjobs``).
        namespace: the request's namespace; None (or ``*``) for every namespace, ignored for cluster-scoped kinds.
        namespaced: whether the kind's objects belong to a namespace.
        name: the object's name, when the request names one.

    Raises:
        ValueError: a kind that does not exist on a cluster (Token), with the sentence saying what does instead.
    """
    if kind == "Token":
        raise ValueError(NO_TOKENS_ON_A_CLUSTER)
    rbac_verb, subresource = SUBRESOURCE_VERBS.get(verb, (verb.value, ""))
    group = "" if kind == "Node" else API_GROUP
    where = namespace if namespaced and namespace and namespace != "*" else ""
    return ResourceAttributes(rbac_verb, plural, group, where, subresource, name or "")
