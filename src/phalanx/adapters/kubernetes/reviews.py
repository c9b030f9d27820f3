"""TokenReview and SubjectAccessReview: who a bearer token is, and whether RBAC lets them do something.

``phalanx server`` on a cluster sends each caller's token to the API server's TokenReview (authentication) and
asks SubjectAccessReview whether that user and their groups may do what the request does (``core.auth.rbac``
says which verb on which resource), so the cluster's RBAC is the one source of truth. The server's own
ServiceAccount needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews`` (the chart's ClusterRole).

Answers are cached for ``ttl`` seconds (default 10), at most ``size`` of each: a burst of requests by one caller
costs two reviews, not two per request, and a revoked binding or deleted ServiceAccount stops working within
``ttl``. Tokens are kept only as their SHA-256. A failed review (the API server unreachable) is not cached and
raises ``ReviewError``: the server answers 503, it never serves a request it could not check.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from phalanx.adapters.kubernetes.api import KubeApi, KubeApiError
from phalanx.core.auth.rbac import NonResourceAttributes, ResourceAttributes

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # nosec B105  # a name or message, not a secret
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_TTL_S = 10.0
DEFAULT_SIZE = 10_000


class ReviewError(Exception):
    """The API server could not answer a review; the message says which and why."""


@dataclass(frozen=True)
class Identity:
    """Who a token is, as TokenReview says: the user name, uid, groups and extra attributes."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """A SubjectAccessReview's answer: allowed or not, and the authorizer's reason (often empty for RBAC)."""

    allowed: bool
    reason: str = ""


class _Expiring:
    """A bounded map whose entries expire ``ttl`` seconds after they were put (oldest dropped past ``size``)."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float]) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return False, None
            if found[0] <= self.clock():
                del self._items[key]
                return False, None
            return True, found[1]

    def put(self, key: Hashable, value: Any) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._items[key] = (self.clock() + self.ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class KubeReviewer:
    """Reviews tokens and access through one API server, caching the answers briefly."""

    def __init__(
        self,
        api: KubeApi,
        *,
        ttl: float = DEFAULT_TTL_S,
        size: int = DEFAULT_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Review through ``api`` (the server's own identity); answers kept ``ttl`` seconds, ``size`` of each."""
        self.api = api
        self._identities = _Expiring(ttl, size, clock)
        self._verdicts = _Expiring(ttl, size, clock)

    def authenticate(self, token: str) -> Identity | None:
        """Who ``token`` is; None when the API server does not know it (invalid, expired, its account deleted).

        Raises:
            ReviewError: the TokenReview failed.
        """
        key = hashlib.sha256(token.encode()).hexdigest()
        cached, known = self._identities.get(key)
        if cached:
            return known  # type: ignore[no-any-return]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = self._post(TOKEN_REVIEWS, body, "TokenReview")
        identity: Identity | None = None
        if status.get("authenticated"):
            user = status.get("user") or {}
            extra = tuple(sorted((k, tuple(v)) for k, v in (user.get("extra") or {}).items()))
            identity = Identity(
                str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()), extra
            )
        self._identities.put(key, identity)
        return identity

    def allowed(self, identity: Identity, attributes: ResourceAttributes | NonResourceAttributes) -> Verdict:
        """Whether RBAC (the API server's authorizers) lets ``identity`` do what ``attributes`` say.

        Raises:
            ReviewError: the SubjectAccessReview failed.
        """
        key = (identity, attributes)
        cached, verdict = self._verdicts.get(key)
        if cached:
            return verdict  # type: ignore[no-any-return]
        spec: dict[str, Any] = {
            "user": identity.username,
            "groups": list(identity.groups),
            attributes.SPEC_KEY: attributes.to_dict(),
        }
        if identity.uid:
            spec["uid"] = identity.uid
        if identity.extra:
            spec["extra"] = {k: list(v) for k, v in identity.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = self._post(ACCESS_REVIEWS, body, "SubjectAccessReview")
        verdict = Verdict(bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or ""))
        self._verdicts.put(key, verdict)
        return verdict

    def _post(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            answer = self.api.request("POST", path, body=body)
        except KubeApiError as error:
            hint = ""
            if error.status == 403:
                hint = (
                    "; this process's account needs create on tokenreviews and subjectaccessreviews (its ClusterRole)"
                )
            raise ReviewError(f"the API server could not answer a {what}: {error}{hint}") from None
        status = (answer or {}).get("status")
        return status if isinstance(status, dict) else {}
