"""The working copy's free state as columns: one numpy array per quantity, one row per node.

Filters and scores run on every node for every replica. Asked node by node in Python, that costs tens of
microseconds per node and caps a cycle at a few hundred nodes; asked of columns, one numpy expression answers
for every node at once. ``NodeTable`` mirrors each ``WorkingNode``'s free state in arrays, row ``i`` being
``WorkingCluster.nodes[i]`` (nodes sorted by name, so the lowest row wins ties). ``WorkingCluster`` calls
``refresh`` after every reservation it applies or undoes; ``version[i]`` then changes, which is how cached
answers about a row (``fitting.FitMemo``) know they are stale.

GPU columns: row ``i``'s usable (healthy) GPUs sorted by index occupy columns ``0..k-1``; the other columns
are absent (``gpu_present`` False, ``gpu_free`` 0). ``gpu_index[i, j]`` maps a column back to the GPU index
and ``gpu_numa[i, j]`` gives its NUMA node; ``numa_free_cpus[i, n]`` counts the free CPUs of NUMA node ``n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from phalanx.core.scheduling.demands import MILLI
from phalanx.core.scheduling.node_fit import UNCONSTRAINED, NodeConstraint

if TYPE_CHECKING:
    from phalanx.core.scheduling.working import WorkingNode

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

# GPU model id of an absent column; real models are numbered from 0 in order of first appearance.
NO_MODEL = -1


class NodeTable:
    """Column arrays of every node's capacity and free state."""

    __slots__ = (
        "_constraint_masks",
        "_fixed",
        "_tainted",
        "cpu_capacity",
        "cpu_free",
        "free_memory",
        "gpu_free",
        "gpu_index",
        "gpu_model",
        "gpu_numa",
        "gpu_present",
        "grantable",
        "memory_capacity",
        "model_ids",
        "names",
        "numa_free_cpus",
        "row_of",
        "schedulable",
        "version",
    )

    def __init__(self, nodes: Sequence[WorkingNode]) -> None:
        count = len(nodes)
        width = max((len(node.usable_gpus(None)) for node in nodes), default=0)
        self.names: tuple[str, ...] = tuple(node.name for node in nodes)
        self.row_of: dict[str, int] = {name: row for row, name in enumerate(self.names)}
        self.model_ids: dict[str, int] = {}
        self.schedulable: BoolArray = np.array([node.schedulable for node in nodes], dtype=np.bool_)
        self.version: IntArray = np.zeros(count, dtype=np.int64)
        self.cpu_capacity: IntArray = np.array([MILLI * len(node.cpu_by_id) for node in nodes], dtype=np.int64)
        self.memory_capacity: IntArray = np.array([node.snapshot.memory for node in nodes], dtype=np.int64)
        self.cpu_free: IntArray = np.zeros(count, dtype=np.int64)
        self.grantable: IntArray = np.zeros(count, dtype=np.int64)
        self.free_memory: IntArray = np.zeros(count, dtype=np.int64)
        self.gpu_free: IntArray = np.zeros((count, width), dtype=np.int64)
        self.gpu_present: BoolArray = np.zeros((count, width), dtype=np.bool_)
        self.gpu_model: IntArray = np.full((count, width), NO_MODEL, dtype=np.int64)
        self.gpu_index: IntArray = np.full((count, width), -1, dtype=np.int64)
        self.gpu_numa: IntArray = np.zeros((count, width), dtype=np.int64)
        numa_width = 1 + max((cpu.numa for node in nodes for cpu in node.snapshot.cpus), default=-1)
        numa_width = max(numa_width, 1 + max((gpu.numa for node in nodes for gpu in node.snapshot.gpus), default=0))
        self.numa_free_cpus: IntArray = np.zeros((count, numa_width), dtype=np.int64)
        # Labels and taints are fixed for the table's life: each constraint's mask is computed once.
        self._fixed = tuple((node.name, node.snapshot.labels, node.snapshot.taints) for node in nodes)
        # Asked on every fit of an unconstrained replica: looked at once (a 50,000-node scan per replica was 80%
        # of a cycle's time).
        self._tainted = any(taints for _, _, taints in self._fixed)
        self._constraint_masks: dict[NodeConstraint | None, BoolArray] = {}
        for row, node in enumerate(nodes):
            for column, gpu in enumerate(node.usable_gpus(None)):
                self.gpu_present[row, column] = True
                self.gpu_index[row, column] = gpu.index
                self.gpu_numa[row, column] = gpu.numa
                self.gpu_model[row, column] = self.model_ids.setdefault(gpu.model.casefold(), len(self.model_ids))
            self._fill(row, node)
        self.version[:] = 0

    def __len__(self) -> int:
        return len(self.names)

    def refresh(self, row: int, node: WorkingNode) -> None:
        """Copy ``node``'s free state into row ``row`` after it changed, and bump the row's version."""
        self._fill(row, node)

    def _fill(self, row: int, node: WorkingNode) -> None:
        self.cpu_free[row] = node.shared_cpu_free()
        self.grantable[row] = node.grantable_cpus()
        self.free_memory[row] = node.free_memory
        numa_free = self.numa_free_cpus[row]
        numa_free[:] = 0
        for numa, free in node.free_per_numa.items():
            numa_free[numa] = free
        present = self.gpu_present[row]
        indices = self.gpu_index[row]
        for column in range(int(present.sum())):
            self.gpu_free[row, column] = MILLI - node.gpu_used.get(int(indices[column]), 0)
        self.version[row] += 1

    # --- derived columns ------------------------------------------------------------------------------

    def model_mask(self, model: str | None, rows: IntArray | slice) -> BoolArray:
        """Which GPU columns of ``rows`` hold a usable GPU of ``model`` (a ``model_key``; None for any)."""
        present = self.gpu_present[rows]
        if model is None:
            return present
        ids = [self.model_ids[name] for name in model.split("|") if name in self.model_ids]
        if not ids:
            return np.zeros_like(present)
        if len(ids) == 1:
            single: BoolArray = present & (self.gpu_model[rows] == ids[0])
            return single
        mask: BoolArray = present & np.isin(self.gpu_model[rows], ids)
        return mask

    def constraint_mask(self, constraint: NodeConstraint | None, rows: IntArray | slice) -> BoolArray | None:
        """Which of ``rows`` admit a replica of ``constraint`` (``node_fit``); None when every node does.

        None (no constraint) still keeps replicas off nodes with a blocking taint.
        """
        mask = self._constraint_masks.get(constraint)
        if mask is None:
            if constraint is None and not self._tainted:
                return None
            admits = (constraint or UNCONSTRAINED).admits
            mask = np.fromiter(
                (admits(name, labels, taints) for name, labels, taints in self._fixed), dtype=np.bool_, count=len(self)
            )
            self._constraint_masks[constraint] = mask
        selected: BoolArray = mask[rows]
        return selected

    def whole_free(self, eligible: BoolArray, rows: IntArray | slice) -> IntArray:
        """Per row, eligible GPUs that nothing uses (what whole-GPU requests may take)."""
        counts: IntArray = np.count_nonzero(eligible & (self.gpu_free[rows] == MILLI), axis=1).astype(np.int64)
        return counts

    def largest_room(self, eligible: BoolArray, rows: IntArray | slice) -> IntArray:
        """Per row, the most milli-GPU free on one eligible GPU (0 when none)."""
        if eligible.shape[1] == 0:
            return np.zeros(eligible.shape[0], dtype=np.int64)
        room: IntArray = np.where(eligible, self.gpu_free[rows], 0).max(axis=1).astype(np.int64)
        return room

    def usable_count(self, rows: IntArray | slice) -> IntArray:
        """Per row, how many usable GPUs the node has."""
        counts: IntArray = np.count_nonzero(self.gpu_present[rows], axis=1).astype(np.int64)
        return counts

    def gpu_used_total(self, rows: IntArray | slice) -> IntArray:
        """Per row, milli-GPU in use over the usable GPUs."""
        present = self.gpu_present[rows]
        used: IntArray = np.where(present, MILLI - self.gpu_free[rows], 0).sum(axis=1).astype(np.int64)
        return used
