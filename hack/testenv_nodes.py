"""Fake GPU nodes for the test environment: Node manifests kwok manages, with GPUs, a product and a topology."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from testenv_base import TestEnvError
from testenv_processes import FAKE_NODE_ANNOTATION, TestEnv

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TOPOLOGY_ANNOTATION = "phalanx.dev/gpu-topology"


def gpu_topology(gpus: int, numa_nodes: int = 2, nvlink: str = "NV18") -> dict[str, Any]:
    """A DGX-like topology: GPUs split evenly over NUMA nodes, every GPU pair linked by NVLink (``nvlink``)."""
    per_numa = max(1, gpus // max(1, numa_nodes))
    return {
        "numaNodes": [
            {"id": n, "gpus": [g for g in range(gpus) if min(g // per_numa, numa_nodes - 1) == n]}
            for n in range(numa_nodes)
        ],
        "nvlink": {"type": nvlink, "pairs": [[a, b] for a in range(gpus) for b in range(a + 1, gpus)]},
    }


def fake_gpu_node(
    name: str,
    *,
    gpus: int = 8,
    product: str = "NVIDIA-H100-80GB-HBM3",
    cpu: str = "128",
    memory: str = "2Ti",
    pods: str = "110",
    numa_nodes: int = 2,
    topology: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node manifest kwok will manage: its status (capacity, allocatable) is kept as given on create."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                FAKE_NODE_ANNOTATION[0]: FAKE_NODE_ANNOTATION[1],
                GPU_TOPOLOGY_ANNOTATION: json.dumps(topology or gpu_topology(gpus, numa_nodes), separators=(",", ":")),
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                GPU_PRODUCT_LABEL: product,
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def create_fake_gpu_nodes(env: TestEnv, names: Sequence[str], **options: Any) -> list[dict[str, Any]]:
    """Create fake GPU nodes through the API (status included: a create keeps it)."""
    created = []
    for name in names:
        code, body = env.request("POST", "/api/v1/nodes", fake_gpu_node(name, **options))
        if code != 201:
            raise TestEnvError(f"creating node {name} failed: HTTP {code}: {body}")
        created.append(body)
    return created
