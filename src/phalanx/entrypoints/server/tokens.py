"""The REST API's ``authorize`` hook for the embedded backend: bearer tokens of the state directory's store.

The caller's token is checked against the token store (``adapters.auth.token_store``), and what its grant allows
is decided by ``core.auth``. The app asks with ``namespace=None`` for a namespaced kind listed across every
namespace; ``core.auth`` calls that ``*``, and a token for a few namespaces may list "every namespace" as the
namespaces it reaches (``authorize_across``): the answer is then a ``Scope`` the list is narrowed to. A request
without a valid token is answered 401, one whose token may not do it 403, each with the sentence ``core.auth``
gives; a token store that cannot be read answers 503 (nothing is served unchecked).
"""

from __future__ import annotations

from phalanx.adapters.auth.token_store import TokenStore, TokenStoreError
from phalanx.core.auth import ALL_NAMESPACES, NAMESPACED_KINDS, Verb, authorize, authorize_across
from phalanx.entrypoints.server.access import Access, Authorize, Refusal, Scope

#: What a request without a token is told: how to send one, and how to make one.
NO_TOKEN = (
    "this server needs a token: send 'Authorization: Bearer <token>'; its owner makes one with "  # nosec B105  # a name or message, not a secret
    "phalanx token create NAME --role viewer|editor|admin --namespace NS"
)


def token_authorizer(store: TokenStore) -> Authorize:
    """Decide each request by its bearer token against ``store``."""

    def decide(access: Access) -> Refusal | Scope | None:
        if access.token is None:
            return Refusal(401, NO_TOKEN)
        try:
            grant = store.authenticate(access.token)
        except TokenStoreError as error:
            return Refusal(503, f"the token store cannot be read: {error}")
        namespace = access.namespace
        if namespace is None and access.kind in NAMESPACED_KINDS:
            namespace = ALL_NAMESPACES
        if namespace == ALL_NAMESPACES and access.verb in (Verb.LIST, Verb.WATCH):
            # Only a list or a watch is narrowed (both read the Scope); other routes are refused as before.
            decision = authorize_across(grant, Verb(access.verb), access.kind)
        else:
            decision = authorize(grant, Verb(access.verb), access.kind, namespace)
        if decision.allowed:
            return Scope(decision.namespaces) if decision.namespaces is not None else None
        return Refusal(403 if decision.authenticated else 401, decision.sentence)

    return decide
