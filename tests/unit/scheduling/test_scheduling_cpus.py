"""Exclusive CPUs (kubelet static CPU manager semantics), NUMA alignment and the shared pool.

On the simulated server, socket/NUMA 0 has CPUs 0-15 and their siblings 32-47; NUMA 1 has 16-31 and 48-63;
core ``c`` of socket 0 is CPUs ``c`` and ``c + 32``.
"""

from __future__ import annotations

from collections import Counter

import pytest
from scheduling_builders import (
    GI,
    admission,
    changed,
    dgx,
    hold,
    make_job,
    make_node,
    numa_of_cpus,
    numa_of_gpus,
    run,
    snapshot,
    waiting_reason,
)

from phalanx.model.nodes import Node


@pytest.mark.parametrize(
    ("held", "count", "expected"),
    [
        pytest.param([], 4, (0, 1, 32, 33), id="even-request-takes-two-whole-cores"),
        pytest.param([], 2, (0, 32), id="two-cpus-are-one-whole-core"),
        pytest.param([], 3, (0, 1, 32), id="odd-request-one-core-plus-one-thread"),
        pytest.param([0], 1, (32,), id="single-thread-completes-a-split-core"),
        pytest.param([0], 2, (1, 33), id="pair-skips-the-split-core"),
        pytest.param([0], 3, (1, 32, 33), id="odd-remainder-uses-the-split-core"),
    ],
)
def test_whole_physical_cores_first(held: list[int], count: int, expected: tuple[int, ...]) -> None:
    holdings = [hold("dgx-0", cpus=held)] if held else []
    decisions = run(snapshot(dgx(), holdings), make_job("job").replicas(1, cpu=1000 * count))
    assert admission(decisions, "job").assignments[0].cpus == expected


def test_four_gpus_and_eight_cpus_land_on_one_numa_node() -> None:
    node = dgx()
    decisions = run(snapshot(node), make_job("job").replicas(1, cpu=8000, gpu=4))
    (placed,) = admission(decisions, "job").assignments
    assert placed.gpus == (0, 1, 2, 3)
    assert placed.cpus == (0, 1, 2, 3, 32, 33, 34, 35)
    assert numa_of_cpus(node, placed.cpus) == numa_of_gpus(node, placed.gpus) == {0}


def test_gpus_follow_the_numa_node_that_still_has_the_cpus() -> None:
    # NUMA 0 keeps only 4 free CPUs, so a 4-GPU + 8-CPU replica goes whole to NUMA 1.
    node = dgx()
    holdings = [hold("dgx-0", cpus=[*range(0, 14), *range(32, 46)])]
    (placed,) = admission(
        run(snapshot(node, holdings), make_job("job").replicas(1, cpu=8000, gpu=4)), "job"
    ).assignments
    assert placed.gpus == (4, 5, 6, 7)
    assert numa_of_cpus(node, placed.cpus) == {1}


@pytest.mark.parametrize(
    ("topology", "expected_cpus"),
    [
        pytest.param("preferred", (16, 17, 48, 49), id="preferred-cpus-follow-the-gpus"),
        pytest.param("none", (0, 1, 32, 33), id="none-ignores-gpu-numa"),
    ],
)
def test_cpus_follow_the_chosen_gpus_numa_node(topology: str, expected_cpus: tuple[int, ...]) -> None:
    holdings = [hold("dgx-0", gpus=[0, 1, 2, 3])]
    job = make_job("job").replicas(1, cpu=4000, gpu=2).topology(topology)
    (placed,) = admission(run(snapshot(dgx(), holdings), job), "job").assignments
    assert placed.gpus == (4, 5)
    assert placed.cpus == expected_cpus


def test_a_request_larger_than_a_numa_node_spills_when_preferred() -> None:
    node = dgx()
    (placed,) = admission(run(snapshot(node), make_job("job").replicas(1, cpu=40000)), "job").assignments
    per_numa = Counter(cpu.numa for cpu in node.status.cpus if cpu.id in placed.cpus)
    assert len(placed.cpus) == 40
    assert sorted(per_numa.values()) == [8, 32]


def test_a_request_larger_than_a_numa_node_is_refused_when_required() -> None:
    decisions = run(snapshot(dgx()), make_job("job").replicas(1, cpu=40000).topology("required"))
    assert decisions.admitted == ()
    assert waiting_reason(decisions, "job") == (
        "needs 1 replica (40 CPUs exclusive, 2Gi); it does not fit: node dgx-0 has 64 CPUs free but at most "
        "32 on one NUMA node, fewer than 40 (topology required)"
    )


def test_exclusive_cpus_never_overlap_across_replicas_jobs_and_holdings() -> None:
    held = [0, 1, 2, 3, 32, 33]
    jobs = [
        make_job("a").replicas(3, cpu=5000).created(0),
        make_job("b").replicas(2, cpu=7000, gpu=1).created(1),
        make_job("c").replicas(4, cpu=1000).created(2),
        make_job("d").replicas(1, cpu=3000, gpu=2).created(3),
        make_job("e").replicas(2, cpu=9000).created(4),
    ]
    decisions = run(snapshot(dgx(), [hold("dgx-0", cpus=held)]), *jobs)
    assert len(decisions.admitted) == len(jobs)
    granted = [cpu for admitted in decisions.admitted for a in admitted.assignments for cpu in a.cpus]
    assert len(granted) == len(set(granted)) == 15 + 14 + 4 + 3 + 18
    assert set(granted).isdisjoint(held)


@pytest.mark.parametrize(
    ("exclusive", "admitted"),
    [
        pytest.param(62, True, id="leaves-two-cpus-for-1500m-shared"),
        pytest.param(63, False, id="would-squeeze-the-shared-pool"),
    ],
)
def test_fractional_replicas_share_the_pool_and_exclusive_grants_respect_it(exclusive: int, admitted: bool) -> None:
    shared = make_job("shared").replicas(3, cpu=500).created(0)
    greedy = make_job("greedy").replicas(1, cpu=1000 * exclusive).created(1)
    decisions = run(snapshot(dgx()), shared, greedy)
    assert all(a.cpus == () for a in admission(decisions, "shared").assignments)
    if admitted:
        assert len(admission(decisions, "greedy").assignments[0].cpus) == exclusive
    else:
        assert waiting_reason(decisions, "greedy") == (
            "needs 1 replica (63 CPUs exclusive, 2Gi); it does not fit: "
            "node dgx-0 has 62 CPUs free where 63 are needed (2 more kept for the shared pool)"
        )


def small_node() -> Node:
    return make_node("small").cpus(sockets=1, cores=2, threads=2).memory(16 * GI).obj()


@pytest.mark.parametrize(
    ("cpu", "reason"),
    [
        pytest.param(1000, None, id="one-cpu-fits"),
        pytest.param(
            2000,
            "needs 1 replica (2 CPUs exclusive, 2Gi); it does not fit: "
            "node small has 1 CPU free where 2 are needed (3 more kept for the shared pool)",
            id="two-cpus-would-overcommit-2500m-shared",
        ),
    ],
)
def test_exclusive_request_is_refused_when_it_would_overcommit_the_shared_pool(cpu: int, reason: str | None) -> None:
    snap = snapshot(small_node(), [hold("small", cpu_milli=2500)])
    decisions = run(snap, make_job("job").replicas(1, cpu=cpu))
    if reason is None:
        assert len(admission(decisions, "job").assignments[0].cpus) == 1
    else:
        assert waiting_reason(decisions, "job") == reason


@pytest.mark.parametrize(
    ("cpu", "reason"),
    [
        pytest.param(900, None, id="900m-fits-in-the-1000m-left"),
        pytest.param(
            1500,
            "needs 1 replica (1500m CPU shared, 2Gi); it does not fit: "
            "node small has 1000m CPU free in the shared pool where 1500m is needed",
            id="1500m-does-not",
        ),
    ],
)
def test_fractional_request_fits_only_in_the_pool_left(cpu: int, reason: str | None) -> None:
    snap = snapshot(small_node(), [hold("small", cpus=[0, 1, 2])])
    decisions = run(snap, make_job("job").replicas(1, cpu=cpu))
    if reason is None:
        assert admission(decisions, "job").assignments[0].cpus == ()
    else:
        assert waiting_reason(decisions, "job") == reason


def test_reserved_cpus_are_never_granted() -> None:
    node = changed(dgx(), reserved=[0, 32])
    (placed,) = admission(run(snapshot(node), make_job("job").replicas(1, cpu=62000)), "job").assignments
    assert set(placed.cpus) == set(range(64)) - {0, 32}
    too_many = run(snapshot(node), make_job("job").replicas(1, cpu=64000))
    assert waiting_reason(too_many, "job") == (
        "a replica needs 64 CPUs but no node has that many: the largest has 62 CPUs (node dgx-0)"
    )


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        pytest.param(1, (32,), id="single-takes-the-orphaned-sibling"),
        pytest.param(2, (1, 33), id="pair-takes-a-whole-core"),
    ],
)
def test_a_reserved_thread_leaves_its_sibling_as_a_split_core(count: int, expected: tuple[int, ...]) -> None:
    node = changed(dgx(), reserved=[0])
    decisions = run(snapshot(node), make_job("job").replicas(1, cpu=1000 * count))
    assert admission(decisions, "job").assignments[0].cpus == expected
