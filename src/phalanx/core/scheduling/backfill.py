"""Backfill: later jobs may start before the first waiting gang only if they do not delay it (EASY backfill).

Under ``queueing_strategy="backfill"``, the first job in the cycle's order that fits its queue's quota but
not the nodes (and that preemption, when on, could not help) gets a **reservation** (``reserve_for_head``):

1. the running jobs with an expected end are given back on the working copy in expected-end order (jobs
   ending at the same time together), and the gang is placed after each step until it fits: the steps the
   counts rule out (``headroom.could_hold`` over a ``FreedRoom``, without touching the working copy) are
   skipped, the others searched by growing strides then halving. The time of the step where it first fits is
   its **start** (never before ``now``); the placement there is its **shadow**: the nodes and devices it would
   use then;
2. if it does not fit even when every job with an expected end is gone, the jobs without one are given back
   too: the reservation then has no start time (it starts when those finish, whenever that is);
3. if it does not fit on the empty cluster either, it gets no reservation (nothing running delays it), and the
   next job that waits for nodes may get one;
4. the working copy is then put back exactly as it was.

For each shadow node the reservation keeps the node's free room at the start, with the shadow taken
(``_Room``). A later job that fits is then admitted only if it does not delay the head:

- it ends before the start: ``now + duration_estimate <= start`` (a job without an estimate, or a reservation
  without a start, never qualifies: no job is assumed to end early); or
- its placement fits in the room the shadow nodes have left at the start (``admits``); the room is then
  charged with it, so the jobs backfilled together never add up to a delay. A job whose first placement does
  not fit that room is placed once more with the shadow nodes blocked (``blocks``: everything they have free
  now), so it goes elsewhere if it can.

Exactly one reservation per cycle, for the first waiting gang; whole gangs only (a reservation holds the
devices of every replica the gang needs). A search costs a few placements and giving back every running job
once, so at most ``MAX_RESERVATION_TRIES`` waiting gangs per cycle are tried for it. Reasons name it: the
head says when it is expected to start, and a job held back says which job it would delay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from phalanx.core.scheduling.demands import MILLI, demand_of
from phalanx.core.scheduling.gang import GangPlacement, needed_replicas
from phalanx.core.scheduling.headroom import FreedRoom, could_hold
from phalanx.core.scheduling.holdings import Holding
from phalanx.core.scheduling.table import NodeTable
from phalanx.core.scheduling.types import PendingJob
from phalanx.core.scheduling.working import Reservation, WorkingCluster, WorkingNode

MAX_RESERVATION_TRIES = 4


@dataclass(slots=True)
class _Room:
    """A shadow node's free room at the reservation's start, with the head's shadow placement taken."""

    free_cpus: set[int]
    shared_cpu_milli: int
    free_memory: int
    gpu_used: dict[int, int]

    @classmethod
    def of(cls, node: WorkingNode) -> _Room:
        return cls(set(node.free_cpus), node.shared_cpu_milli, node.free_memory, dict(node.gpu_used))

    def admits(self, reservations: Sequence[Reservation]) -> bool:
        cpus: set[int] = set()
        shared = memory = 0
        gpus: dict[int, int] = {}
        for reservation in reservations:
            cpus.update(reservation.cpus)
            shared += reservation.shared_cpu_milli
            memory += reservation.memory
            for index in reservation.gpus:
                gpus[index] = gpus.get(index, 0) + reservation.gpu_milli
        if not cpus <= self.free_cpus or memory > self.free_memory:
            return False
        if self.shared_cpu_milli + shared > MILLI * (len(self.free_cpus) - len(cpus)):
            return False
        return all(self.gpu_used.get(index, 0) + milli <= MILLI for index, milli in gpus.items())

    def take(self, reservations: Sequence[Reservation]) -> None:
        for reservation in reservations:
            self.free_cpus -= set(reservation.cpus)
            self.shared_cpu_milli += reservation.shared_cpu_milli
            self.free_memory -= reservation.memory
            for index in reservation.gpus:
                self.gpu_used[index] = self.gpu_used.get(index, 0) + reservation.gpu_milli


@dataclass(slots=True)
class HeadReservation:
    """Room reserved for the first waiting gang.

    Attributes:
        job: the head.
        start: when it is expected to start; None when that waits for jobs without an expected end.
        nodes: the nodes of its shadow placement, sorted.
    """

    job: PendingJob
    start: datetime | None
    nodes: tuple[str, ...]
    _rooms: dict[str, _Room] = field(default_factory=dict)

    def ends_in_time(self, end: datetime | None) -> bool:
        """Whether a job ending at ``end`` (None: unknown) is gone by the start."""
        return end is not None and self.start is not None and end <= self.start

    def admits(self, placement: GangPlacement) -> bool:
        """Whether ``placement`` leaves the shadow placement possible at the start."""
        by_node: dict[str, list[Reservation]] = {}
        for reservation in placement.reservations:
            if reservation.node in self._rooms:
                by_node.setdefault(reservation.node, []).append(reservation)
        return all(self._rooms[node].admits(reservations) for node, reservations in by_node.items())

    def take(self, placement: GangPlacement) -> None:
        """Charge an admitted job that runs past the start to the room left at the start."""
        for reservation in placement.reservations:
            room = self._rooms.get(reservation.node)
            if room is not None:
                room.take((reservation,))

    def blocks(self, cluster: WorkingCluster) -> list[Reservation]:
        """Reservations that take everything the shadow nodes have free now (apply, place, then undo)."""
        return [block for node in self.nodes for block in _everything_free(cluster.by_name[node])]


def _everything_free(node: WorkingNode) -> list[Reservation]:
    grantable = node.grantable_cpus()
    cpus = tuple(sorted(node.free_cpus)[:grantable])
    shared = MILLI * (len(node.free_cpus) - len(cpus)) - node.shared_cpu_milli
    blocks = []
    if cpus or shared > 0 or node.free_memory > 0:
        blocks.append(
            Reservation(node=node.name, cpus=cpus, shared_cpu_milli=max(0, shared), memory=max(0, node.free_memory))
        )
    rooms: dict[int, list[int]] = {}
    for gpu in node.usable_gpus(None):
        room = MILLI - node.gpu_used.get(gpu.index, 0)
        if room > 0:
            rooms.setdefault(room, []).append(gpu.index)
    blocks.extend(
        Reservation(node=node.name, gpus=tuple(indices), gpu_milli=room) for room, indices in sorted(rooms.items())
    )
    return blocks


class _Releases:
    """The running jobs in expected-end order, given back up to a chosen step.

    Given back on the working copy, or only counted in a ``FreedRoom``.
    """

    __slots__ = ("_cluster", "_done", "_freed", "_order")

    def __init__(self, order: Sequence[Holding], *, cluster: WorkingCluster | None, freed: FreedRoom | None) -> None:
        self._cluster = cluster
        self._freed = freed
        self._order = order
        self._done = 0

    def to(self, count: int) -> None:
        while self._done < count:
            self._give(self._order[self._done], back=True)
            self._done += 1
        while self._done > count:
            self._done -= 1
            self._give(self._order[self._done], back=False)

    def _give(self, holding: Holding, *, back: bool) -> None:
        if self._freed is not None:
            self._freed.add(holding.reservations, 1 if back else -1)
        if self._cluster is not None:
            if back:
                for reservation in reversed(holding.reservations):
                    self._cluster.undo(reservation)
            else:
                for reservation in holding.reservations:
                    self._cluster.apply(reservation)


def reserve_for_head(
    job: PendingJob,
    holdings: Sequence[Holding],
    *,
    cluster: WorkingCluster,
    now: datetime,
    place: Callable[[PendingJob], GangPlacement | None],
    withdraw: Callable[[GangPlacement], None],
) -> HeadReservation | None:
    """Find when and where ``job`` could start as running jobs end; None when nothing running stands in its way.

    The search first finds, by counts alone and without touching the working copy, the first step at which
    the gang could fit (a binary search: the counts only grow as jobs are given back); from there it tries
    placements at growing distances, then halves the last gap: the working copy only ever moves between the
    current state and the answer.

    Args:
        job: the head, which does not fit now.
        holdings: every running job.
        cluster: the working copy; back as it was on return.
        now: the cycle's time.
        place: place the gang (applied on success).
        withdraw: undo a placement.
    """
    known = sorted((h for h in holdings if h.job.expected_end is not None), key=_end_order)
    unknown = sorted((h for h in holdings if h.job.expected_end is None), key=lambda h: h.key)
    order = [*known, *unknown]
    # Steps: give back every job up to the end of a group of equal expected ends; then everything.
    steps: list[int] = [
        position + 1
        for position, holding in enumerate(known)
        if position + 1 == len(known) or known[position + 1].job.expected_end != holding.job.expected_end
    ]
    if unknown:
        steps.append(len(order))
    first = _first_possible_step(job, order, steps, cluster.table)
    if first == len(steps):
        return None
    releases = _Releases(order, cluster=cluster, freed=None)

    def attempt(index: int) -> HeadReservation | None:
        releases.to(steps[index])
        placement = place(job)
        if placement is None:
            return None
        last, unknown_needed = order[steps[index] - 1], steps[index] > len(known)
        reservation = _reservation(job, placement, cluster, last, unknown_needed=unknown_needed, now=now)
        withdraw(placement)
        return reservation

    try:
        found: tuple[int, HeadReservation] | None = None
        index, stride, failed = first, 1, first - 1
        while found is None:
            result = attempt(index)
            if result is not None:
                found = (index, result)
            elif index == len(steps) - 1:
                return None
            else:
                failed = index
                index = min(len(steps) - 1, index + stride)
                stride *= 2
        low, high = failed + 1, found[0] - 1
        while low <= high:
            middle = (low + high) // 2
            result = attempt(middle)
            if result is None:
                low = middle + 1
            else:
                found = (middle, result)
                high = middle - 1
        return found[1]
    finally:
        releases.to(0)


def _first_possible_step(job: PendingJob, order: Sequence[Holding], steps: Sequence[int], table: NodeTable) -> int:
    """The first step at which the counts allow the gang (``len(steps)``: none), by binary search."""
    demands = [demand_of(replica) for replica in job.replicas]
    needed = needed_replicas(job)
    freed = FreedRoom(table)
    releases = _Releases(order, cluster=None, freed=freed)
    low, high = 0, len(steps) - 1
    while low <= high:
        middle = (low + high) // 2
        releases.to(steps[middle])
        if could_hold(table, demands, needed, freed):
            high = middle - 1
        else:
            low = middle + 1
    return low


def _end_order(holding: Holding) -> tuple[datetime, str]:
    assert holding.job.expected_end is not None
    return (holding.job.expected_end, holding.key)


def _reservation(
    job: PendingJob,
    placement: GangPlacement,
    cluster: WorkingCluster,
    last: Holding,
    *,
    unknown_needed: bool,
    now: datetime,
) -> HeadReservation:
    nodes = tuple(sorted({reservation.node for reservation in placement.reservations}))
    rooms = {name: _Room.of(cluster.by_name[name]) for name in nodes}
    start = None if unknown_needed else max(now, _end_order(last)[0])
    return HeadReservation(job=job, start=start, nodes=nodes, _rooms=rooms)
