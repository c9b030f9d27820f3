"""What each running job holds: its reservations on the working copy and its usage in queue units.

A session must be able to give back exactly what a running job holds (when it ends, when backfill foresees its
end, when it is preempted) and to charge it to its queue. Jobs the session admitted keep the ``Reservation``
of every placed replica; jobs handed in by the snapshot (``ClusterSnapshot.running``) get theirs rebuilt from
each assignment and the replica's request, counted exactly as ``build_snapshot`` counts a holding:

- the listed CPUs are held exclusively; an assignment without CPUs takes the request's ``cpu_milli`` from the
  shared pool;
- the request's memory is taken;
- each listed GPU is taken whole, or by ``gpu_milli`` when the assignment has a share.

So releasing a rebuilt reservation undoes precisely what the snapshot's ``used_*`` fields counted for it.
``check_holdings`` refuses running jobs the snapshot does not account for (a CPU claimed twice, more memory
than the node has in use): giving back room that was never taken would corrupt the working copy.

``Usage`` is what a queue is charged: CPU in millicores (exclusive and shared alike), memory in bytes, GPUs in
milli-GPU (a whole GPU is 1000).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from phalanx.core.scheduling.demands import MILLI
from phalanx.core.scheduling.types import ClusterSnapshot, DeviceAssignment, ReplicaRequest, RunningJob
from phalanx.core.scheduling.working import Reservation


@dataclass(frozen=True, slots=True)
class Usage:
    """An amount charged to a queue: millicores, bytes, milli-GPU."""

    cpu_milli: int = 0
    memory: int = 0
    gpu_milli: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_milli + other.cpu_milli, self.memory + other.memory, self.gpu_milli + other.gpu_milli)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu_milli - other.cpu_milli, self.memory - other.memory, self.gpu_milli - other.gpu_milli)

    def values(self) -> tuple[int, int, int]:
        """The amounts in resource order (``quotas.RESOURCES``: cpu, memory, gpu)."""
        return (self.cpu_milli, self.memory, self.gpu_milli)


def usage_of(request: ReplicaRequest) -> Usage:
    """What one replica is charged: its whole request (a GPU share counts as its milli-GPU)."""
    resources = request.resources
    overhead = request.overhead
    gpu = max(0, resources.gpu)
    return Usage(
        cpu_milli=max(0, resources.cpu_milli) + max(0, overhead.cpu_milli),
        memory=max(0, resources.memory) + max(0, overhead.memory),
        gpu_milli=gpu * MILLI if gpu else max(0, resources.gpu_milli),
    )


def total_usage(requests: Iterable[ReplicaRequest]) -> Usage:
    """The sum of ``usage_of`` over ``requests``."""
    total = Usage()
    for request in requests:
        total = total + usage_of(request)
    return total


@dataclass(frozen=True, slots=True)
class Holding:
    """A running job with the reservations it holds on the working copy and the usage charged to its queue.

    Attributes:
        job: the running job.
        reservations: one per assignment on a node the snapshot lists, in assignment order.
        usage: what its assigned replicas ask for, charged to ``job.queue``.
        nodes: the nodes its reservations are on.
    """

    job: RunningJob
    reservations: tuple[Reservation, ...]
    usage: Usage
    nodes: frozenset[str] = field(default_factory=frozenset)

    @property
    def key(self) -> str:
        """The job's key."""
        return self.job.key


def holding_of(job: RunningJob, reservations: Sequence[Reservation] | None = None) -> Holding:
    """The holding of ``job``: its given ``reservations``, or ones rebuilt from its assignments.

    Raises:
        ValueError: an assignment names a replica the job does not list, or two name the same replica.
    """
    requests = {request.name: request for request in job.replicas}
    assigned: list[ReplicaRequest] = []
    for assignment in job.assignments:
        request = requests.get(assignment.replica)  # nosec B113  # a dict named requests, not the library
        if request is None:
            raise ValueError(f"running job {job.key}: assignment of unknown replica {assignment.replica!r}")
        assigned.append(request)
    names = [assignment.replica for assignment in job.assignments]
    if len(set(names)) != len(names):
        raise ValueError(f"running job {job.key}: a replica is assigned more than once")
    if reservations is None:
        pairs = zip(job.assignments, assigned, strict=True)
        reservations = [rebuild_reservation(assignment, request) for assignment, request in pairs]
    held = tuple(reservations)
    return Holding(job=job, reservations=held, usage=total_usage(assigned), nodes=frozenset(r.node for r in held))


def rebuild_reservation(assignment: DeviceAssignment, request: ReplicaRequest) -> Reservation:
    """What ``assignment`` of ``request`` holds, counted as ``build_snapshot`` counts a holding."""
    resources = request.resources
    overhead = request.overhead
    return Reservation(
        node=assignment.node,
        cpus=tuple(assignment.cpus),
        shared_cpu_milli=(0 if assignment.cpus else max(0, resources.cpu_milli)) + max(0, overhead.cpu_milli),
        memory=max(0, resources.memory) + max(0, overhead.memory),
        gpus=tuple(assignment.gpus),
        gpu_milli=(assignment.gpu_milli if assignment.gpu_milli > 0 else MILLI) if assignment.gpus else 0,
    )


def snapshot_holdings(snapshot: ClusterSnapshot) -> list[Holding]:
    """The holdings of the snapshot's running jobs, reservations on unlisted nodes dropped, checked.

    Raises:
        ValueError: a running job is listed twice, names an unknown replica, or holds something the nodes'
            ``used_*`` fields do not count.
    """
    repeated = sorted(key for key, count in Counter(job.key for job in snapshot.running).items() if count > 1)
    if repeated:
        raise ValueError(f"running jobs listed more than once: {', '.join(repeated)}")
    known = {node.name for node in snapshot.nodes}
    holdings = []
    for job in sorted(snapshot.running, key=lambda job: job.key):
        rebuilt = holding_of(job)
        kept = tuple(reservation for reservation in rebuilt.reservations if reservation.node in known)
        holdings.append(holding_of(job, kept) if len(kept) != len(rebuilt.reservations) else rebuilt)
    check_holdings(snapshot, holdings)
    return holdings


@dataclass(slots=True)
class _Claimed:
    cpus: dict[int, str] = field(default_factory=dict)
    shared_cpu_milli: int = 0
    memory: int = 0
    gpus: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))


def check_holdings(snapshot: ClusterSnapshot, holdings: Sequence[Holding]) -> None:
    """Refuse holdings that claim more than the snapshot counts as used on a node.

    Raises:
        ValueError: naming the job, the node and what does not add up.
    """
    nodes = {node.name: node for node in snapshot.nodes}
    claimed: dict[str, _Claimed] = {}
    for holding in holdings:
        for reservation in holding.reservations:
            node = nodes[reservation.node]
            tally = claimed.setdefault(node.name, _Claimed())
            problem = _claim(tally, holding.key, reservation, used_cpus=node.used_exclusive_cpus)
            if problem is None:
                if tally.shared_cpu_milli > node.used_shared_cpu_milli:
                    problem = "more shared CPU than the node has in use"
                elif tally.memory > node.used_memory:
                    problem = "more memory than the node has in use"
                else:
                    over = [i for i in reservation.gpus if tally.gpus[i] > _used_gpu(node.used_gpus, i)]
                    problem = f"GPU {over[0]} beyond what the node has in use" if over else None
            if problem is not None:
                raise ValueError(f"running job {holding.key} on node {node.name}: {problem}")


def _claim(tally: _Claimed, key: str, reservation: Reservation, *, used_cpus: frozenset[int]) -> str | None:
    for cpu in reservation.cpus:
        if cpu not in used_cpus:
            return f"CPU {cpu} is not in use on the node"
        owner = tally.cpus.get(cpu)
        if owner is not None:
            return f"CPU {cpu} is also held by {owner}"
        tally.cpus[cpu] = key
    tally.shared_cpu_milli += reservation.shared_cpu_milli
    tally.memory += reservation.memory
    for index in reservation.gpus:
        tally.gpus[index] += reservation.gpu_milli
    return None


def _used_gpu(used: Mapping[int, int], index: int) -> int:
    return used.get(index, 0)
