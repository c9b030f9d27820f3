"""Authorization decisions, pure: roles, verbs, which kinds are cluster-scoped, and who may do what.

``grants`` holds what a token carries (a ``Grant``: one role for a set of namespaces) and the rules that check
one; ``deciding`` holds ``authorize``, the one function every door (the HTTP server, later the dashboard's API)
asks before it acts, and ``authorize_across`` for a read of every namespace at once; ``lifetimes`` reads a
token's lifetime (``30d``). Nothing here reads a token, a file or the clock: the token store (``adapters.auth``)
turns a secret into a ``Grant`` and the caller passes it in.
"""

from phalanx.core.auth.deciding import Decision, authorize, authorize_across
from phalanx.core.auth.grants import (
    ALL_NAMESPACES,
    CLUSTER_SCOPED_KINDS,
    NAMESPACED_KINDS,
    READ_VERBS,
    WRITE_VERBS,
    Grant,
    Role,
    Verb,
    check_namespaces,
    check_role,
    resource_of,
)
from phalanx.core.auth.lifetimes import parse_lifetime

__all__ = [
    "ALL_NAMESPACES",
    "CLUSTER_SCOPED_KINDS",
    "NAMESPACED_KINDS",
    "READ_VERBS",
    "WRITE_VERBS",
    "Decision",
    "Grant",
    "Role",
    "Verb",
    "authorize",
    "authorize_across",
    "check_namespaces",
    "check_role",
    "parse_lifetime",
    "resource_of",
]
