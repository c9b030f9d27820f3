"""One scheduling cycle over a session's working copy: the per-job pipeline.

For each pending job, in the order the cycle offers them (``queueing.py``; with fair share, ``fairshare.py``):

1. **strict FIFO**: under ``strict-fifo``, a job behind one that waits for nodes waits too, and a job behind
   one of its own queue that is over quota waits too;
2. **quota** (``quotas.py``): the job's queue must have room for it (borrowing within the cohort allowed);
   a job of a queue without quota skips this;
3. **place** the whole gang on the working copy (``gang.py``); with ``min_available``, trailing replicas
   that the quota cannot hold are given back, down to the minimum; quota and nodes are so checked in the same
   step, and a job is never admitted by quota and then stuck for lack of a node;
4. **backfill** (``backfill.py``): once a reservation is held for the first waiting gang, a job that fits is
   admitted only if it does not delay it;
5. **preempt** (``preemption.py``, when on): a job that fits neither nodes nor quota may stop running jobs
   (strictly lower priority, or borrowers of its cohort when it reclaims its nominal quota; with time slicing,
   jobs of its priority in a lower least-attained-service band);
6. **reserve** for the first job that waits for nodes under ``backfill``, or block the line under
   ``strict-fifo``;
7. **explain** every job left waiting (``reasons.py``), unless explaining is off (``SchedulerConfig.explain``
   or the session's per-cycle override): then a waiting job maps to an empty string. Explaining never changes
   a decision: every sentence is built from what the decision already computed.

With time slicing (``SchedulerConfig.las_preempt``) the cycle first lets the session's ``ServiceBands`` count
waiting time and promote starved jobs; pending jobs are then ordered by band as usual
(``least-attained-service``), and running jobs rank by (priority, band) as preemption victims.

An admitted job becomes a running one at once (a ``Holding`` with its reservations, charged to its queue), so
later jobs of the cycle see the room and quota it took, and the next cycle may preempt it. The cycle is
also the ``TrialSpace`` the victim search works through.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from phalanx.core.scheduling.backfill import MAX_RESERVATION_TRIES, HeadReservation, reserve_for_head
from phalanx.core.scheduling.config import BACKFILL, STRICT_FIFO, SchedulerConfig
from phalanx.core.scheduling.demands import Demand, demand_of, model_alternatives
from phalanx.core.scheduling.fairshare import FairOrder, dominant_share
from phalanx.core.scheduling.fitting import FitMemo, Shortage
from phalanx.core.scheduling.fragmentation import WorkloadProfile
from phalanx.core.scheduling.gang import GangPlacement, GangShortfall, needed_replicas, place_gang
from phalanx.core.scheduling.headroom import FreedRoom, could_hold
from phalanx.core.scheduling.holdings import Holding, Usage, total_usage, usage_of
from phalanx.core.scheduling.policies import RANDOM
from phalanx.core.scheduling.preemption import (
    PreemptionPlan,
    Rank,
    ServiceBands,
    band_reason,
    by_node,
    eligible_victims,
    find_victims,
    loss,
    plain_rank,
)
from phalanx.core.scheduling.queueing import queue_key, queue_order
from phalanx.core.scheduling.quotas import QuotaLedger, QuotaShortfall
from phalanx.core.scheduling.reasons import (
    behind,
    explain,
    explain_quota,
    held_back,
    preemption_note,
    preemption_reason,
    reservation_note,
)
from phalanx.core.scheduling.types import Admission, Decisions, PendingJob, Preemption, RunningJob
from phalanx.core.scheduling.working import WorkingCluster

_GPU_SHORTAGES = frozenset({Shortage.GPU_MODEL, Shortage.GPUS, Shortage.GPU_SHARE, Shortage.GPU_TOPOLOGY})

Outcome = GangPlacement | GangShortfall | QuotaShortfall


@dataclass(slots=True)
class SessionState:
    """What a session keeps between cycles and a cycle changes.

    Attributes:
        config: the run's settings.
        cluster: the working copy, with every running job's reservations applied.
        memo: per-row answers about ``cluster.table``.
        held: running job key -> its holding (jobs handed in by the snapshot and jobs admitted since).
        ledger: per-queue usage and quotas; None when neither queues nor fair share are configured.
        bands: attained service and bands across cycles; None without time slicing.
    """

    config: SchedulerConfig
    cluster: WorkingCluster
    memo: FitMemo
    held: dict[str, Holding]
    ledger: QuotaLedger | None
    bands: ServiceBands | None = None


class Cycle:
    """One cycle's decisions as they are made; ``run`` drives it."""

    __slots__ = (
        "_capacity",
        "_demands",
        "_generation",
        "_held_back",
        "_order",
        "_preempt_failures",
        "_profile",
        "_ranks",
        "_reservation_tries",
        "_sorted",
        "admitted",
        "admitted_keys",
        "blocker",
        "explain",
        "now",
        "preempted",
        "queue_blockers",
        "reservation",
        "state",
        "waiting",
    )

    def __init__(
        self, state: SessionState, now: datetime, profile: WorkloadProfile | None, *, explain: bool = True
    ) -> None:
        self.state = state
        self.now = now
        self.explain = explain
        self._profile = profile
        self.admitted: list[Admission] = []
        self.admitted_keys: set[str] = set()
        self.waiting: dict[str, str] = {}
        self.preempted: list[Preemption] = []
        self.reservation: HeadReservation | None = None
        self.blocker: PendingJob | None = None
        self.queue_blockers: dict[str, PendingJob] = {}
        self._order: FairOrder | None = None
        self._demands: dict[str, list[Demand]] = {}
        self._capacity = Usage()
        # Bumped by every admission: failed searches are remembered for jobs of the same shape until then.
        self._generation = 0
        self._preempt_failures: dict[tuple[object, ...], tuple[int, str]] = {}
        self._held_back: dict[tuple[object, ...], int] = {}
        self._reservation_tries = 0
        self._sorted: tuple[list[tuple[int, int, int, float, str]], list[Holding]] | None = None
        self._ranks: dict[str, Rank] = {}

    def run(self, pending: Sequence[PendingJob], first: Collection[str] = ()) -> Decisions:
        """Decide every pending job (already validated) and return the cycle's decisions.

        The jobs whose keys are in ``first`` (nominated preemptors, ``passes.py``) are decided before the others,
        in their queue order: the room their victims freed is theirs.
        """
        config = self.state.config
        bands = self.state.bands
        if bands is not None:
            pending = bands.observe(pending, self.state.held, self.now)
        ordered = queue_order(pending, config)
        if first:
            for job in [job for job in ordered if job.key in first]:
                self._consider(job)
            ordered = [job for job in ordered if job.key not in first]
        jobs: Sequence[PendingJob] | FairOrder = ordered
        if config.fair_share:
            self._capacity = _capacity(self.state.cluster)
            self._order = FairOrder(ordered, key=lambda job: queue_key(job, config), share=self._share)
            jobs = self._order
        for job in jobs:
            self._consider(job)
        return Decisions(admitted=tuple(self.admitted), waiting=self.waiting, preempted=tuple(self.preempted))

    # --- the pipeline ---------------------------------------------------------------------------------

    def _consider(self, job: PendingJob) -> None:
        config = self.state.config
        explain_it = self.explain
        if self.blocker is not None:
            self.waiting[job.key] = behind(self.blocker) if explain_it else ""
            return
        blocker = self.queue_blockers.get(job.queue)
        if blocker is not None:
            self.waiting[job.key] = behind(blocker, queue=job.queue) if explain_it else ""
            return
        reservation = self.reservation
        shape = None
        if reservation is not None and not reservation.ends_in_time(self._end(job)) and job.placement != RANDOM:
            shape = self._shape(job)
            if self._held_back.get(shape) == self._generation:
                self.waiting[job.key] = held_back(reservation, self._end(job), self.now) if explain_it else ""
                return
        outcome = self._attempt(job)
        if isinstance(outcome, GangPlacement):
            placement = self._keep_head_free(job, outcome)
            if placement is not None:
                self._admit(job, placement)
            else:
                assert reservation is not None
                if shape is not None:
                    # A job of the same shape would be placed and held back the same way until the next
                    # admission changes the cluster: later ones skip the placement.
                    self._held_back[shape] = self._generation
                self.waiting[job.key] = held_back(reservation, self._end(job), self.now) if explain_it else ""
            return
        note = ""
        if (config.preemption or config.las_preempt) and self.state.held:
            phrase = self._preempt(job, outcome)
            if phrase is None:
                return
            note = preemption_note(phrase) if explain_it else ""
        if isinstance(outcome, GangShortfall):
            reason = (explain(job, outcome, self.state.cluster) + note) if explain_it else ""
            if (
                config.queueing_strategy == BACKFILL
                and self.reservation is None
                and self.state.held
                and self._reservation_tries < MAX_RESERVATION_TRIES
            ):
                self._reservation_tries += 1
                self.reservation = self._reserve(job)
                if self.reservation is not None and explain_it:
                    reason += reservation_note(self.reservation, self.now)
            elif config.queueing_strategy == STRICT_FIFO:
                self.blocker = job
        else:
            reason = (explain_quota(outcome) + note) if explain_it else ""
            if config.queueing_strategy == STRICT_FIFO:
                self.queue_blockers[job.queue] = job
        self.waiting[job.key] = reason

    def _attempt(self, job: PendingJob) -> Outcome:
        """Check the quota and place the gang; a placement stays applied."""
        ledger = self.state.ledger
        limited = ledger is not None and ledger.limits(job.queue)
        if limited:
            assert ledger is not None
            shortfall = ledger.shortfall(job.queue, self._least_usage(job))
            if shortfall is not None:
                return shortfall
        state = self.state
        outcome = place_gang(state.cluster, job, state.memo, config=state.config, profile=self._profile)
        if limited and isinstance(outcome, GangPlacement):
            return self._trim_to_quota(job, outcome)
        return outcome

    def _trim_to_quota(self, job: PendingJob, placement: GangPlacement) -> GangPlacement | QuotaShortfall:
        """Give back trailing replicas (not below ``min_available``) until the placement fits the quota."""
        ledger = self.state.ledger
        assert ledger is not None
        usages = self._placed_usages(job, placement)
        total = sum(usages, Usage())
        shortfall = ledger.shortfall(job.queue, total)
        if shortfall is None:
            return placement
        reservations, assignments = list(placement.reservations), list(placement.assignments)
        needed = needed_replicas(job)
        while shortfall is not None and len(assignments) > needed:
            self.state.cluster.undo(reservations.pop())
            assignments.pop()
            total = total - usages.pop()
            shortfall = ledger.shortfall(job.queue, total)
        if shortfall is not None:
            self.withdraw(GangPlacement(tuple(assignments), tuple(reservations)))
            return shortfall
        return GangPlacement(tuple(assignments), tuple(reservations))

    def _admit(self, job: PendingJob, placement: GangPlacement) -> None:
        state = self.state
        self._generation += 1
        self.admitted.append(Admission(key=job.key, assignments=placement.assignments))
        self.admitted_keys.add(job.key)
        running = RunningJob(
            key=job.key,
            priority=job.priority,
            queue=job.queue,
            started=self.now,
            replicas=job.replicas,
            assignments=placement.assignments,
            expected_end=self._end(job),
            preemptible=job.preemptible,
        )
        usage = Usage()
        if state.ledger is not None:
            usage = sum(self._placed_usages(job, placement), Usage())
            state.ledger.charge(job.queue, usage)
        nodes = frozenset(reservation.node for reservation in placement.reservations)
        holding = Holding(job=running, reservations=placement.reservations, usage=usage, nodes=nodes)
        state.held[job.key] = holding
        if state.bands is not None:
            requests = {replica.name: replica for replica in job.replicas}
            state.bands.admit(job, [requests[a.replica] for a in placement.assignments], self.now)
        self._sorted_add(holding)

    def _end(self, job: PendingJob) -> datetime | None:
        estimate = job.duration_estimate
        return None if estimate is None else self.now + timedelta(seconds=estimate)

    # --- backfill -------------------------------------------------------------------------------------

    def _keep_head_free(self, job: PendingJob, placement: GangPlacement) -> GangPlacement | None:
        """The placement if it does not delay the reserved head (placed again away from it if need be)."""
        reservation = self.reservation
        if reservation is None or reservation.ends_in_time(self._end(job)):
            return placement
        if reservation.admits(placement):
            reservation.take(placement)
            return placement
        self.withdraw(placement)
        cluster = self.state.cluster
        blocks = reservation.blocks(cluster)
        for block in blocks:
            cluster.apply(block)
        try:
            outcome = self._attempt(job)
        finally:
            for block in reversed(blocks):
                cluster.undo(block)
        if not isinstance(outcome, GangPlacement):
            return None
        if not reservation.admits(outcome):  # pragma: no cover - the blocks keep it off the shadow nodes
            self.withdraw(outcome)
            return None
        reservation.take(outcome)
        return outcome

    def _reserve(self, job: PendingJob) -> HeadReservation | None:
        return reserve_for_head(
            job,
            list(self.state.held.values()),
            cluster=self.state.cluster,
            now=self.now,
            place=self._place_only,
            withdraw=self.withdraw,
        )

    def _place_only(self, job: PendingJob) -> GangPlacement | None:
        state = self.state
        outcome = place_gang(state.cluster, job, state.memo, config=state.config, profile=self._profile)
        return outcome if isinstance(outcome, GangPlacement) else None

    # --- preemption -----------------------------------------------------------------------------------

    def _preempt(self, job: PendingJob, outcome: GangShortfall | QuotaShortfall) -> str | None:
        """Admit ``job`` by preempting, and return None; or say why preemption cannot help.

        A failed search is remembered for jobs of the same shape (priority, queue, replicas, policies; with time
        slicing, band and whether the job waited in the previous cycle) until the next admission changes the
        cluster: gangs of identical workers do not search again.
        """
        bands = self.state.bands
        slicing = (bands.pending_band(job), bands.waited_before(job.key)) if bands is not None else ()
        shape = (job.priority, *slicing, *self._shape(job), self.reservation is not None)
        failed = self._preempt_failures.get(shape)
        if failed is not None and failed[0] == self._generation:
            return failed[1]
        phrase = self._search_victims(job, outcome)
        if phrase is not None:
            self._preempt_failures[shape] = (self._generation, phrase)
        return phrase

    def _search_victims(self, job: PendingJob, outcome: GangShortfall | QuotaShortfall) -> str | None:
        state = self.state
        ledger = state.ledger
        may_reclaim = (
            state.config.preemption
            and ledger is not None
            and ledger.limits(job.queue)
            and ledger.cohort_of(job.queue) is not None
            and ledger.within_nominal(job.queue, self._least_usage(job))
        )
        candidates = eligible_victims(
            job,
            self._by_loss(),
            ledger=ledger,
            may_reclaim=may_reclaim,
            relevant=self._relevance(job, outcome),
            excluded=self.admitted_keys,
            by_priority=state.config.preemption,
            rank=self._rank,
            job_band=self._pending_band(job),
            recent=self._shielded(job),
        )
        if isinstance(outcome, GangShortfall):
            candidates = by_node(candidates, demand_of(outcome.failing), state.cluster, self._rank)
        plan = find_victims(job, candidates, self, ledger=ledger)
        if not isinstance(plan, PreemptionPlan):
            return plan
        placement = self._keep_head_free(job, plan.placement)
        if placement is None:
            for candidate in reversed(plan.victims):
                self.take_again(candidate.holding)
            return "the room it would free is reserved for the first job in line"
        for candidate in plan.victims:
            victim = candidate.holding.job
            self._sorted_drop(candidate.holding)
            del state.held[victim.key]
            if candidate.by_band:
                victim_band = -self._rank(victim)[1]
                reason = band_reason(victim, job, victim_band=victim_band, preemptor_band=self._pending_band(job))
            else:
                cohort = ledger.cohort_of(job.queue) if ledger is not None else None
                reason = preemption_reason(victim, job, reclaim=candidate.reclaim, cohort=cohort)
            if state.bands is not None:
                state.bands.stop(victim.key, self.now)
            self.preempted.append(Preemption(victim=victim.key, preemptor=job.key, reason=reason))
            if self._order is not None:
                self._order.touched(victim.queue)
        self._admit(job, placement)
        return None

    def _relevance(self, job: PendingJob, outcome: GangShortfall | QuotaShortfall) -> Callable[[Holding], bool]:
        """Which running jobs could help: GPU holders (of an acceptable model) when GPUs are what is short."""
        demands = self._demands_of(job)
        if isinstance(outcome, QuotaShortfall):
            gpu_bound = outcome.resource == 2
        else:
            gpu_bound = demand_of(outcome.failing).wants_gpu and any(
                shortage in _GPU_SHORTAGES for shortage in outcome.shortages
            )
        if not gpu_bound:
            return lambda holding: True
        models = {demand.gpu_model for demand in demands if demand.wants_gpu}
        allowed: frozenset[str] | None = None
        if None not in models:
            allowed = frozenset(name for model in models if model is not None for name in model_alternatives(model))
        by_name = self.state.cluster.by_name

        def relevant(holding: Holding) -> bool:
            if holding.usage.gpu_milli <= 0 and not any(reservation.gpus for reservation in holding.reservations):
                return False
            if allowed is None:
                return True
            return any(
                by_name[reservation.node].gpu_by_index[index].model.casefold() in allowed
                for reservation in holding.reservations
                for index in reservation.gpus
            )

        return relevant

    # --- TrialSpace -----------------------------------------------------------------------------------

    def give_back(self, holding: Holding) -> None:
        """Take a running job off the working copy and refund its queue."""
        for reservation in reversed(holding.reservations):
            self.state.cluster.undo(reservation)
        if self.state.ledger is not None:
            self.state.ledger.refund(holding.job.queue, holding.usage)

    def take_again(self, holding: Holding) -> None:
        """Undo ``give_back``."""
        for reservation in holding.reservations:
            self.state.cluster.apply(reservation)
        if self.state.ledger is not None:
            self.state.ledger.charge(holding.job.queue, holding.usage)

    def might_fit(self, job: PendingJob) -> bool:
        """The quota allows the job's minimum and the nodes could hold it by counts."""
        ledger = self.state.ledger
        if ledger is not None and ledger.shortfall(job.queue, self._least_usage(job)) is not None:
            return False
        return could_hold(self.state.cluster.table, self._demands_of(job), needed_replicas(job))

    def counts_allow(self, job: PendingJob, holdings: Sequence[Holding]) -> bool:
        """``might_fit`` as if ``holdings`` were given back (the ledger is back as it was on return)."""
        ledger = self.state.ledger
        if ledger is not None and ledger.limits(job.queue):
            for holding in holdings:
                ledger.refund(holding.job.queue, holding.usage)
            allowed = ledger.shortfall(job.queue, self._least_usage(job)) is None
            for holding in reversed(holdings):
                ledger.charge(holding.job.queue, holding.usage)
            if not allowed:
                return False
        table = self.state.cluster.table
        freed = FreedRoom(table)
        freed.add(reservation for holding in holdings for reservation in holding.reservations)
        return could_hold(table, self._demands_of(job), needed_replicas(job), freed)

    def attempt(self, job: PendingJob) -> GangPlacement | None:
        """Check the quota and place the gang; on success the placement stays applied."""
        outcome = self._attempt(job)
        return outcome if isinstance(outcome, GangPlacement) else None

    def quota_allows(self, job: PendingJob, placement: GangPlacement) -> bool:
        """Whether ``placement``'s usage fits the job's queue quota now."""
        ledger = self.state.ledger
        if ledger is None:
            return True
        return ledger.shortfall(job.queue, sum(self._placed_usages(job, placement), Usage())) is None

    def withdraw(self, placement: GangPlacement) -> None:
        """Undo an applied placement."""
        for reservation in reversed(placement.reservations):
            self.state.cluster.undo(reservation)

    def restore(self, placement: GangPlacement) -> None:
        """Apply a withdrawn placement again."""
        for reservation in placement.reservations:
            self.state.cluster.apply(reservation)

    # --- helpers --------------------------------------------------------------------------------------

    def _by_loss(self) -> list[Holding]:
        """Every running job, least loss first (sorted once, then kept sorted as jobs come and go)."""
        if self._sorted is None:
            keyed = sorted((loss(holding, self._rank), holding) for holding in self.state.held.values())
            self._sorted = ([key for key, _ in keyed], [holding for _, holding in keyed])
        return self._sorted[1]

    def _sorted_add(self, holding: Holding) -> None:
        if self._sorted is not None:
            key = loss(holding, self._rank)
            position = bisect_left(self._sorted[0], key)
            self._sorted[0].insert(position, key)
            self._sorted[1].insert(position, holding)

    def _sorted_drop(self, holding: Holding) -> None:
        if self._sorted is not None:
            position = bisect_left(self._sorted[0], loss(holding, self._rank))
            del self._sorted[0][position]
            del self._sorted[1][position]

    def _rank(self, job: RunningJob) -> Rank:
        """A running job's rank as a victim: its priority, then (time slicing) minus its band now."""
        bands = self.state.bands
        if bands is None:
            return plain_rank(job)
        rank = self._ranks.get(job.key)
        if rank is None:
            rank = self._ranks[job.key] = (job.priority, -bands.running_band(job, self.now))
        return rank

    def _pending_band(self, job: PendingJob) -> int:
        bands = self.state.bands
        return 0 if bands is None else bands.pending_band(job)

    def _shielded(self, job: PendingJob) -> frozenset[str]:
        """Running jobs ``job`` may not preempt by band: admitted just now, or last cycle while it waited."""
        bands = self.state.bands
        if bands is None:
            return frozenset()
        return bands.shielded(self.state.held, job.key)

    def _shape(self, job: PendingJob) -> tuple[object, ...]:
        """What decides a job's placement and quota check, apart from the state: equal shapes, equal answers."""
        return (job.queue, job.placement, job.topology, needed_replicas(job), tuple(self._demands_of(job)))

    def _demands_of(self, job: PendingJob) -> list[Demand]:
        demands = self._demands.get(job.key)
        if demands is None:
            demands = self._demands[job.key] = [demand_of(replica) for replica in job.replicas]
        return demands

    def _least_usage(self, job: PendingJob) -> Usage:
        """What the job needs at least: all replicas, or the smallest ``min_available`` of them."""
        needed = needed_replicas(job)
        if needed >= len(job.replicas):
            return total_usage(job.replicas)
        usages = sorted(
            (usage_of(replica) for replica in job.replicas), key=lambda u: (u.gpu_milli, u.cpu_milli, u.memory)
        )
        return sum(usages[:needed], Usage())

    def _placed_usages(self, job: PendingJob, placement: GangPlacement) -> list[Usage]:
        requests = {replica.name: replica for replica in job.replicas}
        return [usage_of(requests[assignment.replica]) for assignment in placement.assignments]

    def _share(self, queue: str) -> float:
        ledger = self.state.ledger
        assert ledger is not None
        return dominant_share(ledger.usage(queue), self._capacity, ledger.weight(queue))


def _capacity(cluster: WorkingCluster) -> Usage:
    """The allocatable CPU, memory and milli-GPU of every schedulable node."""
    table = cluster.table
    schedulable = table.schedulable
    return Usage(
        cpu_milli=int(table.cpu_capacity[schedulable].sum()),
        memory=int(table.memory_capacity[schedulable].sum()),
        gpu_milli=1000 * int(np.count_nonzero(table.gpu_present[schedulable])),
    )
