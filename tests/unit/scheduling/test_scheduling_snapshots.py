"""build_snapshot: observed nodes and held placements become the scheduler's snapshot."""

from __future__ import annotations

import pytest
from scheduling_builders import (
    DGX_MODEL,
    GI,
    Holding,
    admission,
    changed,
    dgx,
    hold,
    make_job,
    make_node,
    run,
    snapshot,
    two_nodes,
    waiting_reason,
)

from phalanx.core.scheduling import GpuSlot, build_snapshot
from phalanx.model.nodes import GpuInfo


def test_inventory_becomes_a_snapshot() -> None:
    (node,) = snapshot(dgx()).nodes
    assert node.name == "dgx-0"
    assert [cpu.id for cpu in node.cpus] == list(range(64))
    assert node.memory == 512 * GI
    assert node.schedulable
    assert node.labels == {"phalanx.dev/gpu-model": DGX_MODEL}
    assert node.gpus[0] == GpuSlot(index=0, model=DGX_MODEL, numa=0, healthy=True, nvlink_peers=frozenset({1, 2, 3, 4}))
    assert node.gpus[5].nvlink_peers == frozenset({1, 4, 6, 7})
    assert (node.used_exclusive_cpus, node.used_shared_cpu_milli, node.used_memory, node.used_gpus) == (
        frozenset(),
        0,
        0,
        {},
    )


def test_reserved_cpus_unschedulable_and_unhealthy_gpus() -> None:
    (node,) = snapshot(changed(dgx(), reserved=[0, 32], unschedulable=True, unhealthy=[3])).nodes
    assert {cpu.id for cpu in node.cpus} == set(range(64)) - {0, 32}
    assert not node.schedulable
    assert [gpu.healthy for gpu in node.gpus] == [True, True, True, False, True, True, True, True]


def test_nvlink_peers_are_symmetric_and_ignore_dead_entries() -> None:
    node = make_node("n").cpus().gpus(3).obj()
    node.status.gpus[0] = GpuInfo(index=0, model="NVIDIA-L4", nvlinks={1: 2, 2: 0, 7: 1})
    (snap,) = snapshot(node).nodes
    assert [gpu.nvlink_peers for gpu in snap.gpus] == [frozenset({1}), frozenset({0}), frozenset()]


@pytest.mark.parametrize(
    ("holdings", "expected"),
    [
        pytest.param(
            [hold("dgx-0", cpus=[0, 32], memory=4 * GI)],
            {"cpus": frozenset({0, 32}), "shared": 0, "memory": 4 * GI, "gpus": {}},
            id="exclusive-cpus-and-memory",
        ),
        pytest.param(
            [hold("dgx-0", cpu_milli=500), hold("dgx-0", cpu_milli=1500)],
            {"cpus": frozenset(), "shared": 2000, "memory": 0, "gpus": {}},
            id="shared-millicores-add-up",
        ),
        pytest.param(
            [hold("dgx-0", cpus=[1], gpus=[2, 3])],
            {"cpus": frozenset({1}), "shared": 0, "memory": 0, "gpus": {2: 1000, 3: 1000}},
            id="whole-gpus",
        ),
        pytest.param(
            [hold("dgx-0", gpus=[5], gpu_milli=250), hold("dgx-0", gpus=[5], gpu_milli=500)],
            {"cpus": frozenset(), "shared": 0, "memory": 0, "gpus": {5: 750}},
            id="gpu-shares-add-up-on-one-gpu",
        ),
        pytest.param(
            [hold("gone", cpus=[0], gpus=[0], memory=GI)],
            {"cpus": frozenset(), "shared": 0, "memory": 0, "gpus": {}},
            id="holding-on-a-vanished-node-is-ignored",
        ),
    ],
)
def test_holdings_are_accounted(holdings: list[Holding], expected: dict[str, object]) -> None:
    (node,) = snapshot(dgx(), holdings).nodes
    assert node.used_exclusive_cpus == expected["cpus"]
    assert node.used_shared_cpu_milli == expected["shared"]
    assert node.used_memory == expected["memory"]
    assert node.used_gpus == expected["gpus"]


def test_nodes_are_sorted_by_name() -> None:
    node_a, node_b = two_nodes()
    assert [node.name for node in build_snapshot([node_b, node_a], []).nodes] == ["node-a", "node-b"]


def test_duplicate_node_names_are_refused() -> None:
    with pytest.raises(ValueError, match="node-a"):
        build_snapshot([two_nodes()[0], two_nodes()[0]], [])


@pytest.mark.parametrize(
    ("holdings", "job_cpu", "expected"),
    [
        pytest.param([], 8000, None, id="empty-node-fits"),
        pytest.param(
            [hold("dgx-0", cpus=range(60))],
            8000,
            "needs 1 replica (8 CPUs exclusive, 2Gi); it does not fit: node dgx-0 has 4 CPUs free where 8 are needed",
            id="held-exclusive-cpus-leave-four",
        ),
        pytest.param(
            [hold("dgx-0", cpu_milli=59500)],
            8000,
            "needs 1 replica (8 CPUs exclusive, 2Gi); it does not fit: "
            "node dgx-0 has 4 CPUs free where 8 are needed (60 more kept for the shared pool)",
            id="held-shared-millicores-keep-sixty",
        ),
        pytest.param(
            [hold("dgx-0", memory=511 * GI)],
            8000,
            "needs 1 replica (8 CPUs exclusive, 2Gi); it does not fit: node dgx-0 has 1Gi memory free "
            "where 2Gi is needed",
            id="held-memory",
        ),
    ],
)
def test_holdings_reduce_capacity(holdings: list[Holding], job_cpu: int, expected: str | None) -> None:
    decisions = run(snapshot(dgx(), holdings), make_job("job").replicas(1, cpu=job_cpu))
    if expected is None:
        assert len(admission(decisions, "job").assignments[0].cpus) == job_cpu // 1000
    else:
        assert waiting_reason(decisions, "job") == expected


def test_held_gpus_are_not_chosen_again() -> None:
    holdings = [hold("dgx-0", gpus=[0, 1, 2, 3, 4, 5])]
    decisions = run(snapshot(dgx(), holdings), make_job("a").replicas(1, gpu=2), make_job("b").replicas(1, gpu=1))
    assert admission(decisions, "a").assignments[0].gpus == (6, 7)
    assert waiting_reason(decisions, "b") == (
        "needs 1 GPU on one node; largest free block is 0 on node dgx-0 (0 free in total)"
    )
