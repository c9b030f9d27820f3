"""One scheduling cycle: ``schedule(snapshot, pending, now, config) -> Decisions``, a pure function.

The pipeline, in the Kueue/kube-scheduler shape:

1. check every pending job's policies (a bad value fails the whole call before anything is decided);
2. order the queue (``queueing.py``): priority, then fair share across queues when on, then the run's queue
   order (FIFO, shortest-first or least-attained-service), then key; BestEffortFIFO by default, strict FIFO
   or backfill when configured (``backfill.py``);
3. copy the snapshot into a mutable working copy (``working.py``); the input is never mutated;
4. for each job in order (``cycles.py``), check its queue's quota (``quotas.py``) and place its gang on the
   working copy (``gang.py``: filter, score plugins, choose devices, reserve), keeping the reservations of
   admitted gangs so later jobs see the room that is left, and rolling a failed gang back entirely; when
   enabled, preempt lower-priority gangs or reclaim borrowed quota (``preemption.py``);
5. explain every job left waiting in one sentence (``reasons.py``).

The cycle itself lives in ``session.py``: ``schedule`` runs one on a fresh ``SchedulingSession``, and the
simulator keeps a session across cycles. No I/O, no wall clock, no randomness: equal inputs give equal
decisions, which is what lets the embedded runtime, the Kubernetes scheduler and the simulator share this
code.
"""

from phalanx.core.scheduling.session import schedule

__all__ = ["schedule"]
