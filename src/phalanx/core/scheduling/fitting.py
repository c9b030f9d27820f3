"""The node filter: can a node take one more replica, judged by counts alone, and if not, what is short.

Filtering by counts is cheap (no device is chosen), so it runs on every node for every replica, as one numpy
expression over the ``NodeTable`` columns; exact device choice (``devices.py``) then runs only on the best
scored node, and can still refuse it for topology. A refusal is a ``Shortage``: the gang placer counts them
for the replica that did not fit, and ``reasons.py`` turns the counts into the sentence a waiting job shows.

``FitMemo`` keeps, for the life of a cycle or a session, every answer about a row (filter code, score
columns, device refusal) with the row's ``version``; only rows whose version moved are recomputed. Gangs are
mostly identical workers, trace replay repeats a few request shapes, and a placement changes one node, so
nearly every answer is a cache hit and a replica costs a handful of vector operations whatever the cluster
size.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import numpy as np

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.table import BoolArray, IntArray, NodeTable


class Shortage(StrEnum):
    """Why a node cannot take a replica. Declaration order is the order filters run in, scarcest first."""

    UNSCHEDULABLE = "unschedulable"
    NODE_CONSTRAINT = "node-constraint"
    GPU_MODEL = "gpu-model"
    GPUS = "gpus"
    GPU_SHARE = "gpu-share"
    EXCLUSIVE_CPUS = "exclusive-cpus"
    SHARED_CPU = "shared-cpu"
    MEMORY = "memory"
    GPU_TOPOLOGY = "gpu-topology"
    CPU_TOPOLOGY = "cpu-topology"
    CPU_POLICY = "cpu-policy"


SHORTAGES: tuple[Shortage, ...] = tuple(Shortage)
# Filter code of a row: 0 fits, otherwise 1 + the position of its Shortage in SHORTAGES.
FITS = 0


def code_of(shortage: Shortage) -> int:
    """The filter code that stands for ``shortage``."""
    return SHORTAGES.index(shortage) + 1


def shortage_codes(table: NodeTable, demand: Demand, rows: IntArray | slice) -> IntArray:
    """Per row of ``rows``, 0 when the counts of ``demand`` fit now, else the code of the first shortage.

    Whole GPUs must be entirely unused; a GPU share needs one GPU whose used milli-GPU plus the share stays
    within 1000. Exclusive CPUs must leave the shared pool able to hold what it already serves.
    """
    eligible = table.model_mask(demand.gpu_model, rows)
    unschedulable: BoolArray = np.logical_not(table.schedulable[rows])
    checks: list[tuple[BoolArray, Shortage]] = [(unschedulable, Shortage.UNSCHEDULABLE)]
    admitted = table.constraint_mask(demand.node_constraint, rows)
    if admitted is not None:
        checks.append((np.logical_not(admitted), Shortage.NODE_CONSTRAINT))
    if demand.gpu_model is not None:
        no_model: BoolArray = np.logical_not(eligible.any(axis=1))
        checks.append((no_model, Shortage.GPU_MODEL))
    if demand.gpus:
        checks.append((table.whole_free(eligible, rows) < demand.gpus, Shortage.GPUS))
    if demand.gpu_milli:
        checks.append((table.largest_room(eligible, rows) < demand.gpu_milli, Shortage.GPU_SHARE))
    if demand.exclusive_cpus:
        checks.append((table.grantable[rows] < demand.exclusive_cpus, Shortage.EXCLUSIVE_CPUS))
    if demand.shared_cpu_milli:
        checks.append((table.cpu_free[rows] < demand.shared_cpu_milli, Shortage.SHARED_CPU))
    if demand.memory:
        checks.append((table.free_memory[rows] < demand.memory, Shortage.MEMORY))
    conditions = [failed for failed, _ in checks]
    codes = [code_of(shortage) for _, shortage in checks]
    return np.select(conditions, codes, default=FITS).astype(np.int64)


def holds_in_bulk(table: NodeTable, demand: Demand, rows: IntArray) -> BoolArray:
    """Per row, whether the counts of ``demand`` (usually a sum over several replicas) fit at once.

    An estimate for scoring, not a guarantee: GPU shares and topology are not checked.
    """
    eligible = table.model_mask(demand.gpu_model, rows)
    grantable = table.grantable[rows]
    shared_after = table.cpu_free[rows] - MILLI * demand.exclusive_cpus
    result: BoolArray = (
        (demand.exclusive_cpus <= grantable)
        & (shared_after >= demand.shared_cpu_milli)
        & (demand.memory <= table.free_memory[rows])
        & (demand.gpus <= table.whole_free(eligible, rows))
    )
    admitted = table.constraint_mask(demand.node_constraint, rows)
    return result if admitted is None else result & admitted


ColumnFunction = Callable[[IntArray], IntArray]


class _Column:
    """One cached per-row answer: values with the row version they were computed at."""

    __slots__ = ("values", "versions")

    def __init__(self, size: int) -> None:
        self.values: IntArray = np.zeros(size, dtype=np.int64)
        self.versions: IntArray = np.full(size, -1, dtype=np.int64)


class FitMemo:
    """Per-row answers for one table, each valid while the row's ``version`` is unchanged."""

    __slots__ = ("_columns", "_refusals", "table")

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._columns: dict[object, _Column] = {}
        self._refusals: dict[tuple[Demand, str], dict[int, tuple[int, int]]] = {}

    def column(self, key: object, compute: ColumnFunction) -> IntArray:
        """The cached column ``key``, recomputing (with ``compute(rows)``) only rows whose version moved."""
        column = self._columns.get(key)
        if column is None:
            column = self._columns[key] = _Column(len(self.table))
        stale = np.flatnonzero(column.versions != self.table.version)
        if stale.size:
            rows = slice(None) if stale.size == len(self.table) else stale
            column.values[rows] = compute(stale)
            column.versions[rows] = self.table.version[rows]
        return column.values

    def codes(self, demand: Demand, topology: str) -> IntArray:
        """Filter code of every row for ``demand``, device refusals at the current version included."""
        codes = self.column(("fit", demand), lambda rows: shortage_codes(self.table, demand, rows))
        refusals = self._refusals.get((demand, topology))
        if refusals:
            codes = codes.copy()
            for row, (version, code) in list(refusals.items()):
                if version == self.table.version[row]:
                    if codes[row] == FITS:
                        codes[row] = code
                else:
                    del refusals[row]
        return codes

    def refuse_devices(self, row: int, demand: Demand, topology: str, shortage: Shortage) -> None:
        """Remember that device choice refused row ``row`` for this demand and topology."""
        entry = (int(self.table.version[row]), code_of(shortage))
        self._refusals.setdefault((demand, topology), {})[row] = entry


def count_shortages(codes: IntArray, refused: dict[int, Shortage]) -> dict[Shortage, int]:
    """How many schedulable-or-not rows lacked each resource, from filter codes plus this attempt's refusals."""
    codes = codes.copy()
    for row, shortage in refused.items():
        codes[row] = code_of(shortage)
    counts = np.bincount(codes, minlength=len(SHORTAGES) + 1)
    return {shortage: int(counts[code_of(shortage)]) for shortage in SHORTAGES if counts[code_of(shortage)]}
