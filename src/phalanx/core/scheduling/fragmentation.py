"""GPU fragmentation: how much idle GPU capacity the typical work of the cluster could not use.

The measure follows the definition of Weng et al. (USENIX ATC'23, "Beware of Fragmentation"), written here
from its description. For a node and one typical task shape ``m``:

- if ``m`` asks for no GPU, or the node has no GPU of ``m``'s model, or ``m`` does not fit on the node (too
  little free CPU, or fewer than ``m.gpus`` GPUs each with at least ``m.gpu_milli`` free), all of the node's
  idle GPU capacity is fragmented for ``m``;
- otherwise only the idle capacity of the GPUs whose free share is below ``m.gpu_milli`` is.

A node's fragmentation is the popularity-weighted sum over the shapes of the workload profile (weights
normalised to one), in milli-GPU; the cluster's is the sum over nodes. Placing a replica where the
fragmentation grows least (or drops most) is fragmentation gradient descent; ``fragmentation_after`` gives the
state after for every row at once, and ``best_share_column`` picks the GPU of a shared request the same way.

The **packed** measure (``packed=True``, what the default placement descends) differs for shapes that share a
GPU: the idle capacity such a shape can use is what as many of it as the node could still hold would use,
counted in whole shares (two 0.47 shares of a free GPU use 0.94 of it) and no more than the node's free CPU
feeds at the shape's CPU ask; the rest is fragmented for it. FGD's measure calls a node where one share fits
free of fragmentation for that shape, however many GPUs its CPU leaves stranded, and GPUs on nodes without
the CPU to feed them are most of what the FGD protocol leaves idle at the end (``sim/fgd.py``,
``unallocated``). Whole-GPU shapes are measured as FGD does. Variants that counted the CPU for whole-GPU shapes
too, or the CPU at the lightest sharing shape's ask, or only the share left on a GPU, lost more on some workload
mixes than they gained on others (docs/experiments, section a2).

A ``WorkloadProfile`` comes from ``SchedulerConfig.workload`` when the run states one (the simulator passes
the trace's shapes) or is learned from the requests the scheduler sees (``ShapeTally``): the most frequent
shapes covering 95 % of them, as in the paper's protocol.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from phalanx.core.scheduling.demands import MILLI, Demand, model_key
from phalanx.core.scheduling.table import BoolArray, FloatArray, IntArray, NodeTable
from phalanx.core.scheduling.types import TaskShape

# Shapes kept in a learned profile: the most frequent ones until this share of all requests is covered.
COVERAGE = 0.95
# A learned profile is rebuilt when the requests seen grew by this factor since the last build (or by
# REBUILD_MIN_STEP, whichever is larger): the profile stabilises quickly, and each rebuild invalidates every
# cached fragmentation score.
REBUILD_GROWTH = 1.25
REBUILD_MIN_STEP = 64
# Scores are kept as integers: fragmentation deltas in micro-GPU (milli-GPU times this).
SCALE = 1000
# The scaled fragmentation of a node that cannot hold the replica: far above any real value.
UNFIT = 10**15


def shape_of(demand: Demand) -> TaskShape:
    """The task shape a demand has (weight 1)."""
    if demand.gpus:
        return TaskShape(demand.cpu_milli, demand.gpus, MILLI, 1.0, demand.gpu_model)
    if demand.gpu_milli:
        return TaskShape(demand.cpu_milli, 1, demand.gpu_milli, 1.0, demand.gpu_model)
    return TaskShape(demand.cpu_milli, 0, 0, 1.0, None)


def typical_shapes(counts: Counter[TaskShape], coverage: float = COVERAGE) -> tuple[TaskShape, ...]:
    """The most frequent shapes (weight 1 keys) covering ``coverage`` of all requests, weighted by frequency.

    Ties in frequency go to the shape's fields, so the result depends only on the counts.
    """
    total = sum(counts.values())
    if total <= 0:
        return ()
    ordered = sorted(
        counts.items(),
        key=lambda item: (-item[1], item[0].gpus, item[0].gpu_milli, item[0].cpu_milli, item[0].gpu_model or ""),
    )
    chosen: list[TaskShape] = []
    covered = 0
    for shape, count in ordered:
        chosen.append(TaskShape(shape.cpu_milli, shape.gpus, shape.gpu_milli, float(count), shape.gpu_model))
        covered += count
        if covered >= coverage * total:
            break
    return tuple(chosen)


class ShapeTally:
    """Counts the shapes of the replicas a scheduler is asked to place, and builds a profile from them."""

    __slots__ = ("_built_at", "_counts", "_seen", "_shapes", "_total")

    def __init__(self) -> None:
        self._counts: Counter[TaskShape] = Counter()
        self._seen: set[str] = set()
        self._total = 0
        self._built_at = 0
        self._shapes: tuple[TaskShape, ...] = ()

    def observe(self, key: str, demands: Iterable[Demand]) -> None:
        """Count the replicas of job ``key`` once, however many cycles it waits."""
        if key in self._seen:
            return
        self._seen.add(key)
        for demand in demands:
            self._counts[shape_of(demand)] += 1
            self._total += 1

    def shapes(self) -> tuple[TaskShape, ...]:
        """The learned typical shapes, rebuilt only when the tally grew enough (see ``REBUILD_GROWTH``)."""
        threshold = max(self._built_at * REBUILD_GROWTH, self._built_at + REBUILD_MIN_STEP)
        if not self._shapes or self._total >= threshold:
            self._shapes = typical_shapes(self._counts)
            self._built_at = self._total
        return self._shapes


@dataclass(frozen=True, slots=True, eq=False)
class WorkloadProfile:
    """Typical shapes as columns, weights normalised to one, models resolved against one table.

    Compared and hashed by identity: caches key their columns on the profile object they were computed for.
    ``eligible`` [shape, row, column] says which GPU columns of the table hold a GPU of the shape's model;
    ``shares`` which shapes ask for a share of one GPU.
    """

    shapes: tuple[TaskShape, ...]
    cpu: IntArray
    gpus: IntArray
    gpu_milli: IntArray
    weight: FloatArray
    eligible: BoolArray
    shares: BoolArray

    @classmethod
    def build(cls, shapes: Sequence[TaskShape], table: NodeTable) -> WorkloadProfile:
        """Resolve ``shapes`` against ``table``'s GPU models (a model no node has matches no GPU)."""
        total = sum(max(0.0, shape.weight) for shape in shapes)
        weights = [max(0.0, shape.weight) / total if total > 0 else 0.0 for shape in shapes]

        sharing = [bool(shape.gpus) and shape.gpu_milli < MILLI for shape in shapes]
        everything = slice(None)
        eligible = (
            np.stack([table.model_mask(model_key(shape.gpu_model), everything) for shape in shapes])
            if shapes
            else np.zeros((0, *table.gpu_present.shape), dtype=np.bool_)
        )
        return cls(
            shapes=tuple(shapes),
            cpu=np.array([shape.cpu_milli for shape in shapes], dtype=np.int64),
            gpus=np.array([shape.gpus for shape in shapes], dtype=np.int64),
            gpu_milli=np.array([shape.gpu_milli for shape in shapes], dtype=np.int64),
            weight=np.array(weights, dtype=np.float64),
            eligible=eligible,
            shares=np.array(sharing, dtype=np.bool_),
        )

    def __bool__(self) -> bool:
        return bool(self.shapes)


def _eligible(profile: WorkloadProfile, rows: IntArray | slice) -> BoolArray:
    """[shape, row, column]: the column holds a usable GPU of the shape's model."""
    result: BoolArray = profile.eligible[:, rows, :]
    return result


def _fragmentation(
    free: IntArray, cpu_free: IntArray, eligible: BoolArray, profile: WorkloadProfile, *, packed: bool = False
) -> FloatArray:
    """Weighted fragmentation per row of ``free`` [row, column] (milli-GPU), shapes broadcast in front."""
    total = free.sum(axis=-1)
    need = profile.gpu_milli[:, None, None]
    usable = (free[None] >= need) & eligible
    count = np.count_nonzero(usable, axis=-1)
    small = np.where(usable, 0, free[None]).sum(axis=-1)
    fits = (profile.gpus[:, None] > 0) & (cpu_free[None, :] >= profile.cpu[:, None]) & (count >= profile.gpus[:, None])
    per_shape = np.where(fits, small, total[None, :])
    sharing = profile.shares
    if packed and sharing.any():
        # Only the sharing shapes' rows: a profile of whole GPUs (the common case) pays nothing for the flag.
        per_shape[sharing] = _unpacked(free, cpu_free, eligible[sharing], profile.gpu_milli[sharing],
                                       profile.cpu[sharing], total)  # fmt: skip
    result: FloatArray = (profile.weight[:, None] * per_shape).sum(axis=0)
    return result


def _unpacked(
    free: IntArray, cpu_free: IntArray, eligible: BoolArray, gpu_milli: IntArray, cpu: IntArray, total: IntArray
) -> IntArray:
    """[shape, row]: for shapes sharing a GPU, the idle capacity as many of the shape as still fit leave unused.

    As many as fit: the shares the node's GPUs of the shape's model have room for (``slots``), and no more than
    its free CPU feeds at the shape's own CPU ask. ``eligible``, ``gpu_milli`` and ``cpu`` are the sharing
    shapes' rows of the profile.
    """
    slots = (np.where(eligible, free[None], 0) // np.maximum(gpu_milli, 1)[:, None, None]).sum(axis=-1)
    asks = cpu[:, None]
    fed = np.where(asks > 0, np.maximum(cpu_free[None, :], 0) // np.maximum(asks, 1), slots)
    unused: IntArray = total[None, :] - np.minimum(slots, fed) * gpu_milli[:, None]
    return unused


def node_fragmentation(
    table: NodeTable, profile: WorkloadProfile, rows: IntArray | slice, *, packed: bool = False
) -> FloatArray:
    """Fragmentation of each row now, in milli-GPU (FGD's measure, or the packed one)."""
    if not profile:
        return np.zeros(len(table.names) if isinstance(rows, slice) else len(rows), dtype=np.float64)
    free = np.where(table.gpu_present[rows], table.gpu_free[rows], 0)
    return _fragmentation(free, table.cpu_free[rows], _eligible(profile, rows), profile, packed=packed)


def share_fragmentation(
    table: NodeTable, profile: WorkloadProfile, demand: Demand, rows: IntArray, *, packed: bool = False
) -> FloatArray:
    """[row, column]: each row's fragmentation with ``demand``'s GPU share on that column (inf: cannot hold)."""
    free = np.where(table.gpu_present[rows], table.gpu_free[rows], 0)
    can_hold = table.model_mask(demand.gpu_model, rows) & (free >= demand.gpu_milli)
    if not profile:
        return np.where(can_hold, 0.0, np.inf)
    count, width = free.shape
    # Every (row, column) pair becomes one hypothetical node: the row with the share taken from that column.
    after = np.repeat(free, width, axis=0).reshape(count, width, width)
    after[:, np.arange(width), np.arange(width)] -= demand.gpu_milli
    cpu_after = np.repeat(table.cpu_free[rows] - demand.cpu_milli, width)
    eligible = np.repeat(_eligible(profile, rows), width, axis=1)
    fragmented = _fragmentation(after.reshape(count * width, width), cpu_after, eligible, profile, packed=packed)
    result: FloatArray = np.where(can_hold, fragmented.reshape(count, width), np.inf)
    return result


def fragmentation_after(
    table: NodeTable, profile: WorkloadProfile, demand: Demand, rows: IntArray, *, packed: bool = False
) -> FloatArray:
    """Each row's fragmentation once ``demand`` is placed on it (GPU shares on their best column)."""
    free = np.where(table.gpu_present[rows], table.gpu_free[rows], 0)
    cpu_after = table.cpu_free[rows] - demand.cpu_milli
    if demand.gpu_milli:
        after = share_fragmentation(table, profile, demand, rows, packed=packed)
        best: FloatArray = after.min(axis=1) if after.shape[1] else np.full(len(rows), np.inf)
        return best
    if not profile:
        return np.zeros(len(rows), dtype=np.float64)
    if demand.gpus:
        full = table.model_mask(demand.gpu_model, rows) & (free == MILLI)
        taken = full & (np.cumsum(full, axis=1) <= demand.gpus)
        free = np.where(taken, 0, free)
    return _fragmentation(free, cpu_after, _eligible(profile, rows), profile, packed=packed)


def scaled_fragmentation(
    table: NodeTable, profile: WorkloadProfile, rows: IntArray, *, packed: bool = False
) -> IntArray:
    """``node_fragmentation`` in micro-GPU, as integers (cached score columns are integers)."""
    scaled: IntArray = np.rint(node_fragmentation(table, profile, rows, packed=packed) * SCALE).astype(np.int64)
    return scaled


def scaled_fragmentation_after(
    table: NodeTable, profile: WorkloadProfile, demand: Demand, rows: IntArray, *, packed: bool = False
) -> IntArray:
    """``fragmentation_after`` in micro-GPU, as integers; rows that cannot hold ``demand`` get a huge value."""
    after = fragmentation_after(table, profile, demand, rows, packed=packed)
    scaled: IntArray = np.where(np.isfinite(after), np.rint(np.where(np.isfinite(after), after, 0) * SCALE), UNFIT)
    return scaled.astype(np.int64)


def best_share_column(
    table: NodeTable, profile: WorkloadProfile, demand: Demand, row: int, *, packed: bool = False
) -> int | None:
    """The GPU column of row ``row`` where ``demand``'s share leaves the least fragmentation, or None.

    Ties go to the column with the least room left after it, then to the lowest column.
    """
    rows = np.array([row], dtype=np.int64)
    after = share_fragmentation(table, profile, demand, rows, packed=packed)[0]
    if not np.isfinite(after).any():
        return None
    free = table.gpu_free[row]
    scaled = np.where(
        np.isfinite(after), np.rint(np.where(np.isfinite(after), after, 0) * SCALE), np.iinfo(np.int64).max
    )
    room = np.where(np.isfinite(after), free - demand.gpu_milli, np.iinfo(np.int64).max)
    order = np.lexsort((np.arange(len(after)), room, scaled))
    return int(order[0])
