"""Dominant resource fairness across queues: which queue's job a cycle tries next among equal priorities.

A queue's dominant share is the largest fraction of the cluster it holds of any one resource (CPU, memory,
GPUs, over every schedulable node's allocatable amount), divided by its weight (DRF, Ghodsi et al. 2011, as in
Volcano's ``drf`` and YuniKorn's ``fair`` sorting). Priority still comes first: fair share only orders jobs of
equal priority. Within one priority, the queue with the lowest weighted dominant share offers its next job (in
the run's queue order); ties go to the job that comes first in queue order, so with equal shares the cycle is
plain FIFO. Shares are read live from the ``QuotaLedger``: a job admitted raises its queue's share before the
next choice, a preempted one lowers its queue's (``touched``).

Queues without a ``QueueQuota`` take part with weight 1.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from phalanx.core.scheduling.holdings import Usage
from phalanx.core.scheduling.queueing import QueueKey
from phalanx.core.scheduling.types import PendingJob


def dominant_share(usage: Usage, capacity: Usage, weight: float) -> float:
    """The largest share of any resource ``usage`` holds of ``capacity``, divided by ``weight``."""
    shares = [used / total for used, total in zip(usage.values(), capacity.values(), strict=True) if total > 0]
    return max(shares, default=0.0) / weight


_Entry = tuple[float, QueueKey, str, int]


class FairOrder:
    """Pending jobs in priority bands; within a band, the queue with the lowest share offers the next job.

    Iterate to get the jobs; between two jobs, the caller may change usage (admit, preempt) and must call
    ``touched`` for every queue whose usage went down other than the one of the job just handed out.
    """

    __slots__ = ("_bands", "_heap", "_key", "_share", "_versions", "_waiting")

    def __init__(
        self,
        ordered: Sequence[PendingJob],
        *,
        key: Callable[[PendingJob], QueueKey],
        share: Callable[[str], float],
    ) -> None:
        """Order ``ordered`` (already in queue order) by ``share(queue)`` within each priority."""
        self._key = key
        self._share = share
        self._bands: list[dict[str, deque[PendingJob]]] = []
        last: int | None = None
        for job in ordered:
            if last is None or job.priority != last:
                self._bands.append({})
                last = job.priority
            self._bands[-1].setdefault(job.queue, deque()).append(job)
        self._heap: list[_Entry] = []
        self._waiting: dict[str, deque[PendingJob]] = {}
        self._versions: dict[str, int] = {}

    def __iter__(self) -> Iterator[PendingJob]:
        for band in self._bands:
            self._waiting = band
            self._heap = []
            for queue in band:
                self._push(queue)
            while self._heap:
                _, _, queue, version = heapq.heappop(self._heap)
                if version != self._versions[queue]:
                    continue
                jobs = band[queue]
                job = jobs.popleft()
                yield job
                if jobs:
                    self._push(queue)
                else:
                    self._versions[queue] += 1

    def touched(self, queue: str) -> None:
        """``queue``'s usage changed: re-rank its next job in the current band, if it has one."""
        jobs = self._waiting.get(queue)
        if jobs:
            self._push(queue)

    def _push(self, queue: str) -> None:
        version = self._versions.get(queue, 0) + 1
        self._versions[queue] = version
        head = self._waiting[queue][0]
        heapq.heappush(self._heap, (self._share(queue), self._key(head), queue, version))
