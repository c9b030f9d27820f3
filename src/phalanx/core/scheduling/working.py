"""The mutable working copy of a snapshot on which one scheduling cycle tries placements.

A cycle never touches the frozen ``ClusterSnapshot`` it was given. It copies each node's free state (free CPU
ids, shared-pool use, free memory, GPU use) into a ``WorkingNode``, applies a ``Reservation`` per placed
replica, and undoes reservations exactly when a gang fails: what-if placement with rollback, as in the
kube-scheduler's Reserve/Unreserve. Jobs admitted earlier in the cycle keep their reservations, so later jobs
see the room that is really left.

Invariants kept by ``apply``/``undo`` (callers check fit before applying; the asserts catch scheduler bugs):
- an exclusive CPU is held by at most one replica;
- the shared pool is every allocatable CPU not held exclusively, so its capacity is ``1000 * len(free_cpus)``
  millicores and ``shared_cpu_milli`` never exceeds it;
- a GPU's used milli-GPU stays within 0..1000.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from phalanx.core.scheduling.demands import MILLI, model_alternatives
from phalanx.core.scheduling.table import NodeTable
from phalanx.core.scheduling.types import ClusterSnapshot, CpuSlot, GpuSlot, NodeSnapshot


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one placed replica takes from one node.

    Attributes:
        node: node name.
        cpus: exclusive CPU ids.
        shared_cpu_milli: millicores from the shared pool.
        memory: bytes.
        gpus: GPU indices.
        gpu_milli: milli-GPU taken on each GPU of ``gpus`` (1000 for whole GPUs).
    """

    node: str
    cpus: tuple[int, ...] = ()
    shared_cpu_milli: int = 0
    memory: int = 0
    gpus: tuple[int, ...] = ()
    gpu_milli: int = 0


class WorkingNode:
    """One node's free state during a cycle, plus cached views of its fixed inventory."""

    __slots__ = (
        "_core_groups",
        "_core_of",
        "_free_gpu_counts",
        "_gpu_rooms",
        "_gpu_used_total",
        "_threads_per_core",
        "_usable",
        "cpu_by_id",
        "free_cpus",
        "free_memory",
        "free_per_numa",
        "gpu_by_index",
        "gpu_used",
        "name",
        "shared_cpu_milli",
        "snapshot",
        "version",
    )

    def __init__(self, snapshot: NodeSnapshot) -> None:
        self.snapshot = snapshot
        self.name = snapshot.name
        self.cpu_by_id: dict[int, CpuSlot] = {cpu.id: cpu for cpu in snapshot.cpus}
        self.free_cpus: set[int] = self.cpu_by_id.keys() - snapshot.used_exclusive_cpus
        # Free CPUs per NUMA node, kept up to date by apply/undo (the node table reads it on every refresh).
        self.free_per_numa: Counter[int] = Counter(self.cpu_by_id[cpu].numa for cpu in self.free_cpus)
        self.shared_cpu_milli = snapshot.used_shared_cpu_milli
        self.free_memory = snapshot.memory - snapshot.used_memory
        self.gpu_by_index: dict[int, GpuSlot] = {gpu.index: gpu for gpu in snapshot.gpus}
        self.gpu_used: dict[int, int] = {index: milli for index, milli in snapshot.used_gpus.items() if milli}
        self._usable: dict[str | None, tuple[GpuSlot, ...]] = {}
        # Derived from the free state, cached because every replica filters every node; dropped on change.
        self._free_gpu_counts: dict[str | None, int] = {}
        self._gpu_rooms: dict[str | None, int] = {}
        self._gpu_used_total: int | None = None
        self._core_of: dict[int, tuple[int, int]] | None = None
        self._threads_per_core = 0
        self._core_groups: dict[int, list[list[int]]] | None = None
        # Bumped by every apply and undo: memoized answers about this node are valid for one version only.
        self.version = 0

    @property
    def schedulable(self) -> bool:
        """False when the node is cordoned."""
        return self.snapshot.schedulable

    # --- CPUs -------------------------------------------------------------------------------------------

    def grantable_cpus(self) -> int:
        """How many more CPUs can be granted exclusively now.

        A CPU granted exclusively leaves the shared pool, so the CPUs still free must keep holding the
        millicores fractional replicas already use: never overcommit the shared pool.
        """
        held_by_shared = -(-self.shared_cpu_milli // MILLI)
        return max(0, len(self.free_cpus) - held_by_shared)

    def shared_cpu_free(self) -> int:
        """Millicores still free in the shared pool."""
        return MILLI * len(self.free_cpus) - self.shared_cpu_milli

    def core_of(self, cpu: int) -> tuple[int, int]:
        """Return the physical core ``(socket, core)`` that logical CPU ``cpu`` belongs to."""
        return self._cores()[cpu]

    def threads_per_core(self) -> int:
        """Hardware threads per physical core on this node (2 with hyperthreading), from its CPU list."""
        self._cores()
        return self._threads_per_core

    def free_cpus_by_numa(self) -> dict[int, list[int]]:
        """Free CPU ids per NUMA node, ids ascending, NUMA nodes ascending."""
        return {numa: sorted(cpu for core in cores for cpu in core) for numa, cores in self.free_cores().items()}

    def free_cores(self) -> dict[int, list[list[int]]]:
        """Free CPU ids per NUMA node (ascending), grouped by physical core, cores by their lowest free id.

        Cached until the node changes: every replica asking for exclusive CPUs reads it.
        """
        if self._core_groups is None:
            core_of = self._cores()
            grouped: dict[int, dict[tuple[int, int], list[int]]] = {}
            cpu_by_id = self.cpu_by_id
            for cpu in sorted(self.free_cpus):
                grouped.setdefault(cpu_by_id[cpu].numa, {}).setdefault(core_of[cpu], []).append(cpu)
            self._core_groups = {numa: list(grouped[numa].values()) for numa in sorted(grouped)}
        return self._core_groups

    def _cores(self) -> dict[int, tuple[int, int]]:
        if self._core_of is None:
            self._core_of = {cpu.id: (cpu.socket, cpu.core) for cpu in self.snapshot.cpus}
            sizes = Counter(self._core_of.values())
            self._threads_per_core = max(sizes.values(), default=1)
        return self._core_of

    # --- GPUs -------------------------------------------------------------------------------------------

    def usable_gpus(self, model: str | None) -> tuple[GpuSlot, ...]:
        """Healthy GPUs of ``model`` (a ``model_key``: alternatives joined by ``|``; None for any), by index."""
        found = self._usable.get(model)
        if found is None:
            allowed = None if model is None else model_alternatives(model)
            found = tuple(
                sorted(
                    (
                        gpu
                        for gpu in self.snapshot.gpus
                        if gpu.healthy and (allowed is None or gpu.model.casefold() in allowed)
                    ),
                    key=lambda gpu: gpu.index,
                )
            )
            self._usable[model] = found
        return found

    def free_gpus(self, model: str | None) -> list[GpuSlot]:
        """Usable GPUs of ``model`` that nothing uses, not even a share: what a whole-GPU request may take."""
        return [gpu for gpu in self.usable_gpus(model) if not self.gpu_used.get(gpu.index)]

    def free_gpu_count(self, model: str | None) -> int:
        """``len(free_gpus(model))``, cached."""
        count = self._free_gpu_counts.get(model)
        if count is None:
            count = self._free_gpu_counts[model] = len(self.free_gpus(model))
        return count

    def largest_gpu_room(self, model: str | None) -> int:
        """The most milli-GPU free on any one usable GPU of ``model`` (0 when there is none), cached."""
        room = self._gpu_rooms.get(model)
        if room is None:
            usable = self.usable_gpus(model)
            room = max((MILLI - self.gpu_used.get(gpu.index, 0) for gpu in usable), default=0)
            self._gpu_rooms[model] = room
        return room

    def gpu_used_total(self) -> int:
        """Milli-GPU in use over all usable GPUs, cached."""
        if self._gpu_used_total is None:
            self._gpu_used_total = sum(self.gpu_used.get(gpu.index, 0) for gpu in self.usable_gpus(None))
        return self._gpu_used_total

    def _forget_derived(self) -> None:
        self.version += 1
        self._core_groups = None
        self._free_gpu_counts.clear()
        self._gpu_rooms.clear()
        self._gpu_used_total = None

    # --- reservations -----------------------------------------------------------------------------------

    def apply(self, reservation: Reservation) -> None:
        """Take what ``reservation`` holds."""
        cpus = set(reservation.cpus)
        assert cpus <= self.free_cpus, f"CPUs {sorted(cpus - self.free_cpus)} on {self.name} are not free"
        self.free_cpus -= cpus
        for cpu in cpus:
            self.free_per_numa[self.cpu_by_id[cpu].numa] -= 1
        self.shared_cpu_milli += reservation.shared_cpu_milli
        assert self.shared_cpu_milli <= MILLI * len(self.free_cpus), f"shared pool of {self.name} overcommitted"
        self.free_memory -= reservation.memory
        for index in reservation.gpus:
            used = self.gpu_used.get(index, 0) + reservation.gpu_milli
            assert used <= MILLI, f"GPU {index} on {self.name} overcommitted"
            self.gpu_used[index] = used
        self._forget_derived()

    def undo(self, reservation: Reservation) -> None:
        """Give back what ``reservation`` held (the exact inverse of ``apply``)."""
        self.free_cpus |= set(reservation.cpus)
        for cpu in reservation.cpus:
            self.free_per_numa[self.cpu_by_id[cpu].numa] += 1
        self.shared_cpu_milli -= reservation.shared_cpu_milli
        self.free_memory += reservation.memory
        for index in reservation.gpus:
            used = self.gpu_used[index] - reservation.gpu_milli
            if used:
                self.gpu_used[index] = used
            else:
                del self.gpu_used[index]
        self._forget_derived()


class WorkingCluster:
    """Every node of a snapshot as a ``WorkingNode``, by name ascending (the tie-break order).

    ``table`` holds the same free state as columns (row ``i`` = ``nodes[i]``) for vectorised filters and scores.
    """

    __slots__ = ("by_name", "nodes", "schedulable_nodes", "table")

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        names = [node.name for node in snapshot.nodes]
        duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
        if duplicates:
            raise ValueError(f"the snapshot lists node names more than once: {', '.join(duplicates)}")
        self.nodes: tuple[WorkingNode, ...] = tuple(
            WorkingNode(node) for node in sorted(snapshot.nodes, key=lambda node: node.name)
        )
        self.by_name: dict[str, WorkingNode] = {node.name: node for node in self.nodes}
        self.schedulable_nodes: tuple[WorkingNode, ...] = tuple(node for node in self.nodes if node.schedulable)
        self.table = NodeTable(self.nodes)

    def apply(self, reservation: Reservation) -> None:
        """Take what ``reservation`` holds on its node."""
        node = self.by_name[reservation.node]
        node.apply(reservation)
        self.table.refresh(self.table.row_of[node.name], node)

    def undo(self, reservation: Reservation) -> None:
        """Give back what ``reservation`` held on its node."""
        node = self.by_name[reservation.node]
        node.undo(reservation)
        self.table.refresh(self.table.row_of[node.name], node)
