"""Preemption: which running gangs to stop so that a waiting gang fits, decided on the working copy.

DESIGN §4.4, in the kube-scheduler and Kueue shape. When a job fits neither the nodes nor its queue's quota
and preemption is on, the cycle looks for victims among the running jobs:

- **who may be a victim** (``eligible_victims``): never a job marked non-preemptible, never one admitted in
  this same cycle, and only whole jobs (every replica). Either
  - *priority*: a job of strictly lower priority, of the preemptor's own queue or of a queue without quota
    (Kueue's ``withinClusterQueue: LowerPriority``; across quota'd queues, priority does not override
    quota); or
  - *reclaim*: when the preemptor's queue has a cohort and the job stays within its queue's nominal quota,
    a job of any priority from another queue of the cohort while that queue borrows (Kueue's
    ``reclaimWithinCohort: Any``): lent quota comes back when its owner needs it.

  - *band* (time slicing, ``SchedulerConfig.las_preempt``): a job of the same priority whose attained
    service (``ServiceBands``) puts it in a strictly lower least-attained-service band than the preemptor's,
    under the same queue rule as priority; not one admitted in this cycle, nor one admitted in the previous
    cycle when the preemptor already waited then (it got that room first: no thrashing). The band acts as a
    priority below the real one: real priority always wins, and there is no preemption within a band.

  Since a job only ever preempts strictly lower priorities (or bands), or takes back quota that is its queue's
  own, preemption cannot cycle within a cycle: a victim never preempts its preemptor back. Across cycles a
  band only grows while a job runs, so a victim can preempt its preemptor later only once that one has
  attained more than it, or after a starvation promotion.
- **which ones** (``find_victims``): candidates in order of least loss: lowest priority first, then (time
  slicing) the lowest band, then checkpointed work, then the most recently started, then the key; when nodes
  (not quota) are short, grouped by node, cheapest node first (``by_node``). They are taken away one by one
  (what they hold given back, their queue refunded) until the gang fits; placement is tried only when the node
  table says it might (``headroom.could_hold``) and the quota allows it. Then a **reprieve** pass, as in the
  kube-scheduler, gives back to each victim, the most valuable first, what it held when the gang still fits
  without it: for a victim on nodes the gang's placement does not use, only the quota is re-checked; for the
  others the gang is placed again. What remains is a minimal set: dropping any one victim from it would not
  let the gang fit (up to the placement being greedy).
- **bounds**: at most ``MAX_CANDIDATES`` candidates are considered and at most ``MAX_TRIALS`` placements
  tried per preemptor, so a job that cannot be helped costs little; the search only runs for jobs that did
  not fit.

The search changes the working copy through a ``TrialSpace`` (the cycle), and leaves it as it found it when
no set of victims works. On success the gang's placement stays applied and the victims' holdings are given
back; the caller records them.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.gang import GangPlacement
from phalanx.core.scheduling.holdings import Holding, usage_of
from phalanx.core.scheduling.quotas import QuotaLedger
from phalanx.core.scheduling.types import GpuSlot, PendingJob, ReplicaRequest, RunningJob
from phalanx.core.scheduling.working import WorkingCluster, WorkingNode

MAX_CANDIDATES = 256
MAX_TRIALS = 24

# A job's rank in preemption: (priority, -band). Higher ranks are worth more; a job may preempt lower ranks only.
# Without time slicing every band is 0 and the rank is the priority alone.
Rank = tuple[int, int]


def plain_rank(job: RunningJob) -> Rank:
    """The rank without time slicing: the priority alone."""
    return (job.priority, 0)


class TrialSpace(Protocol):
    """The operations a victim search needs from the cycle's working copy and ledger."""

    def give_back(self, holding: Holding) -> None:
        """Take a running job off the working copy and refund its queue."""

    def take_again(self, holding: Holding) -> None:
        """Undo ``give_back``."""

    def might_fit(self, job: PendingJob) -> bool:
        """A cheap necessary condition for ``attempt`` to succeed."""

    def counts_allow(self, job: PendingJob, holdings: Sequence[Holding]) -> bool:
        """``might_fit`` as if ``holdings`` were given back, without giving them back."""

    def attempt(self, job: PendingJob) -> GangPlacement | None:
        """Check the quota and place the gang; on success the placement stays applied."""

    def quota_allows(self, job: PendingJob, placement: GangPlacement) -> bool:
        """Whether ``placement``'s usage still fits the job's queue quota."""

    def withdraw(self, placement: GangPlacement) -> None:
        """Undo an applied placement."""

    def restore(self, placement: GangPlacement) -> None:
        """Apply a withdrawn placement again, as it was."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running job that may be preempted, and on which ground.

    Attributes:
        holding: the running job.
        reclaim: True when only reclaim allows it (it may be taken only while its queue borrows).
        by_band: True when only its least-attained-service band allows it (time slicing).
    """

    holding: Holding
    reclaim: bool
    by_band: bool = False


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Victims found: the gang's placement (applied) and the victims (given back), in preference order."""

    placement: GangPlacement
    victims: tuple[Candidate, ...]


def eligible_victims(
    job: PendingJob,
    holdings: Sequence[Holding],
    *,
    ledger: QuotaLedger | None,
    may_reclaim: bool,
    relevant: Callable[[Holding], bool],
    excluded: Collection[str] = frozenset(),
    by_priority: bool = True,
    rank: Callable[[RunningJob], Rank] = plain_rank,
    job_band: int = 0,
    recent: Collection[str] = frozenset(),
) -> list[Candidate]:
    """The running jobs ``job`` may preempt, least loss first, at most ``MAX_CANDIDATES`` of them.

    Args:
        job: the preemptor.
        holdings: every running job, sorted by ``loss`` under the same ``rank``.
        ledger: the queue ledger (None: no queue has quota).
        may_reclaim: whether the job stays within its queue's nominal quota, so it may reclaim.
        relevant: whether stopping a running job could help at all (it holds what the job lacks).
        excluded: keys that must not be preempted (admitted in this cycle).
        by_priority: whether lower priorities may be preempted (``SchedulerConfig.preemption``).
        rank: each running job's rank; with time slicing ``(priority, -band)``, which also allows preempting
            a job of the same priority in a lower band.
        job_band: the preemptor's band (0 without time slicing).
        recent: keys that must not be preempted by band (admitted in the previous cycle while the preemptor
            waited).
    """
    own = job.queue
    own_rank = (job.priority, -job_band)
    cohort = ledger.cohort_of(own) if ledger is not None and may_reclaim else None
    found: list[Candidate] = []
    for holding in holdings:
        victim = holding.job
        victim_rank = rank(victim)
        if victim_rank >= own_rank and cohort is None:
            break  # sorted by rank: nothing further may be preempted by priority or band, and no reclaim
        if not victim.preemptible or victim.key in excluded:
            continue
        queue_allows = victim.queue == own or ledger is None or not ledger.limits(victim.queue)
        lower_priority = by_priority and victim.priority < job.priority and queue_allows
        lower_band = (
            not lower_priority
            and victim.priority == job.priority
            and victim_rank < own_rank
            and queue_allows
            and victim.key not in recent
        )
        by_reclaim = (
            not lower_priority
            and not lower_band
            and cohort is not None
            and ledger is not None
            and victim.queue != own
            and ledger.cohort_of(victim.queue) == cohort
        )
        if (lower_priority or lower_band or by_reclaim) and relevant(holding):
            found.append(Candidate(holding=holding, reclaim=by_reclaim, by_band=lower_band))
            if len(found) == MAX_CANDIDATES:
                break
    return found


def loss(holding: Holding, rank: Callable[[RunningJob], Rank] = plain_rank) -> tuple[int, int, int, float, str]:
    """Sort key of running jobs, least loss first: rank (priority, then band), checkpointed, youngest, key."""
    victim = holding.job
    priority, band = rank(victim)
    return (priority, band, 0 if victim.checkpointed else 1, -victim.started.timestamp(), victim.key)


def find_victims(
    job: PendingJob, candidates: Sequence[Candidate], space: TrialSpace, *, ledger: QuotaLedger | None
) -> PreemptionPlan | str:
    """Find a minimal set of victims among ``candidates`` that lets ``job`` fit, or say why there is none.

    The candidates are taken in order (a reclaim candidate only while its queue still borrows). The counts
    (``TrialSpace.counts_allow``, without touching the working copy) say how many of them at least must go;
    those are given back at once, placement is tried, and further ones are given back one at a time until the
    gang fits or ``MAX_TRIALS`` placements failed.

    Returns:
        The plan (placement applied, victims given back), or a phrase for the waiting reason.
    """
    if not candidates:
        return "no running job it may preempt holds what it lacks"
    sequence = _taking_order(candidates, ledger)
    if not space.counts_allow(job, [candidate.holding for candidate in sequence]):
        return "stopping the running jobs it may preempt would not make room"
    low, high = 1, len(sequence)
    while low < high:
        middle = (low + high) // 2
        if space.counts_allow(job, [candidate.holding for candidate in sequence[:middle]]):
            high = middle
        else:
            low = middle + 1
    removed = list(sequence[:low])
    for candidate in removed:
        space.give_back(candidate.holding)
    placement = space.attempt(job)
    trials = 1
    for candidate in sequence[low:]:
        if placement is not None or trials >= MAX_TRIALS:
            break
        space.give_back(candidate.holding)
        removed.append(candidate)
        if space.might_fit(job):
            trials += 1
            placement = space.attempt(job)
    if placement is None:
        for candidate in reversed(removed):
            space.take_again(candidate.holding)
        return "stopping the running jobs it may preempt would not make room"
    victims, placement = _reprieve(job, removed, placement, space, trials)
    return PreemptionPlan(placement=placement, victims=tuple(victims))


def _taking_order(candidates: Sequence[Candidate], ledger: QuotaLedger | None) -> list[Candidate]:
    """The candidates that would be taken in turn: a reclaim candidate only while its queue borrows.

    A dry run on the ledger (refunds, then the charges back): taking any prefix of the result really, in
    order, skips exactly the same candidates.
    """
    taken: list[Candidate] = []
    for candidate in candidates:
        holding = candidate.holding
        if candidate.reclaim and (ledger is None or not ledger.borrowing(holding.job.queue)):
            continue  # its queue no longer borrows: what it holds is its own quota
        if ledger is not None:
            ledger.refund(holding.job.queue, holding.usage)
        taken.append(candidate)
    if ledger is not None:
        for candidate in reversed(taken):
            ledger.charge(candidate.holding.job.queue, candidate.holding.usage)
    return taken


def _reprieve(
    job: PendingJob, removed: list[Candidate], placement: GangPlacement, space: TrialSpace, trials: int
) -> tuple[list[Candidate], GangPlacement]:
    """Give back to each victim, the most valuable first, what it held if the gang fits without stopping it."""
    kept = [True] * len(removed)
    for position in range(len(removed) - 1, -1, -1):
        holding = removed[position].holding
        used_nodes = {reservation.node for reservation in placement.reservations}
        if holding.nodes.isdisjoint(used_nodes):
            space.take_again(holding)
            if space.quota_allows(job, placement):
                kept[position] = False
            else:
                space.give_back(holding)
            continue
        if trials >= MAX_TRIALS:
            continue
        trials += 1
        space.withdraw(placement)
        space.take_again(holding)
        again = space.attempt(job)
        if again is not None:
            placement = again
            kept[position] = False
        else:
            space.give_back(holding)
            space.restore(placement)
    return [candidate for candidate, keep in zip(removed, kept, strict=True) if keep], placement


def by_node(
    candidates: Sequence[Candidate],
    demand: Demand,
    cluster: WorkingCluster,
    rank: Callable[[RunningJob], Rank] = plain_rank,
) -> list[Candidate]:
    """``candidates`` reordered so that the cheapest node to make room on comes first.

    For every node, the candidates holding something there are taken in order (least loss first) until one
    replica of ``demand`` would fit by counts; nodes are then ranked by the highest rank (priority, then band)
    among those victims, then their number, then how far down the least-loss order the last of them is, then
    the node order, and their victims listed in that order, followed by every candidate not listed yet (in
    their own order). Stopping jobs all over the cluster frees room nowhere in
    particular; this way the search frees whole nodes, cheapest first, the way the kube-scheduler picks the
    node whose victims cost least.
    """
    on_node: dict[str, list[Candidate]] = {}
    position: dict[str, int] = {}
    for order, candidate in enumerate(candidates):
        position[candidate.holding.key] = order
        for name in sorted(candidate.holding.nodes):
            on_node.setdefault(name, []).append(candidate)
    ranked: list[tuple[tuple[Rank, int, int, int], list[Candidate]]] = []
    for name, there in on_node.items():
        node = cluster.by_name.get(name)
        if node is None or not node.schedulable:
            continue
        needed = _victims_for_room(node, there, demand)
        if needed is not None:
            worst = max(rank(candidate.holding.job) for candidate in needed)
            dearest = max(position[candidate.holding.key] for candidate in needed)
            ranked.append(((worst, len(needed), dearest, cluster.table.row_of[name]), needed))
    ranked.sort(key=lambda entry: entry[0])
    ordered: list[Candidate] = []
    seen: set[str] = set()
    for _, needed in ranked:
        for candidate in needed:
            if candidate.holding.key not in seen:
                seen.add(candidate.holding.key)
                ordered.append(candidate)
    ordered.extend(candidate for candidate in candidates if candidate.holding.key not in seen)
    return ordered


def _victims_for_room(node: WorkingNode, there: Sequence[Candidate], demand: Demand) -> list[Candidate] | None:
    """The first of ``there`` whose removal lets one replica of ``demand`` fit ``node`` by counts, or None."""
    usable = node.usable_gpus(demand.gpu_model) if demand.wants_gpu else ()
    if demand.wants_gpu and not usable:
        return None
    gpu_used = dict(node.gpu_used)
    free_cpus, shared, memory = len(node.free_cpus), node.shared_cpu_milli, node.free_memory
    taken: list[Candidate] = []
    for candidate in there:
        taken.append(candidate)
        for reservation in candidate.holding.reservations:
            if reservation.node != node.name:
                continue
            free_cpus += len(reservation.cpus)
            shared -= reservation.shared_cpu_milli
            memory += reservation.memory
            for index in reservation.gpus:
                gpu_used[index] = gpu_used.get(index, 0) - reservation.gpu_milli
        if _fits(demand, usable, gpu_used, free_cpus=free_cpus, shared=shared, memory=memory):
            return taken
    return None


def _fits(
    demand: Demand, usable: Sequence[GpuSlot], gpu_used: dict[int, int], *, free_cpus: int, shared: int, memory: int
) -> bool:
    if demand.memory > memory:
        return False
    if demand.exclusive_cpus > free_cpus - -(-shared // MILLI):
        return False
    if demand.shared_cpu_milli > MILLI * free_cpus - shared:
        return False
    if demand.gpus and sum(1 for gpu in usable if gpu_used.get(gpu.index, 0) <= 0) < demand.gpus:
        return False
    return not demand.gpu_milli or any(MILLI - gpu_used.get(gpu.index, 0) >= demand.gpu_milli for gpu in usable)


# --- least-attained-service time slicing ---------------------------------------------------------------------


def band_reason(victim: RunningJob, preemptor: PendingJob, *, victim_band: int, preemptor_band: int) -> str:
    """The sentence a job preempted by time slicing gets."""
    return (
        f"preempted to make room for {preemptor.key}: least attained service, its attained GPU time put it in "
        f"band {victim_band}, below {preemptor.key}'s band {preemptor_band} (same priority {victim.priority})"
    )


@dataclass(slots=True)
class _Service:
    """What the session knows of one job's service, for its band and its starvation guard.

    Attributes:
        base: GPU-seconds attained before the current run (while it waits: in all), as the caller reported.
        offset: GPU-seconds forgiven by starvation promotions; the band counts ``attained - offset``.
        gpus: GPUs its current (or last) run holds.
        started: start of the current run; None while it waits.
        ran: seconds run since its last promotion (Tiresias' executed time).
        waited: seconds waited since its last promotion, once it had run (Tiresias' last pending time).
        mark: when ``waited`` was last brought up to date.
        admitted: the session cycle that admitted its current run (-2 for jobs handed in by a snapshot).
        promoted: when it was last promoted; it queues in the top band from then on, behind the jobs already
            there.
    """

    base: float
    offset: float = 0.0
    gpus: float = 0.0
    started: datetime | None = None
    ran: float = 0.0
    waited: float = 0.0
    mark: datetime | None = None
    admitted: int = -2
    promoted: datetime | None = None


def _gpus(replicas: Iterable[ReplicaRequest]) -> float:
    return sum(usage_of(replica).gpu_milli for replica in replicas) / MILLI


class ServiceBands:
    """Attained service and least-attained-service bands of pending and running jobs, across a session's cycles.

    A waiting job's service is its ``PendingJob.attained_service``; a running job's grows by its GPUs times the
    seconds since it started (``base + gpus * (now - started)``). The band is the number of ``thresholds`` that
    service (less what starvation promotions forgave) has reached: 0 is the top band. Running jobs handed in by
    a snapshot count from their ``started`` on top of their ``RunningJob.attained_service`` (earlier runs).

    Starvation guard (Tiresias' STARVELIMIT): a waiting job that ran since its last promotion, sits below the
    top band and has waited, since that promotion, ``starve_limit`` times as long as it ran there goes back to
    band 0 (its service counts from zero again for the bands), at the end of that band's line. Waiting time is
    measured from cycle to cycle, so the guard needs the session kept across cycles; a one-shot ``schedule``
    never promotes.
    """

    __slots__ = ("_jobs", "_waited_before", "_waiting", "cycle", "promotions", "starve_limit", "thresholds")

    def __init__(self, thresholds: tuple[float, ...], starve_limit: float) -> None:
        self.thresholds = thresholds
        self.starve_limit = starve_limit
        self._jobs: dict[str, _Service] = {}
        self._waiting: frozenset[str] = frozenset()  # pending in this cycle
        self._waited_before: frozenset[str] = frozenset()  # pending in the previous cycle
        self.cycle = 0
        self.promotions = 0

    def band(self, service: float) -> int:
        """The band of ``service`` GPU-seconds: how many thresholds it has reached."""
        return bisect_right(self.thresholds, service)

    def pending_band(self, job: PendingJob) -> int:
        """The band of a waiting job as ``observe`` handed it to the cycle (promotions already applied)."""
        return self.band(job.attained_service)

    def running_band(self, job: RunningJob, now: datetime) -> int:
        """The band of a running job at ``now``."""
        record = self._running(job)
        started = record.started if record.started is not None else job.started
        served = record.gpus * max(0.0, (now - started).total_seconds())
        return self.band(record.base + served - record.offset)

    def waited_before(self, key: str) -> bool:
        """Whether ``key`` was pending in the previous cycle too."""
        return key in self._waited_before

    def shielded(self, keys: Iterable[str], preemptor: str) -> frozenset[str]:
        """Of the running ``keys``, those ``preemptor`` may not stop by band (no thrashing).

        They are the ones admitted in this cycle, and those admitted in the previous one while ``preemptor``
        already waited (it had its chance at that room then). A job that arrived since may preempt them.
        """
        waited = preemptor in self._waited_before
        shielded: set[str] = set()
        for key in keys:
            record = self._jobs.get(key)
            if record is None:
                continue
            if record.admitted == self.cycle or (waited and record.admitted == self.cycle - 1):
                shielded.add(key)
        return frozenset(shielded)

    def observe(self, pending: Sequence[PendingJob], held: Collection[str], now: datetime) -> list[PendingJob]:
        """Start a cycle: count waiting time, promote starved jobs, forget jobs that left.

        Returns:
            ``pending`` with each promoted job's ``attained_service`` lowered by what its promotions forgave,
            so that the queue order sees its band, and its ``created`` moved to its last promotion, so that it
            joins the top band behind the jobs already waiting there (as Tiresias appends it to the queue).
        """
        self.cycle += 1
        self._waited_before = self._waiting
        self._waiting = frozenset(job.key for job in pending)
        seen = set(held)
        out: list[PendingJob] = []
        for job in pending:
            seen.add(job.key)
            record = self._jobs.get(job.key)
            if record is None:
                if job.attained_service <= 0:
                    out.append(job)
                    continue
                gpus = _gpus(job.replicas)
                ran = job.attained_service / gpus if gpus > 0 else 0.0
                record = self._jobs[job.key] = _Service(base=job.attained_service, gpus=gpus, ran=ran, mark=now)
            elif record.started is not None:
                self._stop(record, now)  # stopped without the session being told (not preempted by it)
            elif record.ran > 0 and record.mark is not None:
                record.waited += max(0.0, (now - record.mark).total_seconds())
            record.mark = now
            record.base = job.attained_service
            if self._starved(record):
                record.offset = job.attained_service
                record.ran = 0.0
                record.waited = 0.0
                record.promoted = now
                self.promotions += 1
            if record.promoted is not None:
                job = replace(
                    job,
                    attained_service=max(0.0, job.attained_service - record.offset),
                    created=max(job.created, record.promoted),
                )
            out.append(job)
        for key in [key for key in self._jobs if key not in seen]:
            del self._jobs[key]
        return out

    def _starved(self, record: _Service) -> bool:
        return (
            self.starve_limit > 0
            and record.ran > 0
            and self.band(record.base - record.offset) > 0
            and record.waited >= self.starve_limit * record.ran
        )

    def admit(self, job: PendingJob, assigned: Iterable[ReplicaRequest], now: datetime) -> None:
        """Record that ``job`` (as ``observe`` handed it) starts now with the ``assigned`` replicas."""
        record = self._jobs.get(job.key)
        if record is None:
            record = self._jobs[job.key] = _Service(base=job.attained_service)
        else:
            record.base = job.attained_service + record.offset
        record.gpus = _gpus(assigned)
        record.started = now
        record.admitted = self.cycle

    def stop(self, key: str, now: datetime) -> None:
        """Record that the running job ``key`` was preempted at ``now``; it waits again, keeping its service."""
        record = self._jobs.get(key)
        if record is not None and record.started is not None:
            self._stop(record, now)

    def _stop(self, record: _Service, now: datetime) -> None:
        assert record.started is not None
        seconds = max(0.0, (now - record.started).total_seconds())
        record.base += record.gpus * seconds
        record.ran += seconds
        record.started = None
        record.mark = now

    def release(self, key: str) -> None:
        """Forget a job that finished (or left)."""
        self._jobs.pop(key, None)

    def next_change(self, running: Iterable[RunningJob], now: datetime) -> datetime | None:
        """The next time after ``now`` (whole seconds later) at which a band changes, or None.

        A running job changes band when its service reaches the next threshold; a waiting job that has run is
        promoted when its waiting time reaches the starvation limit. A caller that runs cycles only on events
        (the simulator) adds this time as one.
        """
        waits: list[float] = []
        for job in running:
            record = self._running(job)
            if record.gpus <= 0 or record.started is None:
                continue
            service = record.base + record.gpus * (now - record.started).total_seconds() - record.offset
            band = self.band(service)
            if band < len(self.thresholds):
                waits.append((self.thresholds[band] - service) / record.gpus)
        if self.starve_limit > 0:
            for record in self._jobs.values():
                if record.started is None and record.ran > 0 and self.band(record.base - record.offset) > 0:
                    since = (now - record.mark).total_seconds() if record.mark is not None else 0.0
                    waits.append(self.starve_limit * record.ran - record.waited - since)
        if not waits:
            return None
        return now + timedelta(seconds=max(1, math.ceil(min(waits))))

    def _running(self, job: RunningJob) -> _Service:
        """The record of a running job; one handed in by a snapshot starts at its ``started``, on its earlier runs."""
        record = self._jobs.get(job.key)
        if record is None or record.started is None:
            requests = {replica.name: replica for replica in job.replicas}
            assigned = [requests[a.replica] for a in job.assignments if a.replica in requests]
            if record is None:
                record = self._jobs[job.key] = _Service(base=job.attained_service)
            record.gpus = _gpus(assigned)
            record.started = job.started
        return record
