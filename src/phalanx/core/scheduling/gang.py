"""Gang admission: place all of a job's replicas (or ``min_available`` of them) on the working copy, or none.

Replicas are tried in order. For each, every schedulable node is filtered by counts (``fitting.py``), the
survivors are ordered by the job's placement policy (``scoring.py``), and devices are chosen on the best node
(``devices.py``); a node whose devices cannot satisfy the topology rule is skipped for the next best. Each
placed replica's ``Reservation`` is applied to the working copy at once, so the next replica sees it.

- Without ``min_available`` the first replica that fits nowhere ends the attempt.
- With it, a replica that fits nowhere is skipped and later ones are still tried ("as many as fit, in replica
  order"); the gang is admitted when at least ``min_available`` were placed. ``min_available`` is clamped to
  1..len(replicas), and a job with no replica left to place is admitted with no assignment.

A failed attempt undoes every reservation it made, in reverse, leaving the working copy exactly as before: no
GPU is ever held by half a gang. The ``GangShortfall`` it returns keeps what ``reasons.py`` needs to explain
the wait: how many replicas fit and, per node, what the first replica that did not fit lacked there.

Answers about a node (fits or not, score, device refusal) come from a ``FitMemo`` shared by the whole cycle
and are reused until the node changes, so identical replicas and identical jobs do not re-filter unchanged
nodes. Under pack, nodes already hosting the gang are ranked first and the rest only if none of them can
take the replica, which keeps large gangs from re-scoring every node per replica.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from phalanx.core.scheduling.demands import MILLI, Demand, demand_of
from phalanx.core.scheduling.devices import DeviceChoice, choose_devices
from phalanx.core.scheduling.fitting import FitMemo, Shortage, holds_in_bulk
from phalanx.core.scheduling.policies import BINPACK, SPREAD
from phalanx.core.scheduling.scoring import order_key
from phalanx.core.scheduling.types import DeviceAssignment, PendingJob, ReplicaRequest
from phalanx.core.scheduling.working import Reservation, WorkingCluster


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """A gang that was placed; its reservations stay on the working copy."""

    assignments: tuple[DeviceAssignment, ...]


@dataclass(frozen=True, slots=True)
class GangShortfall:
    """A gang that could not be placed; the working copy is back as it was.

    Attributes:
        needed: how many replicas had to be placed together.
        placed: how many fit before the attempt gave up (fewer than ``needed``).
        failing: the first replica that fit nowhere.
        shortages: schedulable node name -> what it lacked for ``failing``, at that moment.
    """

    needed: int
    placed: int
    failing: ReplicaRequest
    shortages: dict[str, Shortage] = field(default_factory=dict)


def needed_replicas(job: PendingJob) -> int:
    """How many of the job's replicas must be placed together: ``min_available`` clamped to 1..all."""
    count = len(job.replicas)
    if job.min_available is None:
        return count
    return max(1, min(job.min_available, count)) if count else 0


def place_gang(cluster: WorkingCluster, job: PendingJob, memo: FitMemo | None = None) -> GangPlacement | GangShortfall:
    """Try to place ``job``'s gang on ``cluster``, keeping the placement or undoing it entirely.

    Args:
        cluster: the working copy; changed only when the gang is placed.
        job: the gang.
        memo: answers about nodes shared across the cycle (a fresh one when None).
    """
    memo = memo if memo is not None else FitMemo()
    demands = [demand_of(replica) for replica in job.replicas]
    needed = needed_replicas(job)
    packing = job.placement not in (SPREAD, BINPACK)
    rest = _suffix_totals(demands) if packing else []
    reservations: list[Reservation] = []
    assignments: list[DeviceAssignment] = []
    members: dict[str, int] = {}
    failure: tuple[ReplicaRequest, dict[str, Shortage]] | None = None
    for position, (replica, demand) in enumerate(zip(job.replicas, demands, strict=True)):
        placed = _place_replica(
            cluster, job, replica, demand, memo=memo, members=members, rest=rest[position] if packing else None
        )
        if isinstance(placed, dict):
            failure = failure or (replica, placed)
            still_possible = len(assignments) + len(job.replicas) - position - 1 >= needed
            if not still_possible:
                break
            continue
        reservation, assignment = placed
        cluster.apply(reservation)
        reservations.append(reservation)
        assignments.append(assignment)
        members[reservation.node] = members.get(reservation.node, 0) + 1
    if len(assignments) >= needed:
        return GangPlacement(tuple(assignments))
    for reservation in reversed(reservations):
        cluster.undo(reservation)
    assert failure is not None  # fewer than needed were placed, so some replica failed
    return GangShortfall(needed=needed, placed=len(assignments), failing=failure[0], shortages=failure[1])


def _place_replica(
    cluster: WorkingCluster,
    job: PendingJob,
    replica: ReplicaRequest,
    demand: Demand,
    *,
    memo: FitMemo,
    members: dict[str, int],
    rest: Demand | None,
) -> tuple[Reservation, DeviceAssignment] | dict[str, Shortage]:
    """Place one replica on the best node, or return what every schedulable node lacked."""
    fitting, shortages = memo.filter(cluster.schedulable_nodes, demand, job.topology)
    # Under pack, a node already hosting the gang beats every other node (the first tier of its order key),
    # so the others are ranked only if devices cannot be chosen on any of those.
    hosting = [node for node in fitting if node.name in members] if rest is not None else []
    groups = [hosting, [node for node in fitting if node.name not in members]] if hosting else [fitting]
    for group in groups:
        ranked = [
            (
                order_key(
                    node.name,
                    score=score,
                    placement=job.placement,
                    gang_members=members.get(node.name, 0),
                    holds_rest=rest is not None and holds_in_bulk(node, rest),
                ),
                node,
            )
            for node, score in zip(group, memo.scores(group, demand), strict=True)
        ]
        heapq.heapify(ranked)
        while ranked:
            _, node = heapq.heappop(ranked)
            choice = choose_devices(node, demand, topology=job.topology)
            if isinstance(choice, Shortage):
                memo.refuse_devices(node, demand, job.topology, choice)
                shortages[node.name] = choice
                continue
            return _reserve(node.name, replica, demand, choice)
    return shortages


def _reserve(
    node: str, replica: ReplicaRequest, demand: Demand, choice: DeviceChoice
) -> tuple[Reservation, DeviceAssignment]:
    whole = bool(demand.gpus)
    reservation = Reservation(
        node=node,
        cpus=choice.cpus,
        shared_cpu_milli=demand.shared_cpu_milli,
        memory=demand.memory,
        gpus=choice.gpus,
        gpu_milli=MILLI if whole else demand.gpu_milli,
    )
    assignment = DeviceAssignment(
        replica=replica.name,
        node=node,
        cpus=choice.cpus,
        gpus=choice.gpus,
        gpu_milli=0 if whole else demand.gpu_milli,
    )
    return reservation, assignment


def _suffix_totals(demands: Sequence[Demand]) -> list[Demand]:
    """For each position, the total demand of that replica and every later one."""
    totals: list[Demand] = []
    running = Demand()
    for demand in reversed(demands):
        running = demand + running
        totals.append(running)
    totals.reverse()
    return totals
