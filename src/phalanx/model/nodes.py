"""Node: what a machine has, as observed (never declared by users).

A node lists its logical CPUs with their core, socket and NUMA ids, its memory and its GPUs with model, memory,
NUMA affinity, health and the link matrix between them. The same shape comes from /sys and NVML on a real
machine, from a simulated inventory file in tests and demos, and from the node agent on Kubernetes. Every number
is bounded (``model.bounds``), far above real hardware: the scheduler holds them in int64 arrays.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from phalanx.model.base import API_VERSION, ApiModel
from phalanx.model.bounds import (
    MAX_CPU_ID,
    MAX_CPUS_PER_NODE,
    MAX_GPU_INDEX,
    MAX_GPUS_PER_NODE,
    MAX_NODE_MEMORY,
    MAX_NVLINKS,
    MAX_POD_LIST_ITEMS,
)
from phalanx.model.meta import ObjectMeta

# Link kinds between two GPUs, best first, as nvidia-smi topo prints them.
GpuLink = Literal["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]


class CpuInfo(ApiModel):
    """One logical CPU (a hardware thread).

    A CPU listed without ``core`` is its own physical core: an inventory that does not describe
    hyperthreads must not make every CPU look like a sibling of core 0.
    """

    id: int = Field(ge=0, le=MAX_CPU_ID)
    core: int = Field(
        default=0, ge=0, le=MAX_CPU_ID, description="physical core id, unique within the socket; default: the id"
    )
    socket: int = Field(default=0, ge=0, le=MAX_CPU_ID)
    numa: int = Field(default=0, ge=0, le=MAX_CPU_ID)

    @model_validator(mode="before")
    @classmethod
    def _own_core_by_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "core" not in data and "id" in data:
            return {**data, "core": data["id"]}
        return data


class GpuInfo(ApiModel):
    """One GPU as the driver reports it."""

    index: int = Field(ge=0, le=MAX_GPU_INDEX)
    uuid: str = ""
    pci_bus_id: str = Field(default="", max_length=32, description="its PCI address, e.g. 0000:07:00.0; empty: unknown")
    model: str = "unknown"
    memory: int = Field(default=0, ge=0, le=MAX_NODE_MEMORY, description="bytes of device memory")
    numa: int = Field(default=0, ge=0, le=MAX_CPU_ID)
    healthy: bool = True
    problem: str = Field(default="", max_length=1000, description="why the GPU is unhealthy; empty when healthy")
    nvlinks: dict[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)], Annotated[int, Field(ge=0, le=MAX_NVLINKS)]] = Field(
        default_factory=dict, description="peer GPU index -> number of NVLink links to it"
    )


class NodeTaint(ApiModel):
    """A taint of a node (Kubernetes' ``spec.taints``): replicas that do not tolerate it stay off the node."""

    key: str = Field(min_length=1, max_length=317)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeSpec(ApiModel):
    """What may be scheduled on the node."""

    unschedulable: bool = False
    reserved_cpus: list[Annotated[int, Field(ge=0, le=MAX_CPU_ID)]] = Field(
        default_factory=list, max_length=MAX_CPUS_PER_NODE, description="CPUs never handed to replicas"
    )
    taints: list[NodeTaint] = Field(
        default_factory=list,
        max_length=MAX_POD_LIST_ITEMS,
        description="replicas that do not tolerate a NoSchedule or NoExecute taint are not placed here",
    )


class CpuPolicy(ApiModel):
    """Whether the node itself enforces exclusive, NUMA-aligned cores, and what says so (``core.cpu_policy``).

    The embedded runtime pins each replica's cores itself (its default: enforced); on Kubernetes the kubelet
    does, only with its static CPU manager and a topology manager that aligns (its node agent reports them).
    """

    enforced: bool = True
    cpu_manager: str = Field(default="", max_length=63, description="the kubelet's cpuManagerPolicy; '' unknown")
    topology_manager: str = Field(
        default="", max_length=63, description="the kubelet's topologyManagerPolicy; '' unknown"
    )
    reason: str = Field(default="", max_length=1000, description="why alignment is not enforced; empty when it is")


class NodeStatus(ApiModel):
    """Inventory and health of the node."""

    cpus: list[CpuInfo] = Field(default_factory=list, max_length=MAX_CPUS_PER_NODE)
    memory: int = Field(default=0, ge=0, le=MAX_NODE_MEMORY, description="bytes of allocatable memory")
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=MAX_GPUS_PER_NODE)
    source: Literal["sysfs", "nvml", "simulated", "kubernetes"] = "sysfs"
    heartbeat_time: datetime | None = None
    cpu_policy: CpuPolicy = Field(default_factory=CpuPolicy)


class Node(ApiModel):
    """A machine that runs replicas."""

    api_version: str = API_VERSION
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @model_validator(mode="after")
    def _unique_ids(self) -> Node:
        cpu_ids = [cpu.id for cpu in self.status.cpus]
        if len(set(cpu_ids)) != len(cpu_ids):
            raise ValueError("status.cpus: CPU ids must be unique")
        gpu_ids = [gpu.index for gpu in self.status.gpus]
        if len(set(gpu_ids)) != len(gpu_ids):
            raise ValueError("status.gpus: GPU indices must be unique")
        return self

    def gpu_link(self, a: int, b: int) -> GpuLink:
        """The best link between GPUs ``a`` and ``b``: NVLink, same NUMA node, or across sockets."""
        gpus = {gpu.index: gpu for gpu in self.status.gpus}
        if gpus[a].nvlinks.get(b, 0) > 0 or gpus[b].nvlinks.get(a, 0) > 0:
            return "NV"
        return "NODE" if gpus[a].numa == gpus[b].numa else "SYS"
