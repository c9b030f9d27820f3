"""The cycle is pure: inputs untouched, equal inputs give equal decisions, and its invariants always hold."""

from __future__ import annotations

import copy
from collections import defaultdict
from datetime import timedelta
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduling_builders import (
    DGX_MODEL,
    GI,
    T0,
    admitted_keys,
    changed,
    dgx,
    hold,
    make_job,
    run,
    snapshot,
    two_nodes,
)

from phalanx.core.scheduling import Admission, ClusterSnapshot, Decisions, PendingJob, schedule
from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.fragmentation import ShapeTally, WorkloadProfile
from phalanx.core.scheduling.gang import GangPlacement, needed_replicas, place_gang
from phalanx.core.scheduling.queueing import queue_order
from phalanx.core.scheduling.reasons import explain
from phalanx.core.scheduling.working import WorkingCluster


def busy_cluster() -> ClusterSnapshot:
    holdings = [
        hold("dgx-0", cpus=[0, 1, 32, 33], memory=16 * GI, gpus=[0]),
        hold("dgx-0", cpu_milli=1500, gpus=[7], gpu_milli=300),
        hold("node-b", cpus=[4, 12], gpus=[2, 3], memory=32 * GI),
    ]
    nodes = [changed(dgx(), reserved=[63], unhealthy=[5]), *two_nodes()]
    return snapshot(nodes, holdings)


def mixed_jobs() -> list[PendingJob]:
    return [
        make_job("train").replicas(2, cpu=8000, gpu=4, memory=64 * GI).priority(5).obj(),
        make_job("sweep").replicas(6, cpu=500, gpu_milli=250).created(1).obj(),
        make_job("etl").replicas(4, cpu=3000, memory=8 * GI).placement("spread").created(2).obj(),
        make_job("huge").replicas(3, gpu=8).created(3).obj(),
        make_job("elastic").replicas(5, cpu=2000, gpu=1).min_available(2).created(4).obj(),
        make_job("v100").replicas(1, gpu=1, gpu_model="V100").created(5).obj(),
    ]


def test_the_input_snapshot_and_jobs_are_not_mutated() -> None:
    snap = busy_cluster()
    jobs = mixed_jobs()
    before_snap, before_jobs = copy.deepcopy(snap), copy.deepcopy(jobs)
    decisions = schedule(snap, jobs, T0)
    assert decisions.admitted, "the scenario must admit something for this test to mean anything"
    assert snap == before_snap
    assert jobs == before_jobs
    assert schedule(snap, jobs, T0) == decisions


def test_decisions_do_not_depend_on_input_order_or_time() -> None:
    snap = busy_cluster()
    jobs = mixed_jobs()
    expected = schedule(snap, jobs, T0)
    reordered = ClusterSnapshot(nodes=tuple(reversed(snap.nodes)))
    assert schedule(reordered, list(reversed(jobs)), T0 + timedelta(days=3)) == expected
    assert admitted_keys(expected) == ["train", "sweep", "etl", "elastic"]
    assert set(expected.waiting) == {"default/huge", "default/v100"}


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        pytest.param([make_job("a").obj(), make_job("a").obj()], "default/a", id="duplicate-job-key"),
        pytest.param([make_job("a").placement("tight").obj()], "placement 'tight'", id="unknown-placement"),
        pytest.param([make_job("a").topology("strict").obj()], "topology 'strict'", id="unknown-topology"),
    ],
)
def test_bad_input_is_refused_loudly(jobs: list[PendingJob], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(snapshot(dgx()), jobs, T0)


def test_duplicate_node_names_in_a_snapshot_are_refused() -> None:
    (node,) = snapshot(dgx()).nodes
    with pytest.raises(ValueError, match="dgx-0"):
        schedule(ClusterSnapshot(nodes=(node, node)), [], T0)


def test_an_empty_cycle_decides_nothing() -> None:
    assert schedule(snapshot(dgx()), [], T0) == Decisions()
    assert run(ClusterSnapshot(nodes=()), make_job("a").replicas(1)).waiting == {
        "default/a": "no schedulable node: the cluster has no nodes"
    }


# --- invariants over generated workloads ----------------------------------------------------------------

job_shapes = st.tuples(
    st.integers(min_value=1, max_value=4),  # replicas
    st.sampled_from([0, 500, 1000, 1500, 2000, 4000, 8000, 20000]),  # cpu milli
    st.integers(min_value=0, max_value=96),  # memory GiB
    st.sampled_from([(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (8, 0), (0, 250), (0, 500), (0, 1000)]),
    st.integers(min_value=-2, max_value=2),  # priority
    st.one_of(st.none(), st.integers(min_value=1, max_value=4)),  # min_available
    st.sampled_from(["pack", "spread", "binpack", "auto"]),
    st.sampled_from(["none", "preferred", "required"]),
    st.sampled_from([None, DGX_MODEL.lower(), "NVIDIA-A100-PCIE-40GB"]),
)


def build_jobs(shapes: list[tuple]) -> list[PendingJob]:  # type: ignore[type-arg]
    jobs = []
    for number, (
        count,
        cpu,
        memory,
        (gpu, milli),
        priority,
        minimum,
        placement,
        topology,
        model,
    ) in enumerate(shapes):
        builder = make_job(f"job-{number}").replicas(
            count, cpu=cpu, memory=memory * GI, gpu=gpu, gpu_milli=milli, gpu_model=model
        )
        builder = builder.priority(priority).created(number % 3).placement(placement).topology(topology)
        if minimum is not None:
            builder = builder.min_available(minimum)
        jobs.append(builder.obj())
    return jobs


def check_invariants(snap: ClusterSnapshot, jobs: list[PendingJob], decisions: Decisions) -> None:
    by_key = {job.key: job for job in jobs}
    admitted = {admission.key for admission in decisions.admitted}
    assert admitted.isdisjoint(decisions.waiting)
    assert admitted | set(decisions.waiting) == set(by_key)
    assert all(reason.strip() for reason in decisions.waiting.values())

    nodes = {node.name: node for node in snap.nodes}
    exclusive = {name: set(node.used_exclusive_cpus) for name, node in nodes.items()}
    shared = {name: node.used_shared_cpu_milli for name, node in nodes.items()}
    memory = {name: node.used_memory for name, node in nodes.items()}
    gpu_use: dict[str, defaultdict[int, int]] = {name: defaultdict(int, node.used_gpus) for name, node in nodes.items()}
    for admission in decisions.admitted:
        job = by_key[admission.key]
        requests = {replica.name: replica for replica in job.replicas}
        names = [a.replica for a in admission.assignments]
        assert len(names) == len(set(names)) and set(names) <= set(requests)
        assert needed_replicas(job) <= len(names) <= len(job.replicas)
        for assignment in admission.assignments:
            node = nodes[assignment.node]
            assert node.schedulable
            wanted = requests[assignment.replica].resources
            cpu_ids = {cpu.id: cpu for cpu in node.cpus}
            if wanted.cpu_milli and wanted.cpu_milli % 1000 == 0:
                assert len(assignment.cpus) == wanted.cpu_milli // 1000
                assert set(assignment.cpus) <= set(cpu_ids)
                assert exclusive[node.name].isdisjoint(assignment.cpus)
                exclusive[node.name] |= set(assignment.cpus)
                if job.topology == "required":
                    assert len({cpu_ids[cpu].numa for cpu in assignment.cpus}) == 1
            else:
                assert assignment.cpus == ()
                shared[node.name] += wanted.cpu_milli
            memory[node.name] += wanted.memory
            gpus = {gpu.index: gpu for gpu in node.gpus}
            model = requests[assignment.replica].gpu_model
            for index in assignment.gpus:
                assert gpus[index].healthy
                assert model is None or gpus[index].model.casefold() == model.casefold()
            if wanted.gpu:
                assert len(assignment.gpus) == wanted.gpu and assignment.gpu_milli == 0
                for index in assignment.gpus:
                    assert gpu_use[node.name][index] == 0
                    gpu_use[node.name][index] = 1000
                if job.topology == "required" and wanted.gpu > 1:
                    chosen = [gpus[index] for index in assignment.gpus]
                    linked = all(b.index in a.nvlink_peers for a, b in combinations(chosen, 2))
                    assert linked or len({gpu.numa for gpu in chosen}) == 1
            elif wanted.gpu_milli:
                assert len(assignment.gpus) == 1 and assignment.gpu_milli == wanted.gpu_milli
                gpu_use[node.name][assignment.gpus[0]] += wanted.gpu_milli
            else:
                assert assignment.gpus == ()
    for name, node in nodes.items():
        assert memory[name] <= node.memory
        assert shared[name] <= 1000 * (len({cpu.id for cpu in node.cpus} - exclusive[name]))
        assert all(used <= 1000 for used in gpu_use[name].values())


def schedule_without_memo(snap: ClusterSnapshot, jobs: list[PendingJob]) -> Decisions:
    """The cycle recomputed with nothing memoized across gangs: the memo must never change a decision."""
    cluster = WorkingCluster(snap)
    tally = ShapeTally()
    for job in jobs:
        tally.observe(job.key, [demand_of(replica) for replica in job.replicas])
    profile = WorkloadProfile.build(tally.shapes(), cluster.table)
    admitted: list[Admission] = []
    waiting: dict[str, str] = {}
    for job in queue_order(jobs):
        outcome = place_gang(cluster, job, profile=profile)
        if isinstance(outcome, GangPlacement):
            admitted.append(Admission(key=job.key, assignments=outcome.assignments))
        else:
            waiting[job.key] = explain(job, outcome, cluster)
    return Decisions(admitted=tuple(admitted), waiting=waiting)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(job_shapes, min_size=1, max_size=8))
def test_invariants_hold_for_any_workload(shapes: list[tuple]) -> None:  # type: ignore[type-arg]
    snap = busy_cluster()
    jobs = build_jobs(shapes)
    decisions = schedule(snap, jobs, T0)
    check_invariants(snap, jobs, decisions)
    assert schedule(snap, list(reversed(jobs)), T0) == decisions
    assert schedule_without_memo(snap, jobs) == decisions
