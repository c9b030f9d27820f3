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

  Since a job only ever preempts strictly lower priorities, or takes back quota that is its queue's own,
  preemption cannot cycle: a victim never preempts its preemptor back.
- **which ones** (``find_victims``): candidates in order of least loss: lowest priority first, then
  checkpointed work, then the most recently started, then the key; when nodes (not quota) are short, grouped
  by node, cheapest node first (``by_node``). They are taken away one by one (what they hold given back, their
  queue refunded) until the gang fits; placement is tried only when the node table
  says it might (``headroom.could_hold``) and the quota allows it. Then a **reprieve** pass, as in the
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.gang import GangPlacement
from phalanx.core.scheduling.holdings import Holding
from phalanx.core.scheduling.quotas import QuotaLedger
from phalanx.core.scheduling.types import GpuSlot, PendingJob
from phalanx.core.scheduling.working import WorkingCluster, WorkingNode

MAX_CANDIDATES = 256
MAX_TRIALS = 24


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
    """

    holding: Holding
    reclaim: bool


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
    excluded: frozenset[str] | set[str] = frozenset(),
) -> list[Candidate]:
    """The running jobs ``job`` may preempt, least loss first, at most ``MAX_CANDIDATES`` of them.

    Args:
        job: the preemptor.
        holdings: every running job, sorted by ``loss``.
        ledger: the queue ledger (None: no queue has quota).
        may_reclaim: whether the job stays within its queue's nominal quota, so it may reclaim.
        relevant: whether stopping a running job could help at all (it holds what the job lacks).
        excluded: keys that must not be preempted (admitted in this cycle).
    """
    own = job.queue
    cohort = ledger.cohort_of(own) if ledger is not None and may_reclaim else None
    found: list[Candidate] = []
    for holding in holdings:
        victim = holding.job
        if victim.priority >= job.priority and cohort is None:
            break  # sorted by priority: nothing further may be preempted by priority, and no reclaim
        if not victim.preemptible or victim.key in excluded:
            continue
        by_priority = victim.priority < job.priority and (
            victim.queue == own or ledger is None or not ledger.limits(victim.queue)
        )
        by_reclaim = (
            not by_priority
            and cohort is not None
            and ledger is not None
            and victim.queue != own
            and ledger.cohort_of(victim.queue) == cohort
        )
        if (by_priority or by_reclaim) and relevant(holding):
            found.append(Candidate(holding=holding, reclaim=by_reclaim))
            if len(found) == MAX_CANDIDATES:
                break
    return found


def loss(holding: Holding) -> tuple[int, int, float, str]:
    """Sort key of running jobs, least loss first: priority, checkpointed first, youngest first, key."""
    victim = holding.job
    return (victim.priority, 0 if victim.checkpointed else 1, -victim.started.timestamp(), victim.key)


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


def by_node(candidates: Sequence[Candidate], demand: Demand, cluster: WorkingCluster) -> list[Candidate]:
    """``candidates`` reordered so that the cheapest node to make room on comes first.

    For every node, the candidates holding something there are taken in order (least loss first) until one
    replica of ``demand`` would fit by counts; nodes are then ranked by the highest priority among those
    victims, then their number, then how far down the least-loss order the last of them is, then the node
    order, and their victims listed in that order, followed by every
    candidate not listed yet (in their own order). Stopping jobs all over the cluster frees room nowhere in
    particular; this way the search frees whole nodes, cheapest first, the way the kube-scheduler picks the
    node whose victims cost least.
    """
    on_node: dict[str, list[Candidate]] = {}
    position: dict[str, int] = {}
    for rank, candidate in enumerate(candidates):
        position[candidate.holding.key] = rank
        for name in sorted(candidate.holding.nodes):
            on_node.setdefault(name, []).append(candidate)
    ranked: list[tuple[tuple[int, int, int, int], list[Candidate]]] = []
    for name, there in on_node.items():
        node = cluster.by_name.get(name)
        if node is None or not node.schedulable:
            continue
        needed = _victims_for_room(node, there, demand)
        if needed is not None:
            worst = max(candidate.holding.job.priority for candidate in needed)
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
