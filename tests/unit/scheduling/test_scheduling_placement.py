"""Node choice across nodes: pack keeps gangs together on fuller nodes, spread spreads, cordons are respected.

Two identical nodes, node-a and node-b: 16 CPUs, 128Gi and 4 GPUs each.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from scheduling_builders import (
    Holding,
    JobBuilder,
    admission,
    changed,
    hold,
    make_job,
    run,
    snapshot,
    two_nodes,
    waiting_reason,
)


def nodes_of(placement: str, job: JobBuilder, holdings: Sequence[Holding] = ()) -> list[str]:
    decisions = run(snapshot(two_nodes(), holdings), job.placement(placement))
    return [a.node for a in admission(decisions, "job").assignments]


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        pytest.param("pack", ["node-a", "node-a"], id="pack-keeps-the-gang-on-one-node"),
        pytest.param("auto", ["node-a", "node-a"], id="auto-is-pack"),
        pytest.param("spread", ["node-a", "node-b"], id="spread-uses-both-nodes"),
    ],
)
def test_gang_of_two_on_empty_nodes(placement: str, expected: list[str]) -> None:
    assert nodes_of(placement, make_job("job").replicas(2, gpu=1)) == expected


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        pytest.param("pack", ["node-b"], id="pack-prefers-the-fuller-node"),
        pytest.param("binpack", ["node-b"], id="binpack-prefers-the-fuller-node"),
        pytest.param("spread", ["node-a"], id="spread-prefers-the-emptier-node"),
    ],
)
def test_most_or_least_allocated(placement: str, expected: list[str]) -> None:
    holdings = [hold("node-b", gpus=[0], cpus=[0, 8], memory=8 * 2**30)]
    assert nodes_of(placement, make_job("job").replicas(1, gpu=1), holdings) == expected


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        pytest.param("pack", ["node-a", "node-a"], id="pack-keeps-the-gang-whole-on-the-node-that-holds-it"),
        pytest.param("binpack", ["node-b", "node-a"], id="binpack-fills-the-hole-first"),
    ],
)
def test_pack_prefers_a_node_that_holds_the_whole_gang(placement: str, expected: list[str]) -> None:
    holdings = [hold("node-b", gpus=[0, 1, 2])]
    assert nodes_of(placement, make_job("job").replicas(2, gpu=1), holdings) == expected


@pytest.mark.parametrize("placement", ["pack", "spread", "binpack"])
def test_a_gang_larger_than_one_node_spans_both(placement: str) -> None:
    assert sorted(nodes_of(placement, make_job("job").replicas(2, gpu=4))) == ["node-a", "node-b"]


@pytest.mark.parametrize(
    ("placement", "per_node"),
    [
        pytest.param("pack", {"node-a": 4}, id="pack"),
        pytest.param("spread", {"node-a": 2, "node-b": 2}, id="spread"),
    ],
)
def test_cpu_only_gang(placement: str, per_node: dict[str, int]) -> None:
    placed = nodes_of(placement, make_job("job").replicas(4, cpu=2000))
    assert {node: placed.count(node) for node in set(placed)} == per_node


def test_a_cordoned_node_gets_nothing() -> None:
    nodes = [changed(two_nodes()[0], unschedulable=True), two_nodes()[1]]
    decisions = run(snapshot(nodes), make_job("job").replicas(3, gpu=1).placement("spread"))
    assert {a.node for a in admission(decisions, "job").assignments} == {"node-b"}


def test_every_node_cordoned() -> None:
    nodes = [changed(node, unschedulable=True) for node in two_nodes()]
    decisions = run(snapshot(nodes), make_job("job").replicas(1, cpu=1000))
    assert waiting_reason(decisions, "job") == "no schedulable node: all 2 nodes are cordoned"


def test_gpu_reason_across_nodes() -> None:
    decisions = run(snapshot(two_nodes()), make_job("job").replicas(3, gpu=4))
    assert waiting_reason(decisions, "job") == (
        "needs 12 GPUs in one gang; largest free block is 4 on node node-a (8 free in total)"
    )


def test_cpu_reason_across_nodes() -> None:
    decisions = run(snapshot(two_nodes()), make_job("job").replicas(5, cpu=7000))
    assert waiting_reason(decisions, "job") == (
        "needs 5 replicas (35 CPUs exclusive, 10Gi) as one gang; only 4 fit: "
        "node node-a has 16 CPUs free where 35 are needed; 32 free on 2 nodes in all"
    )


def test_replicas_of_a_spread_gang_get_aligned_devices_on_each_node() -> None:
    node_a, _ = two_nodes()
    decisions = run(snapshot(two_nodes()), make_job("job").replicas(2, cpu=4000, gpu=2).placement("spread"))
    for assignment in admission(decisions, "job").assignments:
        assert assignment.gpus == (0, 1)
        assert assignment.cpus == (0, 1, 8, 9)
        assert {cpu.numa for cpu in node_a.status.cpus if cpu.id in assignment.cpus} == {0}


def test_spread_puts_gang_members_on_different_nodes_before_balancing_load() -> None:
    # node-b is much busier, but a spread gang still puts its second replica there rather than doubling up.
    holdings = [hold("node-b", gpus=[0, 1], cpus=[0, 1, 2, 3, 8, 9, 10, 11], memory=64 * 2**30)]
    assert nodes_of("spread", make_job("job").replicas(2, cpu=1000), holdings) == ["node-a", "node-b"]
    assert nodes_of("spread", make_job("job").replicas(3, cpu=1000), holdings) == ["node-a", "node-b", "node-a"]
