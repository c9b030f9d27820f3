"""A scheduler that keeps its working copy between cycles: admit gangs, release finished ones, repeat.

``schedule()`` answers one cycle from a frozen snapshot and is what the runtimes call: they rebuild the
snapshot from what they observe each time. The simulator, and any caller replaying thousands of arrivals,
would spend most of its time rebuilding snapshots that differ by one job; a ``SchedulingSession`` instead keeps
the ``WorkingCluster`` and applies each admission's reservations to it, and gives them back on ``release``.
Both run exactly the same cycle (``cycle``): ``schedule(snapshot, pending, now)`` is
``SchedulingSession(snapshot).cycle(pending, now)``.

Running work is part of the session: the snapshot's ``running`` jobs are registered as holdings (their
reservations rebuilt from their assignments, checked against the nodes' ``used_*`` fields), and every job the
session admits becomes one, with ``started`` at the cycle's ``now`` and ``expected_end`` from its duration
estimate. Quotas are charged from them, backfill foresees their ends, preemption may stop them. A preempted job
is no longer held: its devices are free in the working copy, and the caller must not ``release`` it.

With time slicing (``SchedulerConfig.las_preempt``) the session also keeps every job's attained service across
cycles (``preemption.ServiceBands``): running jobs accrue GPU-seconds as the cycles' ``now`` advances and drop
to lower bands, where waiting jobs of a higher band may preempt them; starved waiting jobs are promoted.
``next_band_change`` says when the next band changes, for callers that run cycles only on events.

A runtime that rebuilds the snapshot every cycle keeps the attained service across cycles by handing each new
session the previous one's ``bands`` (``ServiceBands``), and says what its jobs attained in earlier runs
(``PendingJob.attained_service``, ``RunningJob.attained_service``).

Jobs that ask for ``auto`` placement get ``SchedulerConfig.placement``.

``cycle(..., explain=False)`` skips the waiting reasons for one cycle (``SchedulerConfig.explain`` sets the
default); the decisions are the same.

The session is pure like the rest of the core: no I/O, no clock, no randomness; the caller says when.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.cycles import Cycle, SessionState
from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.fitting import FitMemo
from phalanx.core.scheduling.fragmentation import ShapeTally, WorkloadProfile
from phalanx.core.scheduling.holdings import Holding, snapshot_holdings
from phalanx.core.scheduling.policies import AUTO, check_policies
from phalanx.core.scheduling.preemption import ServiceBands
from phalanx.core.scheduling.quotas import QuotaLedger
from phalanx.core.scheduling.types import ClusterSnapshot, Decisions, PendingJob, RunningJob
from phalanx.core.scheduling.working import WorkingCluster


class SchedulingSession:
    """The scheduler core with memory: a working copy of the cluster that admissions and releases update."""

    __slots__ = ("_profile", "_state", "_tally", "cluster", "config")

    def __init__(
        self, snapshot: ClusterSnapshot, config: SchedulerConfig | None = None, *, bands: ServiceBands | None = None
    ) -> None:
        """Start from ``snapshot`` (what running work already holds is taken) under ``config``.

        With time slicing, ``bands`` carries the attained service and waiting times of an earlier session on
        (a new one when None).

        Raises:
            ValueError: two nodes share a name, or a running job is listed twice, assigns a replica it does
                not list, or holds something the nodes' ``used_*`` fields do not count.
        """
        self.config = config if config is not None else SchedulerConfig()
        self.cluster = WorkingCluster(snapshot)
        ledger = QuotaLedger(self.config.queues) if self.config.queues or self.config.fair_share else None
        held: dict[str, Holding] = {}
        for holding in snapshot_holdings(snapshot):
            held[holding.key] = holding
            if ledger is not None:
                ledger.charge(holding.job.queue, holding.usage)
        if not self.config.las_preempt:
            bands = None
        elif bands is None:
            bands = ServiceBands(self.config.las_thresholds, self.config.las_starve_limit)
        self._state = SessionState(
            config=self.config,
            cluster=self.cluster,
            memo=FitMemo(self.cluster.table),
            held=held,
            ledger=ledger,
            bands=bands,
        )
        self._tally = ShapeTally()
        self._profile: WorkloadProfile | None = None

    def cycle(
        self,
        pending: Sequence[PendingJob],
        now: datetime,
        *,
        explain: bool | None = None,
        first: Collection[str] = (),
    ) -> Decisions:
        """Decide which pending gangs to admit now, with their devices, and why the others wait.

        With preemption (or time slicing) on, it also decides which running jobs to stop. Admitted gangs keep
        their reservations in the session until ``release``; preempted ones lose theirs at once. ``explain``
        overrides ``SchedulerConfig.explain`` for this cycle: False leaves every waiting reason empty. The jobs
        whose keys are in ``first`` are decided before every other (nominated preemptors: ``passes.py``).

        Raises:
            ValueError: two pending jobs share a key, a pending job is already running in this session, or a
                job's placement or topology is unknown. Nothing is admitted then.
        """
        duplicates = sorted(key for key, count in Counter(job.key for job in pending).items() if count > 1)
        if duplicates:
            raise ValueError(f"pending jobs listed more than once: {', '.join(duplicates)}")
        admitted_again = sorted(job.key for job in pending if job.key in self._state.held)
        if admitted_again:
            raise ValueError(f"pending jobs already admitted in this session: {', '.join(admitted_again)}")
        for job in pending:
            check_policies(job)
        if self.config.placement != AUTO:
            chosen = self.config.placement
            pending = [replace(job, placement=chosen) if job.placement == AUTO else job for job in pending]
        profile = self._current_profile(pending)
        explain_it = self.config.explain if explain is None else explain
        return Cycle(self._state, now, profile, explain=explain_it).run(pending, first)

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
        """Give back everything the running job ``key`` holds (it finished, failed or was halted).

        Raises:
            KeyError: the session does not hold ``key``: it never did, it was released, or it was preempted.
        """
        holding = self._state.held.pop(key)
        for reservation in reversed(holding.reservations):
            self.cluster.undo(reservation)
        if self._state.ledger is not None:
            self._state.ledger.refund(holding.job.queue, holding.usage)
        if self._state.bands is not None:
            self._state.bands.release(key)

    def holds(self, key: str) -> bool:
        """Whether the running job ``key`` still holds its devices in this session."""
        return key in self._state.held

    def running(self) -> tuple[RunningJob, ...]:
        """Every running job the session holds, by key."""
        return tuple(self._state.held[key].job for key in sorted(self._state.held))

    def next_band_change(self, now: datetime) -> datetime | None:
        """With time slicing, the next time after ``now`` (whole seconds) at which a job changes band.

        A running job drops a band when its attained service reaches the next threshold; a waiting job is
        promoted when it reaches the starvation limit. None without time slicing or when nothing will change.
        A caller that runs cycles only on events (the simulator) runs one then, so that demotions take effect
        when they happen.
        """
        bands = self._state.bands
        if bands is None:
            return None
        return bands.next_change((holding.job for holding in self._state.held.values()), now)

    @property
    def bands(self) -> ServiceBands | None:
        """Attained service and bands (time slicing), to hand to the next session; None without."""
        return self._state.bands

    @property
    def promotions(self) -> int:
        """Starvation promotions so far (time slicing)."""
        bands = self._state.bands
        return 0 if bands is None else bands.promotions

    def mark_checkpointed(self, key: str, checkpointed: bool = True) -> None:
        """Record that the running job ``key`` has (or no longer has) a recent checkpoint.

        Preemption prefers checkpointed victims among equal priorities.

        Raises:
            KeyError: the session does not hold ``key``.
        """
        holding = self._state.held[key]
        self._state.held[key] = replace(holding, job=replace(holding.job, checkpointed=checkpointed))


def schedule(
    snapshot: ClusterSnapshot,
    pending: Sequence[PendingJob],
    now: datetime,
    config: SchedulerConfig | None = None,
    *,
    bands: ServiceBands | None = None,
) -> Decisions:
    """One cycle from a frozen snapshot: ``SchedulingSession(snapshot, config, bands=bands).cycle(pending, now)``.

    Args:
        snapshot: the nodes, what running work already holds on them, and the running jobs behind it.
        pending: jobs waiting for room, in any order.
        now: the cycle's time (injected; never read from the wall clock).
        config: run-wide settings; the defaults when None.
        bands: with time slicing, the attained service kept from earlier cycles (updated in place).

    Returns:
        The admitted jobs in decision order, the running jobs to preempt, and a reason for every other
        pending job.

    Raises:
        ValueError: two pending jobs share a key, a pending job is also running, two nodes share a name, a
            running job does not match the nodes' use, or a job's placement or topology is unknown.
    """
    return SchedulingSession(snapshot, config, bands=bands).cycle(pending, now)
