"""Queue quotas with cohort borrowing: what a queue's admitted jobs may hold at once.

The model is Kueue's ClusterQueue with cohorts (one level, no hierarchy), per resource (CPU millicores, memory
bytes, milli-GPU):

- a queue with a ``QueueQuota`` may hold its ``nominal`` amount of a resource it limits; a resource its quota
  leaves None is not limited (and the queue neither lends nor borrows it); a queue without a ``QueueQuota`` is
  not limited at all;
- the queues of a cohort pool what they may lend: each queue puts ``min(lending_limit, nominal)`` of its
  quota into the cohort (all of it without a lending limit) and keeps the rest for itself (``guaranteed``);
- a queue may go beyond its nominal quota by borrowing from the pool, at most ``borrowing_limit`` beyond it
  (no limit when None), while the pool holds: the sum over the cohort of every queue's use above its
  guaranteed part never exceeds the pool;
- a queue without a cohort never goes beyond its nominal quota.

So a queue can always use its guaranteed part, and its whole nominal quota unless other queues borrowed it;
then reclaiming (``preemption.py``) may take it back. Without lending limits this is simply: a queue stays
within nominal + borrowing limit, and the cohort's queues together within the sum of their nominal quotas.

The ledger counts every queue's usage (also of queues without quota: fair share reads it) and the pool in use
per cohort, updated as jobs are charged and refunded, so a check costs a few integer comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phalanx.core.scheduling.holdings import Usage
from phalanx.core.scheduling.types import QueueQuota, QuotaAmounts

RESOURCES = ("cpu", "memory", "gpu")
# The order in which a quota check names the first resource that does not fit: scarcest first.
CHECK_ORDER = (2, 0, 1)

# Kinds of quota shortfall.
NO_COHORT = "no-cohort"  # beyond nominal, and the queue has no cohort to borrow from
BORROWING_LIMIT = "borrowing-limit"  # borrowing this much would pass the queue's borrowing limit
COHORT_EXHAUSTED = "cohort-exhausted"  # beyond nominal, and the cohort has not enough idle quota to lend
LENT = "lent"  # within nominal, but other queues of the cohort borrowed the rest: reclaimable


def _amounts(amounts: QuotaAmounts | None) -> tuple[int | None, int | None, int | None]:
    if amounts is None:
        return (None, None, None)
    gpu = None if amounts.gpus is None else amounts.gpus * 1000
    return (amounts.cpu_milli, amounts.memory, gpu)


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    """Why a job does not fit its queue's quota, for the first resource that does not fit.

    Attributes:
        queue: the queue.
        resource: index into ``RESOURCES``.
        kind: ``no-cohort``, ``borrowing-limit``, ``cohort-exhausted`` or ``lent``.
        used: what the queue's admitted jobs hold of the resource.
        nominal: the queue's nominal quota of it.
        need: what the job asks for of it.
        cohort: the queue's cohort, if any.
        cohort_free: what the cohort's pool has idle, the queue's own unused share included.
        borrowing_limit: the queue's borrowing limit of the resource, if any.
        lendable: what the other queues of the cohort have idle to lend: ``cohort_free`` less the queue's own
            unused share, which the job counts on already (within its nominal quota).
    """

    queue: str
    resource: int
    kind: str
    used: int
    nominal: int
    need: int
    cohort: str | None = None
    cohort_free: int = 0
    borrowing_limit: int | None = None
    lendable: int = 0


class QuotaLedger:
    """Per-queue usage and per-cohort pool use, and the quota check."""

    __slots__ = ("_borrow", "_cohort_of", "_guaranteed", "_nominal", "_pool", "_pool_used", "_usage", "quotas")

    def __init__(self, queues: Sequence[QueueQuota]) -> None:
        self.quotas: dict[str, QueueQuota] = {queue.name: queue for queue in queues}
        self._usage: dict[str, list[int]] = {}
        self._nominal: dict[str, tuple[int | None, int | None, int | None]] = {}
        self._borrow: dict[str, tuple[int | None, int | None, int | None]] = {}
        self._guaranteed: dict[str, tuple[int, int, int]] = {}
        self._cohort_of: dict[str, str] = {}
        self._pool: dict[str, list[int]] = {}
        self._pool_used: dict[str, list[int]] = {}
        for queue in sorted(queues, key=lambda queue: queue.name):
            nominal = _amounts(queue.nominal)
            lending = _amounts(queue.lending_limit)
            self._nominal[queue.name] = nominal
            self._borrow[queue.name] = _amounts(queue.borrowing_limit)
            lent = tuple(
                0 if amount is None else min(amount, lend if lend is not None else amount)
                for amount, lend in zip(nominal, lending, strict=True)
            )
            self._guaranteed[queue.name] = (
                (nominal[0] or 0) - lent[0],
                (nominal[1] or 0) - lent[1],
                (nominal[2] or 0) - lent[2],
            )
            if queue.cohort is not None:
                self._cohort_of[queue.name] = queue.cohort
                pool = self._pool.setdefault(queue.cohort, [0, 0, 0])
                self._pool_used.setdefault(queue.cohort, [0, 0, 0])
                for resource in range(3):
                    pool[resource] += lent[resource]

    # --- usage ----------------------------------------------------------------------------------------

    def usage(self, queue: str) -> Usage:
        """What the queue's admitted jobs hold."""
        used = self._usage.get(queue)
        return Usage(*used) if used is not None else Usage()

    def queues_in_use(self) -> list[str]:
        """Every queue that was ever charged, by name."""
        return sorted(self._usage)

    def charge(self, queue: str, usage: Usage) -> None:
        """Count ``usage`` as held by ``queue``."""
        self._change(queue, usage.values(), 1)

    def refund(self, queue: str, usage: Usage) -> None:
        """Count ``usage`` as given back by ``queue``."""
        self._change(queue, usage.values(), -1)

    def _change(self, queue: str, amounts: tuple[int, int, int], sign: int) -> None:
        used = self._usage.setdefault(queue, [0, 0, 0])
        cohort = self._cohort_of.get(queue)
        if cohort is None:
            for resource in range(3):
                used[resource] += sign * amounts[resource]
            return
        pool_used = self._pool_used[cohort]
        guaranteed = self._guaranteed[queue]
        nominal = self._nominal[queue]
        for resource in range(3):
            before = used[resource]
            used[resource] = before + sign * amounts[resource]
            if nominal[resource] is not None:
                pool_used[resource] += max(0, used[resource] - guaranteed[resource]) - max(
                    0, before - guaranteed[resource]
                )

    # --- checks ---------------------------------------------------------------------------------------

    def limits(self, queue: str) -> bool:
        """Whether ``queue`` has a quota at all."""
        return queue in self.quotas

    def shortfall(self, queue: str, need: Usage) -> QuotaShortfall | None:
        """None when ``need`` more fits ``queue``'s quota now, else why not (the first resource that fails)."""
        nominal = self._nominal.get(queue)
        if nominal is None:
            return None
        used = self._usage.get(queue, [0, 0, 0])
        wanted = need.values()
        cohort = self._cohort_of.get(queue)
        for resource in CHECK_ORDER:
            amount, limit = wanted[resource], nominal[resource]
            if not amount or limit is None:
                continue
            after = used[resource] + amount
            kind = self._kind(queue, resource, after, cohort)
            if kind is not None:
                free = self.cohort_free(queue, resource)
                own_idle = max(0, limit - max(used[resource], self._guaranteed[queue][resource]))
                return QuotaShortfall(
                    queue=queue,
                    resource=resource,
                    kind=kind,
                    used=used[resource],
                    nominal=limit,
                    need=amount,
                    cohort=cohort,
                    cohort_free=free,
                    borrowing_limit=self._borrow[queue][resource],
                    lendable=max(0, free - own_idle) if cohort is not None else 0,
                )
        return None

    def _kind(self, queue: str, resource: int, after: int, cohort: str | None) -> str | None:
        limit = self._nominal[queue][resource]
        assert limit is not None
        if cohort is None:
            return NO_COHORT if after > limit else None
        borrow = self._borrow[queue][resource]
        if borrow is not None and after - limit > borrow:
            return BORROWING_LIMIT
        guaranteed = self._guaranteed[queue][resource]
        before = self._usage.get(queue, [0, 0, 0])[resource]
        pool_after = self._pool_used[cohort][resource] - max(0, before - guaranteed) + max(0, after - guaranteed)
        if pool_after > self._pool[cohort][resource]:
            return LENT if after <= limit else COHORT_EXHAUSTED
        return None

    def cohort_free(self, queue: str, resource: int) -> int:
        """What the cohort's pool has idle (0 without a cohort)."""
        cohort = self._cohort_of.get(queue)
        if cohort is None:
            return 0
        return max(0, self._pool[cohort][resource] - self._pool_used[cohort][resource])

    def within_nominal(self, queue: str, need: Usage) -> bool:
        """Whether ``need`` more keeps ``queue`` within its nominal quota in every resource it limits."""
        nominal = self._nominal.get(queue)
        if nominal is None:
            return False
        used = self._usage.get(queue, [0, 0, 0])
        wanted = need.values()
        return all(
            limit is None or not wanted[resource] or used[resource] + wanted[resource] <= limit
            for resource, limit in enumerate(nominal)
        )

    def borrowing(self, queue: str) -> bool:
        """Whether ``queue`` holds more than its nominal quota of some resource."""
        nominal = self._nominal.get(queue)
        if nominal is None or queue not in self._cohort_of:
            return False
        used = self._usage.get(queue, [0, 0, 0])
        return any(limit is not None and used[resource] > limit for resource, limit in enumerate(nominal))

    def cohort_of(self, queue: str) -> str | None:
        """The queue's cohort, or None."""
        return self._cohort_of.get(queue)

    def weight(self, queue: str) -> float:
        """The queue's fair-share weight (1 for a queue without quota)."""
        quota = self.quotas.get(queue)
        return quota.weight if quota is not None else 1.0
