"""What a token carries: one ``Role`` for a set of namespaces (a ``Grant``), the verbs, and the kinds' scopes.

Roles nest: a viewer reads (get, list, watch, logs, events, explain); an editor also writes (create, update,
delete, halt, resume); an admin also writes the cluster-scoped kinds and manages tokens. A grant's namespaces
are exact names, or ``*`` for every namespace (alone: it already covers the others).

Cluster-scoped kinds (JobType, Queue, Node, and Token, the tokens themselves) are scoped as on a cluster even
where the embedded store files a JobType under a namespace: a JobType is a template every namespace's jobs may
name and a Queue hands out quota to the namespaces it lists, so writing either is the cluster administrator's
decision, the reason ``model.queues`` gives for Queues being cluster-scoped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from phalanx.model.names import check_dns_label

ALL_NAMESPACES = "*"
"""The namespace of a grant (or a request) that means every namespace."""


class Role(StrEnum):
    """What a token may do, each role all the previous one may and more."""

    VIEWER = "viewer"
    EDITOR = "editor"
    ADMIN = "admin"


class Verb(StrEnum):
    """What a request does to objects of one kind."""

    GET = "get"
    LIST = "list"
    WATCH = "watch"
    LOGS = "logs"
    EVENTS = "events"
    EXPLAIN = "explain"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    HALT = "halt"
    RESUME = "resume"


READ_VERBS = frozenset({Verb.GET, Verb.LIST, Verb.WATCH, Verb.LOGS, Verb.EVENTS, Verb.EXPLAIN})
WRITE_VERBS = frozenset({Verb.CREATE, Verb.UPDATE, Verb.DELETE, Verb.HALT, Verb.RESUME})

NAMESPACED_KINDS = frozenset({"TrainingJob", "Dataset", "Sweep", "Pipeline", "PipelineRun"})
"""Kinds whose objects belong to one namespace: a grant's namespaces decide who reads and writes them."""
CLUSTER_SCOPED_KINDS = frozenset({"JobType", "Queue", "Node", "Token"})
"""Kinds every role may read and only an admin for every namespace may write (Token: not even read)."""
ADMIN_ONLY_KINDS = frozenset({"Token"})
"""Cluster-scoped kinds no other role may even read: a token list tells who can reach which namespace."""

_RANK = {Role.VIEWER: 0, Role.EDITOR: 1, Role.ADMIN: 2}


def at_least(role: Role, needed: Role) -> bool:
    """Whether ``role`` may do everything ``needed`` may (roles nest: viewer < editor < admin)."""
    return _RANK[role] >= _RANK[needed]


def resource_of(kind: str) -> str:
    """How a sentence names a kind's objects, as kubectl does: ``TrainingJob`` -> ``trainingjobs``."""
    return f"{kind.lower()}s"


def check_role(value: str) -> Role:
    """The role named ``value``.

    Raises:
        ValueError: naming the roles there are.
    """
    try:
        return Role(value)
    except ValueError:
        roles = ", ".join(role.value for role in Role)
        raise ValueError(f"role {value!r} is not one of {roles}; e.g. --role viewer") from None


def check_namespaces(values: Iterable[str]) -> frozenset[str]:
    """The namespaces of a grant: at least one, each a DNS-1123 label, or ``*`` alone.

    Raises:
        ValueError: one sentence naming the namespace that is wrong and how to write it.
    """
    names = list(values)
    if not names:
        raise ValueError("a token needs at least one namespace; e.g. --namespace ml, or --namespace '*' for all")
    if ALL_NAMESPACES in names and len(set(names)) > 1:
        raise ValueError("namespace '*' already covers every namespace; give it alone, or list the namespaces")
    for name in names:
        if name != ALL_NAMESPACES:
            check_dns_label(name, "namespace")
    return frozenset(names)


@dataclass(frozen=True)
class Grant:
    """What one token may do: ``role`` in ``namespaces`` (exact names, or ``{"*"}`` for all).

    ``name`` is the token's name, for sentences and logs; it plays no part in the decision.
    """

    role: Role
    namespaces: frozenset[str]
    name: str = ""

    @property
    def all_namespaces(self) -> bool:
        """Whether the grant covers every namespace."""
        return ALL_NAMESPACES in self.namespaces

    def covers(self, namespace: str) -> bool:
        """Whether the grant reaches ``namespace`` (``*`` asks for every namespace, which only ``*`` covers)."""
        return self.all_namespaces or (namespace != ALL_NAMESPACES and namespace in self.namespaces)

    def describe(self) -> str:
        """``the viewer token ci for namespaces ml, research`` (``a viewer token`` when it has no name)."""
        article = "an" if self.role.value[0] in "aeiou" else "a"
        who = f"the {self.role.value} token {self.name}" if self.name else f"{article} {self.role.value} token"
        scope = "all namespaces" if self.all_namespaces else "namespaces " + ", ".join(sorted(self.namespaces))
        return f"{who} for {scope}"
