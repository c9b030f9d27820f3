"""The order in which a cycle considers pending jobs.

Priority always comes first (higher goes first). Among equal priorities the run's ``queue_order`` decides:

- ``fifo``: submission time;
- ``shortest-first``: ``duration_estimate`` ascending, jobs without an estimate after every job with one;
- ``least-attained-service``: the Tiresias band of the job's attained GPU-seconds (``las_thresholds``), lower
  bands first, so new and short jobs overtake long-running ones that were preempted or restarted, without
  the starvation of continuous LAS between jobs of nearly equal service.

Submission time, then the job key, break the remaining ties, so two jobs never tie and the same input always
yields the same order.

This is the order within one queue. With ``fair_share`` on, the cycle interleaves the queues' orders by their
dominant shares among equal priorities (``fairshare.py``). What a job that cannot start does to the jobs behind
it is the ``queueing_strategy``: ``best-effort-fifo`` (the default, Kueue's BestEffortFIFO: nothing),
``strict-fifo`` (they wait too) or ``backfill`` (they may start if they do not delay it; ``backfill.py``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime
from math import inf

from phalanx.core.scheduling.config import LEAST_ATTAINED_SERVICE, SHORTEST_FIRST, SchedulerConfig
from phalanx.core.scheduling.types import PendingJob

QueueKey = tuple[int, float, datetime, str]


def queue_key(job: PendingJob, config: SchedulerConfig | None = None) -> QueueKey:
    """Sort key of a pending job under ``config``'s queue order (FIFO when None)."""
    order = config.queue_order if config is not None else None
    if order == SHORTEST_FIRST:
        rank = job.duration_estimate if job.duration_estimate is not None else inf
    elif order == LEAST_ATTAINED_SERVICE:
        assert config is not None
        rank = float(bisect_right(config.las_thresholds, job.attained_service))
    else:
        rank = 0.0
    return (-job.priority, rank, job.created, job.key)


def queue_order(pending: Iterable[PendingJob], config: SchedulerConfig | None = None) -> list[PendingJob]:
    """Return the pending jobs in the order a cycle tries them."""
    return sorted(pending, key=lambda job: queue_key(job, config))
