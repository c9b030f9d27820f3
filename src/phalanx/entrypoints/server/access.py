"""The hook authorization plugs into: what a request wants to do, and the refusal when it may not.

``create_app(backend, authorize=...)`` calls ``authorize`` with an ``Access`` before every route touches the
backend; a ``Refusal`` it returns is the answer (401 when the caller is not known, 403 when they may not), with
its sentence. A list across every namespace may instead be answered with a ``Scope``: served, but only over the
namespaces it names (a token that reaches a few sees theirs). Who the caller is (the bearer token) and what a
token allows (``core.auth``, the token store) are decided there, not here: without ``authorize`` every request
is served, which ``phalanx server`` allows on a loopback address only (``serving``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Access:
    """What one request asks: a verb (get, list, create, delete) on a kind, in a namespace (None: cluster-wide)."""

    verb: str
    kind: str
    namespace: str | None
    name: str | None
    token: str | None
    """The bearer token of the request's ``Authorization`` header, or None when it sent none."""


@dataclass(frozen=True)
class Refusal:
    """Why a request is not served: 401 (who is asking is not known) or 403 (they may not), and the sentence."""

    code: int
    message: str


@dataclass(frozen=True)
class Scope:
    """A list or watch across every namespace served over these namespaces only (for those two verbs alone)."""

    namespaces: frozenset[str]


Authorize = Callable[[Access], Refusal | Scope | None]
"""Decides an ``Access``: None serves it, a ``Refusal`` answers it, a ``Scope`` narrows a list of every namespace."""


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header; None when there is no such header."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
