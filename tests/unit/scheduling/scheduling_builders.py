"""Fluent builders and inventory helpers for the scheduling unit tests.

``make_job("a").replicas(3, cpu=1000).obj()`` builds a ``PendingJob``; ``make_node("n").cpus(...).obj()`` a
``Node``; ``inventory("dgx-2socket-8gpu")`` loads a simulated inventory from ``examples/inventories``;
``hold(...)`` makes one holding for ``build_snapshot``. Everything is deterministic: times are offsets from a
fixed epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from phalanx.core.scheduling import (
    Admission,
    ClusterSnapshot,
    Decisions,
    PendingJob,
    ReplicaRequest,
    build_snapshot,
    schedule,
)
from phalanx.core.scheduling.node_fit import NodeConstraint
from phalanx.model.jobs import ReplicaPlacement
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import CpuInfo, GpuInfo, Node, NodeSpec, NodeStatus, NodeTaint
from phalanx.model.resources import ResourceVector

GI = 2**30
T0 = datetime(2026, 1, 1, tzinfo=UTC)
INVENTORIES = Path(__file__).resolve().parents[3] / "examples" / "inventories"
DGX_MODEL = "NVIDIA-A100-SXM4-80GB"

Holding = tuple[ReplicaPlacement, ResourceVector]


# --- inventories ----------------------------------------------------------------------------------------


@cache
def _inventory_documents(name: str) -> tuple[dict[str, Any], ...]:
    text = (INVENTORIES / f"{name}.yaml").read_text(encoding="utf-8")
    return tuple(doc for doc in yaml.safe_load_all(text) if doc)


def inventory(name: str) -> list[Node]:
    """Fresh ``Node`` objects from ``examples/inventories/<name>.yaml`` (safe to modify)."""
    return [Node.model_validate(doc) for doc in _inventory_documents(name)]


def dgx() -> Node:
    """The simulated 2-socket, 64-CPU, 8-GPU server."""
    (node,) = inventory("dgx-2socket-8gpu")
    return node


def two_nodes() -> list[Node]:
    """Two 16-CPU, 4-GPU nodes: node-a and node-b."""
    return inventory("two-nodes-4gpu")


def changed(
    node: Node,
    *,
    name: str | None = None,
    reserved: Sequence[int] = (),
    unschedulable: bool = False,
    unhealthy: Sequence[int] = (),
) -> Node:
    """A copy of ``node`` renamed, with reserved CPUs, cordoned, or with unhealthy GPUs."""
    copy = node.model_copy(deep=True)
    if name is not None:
        copy.metadata.name = name
    copy.spec = NodeSpec(unschedulable=unschedulable, reserved_cpus=list(reserved))
    for gpu in copy.status.gpus:
        if gpu.index in unhealthy:
            gpu.healthy = False
    return copy


def hold(
    node: str,
    *,
    cpus: Sequence[int] = (),
    cpu_milli: int | None = None,
    memory: int = 0,
    gpus: Sequence[int] = (),
    gpu_milli: int = 0,
) -> Holding:
    """One replica's held placement: exclusive ``cpus`` or ``cpu_milli`` from the shared pool, GPUs."""
    requested = ResourceVector(
        cpu_milli=cpu_milli if cpu_milli is not None else 1000 * len(cpus),
        memory=memory,
        gpu=0 if gpu_milli else len(gpus),
        gpu_milli=gpu_milli,
    )
    placement = ReplicaPlacement(node=node, cpus=list(cpus), gpus=list(gpus), gpu_milli=gpu_milli)
    return placement, requested


def snapshot(nodes: Node | Iterable[Node], holdings: Iterable[Holding] = ()) -> ClusterSnapshot:
    """``build_snapshot`` over one node or several."""
    listed = [nodes] if isinstance(nodes, Node) else list(nodes)
    return build_snapshot(listed, holdings)


# --- nodes ----------------------------------------------------------------------------------------------


class NodeBuilder:
    """A synthetic ``Node``: ``make_node("n").cpus(sockets=1, cores=2).memory(8 * GI).gpus(2).obj()``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cpus: list[CpuInfo] = []
        self._memory = 64 * GI
        self._gpus: list[GpuInfo] = []
        self._reserved: list[int] = []
        self._unschedulable = False
        self._labels: dict[str, str] = {}
        self._taints: list[NodeTaint] = []

    def cpus(self, *, sockets: int = 1, cores: int = 2, threads: int = 2) -> NodeBuilder:
        """Linux-numbered CPUs: first threads of every core, then siblings; one NUMA node per socket."""
        per_thread = sockets * cores
        self._cpus = [
            CpuInfo(id=thread * per_thread + socket * cores + core, core=core, socket=socket, numa=socket)
            for thread in range(threads)
            for socket in range(sockets)
            for core in range(cores)
        ]
        return self

    def memory(self, num_bytes: int) -> NodeBuilder:
        self._memory = num_bytes
        return self

    def gpus(
        self,
        count: int,
        *,
        model: str = "NVIDIA-L4",
        numa: Sequence[int] | None = None,
        links: Sequence[tuple[int, int]] = (),
    ) -> NodeBuilder:
        self._gpus = [
            GpuInfo(
                index=index,
                model=model,
                numa=numa[index] if numa is not None else 0,
                nvlinks={b if a == index else a: 1 for a, b in links if index in (a, b)},
            )
            for index in range(count)
        ]
        return self

    def reserved(self, *cpus: int) -> NodeBuilder:
        self._reserved = list(cpus)
        return self

    def cordoned(self) -> NodeBuilder:
        self._unschedulable = True
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._labels.update(labels)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        self._taints.append(NodeTaint(key=key, value=value, effect=effect))  # type: ignore[arg-type]
        return self

    def obj(self) -> Node:
        return Node(
            metadata=ObjectMeta(name=self._name, labels=self._labels),
            spec=NodeSpec(unschedulable=self._unschedulable, reserved_cpus=self._reserved, taints=self._taints),
            status=NodeStatus(cpus=self._cpus, memory=self._memory, gpus=self._gpus, source="simulated"),
        )


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


# --- jobs -----------------------------------------------------------------------------------------------


class JobBuilder:
    """A ``PendingJob``: ``make_job("a").replicas(3, cpu=1000).priority(5).obj()``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._replicas: list[ReplicaRequest] = []
        self._roles: dict[str, int] = {}
        self._priority = 0
        self._created = T0
        self._queue = "default"
        self._min_available: int | None = None
        self._placement = "auto"
        self._topology = "preferred"

    def replicas(
        self,
        count: int,
        *,
        cpu: int = 1000,
        memory: int = 2 * GI,
        gpu: int = 0,
        gpu_milli: int = 0,
        gpu_model: str | None = None,
        role: str = "worker",
        node_constraint: NodeConstraint | None = None,
    ) -> JobBuilder:
        """Add ``count`` replicas of ``role``; ``cpu`` in millicores, ``memory`` in bytes."""
        start = self._roles.get(role, 0)
        for index in range(start, start + count):
            self._replicas.append(
                ReplicaRequest(
                    name=f"{self._name}-{role}-{index}",
                    role=role,
                    resources=ResourceVector(cpu_milli=cpu, memory=memory, gpu=gpu, gpu_milli=gpu_milli),
                    gpu_model=gpu_model,
                    node_constraint=node_constraint,
                )
            )
        self._roles[role] = start + count
        return self

    def priority(self, value: int) -> JobBuilder:
        self._priority = value
        return self

    def created(self, seconds: float) -> JobBuilder:
        """Submitted ``seconds`` after the test epoch."""
        self._created = T0 + timedelta(seconds=seconds)
        return self

    def queue(self, name: str) -> JobBuilder:
        self._queue = name
        return self

    def min_available(self, count: int) -> JobBuilder:
        self._min_available = count
        return self

    def placement(self, policy: str) -> JobBuilder:
        self._placement = policy
        return self

    def topology(self, policy: str) -> JobBuilder:
        self._topology = policy
        return self

    def obj(self) -> PendingJob:
        return PendingJob(
            key=f"default/{self._name}",
            priority=self._priority,
            created=self._created,
            queue=self._queue,
            replicas=tuple(self._replicas),
            min_available=self._min_available,
            placement=self._placement,
            topology=self._topology,
        )


def make_job(name: str) -> JobBuilder:
    return JobBuilder(name)


# --- running and reading decisions ----------------------------------------------------------------------


def run(snap: ClusterSnapshot, *jobs: PendingJob | JobBuilder) -> Decisions:
    """One cycle at the test epoch."""
    pending = [job.obj() if isinstance(job, JobBuilder) else job for job in jobs]
    return schedule(snap, pending, T0)


def admission(decisions: Decisions, name: str) -> Admission:
    """The admission of job ``name``; fails the test with the job's waiting reason if it was not admitted."""
    key = f"default/{name}"
    for admitted in decisions.admitted:
        if admitted.key == key:
            return admitted
    raise AssertionError(f"{key} was not admitted: {decisions.waiting.get(key, 'no reason either')}")


def admitted_keys(decisions: Decisions) -> list[str]:
    return [admitted.key.removeprefix("default/") for admitted in decisions.admitted]


def waiting_reason(decisions: Decisions, name: str) -> str:
    key = f"default/{name}"
    assert key in decisions.waiting, f"{key} is not waiting; admitted: {admitted_keys(decisions)}"
    return decisions.waiting[key]


def numa_of_cpus(node: Node, cpus: Iterable[int]) -> set[int]:
    by_id = {cpu.id: cpu.numa for cpu in node.status.cpus}
    return {by_id[cpu] for cpu in cpus}


def numa_of_gpus(node: Node, gpus: Iterable[int]) -> set[int]:
    by_index = {gpu.index: gpu.numa for gpu in node.status.gpus}
    return {by_index[gpu] for gpu in gpus}
