"""``authorize``: may this grant do this verb to this kind in this namespace? A ``Decision`` with its sentence.

The rules, in the order they are checked:

1. No grant (no token, an unknown, expired or revoked one): not authenticated.
2. A kind nobody knows: refused (fail closed; a route with a typo must not become a route open to all).
3. Tokens: only an admin for every namespace, any verb.
4. Other cluster-scoped kinds (JobType, Queue, Node): every role reads them, whatever its namespaces (a viewer
   must see the queue its job waits in); only an admin for every namespace writes them, since a Queue or a
   JobType reaches every namespace it lists.
5. Namespaced kinds: the grant must cover the namespace (``*``, every namespace, only a ``*`` grant covers), and
   its role must allow the verb: reading needs viewer, writing editor.

Every decision carries one sentence saying who may do what, allowed or not, so a refusal names what was
missing and a server can log what it allowed.

``authorize_across`` decides a read of every namespace at once (``GET .../trainingjobs``): a grant for all
namespaces reads them all; a grant for a few, whose role reads, is allowed too but only over its own namespaces
(``Decision.namespaces``), so a tenant's "everything" is everything it may see, and never another's objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.core.auth.grants import (
    ADMIN_ONLY_KINDS,
    ALL_NAMESPACES,
    CLUSTER_SCOPED_KINDS,
    NAMESPACED_KINDS,
    READ_VERBS,
    Grant,
    Role,
    Verb,
    at_least,
    resource_of,
)

NOT_AUTHENTICATED = (
    "not authenticated: send a token as 'Authorization: Bearer phx_...' (`phalanx token create` makes one); "
    "an expired or revoked token counts as none"
)


@dataclass(frozen=True)
class Decision:
    """Whether a request may go on, and the sentence that says who may do what.

    ``authenticated`` is False when there was no valid token at all (a server answers 401, else 403).
    """

    allowed: bool
    sentence: str
    authenticated: bool = True
    namespaces: frozenset[str] | None = None
    """When allowed: only these namespaces (a read across namespaces by a grant for a few); None: as asked."""


def authorize(grant: Grant | None, verb: Verb, kind: str, namespace: str | None) -> Decision:
    """Decide whether ``grant`` may ``verb`` objects of ``kind`` in ``namespace``.

    Args:
        grant: what the caller's token carries; None when the caller sent no valid token.
        verb: what the request does.
        kind: the objects' kind, as the model names it (``TrainingJob``, ``Queue``, ``Token``...).
        namespace: the request's namespace, ``*`` for every namespace; ignored for cluster-scoped kinds.

    Returns:
        The decision and its sentence.
    """
    if grant is None:
        return Decision(allowed=False, sentence=NOT_AUTHENTICATED, authenticated=False)
    who = grant.describe()
    if kind in CLUSTER_SCOPED_KINDS:
        return _cluster_scoped(grant, who, verb, kind)
    if kind not in NAMESPACED_KINDS:
        known = ", ".join(sorted(NAMESPACED_KINDS | CLUSTER_SCOPED_KINDS))
        return Decision(False, f"{who} cannot {verb.value} {kind!r}: no such kind (kinds: {known})")
    resource = resource_of(kind)
    if not namespace:
        return Decision(False, f"{who} cannot {verb.value} {resource} without a namespace: name one, or '*' for all")
    where = "in all namespaces" if namespace == ALL_NAMESPACES else f"in {namespace}"
    if not grant.covers(namespace):
        reach = ", ".join(sorted(grant.namespaces))
        return Decision(False, f"{who} cannot {verb.value} {resource} {where}: it reaches namespaces {reach} only")
    needed = Role.VIEWER if verb in READ_VERBS else Role.EDITOR
    if not at_least(grant.role, needed):
        return Decision(False, f"{who} cannot {verb.value} {resource} {where}: needs {needed.value}")
    return Decision(True, f"{who} may {verb.value} {resource} {where}")


def _cluster_scoped(grant: Grant, who: str, verb: Verb, kind: str) -> Decision:
    resource = resource_of(kind)
    if verb in READ_VERBS and kind not in ADMIN_ONLY_KINDS:
        return Decision(True, f"{who} may {verb.value} {resource} (cluster-scoped: every role reads them)")
    if grant.role is Role.ADMIN and grant.all_namespaces:
        return Decision(True, f"{who} may {verb.value} {resource} (cluster-scoped)")
    return Decision(
        False,
        f"{who} cannot {verb.value} {resource}: {resource} are cluster-scoped, which needs an admin token for "
        "all namespaces (--role admin --namespace '*')",
    )


def authorize_across(grant: Grant | None, verb: Verb, kind: str) -> Decision:
    """Decide a read of ``kind`` across every namespace: all of them, or (``namespaces``) only the grant's.

    A write across namespaces, a cluster-scoped kind, or a grant for every namespace is decided as
    ``authorize(grant, verb, kind, "*")``.
    """
    across = authorize(grant, verb, kind, ALL_NAMESPACES)
    if across.allowed or grant is None or kind not in NAMESPACED_KINDS or verb not in READ_VERBS:
        return across
    reach = sorted(grant.namespaces)
    each = [authorize(grant, verb, kind, namespace) for namespace in reach]
    refused = next((decision for decision in each if not decision.allowed), None)
    if refused is not None:  # the role does not read: the same refusal as in any one of its namespaces
        return refused
    return Decision(
        True,
        f"{grant.describe()} may {verb.value} {resource_of(kind)} of the namespaces it reaches ({', '.join(reach)})",
        namespaces=frozenset(reach),
    )
