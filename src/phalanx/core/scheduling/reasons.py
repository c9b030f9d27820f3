"""Why a job still waits: one sentence naming the binding constraint, with numbers.

Reasons are read by people (``phalanx get``, ``explain``, the dashboard), so each says what the job needs and
what the cluster has, e.g.

- ``no schedulable node: all 3 nodes are cordoned``
- ``needs GPU model V100; no node has it (nodes have NVIDIA-A100-SXM4-80GB)``
- ``a replica needs 16 GPUs but no node has that many: the largest has 8 GPUs (node dgx-0)``
- ``a replica needs 4 GPUs but no node has that many healthy ones: the largest has 3 healthy GPUs and 1
  unhealthy (node node-a)``
- ``needs 16 GPUs in one gang; largest free block is 8 on node dgx-0 (8 free in total)``
- ``needs 3 replicas (3 CPUs exclusive, 6Gi) as one gang; only 2 fit: node local has 2 CPUs free where 3 are
  needed``

The checks go from the most basic to the most specific: no node at all, no node with the GPU model, a single
replica larger than any empty node, then the shortage most nodes reported for the first replica that did not
fit (ties broken by ``Shortage`` order). Numbers come from the working copy as it stood before the failed
attempt, i.e. after the jobs admitted earlier in the cycle. Everything is sorted, so equal inputs give equal
sentences.

Queues, backfill and preemption add their own sentences (the last section): a job over its queue's quota says
which resource, how much the queue holds of how much, and what the cohort could lend; the head of the queue
under backfill says when its reserved room frees up; a job held back by backfill names the job it would delay;
a job preemption could not help says why; a preempted job says for whom.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import numpy as np

from phalanx.core.scheduling.backfill import HeadReservation
from phalanx.core.scheduling.demands import MILLI, Demand, demand_of, model_alternatives, total_demand
from phalanx.core.scheduling.fitting import Shortage
from phalanx.core.scheduling.gang import GangShortfall
from phalanx.core.scheduling.node_fit import UNCONSTRAINED
from phalanx.core.scheduling.quotas import BORROWING_LIMIT, LENT, NO_COHORT, QuotaShortfall
from phalanx.core.scheduling.table import IntArray
from phalanx.core.scheduling.types import PendingJob, RunningJob
from phalanx.core.scheduling.working import WorkingCluster, WorkingNode
from phalanx.model.resources import format_memory, human_memory

_MIB = 2**20


def explain(job: PendingJob, shortfall: GangShortfall, cluster: WorkingCluster) -> str:
    """Say why a job whose gang could not be placed on ``cluster`` (already rolled back) still waits."""
    if not cluster.schedulable_nodes:
        return _no_schedulable_node(cluster)
    failing = demand_of(shortfall.failing)
    table = cluster.table
    rows = np.flatnonzero(table.schedulable)
    admitted = table.constraint_mask(failing.node_constraint, rows)
    if admitted is not None:
        rows = rows[admitted]
        if not rows.size:
            wanted = (failing.node_constraint or UNCONSTRAINED).describe()
            return f"no schedulable node {wanted} (nodeSelector, required node affinity, tolerations)"
    if failing.gpu_model is not None:
        rows = rows[table.model_mask(failing.gpu_model, rows).any(axis=1)]
        if not rows.size:
            return _missing_model(shortfall.failing.gpu_model or failing.gpu_model, failing.gpu_model, cluster)
    candidates = _Rows(cluster, rows)
    scope = f"no node with {shortfall.failing.gpu_model} GPUs" if failing.gpu_model else "no node"
    too_big = _larger_than_any_node(failing, candidates, scope=scope)
    if too_big is not None:
        return too_big
    need = _at_least(_needed_total([demand_of(replica) for replica in job.replicas], shortfall.needed), failing)
    binding = _binding_shortage(shortfall.shortages)
    if binding is Shortage.GPUS:
        return _gpu_blocks(job, shortfall, need, failing, candidates)
    return f"{_gang_phrase(job, shortfall, need)}: {_detail(binding, need, failing, candidates)}"


def describe_demand(demand: Demand) -> str:
    """Render a demand for people: ``4 GPUs, 8 CPUs exclusive, 64Gi``."""
    parts: list[str] = []
    if demand.gpus:
        parts.append(_count(demand.gpus, "GPU"))
    if demand.gpu_milli:
        parts.append(f"{demand.gpu_milli} milli-GPU")
    if demand.exclusive_cpus:
        parts.append(f"{_count(demand.exclusive_cpus, 'CPU')} exclusive")
    if demand.shared_cpu_milli:
        parts.append(f"{demand.shared_cpu_milli}m CPU shared")
    if demand.memory:
        parts.append(_memory(demand.memory))
    return ", ".join(parts) or "no resources"


# --- the basic cases ------------------------------------------------------------------------------------


def _no_schedulable_node(cluster: WorkingCluster) -> str:
    if not cluster.nodes:
        return "no schedulable node: the cluster has no nodes"
    if len(cluster.nodes) == 1:
        return f"no schedulable node: the only node, {cluster.nodes[0].name}, is cordoned"
    return f"no schedulable node: all {len(cluster.nodes)} nodes are cordoned"


def _missing_model(shown: str, model: str, cluster: WorkingCluster) -> str:
    cordoned = [node.name for node in cluster.nodes if not node.schedulable and node.usable_gpus(model)]
    if cordoned:
        return f"needs GPU model {shown}; only cordoned nodes have it ({', '.join(cordoned)})"
    if any(gpu.model.casefold() == model for node in cluster.schedulable_nodes for gpu in node.snapshot.gpus):
        return f"needs GPU model {shown}; every such GPU on a schedulable node is unhealthy"
    models = sorted({gpu.model for node in cluster.schedulable_nodes for gpu in node.usable_gpus(None)})
    suffix = f" (nodes have {', '.join(models)})" if models else ""
    return f"needs GPU model {shown}; no node has it{suffix}"


def _larger_than_any_node(demand: Demand, nodes: _Rows, *, scope: str) -> str | None:
    """Explain a replica that would not fit even on an empty node; None when some node is large enough."""
    table, rows = nodes.table, nodes.rows
    eligible = table.model_mask(demand.gpu_model, rows)
    if demand.wants_gpu and not eligible.any():
        return "needs a GPU; no schedulable node has a healthy one"
    capacities: list[tuple[int, str, IntArray, Callable[[int], str]]] = [
        (demand.gpus, "GPUs", np.count_nonzero(eligible, axis=1), lambda n: _count(n, "GPU")),
        (demand.exclusive_cpus, "CPUs", table.cpu_capacity[rows] // MILLI, lambda n: _count(n, "CPU")),
        (demand.shared_cpu_milli, "CPU", table.cpu_capacity[rows], lambda n: f"{n}m CPU"),
        (demand.memory, "memory", table.memory_capacity[rows], lambda n: f"{_memory(n)} memory"),
    ]
    for needed, noun, capacity, render in capacities:
        if not needed:
            continue
        node, largest, _ = nodes.most(capacity)
        if largest < needed:
            many = "that many" if noun in ("GPUs", "CPUs") else "that much"
            sick = _unhealthy_gpus(node, demand.gpu_model) if noun == "GPUs" else 0
            if sick:  # the hardware is there: say that health, not size, keeps the replica out
                return (
                    f"a replica needs {render(needed)} but {scope} has {many} healthy ones: the largest has "
                    f"{largest} healthy {noun[:-1] if largest == 1 else noun} and {sick} unhealthy (node {node.name})"
                )
            return (
                f"a replica needs {render(needed)} but {scope} has {many}: "
                f"the largest has {render(largest)} (node {node.name})"
            )
    return None


def _unhealthy_gpus(node: WorkingNode, model: str | None) -> int:
    """How many of the node's GPUs of ``model`` (a ``model_key``; None for any) are unhealthy."""
    allowed = None if model is None else model_alternatives(model)
    return sum(
        1 for gpu in node.snapshot.gpus if not gpu.healthy and (allowed is None or gpu.model.casefold() in allowed)
    )


# --- the binding shortage -------------------------------------------------------------------------------


def _binding_shortage(shortages: dict[Shortage, int]) -> Shortage | None:
    counts = {
        shortage: count
        for shortage, count in shortages.items()
        if count and shortage not in (Shortage.UNSCHEDULABLE, Shortage.NODE_CONSTRAINT, Shortage.GPU_MODEL)
    }
    if not counts:
        return None
    order = list(Shortage)
    return min(counts, key=lambda shortage: (-counts[shortage], order.index(shortage)))


def _needed_total(demands: Sequence[Demand], needed: int) -> Demand:
    """Add up what the ``needed`` replicas ask for (the smallest ones when only some are needed)."""
    if needed >= len(demands):
        return total_demand(demands)
    smallest = sorted(demands, key=lambda d: (d.gpus, d.gpu_milli, d.exclusive_cpus, d.shared_cpu_milli, d.memory))
    return total_demand(smallest[:needed])


def _at_least(need: Demand, failing: Demand) -> Demand:
    """``need`` raised to at least the failing replica's own demand in every field (mixed-size gangs)."""
    return Demand(
        exclusive_cpus=max(need.exclusive_cpus, failing.exclusive_cpus),
        shared_cpu_milli=max(need.shared_cpu_milli, failing.shared_cpu_milli),
        memory=max(need.memory, failing.memory),
        gpus=max(need.gpus, failing.gpus),
        gpu_milli=max(need.gpu_milli, failing.gpu_milli),
        gpu_model=failing.gpu_model,
        node_constraint=failing.node_constraint,
    )


def _needed(amount: int, unit: str = "") -> str:
    """`` where 3 are needed`` / `` where 1500m is needed``: free amounts read against the need."""
    verb = "is" if amount == 1 or unit else "are"
    return f" where {amount}{unit} {verb} needed"


def _gang_phrase(job: PendingJob, shortfall: GangShortfall, need: Demand) -> str:
    summary = describe_demand(need)
    count = len(job.replicas)
    if count == 1:
        return f"needs 1 replica ({summary}); it does not fit"
    fit = f"only {shortfall.placed} fit" if shortfall.placed else "none fit"
    if shortfall.needed == count:
        return f"needs {count} replicas ({summary}) as one gang; {fit}"
    return f"needs at least {shortfall.needed} of {count} replicas ({summary}) together; {fit}"


def _gpu_blocks(job: PendingJob, shortfall: GangShortfall, need: Demand, failing: Demand, nodes: _Rows) -> str:
    noun = f"{shortfall.failing.gpu_model} GPU" if shortfall.failing.gpu_model else "GPU"
    shown = _count(need.gpus, noun)
    largest, largest_free, total_free = nodes.most(nodes.whole_free(failing.gpu_model))
    where = f"largest free block is {largest_free} on node {largest.name} ({total_free} free in total)"
    if len(job.replicas) == 1:
        return f"needs {shown} on one node; {where}"
    if shortfall.needed < len(job.replicas):
        gang = f"in one gang (at least {shortfall.needed} of {len(job.replicas)} replicas)"
        return f"needs {shown} {gang}; {where}"
    return f"needs {shown} in one gang; {where}"


def _detail(shortage: Shortage | None, need: Demand, failing: Demand, nodes: _Rows) -> str:
    table, rows = nodes.table, nodes.rows
    if shortage is Shortage.EXCLUSIVE_CPUS:
        node, free, total = nodes.most(table.grantable[rows])
        held = len(node.free_cpus) - free
        kept = f" ({held} more kept for the shared pool)" if held else ""
        return f"node {node.name} has {_count(free, 'CPU')} free{_needed(need.exclusive_cpus)}{kept}" + _across(
            nodes, str(total)
        )
    if shortage is Shortage.SHARED_CPU:
        node, free, total = nodes.most(table.cpu_free[rows])
        needed = _needed(need.shared_cpu_milli, "m")
        return f"node {node.name} has {free}m CPU free in the shared pool{needed}" + _across(nodes, f"{total}m")
    if shortage is Shortage.MEMORY:
        node, free, total = nodes.most(table.free_memory[rows])
        return f"node {node.name} has {_memory(free)} memory free where {_memory(need.memory)} is needed" + _across(
            nodes, _memory(total)
        )
    if shortage is Shortage.GPU_SHARE:
        return _gpu_share_detail(failing, nodes)
    if shortage is Shortage.GPU_TOPOLOGY:
        node, free, _ = nodes.most(nodes.whole_free(failing.gpu_model))
        return (
            f"node {node.name} has {free} GPUs free but no {failing.gpus} of them joined by NVLink "
            f"or on one NUMA node (topology required)"
        )
    if shortage is Shortage.CPU_TOPOLOGY:
        node, free, _ = nodes.most(table.grantable[rows])
        per_numa = max((len(ids) for ids in node.free_cpus_by_numa().values()), default=0)
        return (
            f"node {node.name} has {free} CPUs free but at most {per_numa} on one NUMA node, "
            f"fewer than {failing.exclusive_cpus} (topology required)"
        )
    if shortage is Shortage.CPU_POLICY:
        refusing = (nodes.cluster.nodes[int(row)] for row in rows)
        unaligned = next((node for node in refusing if not node.snapshot.aligns_cpus), None)
        if unaligned is not None:
            return (
                f"it requires NUMA-aligned exclusive cores (topology required), which node {unaligned.name} does not "
                f"enforce: {unaligned.snapshot.cpu_policy_reason or 'its kubelet does not'}"
            )
        return "it requires NUMA-aligned exclusive cores (topology required), which no node with room enforces"
    return "no node has room"


def _gpu_share_detail(failing: Demand, nodes: _Rows) -> str:
    table, rows = nodes.table, nodes.rows
    room = np.where(table.model_mask(failing.gpu_model, rows), table.gpu_free[rows], -1)
    if not room.size or room.max() < 0:  # pragma: no cover - nodes without usable GPUs were answered earlier
        return "no GPU can take a share"
    # The most room on one GPU; ties go to the node name (row order), then the GPU index (column order).
    flat = int(np.argmax(room))
    position, column = divmod(flat, room.shape[1])
    row = int(rows[position])
    name, index, most = table.names[row], int(table.gpu_index[row, column]), int(room[position, column])
    return f"no GPU has {failing.gpu_milli} milli-GPU free; the most on one GPU is {most} (node {name}, GPU {index})"


# --- helpers --------------------------------------------------------------------------------------------


class _Rows:
    """The nodes a reason speaks about: rows of the cluster's table, ascending (so, by name)."""

    __slots__ = ("cluster", "rows", "table")

    def __init__(self, cluster: WorkingCluster, rows: IntArray) -> None:
        self.cluster = cluster
        self.table = cluster.table
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def whole_free(self, model: str | None) -> IntArray:
        """Per row, GPUs of ``model`` nothing uses."""
        return self.table.whole_free(self.table.model_mask(model, self.rows), self.rows)

    def most(self, amounts: IntArray) -> tuple[WorkingNode, int, int]:
        """The node with the most of ``amounts`` (ties: name), that amount, and the sum over all rows."""
        position = int(np.argmax(amounts))
        return self.cluster.nodes[int(self.rows[position])], int(amounts[position]), int(amounts.sum())


def _across(nodes: _Rows, total: str) -> str:
    return f"; {total} free on {len(nodes)} nodes in all" if len(nodes) > 1 else ""


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _memory(num_bytes: int) -> str:
    return format_memory(num_bytes) if num_bytes % _MIB == 0 else human_memory(num_bytes)


# --- queues, backfill, preemption -----------------------------------------------------------------------

_RESOURCE_NOUNS = ("CPU", "memory", "GPU")


def explain_quota(shortfall: QuotaShortfall) -> str:
    """Say why a job does not fit its queue's quota, e.g.

    ``needs 4 GPUs; queue team-a is at its GPU quota 32/32; cohort research has 0 GPUs to lend``.
    """
    resource = shortfall.resource
    noun = _RESOURCE_NOUNS[resource]
    used, nominal = shortfall.used, shortfall.nominal
    ratio = f"{_amount(resource, used, unit=False)}/{_amount(resource, nominal, unit=False)}"
    if used >= nominal:
        state = f"queue {shortfall.queue} is at its {noun} quota {ratio}"
    else:
        state = f"queue {shortfall.queue} has {ratio} of its {noun} quota in use"
    need = f"needs {_amount(resource, shortfall.need)}"
    free = _amount(resource, shortfall.cohort_free)
    if shortfall.kind == NO_COHORT:
        return f"{need}; {state} and no cohort to borrow from"
    if shortfall.kind == BORROWING_LIMIT:
        assert shortfall.borrowing_limit is not None
        limit = _amount(resource, shortfall.borrowing_limit)
        return f"{need}; {state} and may borrow at most {limit} beyond it (borrowing limit)"
    if shortfall.kind == LENT:
        return f"{need}; {state}, but other queues of cohort {shortfall.cohort} borrowed the rest ({free} idle)"
    lendable = _amount(resource, shortfall.lendable)
    if used < nominal:
        # Part of the job fits the queue's own quota: say how much it must borrow, and what the others can lend
        # (the cohort's idle pool holds the queue's own unused share too, which the job already counts on).
        borrow = _amount(resource, used + shortfall.need - nominal)
        return f"{need}; {state}, so it must borrow {borrow}; cohort {shortfall.cohort} has {lendable} to lend"
    return f"{need}; {state}; cohort {shortfall.cohort} has {lendable} to lend"


def _amount(resource: int, value: int, *, unit: bool = True) -> str:
    if resource == 1:
        return _memory(value)
    noun = _RESOURCE_NOUNS[resource]
    number = f"{value // MILLI}" if value % MILLI == 0 else f"{value / MILLI:g}"
    if not unit:
        return number
    return f"{number} {noun}" if number == "1" else f"{number} {noun}s"


def reservation_note(reservation: HeadReservation, now: datetime) -> str:
    """What the head of the queue is told about the room reserved for it (appended to its reason)."""
    if reservation.start is None:
        return "; room is reserved for it once running jobs without an expected end finish"
    return f"; room is reserved for it: it can start {_when(reservation.start, now)}, as running jobs end"


def held_back(reservation: HeadReservation, end: datetime | None, now: datetime) -> str:
    """Why a job that fits waits: it would delay the head's reserved start."""
    head = reservation.job.key
    where = _names(reservation.nodes)
    if reservation.start is None:
        starts = f"which starts on {where} once running jobs without an expected end finish"
    else:
        starts = f"which starts on {where} {_when(reservation.start, now)}, as running jobs end"
    runs = "has no duration estimate" if end is None else f"would run until {_time(end)}"
    return f"the room it fits in is reserved for {head}, first in line, {starts}; this job {runs}"


def behind(blocker: PendingJob, *, queue: str | None = None) -> str:
    """Why a job waits under strict FIFO: an earlier job cannot start."""
    if queue is None:
        return f"waits behind {blocker.key}, first in line, which cannot start yet (strict FIFO)"
    return f"waits behind {blocker.key}, first in queue {queue}, which is over its quota (strict FIFO)"


def preemption_note(phrase: str) -> str:
    """Why preemption did not help (appended to a waiting reason)."""
    return f"; preemption cannot help: {phrase}"


def preemption_reason(victim: RunningJob, preemptor: PendingJob, *, reclaim: bool, cohort: str | None) -> str:
    """The sentence a preempted job gets."""
    if reclaim:
        return (
            f"preempted to make room for {preemptor.key}: queue {preemptor.queue} reclaims quota that queue "
            f"{victim.queue} borrowed in cohort {cohort}"
        )
    return (
        f"preempted to make room for {preemptor.key}, whose priority {preemptor.priority} is above its "
        f"{victim.priority}"
    )


def _when(at: datetime, now: datetime) -> str:
    seconds = int((at - now).total_seconds())
    return "now" if seconds <= 0 else f"in {_duration(seconds)} (at {_time(at)})"


def _time(at: datetime) -> str:
    return at.isoformat(sep=" ", timespec="seconds")


def _duration(seconds: int) -> str:
    parts = []
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2]) or "0s"


def _names(nodes: Sequence[str]) -> str:
    if len(nodes) <= 3:
        return ", ".join(nodes)
    return f"{', '.join(nodes[:3])} and {len(nodes) - 3} more nodes"
