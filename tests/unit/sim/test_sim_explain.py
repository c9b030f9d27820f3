"""Explaining waiting jobs is bookkeeping: runs with and without it decide exactly the same.

The simulator turns the core's explanations off (``SimOptions.explain``, ``SchedulerConfig.explain``) because they
cost about half of every cycle; the report still gets a sentence for each job that never started, from one
explained cycle at the end. These tests run the same workloads both ways and compare everything a run yields.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sim_builders import cluster, job

from phalanx.core.scheduling import PendingJob, ReplicaRequest, SchedulerConfig, SchedulingSession
from phalanx.model.resources import ResourceVector
from phalanx.sim.clusters import synthetic_cluster
from phalanx.sim.engine import EPOCH, SimOptions, SimResult, simulate
from phalanx.sim.metrics import compute_metrics
from phalanx.sim.traces import load_itp_jobs
from phalanx.sim.workloads import SimJob, jobs_from_itp, poisson_workload


def both_ways(jobs: tuple[SimJob, ...] | list[SimJob], nodes: int, gpus: int, options: SimOptions) -> SimResult:
    """Run with and without explanations, assert that the runs agree in every respect, return the quiet one."""
    snapshot = cluster(nodes, gpus)
    quiet = simulate(snapshot, jobs, replace(options, explain=False))
    loud = simulate(snapshot, jobs, replace(options, explain=True))
    assert quiet.jobs == loud.jobs  # starts, ends, nodes, statuses, reasons of jobs that never started
    assert quiet.timeline == loud.timeline
    assert (quiet.cycles, quiet.preemptions, quiet.promotions) == (loud.cycles, loud.preemptions, loud.promotions)
    assert quiet.deadlock == loud.deadlock
    assert compute_metrics(quiet) == compute_metrics(loud)
    return quiet


def busy_workload() -> tuple[SimJob, ...]:
    """150 Poisson jobs offering about 1.5 times the GPUs of four 8-GPU nodes: queues build up."""
    jobs = poisson_workload(150, rate_per_hour=6.0, seed=3)
    # A few high-priority jobs, so that priority preemption has something to do.
    return tuple(replace(j, priority=100) if i % 10 == 0 else j for i, j in enumerate(jobs))


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(SimOptions(), id="fifo-gang"),
        pytest.param(SimOptions(gang=False), id="fifo-pod-by-pod"),
        pytest.param(SimOptions(queue_order="shortest-first", queueing_strategy="backfill"), id="sf-backfill"),
        pytest.param(SimOptions(queueing_strategy="strict-fifo", placement="spread"), id="strict-spread"),
        pytest.param(SimOptions(preemption=True), id="priority-preemption"),
        pytest.param(
            SimOptions(queue_order="least-attained-service", time_slicing=True, starve_limit=8.0), id="las-slicing"
        ),
    ],
)
def test_explaining_changes_no_decision(options: SimOptions) -> None:
    result = both_ways(busy_workload(), 4, 8, options)
    assert result.jobs and any(o.queueing_delay for o in result.jobs)  # jobs did wait


def test_a_real_trace_decides_the_same_both_ways(traces: Path) -> None:
    jobs = jobs_from_itp(load_itp_jobs(traces / "itp_cluster10.csv"))[:120]
    both_ways(jobs, 1, 8, SimOptions())
    both_ways(jobs, 1, 8, SimOptions(queue_order="least-attained-service", time_slicing=True))


def test_jobs_that_never_start_keep_the_cores_sentence_without_explaining() -> None:
    deadlock = [job("x", 0, 100, 4), job("a", 10, 1000, 4, 4), job("b", 20, 10, 4, 4), job("c", 5000, 10, 1)]
    stuck = both_ways(deadlock, 2, 4, SimOptions(queue_order="shortest-first", gang=False))
    assert stuck.deadlock is not None
    assert all(o.reason for o in stuck.jobs if o.status == "waiting")
    too_big = both_ways([job("small", 0, 10, 1), job("big", 5, 10, 8)], 1, 4, SimOptions())
    (big,) = [o for o in too_big.jobs if o.job.key == "default/big"]
    assert big.reason.startswith("a replica needs 8 GPUs but no node has that many")


def pending(name: str, *gpus: int) -> PendingJob:
    replicas = tuple(
        ReplicaRequest(name=f"{name}-{i}", role="worker", resources=ResourceVector(cpu_milli=1000, gpu=count))
        for i, count in enumerate(gpus)
    )
    return PendingJob(key=f"default/{name}", priority=0, created=EPOCH, queue="default", replicas=replicas)


def test_the_core_leaves_reasons_empty_and_admits_the_same() -> None:
    snapshot = synthetic_cluster(2, 4)
    work = [pending("a", 4), pending("b", 4), pending("c", 4, 4), pending("d", 16)]
    loud = SchedulingSession(snapshot, SchedulerConfig()).cycle(work, EPOCH)
    quiet = SchedulingSession(snapshot, SchedulerConfig(explain=False)).cycle(work, EPOCH)
    override = SchedulingSession(snapshot, SchedulerConfig()).cycle(work, EPOCH, explain=False)
    assert loud.admitted == quiet.admitted == override.admitted
    assert list(loud.waiting) == list(quiet.waiting) == list(override.waiting) == ["default/c", "default/d"]
    assert all(loud.waiting.values())
    assert set(quiet.waiting.values()) == set(override.waiting.values()) == {""}
