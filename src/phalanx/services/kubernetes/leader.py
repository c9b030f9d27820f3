"""Leader election through a ``coordination.k8s.io/v1`` Lease, as kube-scheduler and controller-manager do it.

The holder renews ``renewTime`` every ``renew_s``; anyone may take the Lease once ``renewTime`` is older than
``leaseDurationSeconds``. Every write carries the Lease's resourceVersion, so of two candidates racing for an
expired Lease exactly one wins (the other gets 409). A leader that cannot renew before its own deadline stops
leading *before* the Lease can expire for others, so two leaders never act at once, provided clocks agree to
within ``duration_s - renew_deadline_s`` (the same assumption client-go makes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from phalanx.adapters.clock import Clock, SystemClock
from phalanx.adapters.kubernetes.api import LEASES, ConflictError, KubeApi, KubeApiError, NotFoundError

log = logging.getLogger(__name__)


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class LeaseElector:
    """Acquires and renews one Lease; ``try_lead()`` says whether this process leads right now."""

    api: KubeApi
    namespace: str
    name: str
    identity: str
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    clock: Clock = field(default_factory=SystemClock)
    _leading_until: float = 0.0  # monotonic deadline of our last successful renewal
    _transitions_seen: int = 0

    @property
    def leading(self) -> bool:
        """True while our last renewal is recent enough to act on."""
        return self.clock.monotonic() < self._leading_until

    def try_lead(self) -> bool:
        """Acquire or renew the Lease if possible; True when this process leads."""
        started = self.clock.monotonic()
        try:
            lease = self._read()
            if lease is None:
                self._create()
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity")
                renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
                duration = float(spec.get("leaseDurationSeconds") or self.duration_s)
                expired = renewed is None or self.clock.now() - renewed > timedelta(seconds=duration)
                if holder != self.identity and not expired:
                    self._leading_until = 0.0
                    return False
                self._take(lease, renewing=holder == self.identity)
        except ConflictError:
            self._leading_until = 0.0
            return False
        except KubeApiError as error:
            log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            return self.leading
        self._leading_until = started + self.renew_deadline_s
        return True

    def release(self) -> None:
        """Give the Lease up on a clean shutdown, so a successor need not wait for it to expire."""
        if not self.leading:
            return
        try:
            lease = self._read()
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = _micro_time(self.clock.now() - timedelta(seconds=self.duration_s * 2))
                self.api.replace(LEASES, lease)
        except KubeApiError as error:
            log.info("releasing lease %s/%s: %s", self.namespace, self.name, error)
        self._leading_until = 0.0

    def _read(self) -> dict[str, Any] | None:
        try:
            return self.api.get(LEASES, self.name, self.namespace)
        except NotFoundError:
            return None

    def _create(self) -> None:
        now = _micro_time(self.clock.now())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.duration_s),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        self.api.create(LEASES, body, self.namespace)
        log.info("%s acquired lease %s/%s", self.identity, self.namespace, self.name)

    def _take(self, lease: dict[str, Any], *, renewing: bool) -> None:
        now = _micro_time(self.clock.now())
        spec = dict(lease.get("spec") or {})
        if not renewing:
            spec["holderIdentity"] = self.identity
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["leaseDurationSeconds"] = round(self.duration_s)
        spec["renewTime"] = now
        self.api.replace(LEASES, {**lease, "spec": spec})
        if not renewing:
            log.info("%s took over lease %s/%s", self.identity, self.namespace, self.name)
