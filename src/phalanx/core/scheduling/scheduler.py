"""One scheduling cycle: ``schedule(snapshot, pending, now) -> Decisions``, a pure function.

The pipeline, in the Kueue/kube-scheduler shape:

1. check every pending job's policies (a bad value fails the whole call before anything is decided);
2. order the queue (``queueing.py``): priority, then FIFO, then key; BestEffortFIFO, so a job that does not
   fit never blocks the ones behind it;
3. copy the snapshot into a mutable working copy (``working.py``); the input is never mutated;
4. for each job in order, place its gang on the working copy (``gang.py``: filter, score, choose devices,
   reserve), keeping the reservations of admitted gangs so later jobs see the room that is left, and rolling
   a failed gang back entirely;
5. explain every job left waiting in one sentence (``reasons.py``).

No I/O, no wall clock, no randomness: equal inputs give equal decisions, which is what lets the embedded
runtime, the Kubernetes scheduler and the simulator share this code. ``now`` is part of the signature for
policies that age jobs or honour deadlines; v1 orders by ``created`` and does not read it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from phalanx.core.scheduling.fitting import FitMemo
from phalanx.core.scheduling.gang import GangPlacement, place_gang
from phalanx.core.scheduling.policies import check_policies
from phalanx.core.scheduling.queueing import queue_order
from phalanx.core.scheduling.reasons import explain
from phalanx.core.scheduling.types import Admission, ClusterSnapshot, Decisions, PendingJob
from phalanx.core.scheduling.working import WorkingCluster


def schedule(snapshot: ClusterSnapshot, pending: Sequence[PendingJob], now: datetime) -> Decisions:
    """Decide which pending gangs to admit now, with their devices, and why the others wait.

    Args:
        snapshot: the nodes and what running work already holds on them.
        pending: jobs waiting for room, in any order.
        now: the cycle's time (injected; never read from the wall clock).

    Returns:
        The admitted jobs in decision order, and a reason for every other pending job.

    Raises:
        ValueError: two pending jobs share a key, two nodes share a name, or a job's placement or topology
            is unknown.
    """
    del now  # v1 policies do not depend on the time; see the module docstring
    duplicates = sorted(key for key, count in Counter(job.key for job in pending).items() if count > 1)
    if duplicates:
        raise ValueError(f"pending jobs listed more than once: {', '.join(duplicates)}")
    for job in pending:
        check_policies(job)
    cluster = WorkingCluster(snapshot)
    memo = FitMemo()
    admitted: list[Admission] = []
    waiting: dict[str, str] = {}
    for job in queue_order(pending):
        outcome = place_gang(cluster, job, memo)
        if isinstance(outcome, GangPlacement):
            admitted.append(Admission(key=job.key, assignments=outcome.assignments))
        else:
            waiting[job.key] = explain(job, outcome, cluster)
    return Decisions(admitted=tuple(admitted), waiting=waiting)
