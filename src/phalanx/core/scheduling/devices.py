"""Exact device choice on one node: the GPU indices and exclusive CPU ids a replica gets.

The filter (``fitting.py``) has already checked the counts; this module picks *which* devices, and may still
refuse a node when the job's topology is ``required`` and no acceptable set exists.

GPUs, for a request of ``n`` whole GPUs, among the free healthy GPUs of the requested model:

1. with topology ``preferred`` or ``required``: the set with the most NVLink-joined pairs (a set where every
   pair is joined beats all others), then the fewest NUMA nodes, then a set whose NUMA node can also hold the
   replica's exclusive CPUs;
2. best fit: the set whose NUMA nodes have the fewest free GPUs left over, so large free blocks stay whole;
3. the lowest indices.

``required`` with ``n > 1`` accepts only a fully NVLink-joined set or a set on one NUMA node. Small nodes are
searched exhaustively; when the number of sets is too large (many GPUs), sets are grown greedily from every
seed GPU instead, which keeps the cost polynomial.

A GPU share goes on the GPU with the least room left that still holds it (shares pack together and whole
GPUs stay free), preferring a GPU whose NUMA node can hold the exclusive CPUs.

Exclusive CPUs follow the kubelet static CPU manager: all on one NUMA node when one can hold them (the NUMA
node of the chosen GPUs first, then one where whole cores suffice, then the one with the fewest free CPUs that
still fits); within it, whole physical cores (every hyperthread) first, then single threads from cores that
are already split, then from whole cores. If no NUMA node can hold them, they spill across NUMA nodes, unless
the topology is ``required``, which refuses the node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from phalanx.core.scheduling.demands import MILLI, Demand
from phalanx.core.scheduling.fitting import Shortage
from phalanx.core.scheduling.policies import TOPOLOGY_NONE, TOPOLOGY_REQUIRED
from phalanx.core.scheduling.types import GpuSlot
from phalanx.core.scheduling.working import WorkingNode

# Above this many candidate GPU sets, grow sets greedily instead of trying every one.
MAX_EXHAUSTIVE_GPU_SETS = 5000

_GpuSetKey = tuple[int, int, int, int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """The devices chosen for one replica on one node."""

    cpus: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()


def choose_devices(
    node: WorkingNode, demand: Demand, *, topology: str, shared_gpu: int | None = None
) -> DeviceChoice | Shortage:
    """Pick GPUs, then exclusive CPUs aligned with them, or say which topology rule refuses the node.

    ``shared_gpu``, when given, is the GPU a share goes on (chosen by fragmentation-aware placement) instead
    of the least-room rule.
    """
    aware = topology != TOPOLOGY_NONE
    if topology == TOPOLOGY_REQUIRED and demand.exclusive_cpus and not node.snapshot.aligns_cpus:
        # Alignment the node does not enforce (a kubelet without the static CPU manager and an aligning
        # topology manager) would be bookkeeping only: ``core.cpu_policy``.
        return Shortage.CPU_POLICY
    gpus: tuple[int, ...] = ()
    if demand.gpus:
        chosen = choose_gpus(node, demand, topology=topology)
        if chosen is None:
            return Shortage.GPU_TOPOLOGY
        gpus = chosen
    elif demand.gpu_milli:
        shared = shared_gpu if shared_gpu is not None else choose_shared_gpu(node, demand, topology=topology)
        if shared is None:
            return Shortage.GPU_SHARE
        gpus = (shared,)
    cpus: tuple[int, ...] = ()
    if demand.exclusive_cpus:
        picked = choose_exclusive_cpus(
            node,
            demand.exclusive_cpus,
            numa_preference=_numa_order(node, gpus) if aware else (),
            required=topology == TOPOLOGY_REQUIRED,
        )
        if picked is None:
            return Shortage.CPU_TOPOLOGY
        cpus = picked
    return DeviceChoice(cpus=cpus, gpus=gpus)


# --- GPUs -----------------------------------------------------------------------------------------------


def choose_gpus(node: WorkingNode, demand: Demand, *, topology: str) -> tuple[int, ...] | None:
    """Pick the best set of ``demand.gpus`` free GPUs on ``node``; None when the topology rule finds none."""
    count = demand.gpus
    free = node.free_gpus(demand.gpu_model)
    if count <= 0 or len(free) < count:
        return None
    free_per_numa = Counter(gpu.numa for gpu in free)
    cpus_per_numa = _free_cpu_counts(node) if demand.exclusive_cpus and topology != TOPOLOGY_NONE else {}
    best: tuple[GpuSlot, ...] | None = None
    best_key: _GpuSetKey | None = None
    for gpu_set in _candidate_sets(free, count):
        key = _gpu_set_key(
            gpu_set,
            topology=topology,
            free_per_numa=free_per_numa,
            cpu_need=demand.exclusive_cpus,
            cpus_per_numa=cpus_per_numa,
        )
        if key is not None and (best_key is None or key < best_key):
            best, best_key = gpu_set, key
    return None if best is None else tuple(gpu.index for gpu in best)


def linked_pairs(gpus: Sequence[GpuSlot]) -> int:
    """How many pairs of ``gpus`` are joined by NVLink (a link listed on either side counts)."""
    return sum(1 for a, b in combinations(gpus, 2) if b.index in a.nvlink_peers or a.index in b.nvlink_peers)


def _gpu_set_key(
    gpu_set: tuple[GpuSlot, ...],
    *,
    topology: str,
    free_per_numa: Counter[int],
    cpu_need: int,
    cpus_per_numa: dict[int, int],
) -> _GpuSetKey | None:
    numas = {gpu.numa for gpu in gpu_set}
    leftover = sum(free_per_numa[numa] for numa in numas) - len(gpu_set)
    indices = tuple(gpu.index for gpu in gpu_set)
    if topology == TOPOLOGY_NONE:
        return (0, 0, 0, leftover, indices)
    pairs = linked_pairs(gpu_set)
    all_pairs = len(gpu_set) * (len(gpu_set) - 1) // 2
    if topology == TOPOLOGY_REQUIRED and pairs < all_pairs and len(numas) > 1:
        return None
    aligned = cpu_need == 0 or any(cpus_per_numa.get(numa, 0) >= cpu_need for numa in numas)
    return (-pairs, len(numas), 0 if aligned else 1, leftover, indices)


def _candidate_sets(free: Sequence[GpuSlot], count: int) -> Iterator[tuple[GpuSlot, ...]]:
    if comb(len(free), count) <= MAX_EXHAUSTIVE_GPU_SETS:
        yield from combinations(free, count)
        return
    seen: set[tuple[int, ...]] = set()
    for seed in free:
        grown = _grow_set(seed, free, count)
        indices = tuple(gpu.index for gpu in grown)
        if indices not in seen:
            seen.add(indices)
            yield grown


def _grow_set(seed: GpuSlot, free: Sequence[GpuSlot], count: int) -> tuple[GpuSlot, ...]:
    chosen = [seed]
    rest = [gpu for gpu in free if gpu.index != seed.index]
    while len(chosen) < count:

        def closeness(gpu: GpuSlot) -> tuple[int, int, int]:
            links = sum(1 for other in chosen if other.index in gpu.nvlink_peers or gpu.index in other.nvlink_peers)
            return (-links, 0 if gpu.numa == seed.numa else 1, gpu.index)

        nearest = min(rest, key=closeness)
        chosen.append(nearest)
        rest.remove(nearest)
    return tuple(sorted(chosen, key=lambda gpu: gpu.index))


def choose_shared_gpu(node: WorkingNode, demand: Demand, *, topology: str) -> int | None:
    """Pick the GPU for a ``demand.gpu_milli`` share: least room left after it, NUMA-aligned if asked."""
    cpus_per_numa = _free_cpu_counts(node) if demand.exclusive_cpus and topology != TOPOLOGY_NONE else {}
    best: tuple[int, int, int] | None = None
    for gpu in node.usable_gpus(demand.gpu_model):
        room = MILLI - node.gpu_used.get(gpu.index, 0) - demand.gpu_milli
        if room < 0:
            continue
        aligned = not cpus_per_numa or cpus_per_numa.get(gpu.numa, 0) >= demand.exclusive_cpus
        key = (0 if aligned else 1, room, gpu.index)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]


# --- CPUs -----------------------------------------------------------------------------------------------


def choose_exclusive_cpus(
    node: WorkingNode, count: int, *, numa_preference: Sequence[int] = (), required: bool = False
) -> tuple[int, ...] | None:
    """Pick ``count`` free CPU ids for exclusive use, ascending; None when they cannot be had.

    Args:
        node: the node.
        count: how many logical CPUs.
        numa_preference: NUMA nodes to try first, best first (those of the replica's GPUs).
        required: refuse rather than spill across NUMA nodes.
    """
    cores_by_numa = node.free_cores()
    free_per_numa = {numa: sum(len(core) for core in cores) for numa, cores in cores_by_numa.items()}
    if count <= 0 or sum(free_per_numa.values()) < count:
        return None
    per_core = node.threads_per_core()

    def rank(numa: int) -> int:
        return numa_preference.index(numa) if numa in numa_preference else len(numa_preference)

    def whole_cores(numa: int) -> int:
        return sum(1 for core in cores_by_numa[numa] if len(core) == per_core)

    holding = [numa for numa, free in free_per_numa.items() if free >= count]
    if holding:
        numa = min(
            holding,
            key=lambda n: (rank(n), 0 if whole_cores(n) >= count // per_core else 1, free_per_numa[n], n),
        )
        return tuple(sorted(_take_cpus(cores_by_numa[numa], count, per_core)))
    if required:
        return None
    chosen: list[int] = []
    for numa in sorted(cores_by_numa, key=lambda n: (rank(n), -free_per_numa[n], n)):
        chosen += _take_cpus(cores_by_numa[numa], min(count - len(chosen), free_per_numa[numa]), per_core)
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


def _take_cpus(cores: Sequence[list[int]], count: int, per_core: int) -> list[int]:
    """``count`` free CPUs of one NUMA node (``cores``: its free threads per core).

    Whole cores first, then threads of split cores, fewest free threads first.
    """
    whole = [threads for threads in cores if len(threads) == per_core]
    split = sorted((threads for threads in cores if len(threads) < per_core), key=lambda t: (len(t), t[0]))
    chosen: list[int] = []
    taken_whole = 0
    while count - len(chosen) >= per_core and taken_whole < len(whole):
        chosen += whole[taken_whole]
        taken_whole += 1
    for threads in split + whole[taken_whole:]:
        for cpu in threads:
            if len(chosen) == count:
                return chosen
            chosen.append(cpu)
    return chosen


def _free_cpu_counts(node: WorkingNode) -> dict[int, int]:
    return {numa: sum(len(core) for core in cores) for numa, cores in node.free_cores().items()}


def _numa_order(node: WorkingNode, gpus: Sequence[int]) -> tuple[int, ...]:
    """NUMA nodes of the chosen GPUs, the one with most of them first."""
    counts = Counter(node.gpu_by_index[index].numa for index in gpus)
    return tuple(numa for numa, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
