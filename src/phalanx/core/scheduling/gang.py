"""Gang admission: place all of a job's replicas (or ``min_available`` of them) on the working copy, or none.

Replicas are tried in order. For each, every node is filtered by counts (``fitting.py``, one vector
expression over the node table), the survivors are ranked by the job's placement policy (``scoring.py``),
and devices are chosen on the best node (``devices.py``); a node whose devices cannot satisfy the topology
rule is skipped for the next best. Each placed replica's ``Reservation`` is applied to the working copy at
once, so the next replica sees it.

- Without ``min_available`` the first replica that fits nowhere ends the attempt.
- With it, a replica that fits nowhere is skipped and later ones are still tried ("as many as fit, in replica
  order"); the gang is admitted when at least ``min_available`` were placed. ``min_available`` is clamped to
  1..len(replicas), and a job with no replica left to place is admitted with no assignment.

A failed attempt undoes every reservation it made, in reverse, leaving the working copy exactly as before: no
GPU is ever held by half a gang. The ``GangShortfall`` it returns keeps what ``reasons.py`` needs to explain
the wait: how many replicas fit and, per shortage, how many nodes lacked it for the first replica that did
not fit.

Answers about a node (fits or not, scores, device refusal) come from a ``FitMemo`` shared by the whole cycle
(or session) and are reused until the node changes, so identical replicas and identical jobs do not
re-filter or re-score unchanged nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.demands import MILLI, Demand, demand_of
from phalanx.core.scheduling.devices import DeviceChoice, choose_devices
from phalanx.core.scheduling.fitting import FITS, FitMemo, Shortage, count_shortages
from phalanx.core.scheduling.fragmentation import WorkloadProfile, best_share_column
from phalanx.core.scheduling.policies import RANDOM
from phalanx.core.scheduling.scoring import (
    ScoreInput,
    choose_row,
    needs_rest,
    packs_shares,
    replica_salt,
    uses_fragmentation,
)
from phalanx.core.scheduling.types import DeviceAssignment, PendingJob, ReplicaRequest
from phalanx.core.scheduling.working import Reservation, WorkingCluster


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """A gang that was placed; its reservations stay on the working copy."""

    assignments: tuple[DeviceAssignment, ...]
    reservations: tuple[Reservation, ...] = ()


@dataclass(frozen=True, slots=True)
class GangShortfall:
    """A gang that could not be placed; the working copy is back as it was.

    Attributes:
        needed: how many replicas had to be placed together.
        placed: how many fit before the attempt gave up (fewer than ``needed``).
        failing: the first replica that fit nowhere.
        shortages: how many nodes lacked each resource for ``failing``, at that moment.
    """

    needed: int
    placed: int
    failing: ReplicaRequest
    shortages: dict[Shortage, int] = field(default_factory=dict)


def needed_replicas(job: PendingJob) -> int:
    """How many of the job's replicas must be placed together: ``min_available`` clamped to 1..all."""
    count = len(job.replicas)
    if job.min_available is None:
        return count
    return max(1, min(job.min_available, count)) if count else 0


def place_gang(
    cluster: WorkingCluster,
    job: PendingJob,
    memo: FitMemo | None = None,
    *,
    config: SchedulerConfig | None = None,
    profile: WorkloadProfile | None = None,
) -> GangPlacement | GangShortfall:
    """Try to place ``job``'s gang on ``cluster``, keeping the placement or undoing it entirely.

    Args:
        cluster: the working copy; changed only when the gang is placed.
        job: the gang.
        memo: answers about rows of ``cluster.table`` shared across the cycle (a fresh one when None).
        config: run-wide settings (the random placement's seed).
        profile: the workload profile fragmentation-aware placement scores against.
    """
    memo = memo if memo is not None else FitMemo(cluster.table)
    seed = config.seed if config is not None else 0
    demands = [demand_of(replica) for replica in job.replicas]
    needed = needed_replicas(job)
    rest = _suffix_totals(demands) if needs_rest(job.placement) else []
    reservations: list[Reservation] = []
    assignments: list[DeviceAssignment] = []
    members: dict[int, int] = {}
    failure: tuple[ReplicaRequest, dict[Shortage, int]] | None = None
    for position, (replica, demand) in enumerate(zip(job.replicas, demands, strict=True)):
        score = ScoreInput(
            memo=memo,
            demand=demand,
            members=members,
            rest=rest[position] if rest else None,
            profile=profile,
            salt=replica_salt(seed, job.key, replica.name) if job.placement == RANDOM else 0,
            cluster=cluster,
            topology=job.topology,
            datasets=job.datasets,
        )
        placed = _place_replica(cluster, job, replica, score)
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
        row = cluster.table.row_of[reservation.node]
        members[row] = members.get(row, 0) + 1
    if len(assignments) >= needed:
        return GangPlacement(tuple(assignments), tuple(reservations))
    for reservation in reversed(reservations):
        cluster.undo(reservation)
    assert failure is not None  # fewer than needed were placed, so some replica failed
    return GangShortfall(needed=needed, placed=len(assignments), failing=failure[0], shortages=failure[1])


def _place_replica(
    cluster: WorkingCluster, job: PendingJob, replica: ReplicaRequest, score: ScoreInput
) -> tuple[Reservation, DeviceAssignment] | dict[Shortage, int]:
    """Place one replica on the best node, or count what the nodes lacked."""
    memo, demand, table = score.memo, score.demand, cluster.table
    codes = memo.codes(demand, job.topology)
    candidates = np.flatnonzero(codes == FITS)
    refused: dict[int, Shortage] = {}
    by_fragmentation = demand.gpu_milli > 0 and score.profile is not None and uses_fragmentation(job.placement)
    while candidates.size:
        row = choose_row(job.placement, score, candidates)
        node = cluster.nodes[row]
        shared_gpu: int | None = None
        if by_fragmentation:
            assert score.profile is not None
            column = best_share_column(table, score.profile, demand, row, packed=packs_shares(job.placement))
            shared_gpu = None if column is None else int(table.gpu_index[row, column])
        choice = choose_devices(node, demand, topology=job.topology, shared_gpu=shared_gpu)
        if isinstance(choice, Shortage):
            memo.refuse_devices(row, demand, job.topology, choice)
            refused[row] = choice
            candidates = candidates[candidates != row]
            continue
        return _reserve(node.name, replica, demand, choice)
    return count_shortages(codes, refused)


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
