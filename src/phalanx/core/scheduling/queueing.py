"""The order in which a cycle considers pending jobs.

Priority first (higher goes first), then submission time (FIFO), then the job key, so two jobs never tie and
the same input always yields the same order. The cycle is BestEffortFIFO, like Kueue's queueing strategy of
that name: a job that does not fit does not block the jobs behind it. That keeps the cluster busy but lets
small jobs overtake a big gang forever; reserving room for the head of the queue (strict FIFO, backfill) is a
later policy and plugs in here.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from phalanx.core.scheduling.types import PendingJob


def queue_key(job: PendingJob) -> tuple[int, datetime, str]:
    """Sort key of a pending job: priority descending, then created ascending, then key."""
    return (-job.priority, job.created, job.key)


def queue_order(pending: Iterable[PendingJob]) -> list[PendingJob]:
    """Return the pending jobs in the order a cycle tries them."""
    return sorted(pending, key=queue_key)
