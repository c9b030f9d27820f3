"""Score plugins and placement policies: which of the nodes that fit a replica it should go to.

A score plugin maps the candidate rows of the ``NodeTable`` to integers, smaller is better; it sees the
replica's ``Demand`` and the gang placed so far (``ScoreInput``). A placement policy is a list of tiers
compared lexicographically: the second tier only separates nodes the first tier ties, and so on; what still
ties goes to the lowest row, i.e. the node name. Tiers keep each plugin's meaning intact (kube-scheduler's
weighted sums let a large score drown a small one), and a tier may still add several plugins with weights.

Plugins:

- ``gang-affinity``: prefer nodes already hosting replicas of the gang (keeps its traffic on few nodes);
- ``holds-rest``: prefer a node that could also hold every later replica of the gang;
- ``most-allocated`` / ``least-allocated``: the mean used share of the node's CPU, memory and GPUs (when it
  has any) once the replica is added, in ppm (pack / spread);
- ``best-fit``: the absolute room left once the replica is added, CPU and GPU each normalised by the
  largest node's capacity (half weight each), so the tightest node wins whatever its size; memory is
  filtered, not scored;
- ``fragmentation``: the change of GPU fragmentation the placement causes, FGD's measure (``fragmentation.py``);
- ``packed-fragmentation``: the same change, measured as if each typical shape that shares a GPU filled what it
  still could (``fragmentation.py``, packed), so the share left on a GPU and the GPUs a node's CPU strands count;
- ``topology-fit``: 0 where the node can give the replica NVLink-joined GPUs and CPUs on their NUMA node;
- ``data-locality``: the bytes of the job's datasets (``PendingJob.datasets``) the node does not cache and
  would have to fetch, in 64 MiB steps; a node caching a dataset carries the label
  ``dataset.phalanx.dev/<name>=<version>``. All zero for a job that reads no dataset;
- ``random``: a seeded hash of the replica and the node, the baseline a placement is compared against.

Policies (``PendingJob.placement``):

- ``pack``: gang-affinity, holds-rest, data-locality, topology-fit, most-allocated. Filling busy nodes keeps
  whole nodes free for big gangs; a gang on few nodes keeps its traffic local.
- ``binpack``: best-fit alone.
- ``spread``: gang-affinity reversed (fewest of the gang first), data-locality, then least-allocated.
- ``fragmentation``: fragmentation alone (FGD's policy, for comparison).
- ``random``: random.
- ``auto`` (the default): gang-affinity, holds-rest, data-locality, topology-fit, packed-fragmentation: a gang
  stays together; among the nodes that keep it together, those that already hold its data; then the GPUs
  topology favours; then the node whose free GPUs stay most usable by the typical work.

Data locality comes before topology: fetching a dataset costs minutes per tens of GB (Fluid reports about 2x
for jobs sharing a cached dataset), more than an imperfect GPU set costs a job in most cases; a job for which
NVLink is a must says ``topology: required``, which filters rather than scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from zlib import crc32

import numpy as np

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.devices import choose_gpus, linked_pairs
from phalanx.core.scheduling.fitting import FitMemo, holds_in_bulk
from phalanx.core.scheduling.fragmentation import (
    UNFIT,
    WorkloadProfile,
    scaled_fragmentation,
    scaled_fragmentation_after,
    shape_of,
)
from phalanx.core.scheduling.policies import AUTO, BINPACK, FRAGMENTATION, PACK, RANDOM, SPREAD, TOPOLOGY_NONE
from phalanx.core.scheduling.table import IntArray, NodeTable
from phalanx.core.scheduling.types import DatasetNeed, TaskShape
from phalanx.core.scheduling.working import WorkingCluster

_PPM = 1_000_000
# Fragmentation deltas closer than this (micro-GPU: 0.04 GPU) tie.
FRAGMENTATION_STEP = 40_000
# ... and deltas beyond two GPUs either way count as two GPUs: among nodes where a replica removes (or adds) that
# much fragmentation, the node order decides, which keeps filling the same nodes. Replaying the FGD protocol on
# mixes where a quarter of the GPU pods name GPU models, this allocated 0.3 points more (seeds 42-44) and changed
# nothing measurable on the other mixes; FGD's own scores saturate likewise (a sigmoid of the delta).
FRAGMENTATION_CAP = 2_000_000
# Bytes to fetch closer than this tie: a second or so of transfer does not outweigh the tiers after it.
DATA_STEP = 64 * 2**20


@dataclass(slots=True)
class ScoreInput:
    """What score plugins may read about the replica being placed.

    Attributes:
        memo: per-row caches (and, through it, the table).
        demand: the replica's demand.
        members: row -> replicas of this gang already placed there in this attempt.
        rest: the demand of this replica and every later one of the gang.
        profile: the workload profile for fragmentation.
        salt: a number that identifies the replica, for the random plugin.
        cluster: the working copy (device-level plugins look at a node's GPUs and CPUs).
        topology: the job's topology wish (``none``, ``preferred`` or ``required``).
        datasets: the datasets the replica reads (data locality).
    """

    memo: FitMemo
    demand: Demand
    members: dict[int, int] = field(default_factory=dict)
    rest: Demand | None = None
    profile: WorkloadProfile | None = None
    salt: int = 0
    cluster: WorkingCluster | None = None
    topology: str = TOPOLOGY_NONE
    datasets: tuple[DatasetNeed, ...] = ()

    @property
    def table(self) -> NodeTable:
        """The table whose rows are scored."""
        return self.memo.table

    @property
    def shape(self) -> TaskShape:
        """The replica's task shape: its demand without memory (what fragmentation and best fit read)."""
        return shape_of(self.demand)


ScorePlugin = Callable[[ScoreInput, IntArray], IntArray]


def allocation_ppm(table: NodeTable, demand: Demand, rows: IntArray) -> IntArray:
    """How full each row would be with ``demand`` on it: the mean used share of its resources, in ppm."""
    shares = np.zeros(len(rows), dtype=np.int64)
    counted = np.zeros(len(rows), dtype=np.int64)
    cpu_capacity = table.cpu_capacity[rows]
    has_cpu = cpu_capacity > 0
    cpu_used = cpu_capacity - table.cpu_free[rows] + demand.cpu_milli
    shares += np.where(has_cpu, cpu_used * _PPM // np.maximum(cpu_capacity, 1), 0)
    counted += has_cpu
    memory_capacity = table.memory_capacity[rows]
    has_memory = memory_capacity > 0
    memory_used = memory_capacity - table.free_memory[rows] + demand.memory
    shares += np.where(has_memory, memory_used * _PPM // np.maximum(memory_capacity, 1), 0)
    counted += has_memory
    usable = table.usable_count(rows)
    has_gpus = usable > 0
    gpu_used = table.gpu_used_total(rows) + demand.gpus * MILLI + demand.gpu_milli
    shares += np.where(has_gpus, gpu_used * _PPM // np.maximum(MILLI * usable, 1), 0)
    counted += has_gpus
    result: IntArray = np.where(counted > 0, shares // np.maximum(counted, 1), 0)
    return result


def leftover_ppm(table: NodeTable, demand: Demand, rows: IntArray) -> IntArray:
    """Room left on each row once ``demand`` is placed: CPU and GPU, each over the largest node's, in ppm."""
    largest_cpu = int(table.cpu_capacity.max(initial=0))
    largest_gpu = MILLI * int(table.gpu_present.sum(axis=1).max(initial=0))
    total = np.zeros(len(rows), dtype=np.int64)
    parts = 0
    if largest_cpu:
        total += (table.cpu_free[rows] - demand.cpu_milli) * _PPM // largest_cpu
        parts += 1
    if largest_gpu:
        free_gpu = np.where(table.gpu_present[rows], table.gpu_free[rows], 0).sum(axis=1)
        total += (free_gpu - demand.gpus * MILLI - demand.gpu_milli) * _PPM // largest_gpu
        parts += 1
    result: IntArray = total // max(parts, 1)
    return result


def _members(score: ScoreInput, rows: IntArray) -> IntArray:
    counts = np.zeros(len(rows), dtype=np.int64)
    if score.members:
        hosts = np.fromiter(score.members.keys(), dtype=np.int64, count=len(score.members))
        placed = np.fromiter(score.members.values(), dtype=np.int64, count=len(score.members))
        positions = np.searchsorted(rows, hosts)
        found = positions < len(rows)
        found[found] = rows[positions[found]] == hosts[found]
        counts[positions[found]] = placed[found]
    return counts


def gang_affinity(score: ScoreInput, rows: IntArray) -> IntArray:
    """Fewer is worse: minus the gang's replicas already on the row."""
    result: IntArray = -_members(score, rows)
    return result


def gang_dispersion(score: ScoreInput, rows: IntArray) -> IntArray:
    """The gang's replicas already on the row (spread: fewer is better)."""
    return _members(score, rows)


def holds_rest(score: ScoreInput, rows: IntArray) -> IntArray:
    """0 where the row could hold this replica and every later one of the gang, 1 elsewhere."""
    rest = score.rest
    if rest is None:
        return np.zeros(len(rows), dtype=np.int64)
    column = score.memo.column(
        ("holds", rest), lambda r: np.logical_not(holds_in_bulk(score.table, rest, r)).astype(np.int64)
    )
    return column[rows]


def most_allocated(score: ScoreInput, rows: IntArray) -> IntArray:
    """Minus the allocation share once placed (fuller is better)."""
    column = score.memo.column(("allocation", score.demand), lambda r: allocation_ppm(score.table, score.demand, r))
    result: IntArray = -column[rows]
    return result


def least_allocated(score: ScoreInput, rows: IntArray) -> IntArray:
    """The allocation share once placed (emptier is better)."""
    column = score.memo.column(("allocation", score.demand), lambda r: allocation_ppm(score.table, score.demand, r))
    return column[rows]


def best_fit(score: ScoreInput, rows: IntArray) -> IntArray:
    """Room left once placed (tighter is better)."""
    # Keyed by the task shape: memory is neither scored nor part of the room, so replicas differing only in
    # memory share one cached column.
    column = score.memo.column(("leftover", score.shape), lambda r: leftover_ppm(score.table, score.demand, r))
    return column[rows]


def fragmentation(score: ScoreInput, rows: IntArray) -> IntArray:
    """Growth of GPU fragmentation (FGD's measure) once placed, in steps of ``FRAGMENTATION_STEP`` (less is better).

    Changes smaller than a step count as equal, and changes beyond ``FRAGMENTATION_CAP`` as that cap, so the
    next tier (the node order) decides between them: replaying the FGD protocol, exact deltas broken by best
    fit allocated about one point of the GPUs less than deltas in 0.04-GPU steps broken by a fixed node order,
    which keeps filling the same nodes. 0 everywhere without a profile.
    """
    return _fragmentation_growth(score, rows, packed=False)


def packed_fragmentation(score: ScoreInput, rows: IntArray) -> IntArray:
    """``fragmentation`` with the packed measure, which the default placement (``auto``) descends.

    Replaying the FGD protocol (seeds 42-51) against FGD's own measure under the same tiers, it allocated 0.27
    points more of the GPUs on the default openb trace (95.70 %), 1.13 more where a quarter of the GPU pods name
    GPU models, 0.65 more where CPU-only pods ask 13 % of the cluster's CPU, and 0.35 less where every GPU pod
    shares a GPU (docs/experiments, section a2).
    """
    return _fragmentation_growth(score, rows, packed=True)


def _fragmentation_growth(score: ScoreInput, rows: IntArray, *, packed: bool) -> IntArray:
    profile = score.profile
    if profile is None or not profile:
        return np.zeros(len(rows), dtype=np.int64)
    table = score.table
    before = score.memo.column(
        ("fragmentation-now", profile, packed), lambda r: scaled_fragmentation(table, profile, r, packed=packed)
    )
    column = score.memo.column(
        ("fragmentation-after", score.shape, profile, packed),
        lambda r: scaled_fragmentation_after(table, profile, score.demand, r, packed=packed),
    )
    delta = np.clip(column[rows] - before[rows], -FRAGMENTATION_CAP, FRAGMENTATION_CAP)
    result: IntArray = np.where(column[rows] >= UNFIT, UNFIT, delta // FRAGMENTATION_STEP)
    return result


def topology_fit(score: ScoreInput, rows: IntArray) -> IntArray:
    """How well the node's free devices suit the replica: 0 best, 3 where no GPU set exists.

    The GPUs the replica would get are all joined by NVLink (else +2) and sit, with its exclusive CPUs, on
    one NUMA node (else +1). Only replicas that can tell nodes apart pay for it: several GPUs, or GPUs with
    exclusive CPUs, under a topology wish. One GPU is judged from the table's columns; several come from
    ``devices.choose_gpus``, the same choice placement then makes, node by node (cached per node version).
    """
    demand, cluster, topology = score.demand, score.cluster, score.topology
    if (
        cluster is None
        or topology == TOPOLOGY_NONE
        or not demand.gpus
        or (demand.gpus < 2 and not demand.exclusive_cpus)
    ):
        return np.zeros(len(rows), dtype=np.int64)
    if demand.gpus == 1:
        table = score.table
        aligned = score.memo.column(("one-gpu-alignment", demand), lambda r: _one_gpu_alignment(table, demand, r))
        return aligned[rows]
    column = score.memo.column(
        ("topology", demand, topology), lambda r: _topology_quality(cluster, demand, topology, r)
    )
    return column[rows]


def data_locality(score: ScoreInput, rows: IntArray) -> IntArray:
    """The bytes of the replica's datasets each node lacks and would have to fetch, in ``DATA_STEP`` steps."""
    needs, cluster = score.datasets, score.cluster
    if not needs or cluster is None:
        return np.zeros(len(rows), dtype=np.int64)
    column = score.memo.column(("data", needs), lambda r: _bytes_to_fetch(cluster, needs, r))
    result: IntArray = column[rows] // DATA_STEP
    return result


def _bytes_to_fetch(cluster: WorkingCluster, needs: tuple[DatasetNeed, ...], rows: IntArray) -> IntArray:
    missing = np.zeros(len(rows), dtype=np.int64)
    for i, row in enumerate(rows.tolist()):
        labels = cluster.nodes[row].snapshot.labels
        missing[i] = sum(need.bytes for need in needs if not need.cached_on(labels))
    return missing


def _one_gpu_alignment(table: NodeTable, demand: Demand, rows: IntArray) -> IntArray:
    """One GPU with exclusive CPUs: 0 where a free GPU's NUMA node has the CPUs free too.

    1 where a GPU is free only on a NUMA node without them, 3 where no GPU is free.
    """
    free = table.model_mask(demand.gpu_model, rows) & (table.gpu_free[rows] == MILLI)
    cpus_by_gpu = np.take_along_axis(table.numa_free_cpus[rows], table.gpu_numa[rows], axis=1)
    aligned = (free & (cpus_by_gpu >= demand.exclusive_cpus)).any(axis=1)
    result: IntArray = np.where(aligned, 0, np.where(free.any(axis=1), 1, 3)).astype(np.int64)
    return result


def _topology_quality(cluster: WorkingCluster, demand: Demand, topology: str, rows: IntArray) -> IntArray:
    quality = np.empty(len(rows), dtype=np.int64)
    for position, row in enumerate(rows.tolist()):
        node = cluster.nodes[row]
        chosen = (
            choose_gpus(node, demand, topology=topology)
            if node.free_gpu_count(demand.gpu_model) >= demand.gpus
            else None
        )
        if chosen is None:
            quality[position] = 3
            continue
        gpus = [node.gpu_by_index[index] for index in chosen]
        fully_linked = linked_pairs(gpus) == len(gpus) * (len(gpus) - 1) // 2
        numas = {gpu.numa for gpu in gpus}
        aligned = len(numas) == 1 and (
            not demand.exclusive_cpus
            or sum(len(core) for core in node.free_cores().get(next(iter(numas)), ())) >= demand.exclusive_cpus
        )
        quality[position] = (0 if fully_linked else 2) + (0 if aligned else 1)
    return quality


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def random_order(score: ScoreInput, rows: IntArray) -> IntArray:
    """A seeded pseudo-random number per (replica, row): splitmix64 of the row mixed with the salt."""
    with np.errstate(over="ignore"):
        x = rows.astype(np.uint64) + np.uint64(score.salt & 0xFFFFFFFFFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & _MASK64
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & _MASK64
        x = x ^ (x >> np.uint64(31))
    result: IntArray = (x >> np.uint64(2)).astype(np.int64)
    return result


def replica_salt(seed: int, job_key: str, replica: str) -> int:
    """The random plugin's salt for one replica: stable across runs and Python processes."""
    return (seed * 0x100000001B3 + crc32(f"{job_key}\0{replica}".encode())) & 0xFFFFFFFFFFFFFFFF


Tier = tuple[tuple[ScorePlugin, int], ...]

POLICIES: dict[str, tuple[Tier, ...]] = {
    PACK: (
        ((gang_affinity, 1),),
        ((holds_rest, 1),),
        ((data_locality, 1),),
        ((topology_fit, 1),),
        ((most_allocated, 1),),
    ),
    BINPACK: (((best_fit, 1),),),
    SPREAD: (((gang_dispersion, 1),), ((data_locality, 1),), ((least_allocated, 1),)),
    FRAGMENTATION: (((fragmentation, 1),),),
    RANDOM: (((random_order, 1),),),
    AUTO: (
        ((gang_affinity, 1),),
        ((holds_rest, 1),),
        ((data_locality, 1),),
        ((topology_fit, 1),),
        ((packed_fragmentation, 1),),
    ),
}


def uses_fragmentation(placement: str) -> bool:
    """Whether the policy scores fragmentation (and so picks GPU shares by it too)."""
    return any(plugin in (fragmentation, packed_fragmentation) for tier in POLICIES[placement] for plugin, _ in tier)


def packs_shares(placement: str) -> bool:
    """Whether the policy measures fragmentation packed (and so picks GPU shares by that measure)."""
    return any(plugin is packed_fragmentation for tier in POLICIES[placement] for plugin, _ in tier)


def needs_rest(placement: str) -> bool:
    """Whether the policy reads ``ScoreInput.rest``."""
    return any(plugin is holds_rest for tier in POLICIES[placement] for plugin, _ in tier)


def choose_row(placement: str, score: ScoreInput, rows: IntArray) -> int:
    """The best row among ``rows`` (non-empty, ascending) under ``placement``'s tiers."""
    candidates = rows
    for tier in POLICIES[placement]:
        if len(candidates) == 1:
            break
        values = _tier_values(tier, score, candidates)
        candidates = candidates[values == values.min()]
    return int(candidates[0])


def _tier_values(tier: Tier, score: ScoreInput, rows: IntArray) -> IntArray:
    plugin, weight = tier[0]
    values = plugin(score, rows) * weight if weight != 1 else plugin(score, rows)
    for plugin, weight in tier[1:]:
        values = values + plugin(score, rows) * weight
    return values
