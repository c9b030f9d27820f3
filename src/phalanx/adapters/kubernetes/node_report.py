"""What a node agent writes on its Kubernetes Node, as pure functions of a discovered node (wire translation).

``node_report`` turns a discovered node, its GPUs' problems and injected faults into the labels, annotations and
``nvidia.com/gpu`` quantities the Node should carry (which GPUs are unhealthy is ``core.gpu_health``'s
decision); ``metadata_patch`` and ``status_patch`` are the merge patches that bring an observed Node there.
The reverse translation, a Node object to the scheduler's model, is ``objects.node_from_object``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from phalanx.adapters.devices.inventory import GPU_DISCOVERY_ANNOTATION, label_value
from phalanx.adapters.devices.sysfs import format_cpu_list
from phalanx.adapters.kubernetes.kubelet_config import CPU_POLICY_ANNOTATION, cpu_policy_annotation
from phalanx.adapters.kubernetes.objects import (
    GPU_PROBLEMS_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    GPU_TOPOLOGY_ANNOTATION,
    UNHEALTHY_GPUS_ANNOTATION,
)
from phalanx.core.gpu_health import unhealthy_reasons
from phalanx.model.nodes import Node

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
NUMA_NODES_LABEL = "phalanx.dev/numa-nodes"


@dataclass(frozen=True)
class NodeReport:
    """What the agent wants on its Node.

    Attributes:
        labels: label values; None removes the label.
        annotations: annotation values; None removes the annotation (the heartbeat is not among them).
        gpus: every GPU (capacity ``nvidia.com/gpu``).
        healthy_gpus: the healthy ones (allocatable ``nvidia.com/gpu``).
        problems: why each unhealthy GPU is unhealthy, by index.
        gpus_known: False when discovery could not look for GPUs on a GPU node: GPU fields are then left alone.
    """

    labels: dict[str, str | None]
    annotations: dict[str, str | None]
    gpus: int
    healthy_gpus: int
    problems: dict[int, list[str]]
    gpus_known: bool = True

    @property
    def unhealthy(self) -> set[int]:
        """Indices of the unhealthy GPUs."""
        return set(self.problems)


def gpu_topology(node: Node) -> dict[str, Any]:
    """The ``phalanx.dev/gpu-topology`` document of a discovered node.

    ``{"numaNodes": [{"id": 0, "gpus": [0, 1], "cpus": "0-15,32-47"}, ...], "nvlink": {"type": "NV12",
    "pairs": [[0, 1], ...], "links": [12, ...]}, "source": "nvml"}``: NUMA nodes with their GPUs and CPUs (the
    kernel's list format), and every GPU pair joined by NVLink with its link count (``links``, parallel to
    ``pairs``); ``type`` is ``NV<n>`` when every pair has ``n`` links, as ``nvidia-smi topo -m`` prints it,
    else ``NV``. ``source`` says where it was found (``simulated`` for an inventory). ``uuids``, by index, when
    the GPUs have them: how phalanx-scheduler finds a GPU among a DRA driver's devices (``dra.devices_for``).
    """
    gpus = sorted(node.status.gpus, key=lambda gpu: gpu.index)
    cpus = node.status.cpus
    numa_ids = sorted({cpu.numa for cpu in cpus} | {gpu.numa for gpu in gpus}) or [0]
    numa_nodes = [
        {
            "id": numa,
            "gpus": [gpu.index for gpu in gpus if gpu.numa == numa],
            "cpus": format_cpu_list(cpu.id for cpu in cpus if cpu.numa == numa),
        }
        for numa in numa_ids
    ]
    pairs: list[list[int]] = []
    links: list[int] = []
    for position, gpu in enumerate(gpus):
        for peer in gpus[position + 1 :]:
            count = max(gpu.nvlinks.get(peer.index, 0), peer.nvlinks.get(gpu.index, 0))
            if count > 0:
                pairs.append([gpu.index, peer.index])
                links.append(count)
    nvlink: dict[str, Any] = {"pairs": pairs}
    if pairs:
        nvlink = {"type": f"NV{links[0]}" if len(set(links)) == 1 else "NV", "pairs": pairs, "links": links}
    topology = {"numaNodes": numa_nodes, "nvlink": nvlink, "source": node.status.source}
    if any(gpu.uuid for gpu in gpus) and [gpu.index for gpu in gpus] == list(range(len(gpus))):
        topology["uuids"] = [gpu.uuid for gpu in gpus]  # how a DRA driver's devices are matched to indices
    return topology


def gpu_product(node: Node) -> str | None:
    """The label value of the node's GPU model: the lowest-indexed GPU's known model (None without GPUs)."""
    models = [gpu.model for gpu in sorted(node.status.gpus, key=lambda gpu: gpu.index) if gpu.model != "unknown"]
    if not models:
        return "unknown" if node.status.gpus else None
    return label_value(models[0]) or "unknown"


def node_report(
    node: Node,
    problems: Mapping[int, Sequence[str]],
    *,
    faults: AbstractSet[int] = frozenset(),
    note: str | None = None,
    gpus_unknown: bool = False,
    cpu_policy: Mapping[str, str] | None = None,
) -> NodeReport:
    """What the Node should say about a discovered node.

    Which GPUs are unhealthy, and why, is ``core.gpu_health.unhealthy_reasons``: discovery says so (``healthy``
    false or a problem listed) or ``faults`` (the fault file) names it.

    Args:
        node: the discovered node.
        problems: the discoverer's reasons, by GPU index.
        faults: GPU indices injected as unhealthy.
        note: why discovery found no GPUs, kept in ``phalanx.dev/gpu-discovery``.
        gpus_unknown: discovery could not look for GPUs (``note`` says why) on a node that advertises some: the
            report then leaves every GPU label, annotation and resource as it is, and says only the NUMA count
            and the note. A broken driver or a container without the NVIDIA runtime must not erase a GPU node.
        cpu_policy: the kubelet's CPU and topology manager policies (``kubelet_config.read_kubelet_policy``),
            kept in ``phalanx.dev/cpu-policy``; None: not read, the annotation is left as it is.
    """
    policy = {CPU_POLICY_ANNOTATION: cpu_policy_annotation(cpu_policy)} if cpu_policy is not None else {}
    gpus = sorted(node.status.gpus, key=lambda gpu: gpu.index)
    reasons = unhealthy_reasons(node, problems, faults)
    numa_count = len({cpu.numa for cpu in node.status.cpus} | {gpu.numa for gpu in gpus}) or 1
    if gpus_unknown:
        return NodeReport(
            labels={NUMA_NODES_LABEL: str(numa_count)},
            annotations={GPU_DISCOVERY_ANNOTATION: note, **policy},
            gpus=0,
            healthy_gpus=0,
            problems={},
            gpus_known=False,
        )
    labels: dict[str, str | None] = {
        GPU_PRODUCT_LABEL: gpu_product(node),
        GPU_COUNT_LABEL: str(len(gpus)) if gpus else None,
        NUMA_NODES_LABEL: str(numa_count),
    }
    annotations: dict[str, str | None] = {
        GPU_TOPOLOGY_ANNOTATION: json.dumps(gpu_topology(node), separators=(",", ":")),
        UNHEALTHY_GPUS_ANNOTATION: ",".join(str(index) for index in sorted(reasons)),
        GPU_PROBLEMS_ANNOTATION: json.dumps(
            {str(index): "; ".join(reasons[index]) for index in sorted(reasons)}, separators=(",", ":")
        ),
        GPU_DISCOVERY_ANNOTATION: note if not gpus else None,
        **policy,
    }
    return NodeReport(
        labels=labels, annotations=annotations, gpus=len(gpus), healthy_gpus=len(gpus) - len(reasons), problems=reasons
    )


def metadata_patch(observed: Mapping[str, Any], report: NodeReport) -> dict[str, Any]:
    """The labels and annotations that differ from the observed Node, as a merge patch's ``metadata`` (or {})."""
    meta = observed.get("metadata") or {}
    patch: dict[str, Any] = {}
    for key, wanted in (("labels", report.labels), ("annotations", report.annotations)):
        current = meta.get(key) or {}
        changes = {
            name: value
            for name, value in wanted.items()
            if (value is None and name in current) or (value is not None and current.get(name) != value)
        }
        if changes:
            patch[key] = changes
    return patch


def quantity(value: Any) -> int | None:
    """An integer quantity (``"8"``), or None when absent or not an integer."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def status_patch(observed: Mapping[str, Any], report: NodeReport) -> dict[str, Any]:
    """The ``nodes/status`` merge patch that sets ``nvidia.com/gpu`` capacity and allocatable, or {} when they hold.

    A node without GPUs that never advertised any is left alone.
    """
    if not report.gpus_known:
        return {}
    status = observed.get("status") or {}
    capacity = quantity((status.get("capacity") or {}).get(GPU_RESOURCE))
    allocatable = quantity((status.get("allocatable") or {}).get(GPU_RESOURCE))
    if report.gpus == 0 and capacity is None and allocatable is None:
        return {}
    if capacity == report.gpus and allocatable == report.healthy_gpus:
        return {}
    return {
        "status": {
            "capacity": {GPU_RESOURCE: str(report.gpus)},
            "allocatable": {GPU_RESOURCE: str(report.healthy_gpus)},
        }
    }


def allocatable_gpus(observed: Mapping[str, Any]) -> int | None:
    """The Node's allocatable ``nvidia.com/gpu``, if it has any."""
    return quantity(((observed.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE))
