"""A scheduler that keeps its working copy between cycles: admit gangs, release finished ones, repeat.

``schedule()`` answers one cycle from a frozen snapshot and is what the runtimes call: they rebuild the
snapshot from what they observe each time. The simulator, and any caller replaying thousands of arrivals,
would spend most of its time rebuilding snapshots that differ by one job; a ``SchedulingSession`` instead keeps
the ``WorkingCluster`` and applies each admission's reservations to it, and gives them back on ``release``.
Both run exactly the same cycle (``cycle``): ``schedule(snapshot, pending, now)`` is
``SchedulingSession(snapshot).cycle(pending, now)``.

The session is pure like the rest of the core: no I/O, no clock, no randomness; the caller says when.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.fitting import FitMemo
from phalanx.core.scheduling.fragmentation import ShapeTally, WorkloadProfile
from phalanx.core.scheduling.gang import GangPlacement, place_gang
from phalanx.core.scheduling.policies import check_policies
from phalanx.core.scheduling.queueing import queue_order
from phalanx.core.scheduling.reasons import explain
from phalanx.core.scheduling.types import Admission, ClusterSnapshot, Decisions, PendingJob
from phalanx.core.scheduling.working import Reservation, WorkingCluster


class SchedulingSession:
    """The scheduler core with memory: a working copy of the cluster that admissions and releases update."""

    __slots__ = ("_held", "_memo", "_profile", "_tally", "cluster", "config")

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig | None = None) -> None:
        """Start from ``snapshot`` (what running work already holds is taken) under ``config``."""
        self.config = config if config is not None else SchedulerConfig()
        self.cluster = WorkingCluster(snapshot)
        self._memo = FitMemo(self.cluster.table)
        self._held: dict[str, tuple[Reservation, ...]] = {}
        self._tally = ShapeTally()
        self._profile: WorkloadProfile | None = None

    def cycle(self, pending: Sequence[PendingJob], now: datetime) -> Decisions:
        """Decide which pending gangs to admit now, with their devices, and why the others wait.

        Admitted gangs keep their reservations in the session until ``release``.

        Raises:
            ValueError: two pending jobs share a key, a pending job is already admitted in this session, or a
                job's placement or topology is unknown. Nothing is admitted then.
        """
        del now  # no policy reads the time yet; it is part of the contract for ageing and deadlines
        duplicates = sorted(key for key, count in Counter(job.key for job in pending).items() if count > 1)
        if duplicates:
            raise ValueError(f"pending jobs listed more than once: {', '.join(duplicates)}")
        admitted_again = sorted(job.key for job in pending if job.key in self._held)
        if admitted_again:
            raise ValueError(f"pending jobs already admitted in this session: {', '.join(admitted_again)}")
        for job in pending:
            check_policies(job)
        profile = self._current_profile(pending)
        admitted: list[Admission] = []
        waiting: dict[str, str] = {}
        for job in queue_order(pending, self.config):
            outcome = place_gang(self.cluster, job, self._memo, config=self.config, profile=profile)
            if isinstance(outcome, GangPlacement):
                admitted.append(Admission(key=job.key, assignments=outcome.assignments))
                self._held[job.key] = outcome.reservations
            else:
                waiting[job.key] = explain(job, outcome, self.cluster)
        return Decisions(admitted=tuple(admitted), waiting=waiting)

    def profile(self) -> WorkloadProfile:
        """The workload profile fragmentation-aware placement currently scores against."""
        return self._profile if self._profile is not None else WorkloadProfile.build((), self.cluster.table)

    def _current_profile(self, pending: Sequence[PendingJob]) -> WorkloadProfile:
        if self.config.workload:
            shapes = self.config.workload
        else:
            for job in pending:
                self._tally.observe(job.key, (demand_of(replica) for replica in job.replicas))
            shapes = self._tally.shapes()
        if self._profile is None or self._profile.shapes != shapes:
            self._profile = WorkloadProfile.build(shapes, self.cluster.table)
        return self._profile

    def release(self, key: str) -> None:
        """Give back everything the admitted job ``key`` holds (it finished, failed or was halted).

        Raises:
            KeyError: the session did not admit ``key``, or already released it.
        """
        reservations = self._held.pop(key)
        for reservation in reversed(reservations):
            self.cluster.undo(reservation)

    def holds(self, key: str) -> bool:
        """Whether the admitted job ``key`` still holds its devices in this session."""
        return key in self._held


def schedule(
    snapshot: ClusterSnapshot, pending: Sequence[PendingJob], now: datetime, config: SchedulerConfig | None = None
) -> Decisions:
    """One cycle from a frozen snapshot: ``SchedulingSession(snapshot, config).cycle(pending, now)``.

    Args:
        snapshot: the nodes and what running work already holds on them.
        pending: jobs waiting for room, in any order.
        now: the cycle's time (injected; never read from the wall clock).
        config: run-wide settings; the defaults when None.

    Returns:
        The admitted jobs in decision order, and a reason for every other pending job.

    Raises:
        ValueError: two pending jobs share a key, two nodes share a name, or a job's placement or topology
            is unknown.
    """
    return SchedulingSession(snapshot, config).cycle(pending, now)
