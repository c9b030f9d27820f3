"""The node agent's pure half: from a discovered node and its unhealthy GPUs to the Node's labels, annotations and
status, and back through ``objects.node_from_object`` to the scheduler's view."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.devices.discovery import read_fault_file
from phalanx.adapters.devices.inventory import label_value, load_inventory
from phalanx.adapters.kubernetes.node_report import gpu_topology, metadata_patch, node_report, status_patch
from phalanx.adapters.kubernetes.objects import node_from_object
from phalanx.model.nodes import CpuInfo, GpuInfo, Node
from support.merge_patch import merge

ROOT = Path(__file__).resolve().parents[3]
DGX = ROOT / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"


def dgx() -> Node:
    (node,) = load_inventory(DGX)
    return node


def kube_node(**status: Any) -> dict[str, Any]:
    """A Node as kwok or kubelet leaves it, before the agent: CPU and memory, no GPU fields."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "dgx-0", "labels": {"kubernetes.io/hostname": "dgx-0"}, "annotations": {}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", **status},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", **status},
        },
    }


def applied(obj: dict[str, Any], *patches: dict[str, Any]) -> dict[str, Any]:
    for patch in patches:
        obj = merge(obj, patch)
    return obj


# -- topology -------------------------------------------------------------------------------------------------------


def test_topology_of_the_dgx_inventory_has_numa_gpus_cpus_and_the_cube_mesh() -> None:
    topology = gpu_topology(dgx())

    assert topology["numaNodes"] == [
        {"id": 0, "gpus": [0, 1, 2, 3], "cpus": "0-15,32-47"},
        {"id": 1, "gpus": [4, 5, 6, 7], "cpus": "16-31,48-63"},
    ]
    nvlink = topology["nvlink"]
    pairs = {tuple(pair) for pair in nvlink["pairs"]}
    quads = {(a, b) for q in (range(4), range(4, 8)) for a in q for b in q if a < b}
    twins = {(g, g + 4) for g in range(4)}
    assert pairs == quads | twins  # 0-5 or 1-6 have no NVLink
    assert dict(zip(map(tuple, nvlink["pairs"]), nvlink["links"], strict=True))[(0, 3)] == 2
    assert nvlink["type"] == "NV"  # 1 or 2 links per pair: no single NV<n>
    assert topology["source"] == "simulated"


def test_uniform_links_are_typed_like_nvidia_smi() -> None:
    gpus = [GpuInfo(index=i, nvlinks={j: 18 for j in range(4) if j != i}) for i in range(4)]
    topology = gpu_topology(Node.model_validate({"metadata": {"name": "n"}, "status": {"gpus": gpus}}))

    assert topology["nvlink"]["type"] == "NV18"
    assert len(topology["nvlink"]["pairs"]) == 6


def test_a_node_without_gpus_still_reports_its_numa_nodes_and_cpus() -> None:
    cpus = [CpuInfo(id=i, numa=i // 4) for i in range(8)]
    node = Node.model_validate({"metadata": {"name": "cpu-0"}, "status": {"cpus": cpus}})

    report = node_report(node, {}, note="NVML not available: NVML Shared Library Not Found")

    assert json.loads(report.annotations["phalanx.dev/gpu-topology"]) == {
        "numaNodes": [{"id": 0, "gpus": [], "cpus": "0-3"}, {"id": 1, "gpus": [], "cpus": "4-7"}],
        "nvlink": {"pairs": []},
        "source": "sysfs",
    }
    assert report.labels == {
        "nvidia.com/gpu.product": None,
        "nvidia.com/gpu.count": None,
        "phalanx.dev/numa-nodes": "2",
    }
    assert report.annotations["phalanx.dev/gpu-discovery"].startswith("NVML not available")
    assert status_patch(kube_node(), report) == {}  # a CPU node gets no nvidia.com/gpu: 0


# -- the report and its patches ---------------------------------------------------------------------------------------


def test_a_healthy_dgx_is_labelled_annotated_and_counted() -> None:
    report = node_report(dgx(), {})

    assert report.labels == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "8",
        "phalanx.dev/numa-nodes": "2",
    }
    assert report.annotations["phalanx.dev/unhealthy-gpus"] == ""
    assert report.annotations["phalanx.dev/gpu-problems"] == "{}"
    assert report.annotations["phalanx.dev/gpu-discovery"] is None
    assert (report.gpus, report.healthy_gpus) == (8, 8)
    assert status_patch(kube_node(), report) == {
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}
    }


def test_faults_and_unhealthy_gpus_leave_allocatable_with_their_reasons() -> None:
    node = dgx()
    node.status.gpus[5] = node.status.gpus[5].model_copy(update={"healthy": False})

    report = node_report(node, {5: ["XID 79 (GPU has fallen off the bus)"]}, faults={1, 42})  # 42: no such GPU

    assert report.unhealthy == {1, 5}
    assert report.annotations["phalanx.dev/unhealthy-gpus"] == "1,5"
    assert json.loads(report.annotations["phalanx.dev/gpu-problems"] or "") == {
        "1": "listed in the fault file",
        "5": "XID 79 (GPU has fallen off the bus)",
    }
    assert (report.gpus, report.healthy_gpus) == (8, 6)


def test_an_unhealthy_gpu_without_a_reason_is_still_unhealthy() -> None:
    node = dgx()
    node.status.gpus[2] = node.status.gpus[2].model_copy(update={"healthy": False})

    assert node_report(node, {}).problems == {2: ["unhealthy"]}


def test_the_round_trip_through_the_node_gives_the_scheduler_the_discovered_machine() -> None:
    discovered = dgx()
    report = node_report(discovered, {}, faults={3})
    node = kube_node()

    node = applied(node, {"metadata": metadata_patch(node, report)}, status_patch(node, report))
    seen = node_from_object(node)

    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "dgx-0"  # others' labels are kept
    assert [gpu.index for gpu in seen.status.gpus if not gpu.healthy] == [3]
    assert [gpu.numa for gpu in seen.status.gpus] == [gpu.numa for gpu in discovered.status.gpus]
    assert {gpu.model for gpu in seen.status.gpus} == {"NVIDIA-A100-SXM4-80GB"}
    for gpu in discovered.status.gpus:
        assert set(seen.status.gpus[gpu.index].nvlinks) == set(gpu.nvlinks)
    assert seen.gpu_link(0, 5) == "SYS" and seen.gpu_link(0, 4) == "NV" and seen.gpu_link(0, 1) == "NV"
    numa_of = {cpu.id: cpu.numa for cpu in seen.status.cpus}
    assert [numa_of[c] for c in (0, 15, 16, 31, 32, 47, 48, 63)] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_nothing_to_patch_once_the_node_says_it_all() -> None:
    report = node_report(dgx(), {}, faults={3})
    node = kube_node()
    node = applied(node, {"metadata": metadata_patch(node, report)}, status_patch(node, report))

    assert metadata_patch(node, report) == {}
    assert status_patch(node, report) == {}


def test_a_recovered_gpu_changes_only_what_it_must() -> None:
    node = kube_node()
    sick = node_report(dgx(), {}, faults={3})
    node = applied(node, {"metadata": metadata_patch(node, sick)}, status_patch(node, sick))

    well = node_report(dgx(), {})

    assert metadata_patch(node, well) == {
        "annotations": {"phalanx.dev/unhealthy-gpus": "", "phalanx.dev/gpu-problems": "{}"}
    }
    assert status_patch(node, well) == {
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}
    }


def test_gpu_labels_are_removed_from_a_node_that_has_no_gpus_any_more() -> None:
    node = kube_node(**{"nvidia.com/gpu": "0"})
    node["metadata"]["labels"].update({"nvidia.com/gpu.product": "X", "nvidia.com/gpu.count": "2"})
    empty = Node.model_validate({"metadata": {"name": "n"}, "status": {"cpus": [{"id": 0}]}})

    patch = metadata_patch(node, node_report(empty, {}))

    assert patch["labels"] == {
        "nvidia.com/gpu.product": None,
        "nvidia.com/gpu.count": None,
        "phalanx.dev/numa-nodes": "1",
    }


def test_gpus_that_cannot_be_checked_are_left_as_they_are() -> None:
    # A GPU node whose agent has no NVML (a broken driver, no NVIDIA container runtime): nothing GPU is erased.
    node = kube_node(**{"nvidia.com/gpu": "8"})
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    node["metadata"]["annotations"]["phalanx.dev/unhealthy-gpus"] = "2"
    cpus_only = Node.model_validate({"metadata": {"name": "n"}, "status": {"cpus": [{"id": 0}, {"id": 1}]}})

    report = node_report(cpus_only, {}, note="NVML not available: driver gone", gpus_unknown=True)

    assert metadata_patch(node, report) == {
        "labels": {"phalanx.dev/numa-nodes": "1"},
        "annotations": {"phalanx.dev/gpu-discovery": "NVML not available: driver gone"},
    }
    assert status_patch(node, report) == {}
    assert not report.gpus_known


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("  Tesla V100 (PCIe) ", "Tesla-V100-PCIe"),
        ("x" * 70, "x" * 63),
    ],
)
def test_gpu_models_become_valid_label_values(model: str, label: str) -> None:
    assert label_value(model) == label


# -- the fault file ---------------------------------------------------------------------------------------------------


def test_the_fault_file_lists_indices_with_comments(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "faults"
    path.write_text("1, 3\n# GPU 6 is fine again\n5 seven\n")

    with caplog.at_level(logging.WARNING):
        assert read_fault_file(path) == {1, 3, 5}
    assert "'seven' is not a GPU index" in caplog.text


def test_no_fault_file_means_no_faults(tmp_path: Path) -> None:
    assert read_fault_file(None) == set()
    assert read_fault_file(tmp_path / "missing") == set()
    (tmp_path / "empty").write_text("")
    assert read_fault_file(tmp_path / "empty") == set()


def test_gpu_uuids_reach_the_scheduler_through_the_node_so_a_dra_drivers_devices_can_be_matched() -> None:
    discovered = dgx()
    gpus = [gpu.model_copy(update={"uuid": f"GPU-{gpu.index:04d}"}) for gpu in discovered.status.gpus]
    discovered = discovered.model_copy(update={"status": discovered.status.model_copy(update={"gpus": gpus})})
    node = kube_node()
    report = node_report(discovered, {})
    node = applied(node, {"metadata": metadata_patch(node, report)}, status_patch(node, report))
    assert [gpu.uuid for gpu in node_from_object(node).status.gpus] == [f"GPU-{i:04d}" for i in range(8)]
    nameless = [gpu.model_copy(update={"uuid": ""}) for gpu in gpus]
    without = discovered.model_copy(update={"status": discovered.status.model_copy(update={"gpus": nameless})})
    assert "uuids" not in gpu_topology(without), "GPUs without UUIDs add nothing"
