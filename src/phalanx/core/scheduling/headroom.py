"""A cheap necessary condition for a gang to fit: enough replicas fit the nodes by counts alone.

Preemption and backfill search by trying placements on the working copy after giving back what some running
jobs hold; a placement attempt runs the filter, the scores and device choice per replica, and giving back
refreshes the node table. Most steps of a search cannot succeed yet (not enough has been given back), and this
check says so from the node table's columns in a few vector operations: for each distinct replica demand, how
many such replicas every schedulable node could take on its own (ignoring topology and the other demands),
summed over the nodes, must reach the number of replicas with that demand. It never says no to a gang that
would fit; it may say yes to one that does not (placement then decides).

``FreedRoom`` lets a search ask the same question about a state it has not built: the room that giving back
some reservations would add to each row, counted generously (a GPU a share is given back on counts as freed
whole, whatever the model), so the answer stays a necessary condition without touching the working copy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.table import IntArray, NodeTable
from phalanx.core.scheduling.working import Reservation

# Per-node replica counts are capped here: "more than any gang asks for".
_MANY = 1 << 40


class FreedRoom:
    """Room per row that giving back some reservations would add (an over-estimate)."""

    __slots__ = ("cpus", "gpu_milli", "gpus", "memory", "shared", "table")

    def __init__(self, table: NodeTable) -> None:
        size = len(table)
        self.table = table
        self.gpus: IntArray = np.zeros(size, dtype=np.int64)
        self.gpu_milli: IntArray = np.zeros(size, dtype=np.int64)
        self.cpus: IntArray = np.zeros(size, dtype=np.int64)
        self.shared: IntArray = np.zeros(size, dtype=np.int64)
        self.memory: IntArray = np.zeros(size, dtype=np.int64)

    def add(self, reservations: Iterable[Reservation], sign: int = 1) -> None:
        """Count ``reservations`` as given back (``sign`` -1: no longer)."""
        row_of = self.table.row_of
        rows: list[int] = []
        values: list[tuple[int, int, int, int, int]] = []
        for reservation in reservations:
            gpus = len(reservation.gpus)
            rows.append(row_of[reservation.node])
            milli, cpus = reservation.gpu_milli * gpus, len(reservation.cpus)
            values.append((gpus, milli, cpus, reservation.shared_cpu_milli, reservation.memory))
        if not rows:
            return
        at = np.array(rows, dtype=np.int64)
        amounts = np.array(values, dtype=np.int64) * sign
        for column, target in enumerate((self.gpus, self.gpu_milli, self.cpus, self.shared, self.memory)):
            np.add.at(target, at, amounts[:, column])


def replicas_per_node(table: NodeTable, demand: Demand, freed: FreedRoom | None = None) -> IntArray:
    """How many replicas of ``demand`` each row could take by counts alone (0 on unschedulable rows)."""
    rows = slice(None)
    counts = np.full(len(table), _MANY, dtype=np.int64)
    eligible = table.model_mask(demand.gpu_model, rows)
    grantable, cpu_free, memory = table.grantable, table.cpu_free, table.free_memory
    whole = table.whole_free(eligible, rows) if demand.gpus else None
    if freed is not None:
        grantable = grantable + freed.cpus + -(-freed.shared // MILLI)
        cpu_free = cpu_free + freed.shared + MILLI * freed.cpus
        memory = memory + freed.memory
        whole = whole + freed.gpus if whole is not None else None
    if whole is not None:
        counts = np.minimum(counts, whole // demand.gpus)
    if demand.gpu_milli:
        shares = (np.where(eligible, table.gpu_free, 0) // demand.gpu_milli).sum(axis=1)
        if freed is not None:
            shares = shares + freed.gpu_milli // demand.gpu_milli + freed.gpus
        counts = np.minimum(counts, shares)
    if demand.exclusive_cpus:
        counts = np.minimum(counts, grantable // demand.exclusive_cpus)
    if demand.shared_cpu_milli:
        counts = np.minimum(counts, cpu_free // demand.shared_cpu_milli)
    if demand.memory:
        counts = np.minimum(counts, memory // demand.memory)
    result: IntArray = np.where(table.schedulable, counts, 0)
    return result


def could_hold(table: NodeTable, demands: Sequence[Demand], needed: int, freed: FreedRoom | None = None) -> bool:
    """Whether the nodes (plus ``freed``) might hold ``needed`` of the replicas with ``demands``.

    False means they surely cannot.
    """
    if needed <= 0:
        return True
    chosen = list(demands)
    if needed < len(chosen):
        chosen = sorted(chosen, key=lambda d: (d.gpus, d.gpu_milli, d.exclusive_cpus, d.shared_cpu_milli, d.memory))
        chosen = chosen[:needed]
    for demand, count in Counter(chosen).items():
        if int(np.minimum(replicas_per_node(table, demand, freed), count).sum()) < count:
            return False
    return True
