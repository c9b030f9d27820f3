"""Simulated clusters: openb nodes and synthetic nodes look to the scheduler like the hardware they describe."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.sim.clusters import GIB, gpu_capacity, gpus_by_model, openb_cluster, synthetic_cluster
from phalanx.sim.traces import OpenbNode, load_openb_nodes


def test_openb_nodes_become_cpus_memory_and_gpus_of_their_model() -> None:
    nodes = (OpenbNode("b", 64000, 262144, 2, "P100"), OpenbNode("a", 96500, 1024, 8, "G2"))
    snapshot = openb_cluster(nodes)
    first, second = snapshot.nodes
    assert (first.name, len(first.cpus), first.memory) == ("b", 64, 262144 * 2**20)
    assert [gpu.model for gpu in first.gpus] == ["P100", "P100"]
    assert len(second.cpus) == 96  # 96.5 cores: a fraction of a core is not a CPU slot
    assert {cpu.numa for cpu in second.cpus} == {0}
    assert all(not gpu.nvlink_peers for gpu in second.gpus)
    assert gpu_capacity(snapshot) == 10


def test_openb_cluster_takes_the_first_n_nodes_of_the_shipped_list(traces: Path) -> None:
    nodes = load_openb_nodes(traces / "openb_node_list_gpu_node.csv")
    assert gpu_capacity(openb_cluster(nodes)) == 6212
    assert [node.name for node in openb_cluster(nodes, 3).nodes] == [node.name for node in nodes[:3]]
    with pytest.raises(ValueError, match="choose 1 to 1213"):
        openb_cluster(nodes, 5000)


def test_synthetic_nodes_split_models_in_blocks_and_get_resources_per_gpu() -> None:
    snapshot = synthetic_cluster(7, 4, gpu_models=("K80", "P100", "V100"))
    assert [node.name for node in snapshot.nodes][:2] == ["node-000", "node-001"]
    assert [node.gpus[0].model for node in snapshot.nodes] == ["K80"] * 3 + ["P100"] * 2 + ["V100"] * 2
    assert gpus_by_model(snapshot) == {"K80": 12, "P100": 8, "V100": 8}
    node = snapshot.nodes[0]
    assert (len(node.cpus), node.memory, node.used_gpus) == (32, 256 * GIB, {})


@pytest.mark.parametrize(
    ("interconnect", "peers_of_gpu_0"),
    [pytest.param("pcie", frozenset(), id="pcie"), pytest.param("nvswitch", frozenset({1, 2, 3}), id="nvswitch")],
)
def test_the_interconnect_sets_nvlink_peers(interconnect: str, peers_of_gpu_0: frozenset[int]) -> None:
    (node,) = synthetic_cluster(1, 4, interconnect=interconnect).nodes
    assert node.gpus[0].nvlink_peers == peers_of_gpu_0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"nodes": 0, "gpus_per_node": 8}, "at least one node", id="no-node"),
        pytest.param({"nodes": 2, "gpus_per_node": -1}, "cannot be negative", id="negative-gpus"),
        pytest.param({"nodes": 2, "gpus_per_node": 8, "gpu_models": ()}, "at least one GPU model", id="no-model"),
        pytest.param(
            {"nodes": 1, "gpus_per_node": 8, "gpu_models": ("A", "B")}, "need at least 2 nodes", id="few-nodes"
        ),
        pytest.param({"nodes": 1, "gpus_per_node": 8, "interconnect": "ib"}, "interconnect 'ib'", id="interconnect"),
        pytest.param({"nodes": 1, "gpus_per_node": 8, "cpus_per_node": 0}, "at least one CPU", id="no-cpu"),
    ],
)
def test_nonsense_cluster_shapes_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synthetic_cluster(**kwargs)  # type: ignore[arg-type]
