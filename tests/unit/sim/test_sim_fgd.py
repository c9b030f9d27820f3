"""The FGD protocol driver: workload inflation, seeded node order, curves, on hand-made openb traces."""

from __future__ import annotations

import pytest

from phalanx.core.scheduling import SchedulerConfig, SchedulingSession
from phalanx.core.scheduling.types import TaskShape
from phalanx.sim.clusters import openb_cluster
from phalanx.sim.fgd import (
    Unallocated,
    inflated_workload,
    pod_demand_milli,
    run_fgd,
    run_seed,
    seeded_node_order,
    trace_shapes,
    unallocated,
)
from phalanx.sim.traces import OpenbNode, OpenbPod


def pod(name: str, cpu: int, gpus: int, milli: int) -> OpenbPod:
    return OpenbPod(name, cpu, 1024, gpus, milli, (), "LS", "Running", 0.0, None, 0.0)


PODS = (
    pod("whole", 4000, 1, 1000),
    pod("share", 2000, 1, 500),
    pod("pair", 8000, 2, 1000),
    pod("cpu", 6000, 0, 0),
)
NODES = tuple(OpenbNode(f"n{i}", 32000, 131072, 2 if i % 2 else 4, "T4" if i % 2 else "V100") for i in range(6))
CAPACITY = sum(node.gpus for node in NODES) * 1000


def test_every_trace_pod_comes_once_shuffled_then_samples_until_the_target() -> None:
    workload = inflated_workload(PODS, CAPACITY, seed=42, inflation=1.3)
    assert sorted(p.name for p in workload[: len(PODS)]) == sorted(p.name for p in PODS)
    arrived = sum(pod_demand_milli(p) for p in workload)
    assert arrived <= 1.3 * CAPACITY
    assert arrived > 1.3 * CAPACITY - 2000  # the next sample would have passed the target (largest pod: 2 GPUs)
    assert inflated_workload(PODS, CAPACITY, seed=42, inflation=1.3) == workload
    assert [p.name for p in inflated_workload(PODS, CAPACITY, seed=43, inflation=1.3)] != [p.name for p in workload]


def test_the_seeded_node_order_renames_nodes_but_keeps_them() -> None:
    snapshot = openb_cluster(NODES)
    a, b = seeded_node_order(snapshot, 1), seeded_node_order(snapshot, 2)
    assert sorted(n.name.split("-", 1)[1] for n in a.nodes) == sorted(n.name for n in snapshot.nodes)
    assert [n.name for n in a.nodes] == [n.name for n in seeded_node_order(snapshot, 1).nodes]
    assert sorted(a.nodes, key=lambda n: n.name) != sorted(b.nodes, key=lambda n: n.name)


def test_typical_shapes_cover_95_percent_of_pods() -> None:
    trace = PODS * 10 + (pod("rare", 1000, 1, 100),)
    shapes = trace_shapes(trace)
    assert sum(shape.weight for shape in shapes) >= 0.95 * len(trace)
    assert all(shape.weight >= 10 for shape in shapes)  # the rare shape is not needed to reach 95 %


@pytest.mark.parametrize("policy", ["auto", "binpack", "pack", "spread", "random", "fragmentation"])
def test_a_seed_fills_the_cluster_consistently(policy: str) -> None:
    snapshot = openb_cluster(NODES)
    run = run_seed(snapshot, PODS, policy=policy, seed=7, shapes=trace_shapes(PODS))
    curve = [run.allocation[p] for p in sorted(run.allocation)]
    assert curve[0] == 0.0
    assert all(0.0 <= value <= 100.0 for value in curve)
    assert max(curve) > 50.0
    assert 0 < run.failed < run.pods  # 130 % of the GPUs arrived: some pods had to fail
    assert all(0.0 <= value <= 100.0 for value in run.fragmentation_ratio.values())
    assert run_seed(snapshot, PODS, policy=policy, seed=7, shapes=trace_shapes(PODS)) == run


def test_means_are_over_seeds() -> None:
    result = run_fgd(openb_cluster(NODES), PODS, policy="auto", seeds=[1, 2])
    assert len(result.runs) == 2
    expected = (result.runs[0].allocation[100] + result.runs[1].allocation[100]) / 2
    assert result.mean("allocation", 100) == pytest.approx(expected)


def test_an_empty_trace_or_a_cluster_without_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        run_fgd(openb_cluster(NODES), (), policy="auto", seeds=[1])
    cpu_only = openb_cluster((OpenbNode("c0", 32000, 131072, 0, ""),))
    with pytest.raises(ValueError, match="no GPU"):
        run_fgd(cpu_only, PODS, policy="auto", seeds=[1])


def test_a_pod_that_names_several_models_runs_only_on_those() -> None:
    # 'P100|T4': no P100 here, so only the three T4 nodes' 6 GPUs of 18 can take these pods.
    constrained = tuple(
        OpenbPod(f"c{i}", 1000, 1024, 1, 1000, ("P100", "T4"), "LS", "Running", 0.0, None, 0.0) for i in range(4)
    )
    run = run_seed(openb_cluster(NODES), constrained, policy="auto", seed=3, shapes=trace_shapes(constrained))
    assert max(run.allocation.values()) == pytest.approx(100 * 6 / 18)
    assert run.failed == run.pods - 6


def test_idle_gpus_are_split_by_why_the_typical_work_cannot_use_them() -> None:
    nodes = (
        OpenbNode("starved", 32000, 131072, 2, "T4"),
        OpenbNode("whole", 32000, 131072, 2, "T4"),
        OpenbNode("shared", 32000, 131072, 2, "T4"),
    )
    table = SchedulingSession(openb_cluster(nodes), SchedulerConfig()).cluster.table
    rows = {name: row for name, row in table.row_of.items()}
    table.cpu_free[rows["starved"]] = 1500  # less than any GPU shape below asks: its 2 idle GPUs are CPU-bound
    table.gpu_free[rows["whole"], 0] = 0  # one GPU taken, one whole GPU idle
    table.gpu_free[rows["shared"]] = (300, 0)  # 0.7 of one GPU used: 0.3 left of it
    shapes = (TaskShape(2000, 1, 1000, 1.0), TaskShape(4000, 1, 500, 1.0), TaskShape(500, 0, 0, 1.0))
    assert unallocated(table, shapes) == Unallocated(cpu_bound=2000, whole=1000, shares=300)
    # The CPU-only shape does not count: nodes are CPU-bound for GPU work only.
    assert unallocated(table, shapes[2:]) == Unallocated(cpu_bound=0, whole=3000, shares=300)


def test_what_stays_idle_adds_up_to_what_is_not_allocated() -> None:
    result = run_fgd(openb_cluster(NODES), PODS, policy="auto", seeds=[1, 2])
    idle = result.idle_at_end()
    total = idle.cpu_bound + idle.whole + idle.shares
    assert total == pytest.approx(100 - result.mean("allocation", 130), abs=1e-6)
    for run in result.runs:
        parts = run.unallocated
        assert parts.cpu_bound + parts.whole + parts.shares == pytest.approx(CAPACITY * (1 - run.allocation[130] / 100))
