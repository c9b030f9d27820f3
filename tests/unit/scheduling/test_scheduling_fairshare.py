"""Fair share: among equal priorities, the queue with the lowest weighted dominant share goes first."""

from __future__ import annotations

import pytest
from queue_builders import cluster, gpu_node, keys, on, pending, quota, running
from scheduling_builders import GI, T0, make_job

from phalanx.core.scheduling import PendingJob, QueueQuota, SchedulerConfig, schedule
from phalanx.core.scheduling.fairshare import dominant_share
from phalanx.core.scheduling.holdings import Usage


def one_gpu(name: str, queue: str, created: float, *, priority: int = 0) -> PendingJob:
    return pending(make_job(name).replicas(1, gpu=1).created(created).priority(priority), queue=queue)


FAIR = SchedulerConfig(fair_share=True)


def test_dominant_share_is_the_largest_fraction_over_the_weight() -> None:
    capacity = Usage(cpu_milli=10_000, memory=100, gpu_milli=8000)
    assert dominant_share(Usage(cpu_milli=1000, memory=50, gpu_milli=2000), capacity, 1.0) == 0.5
    assert dominant_share(Usage(cpu_milli=1000, memory=50, gpu_milli=2000), capacity, 2.0) == 0.25
    assert dominant_share(Usage(), capacity, 1.0) == 0.0
    assert dominant_share(Usage(gpu_milli=1000), Usage(), 1.0) == 0.0


def test_the_queue_holding_less_goes_first_even_when_its_job_is_newer() -> None:
    snap = cluster([gpu_node("n0")], [running("heavy", on("n0", 0, 1, 2, 3, 4, 5, 6), queue="a")])
    jobs = [one_gpu("a-old", "a", 0), one_gpu("b-new", "b", 60)]
    assert keys(schedule(snap, jobs, T0)) == ["a-old"]
    fair = schedule(snap, jobs, T0, FAIR)
    assert keys(fair) == ["b-new"]
    assert (
        fair.waiting["default/a-old"] == "needs 1 GPU on one node; largest free block is 0 on node n0 (0 free in total)"
    )


@pytest.mark.parametrize(
    ("queues", "order"),
    [
        pytest.param((), ["a1", "b1", "a2", "b2", "a3"], id="equal-weights-alternate"),
        pytest.param((quota("a", weight=2.0),), ["a1", "b1", "a2", "a3", "b2"], id="double-weight-gets-twice"),
    ],
)
def test_shares_are_recomputed_as_the_cycle_admits(queues: tuple[QueueQuota, ...], order: list[str]) -> None:
    jobs = [
        one_gpu("a1", "a", 0),
        one_gpu("a2", "a", 1),
        one_gpu("a3", "a", 2),
        one_gpu("b1", "b", 3),
        one_gpu("b2", "b", 4),
    ]
    snap = cluster([gpu_node("n0")])
    assert keys(schedule(snap, jobs, T0)) == ["a1", "a2", "a3", "b1", "b2"]
    assert keys(schedule(snap, jobs, T0, SchedulerConfig(fair_share=True, queues=queues))) == order


def test_the_dominant_resource_decides() -> None:
    # Queue a holds half the memory, queue b a quarter of the GPUs: b's dominant share is the smaller.
    snap = cluster(
        [gpu_node("n0", memory=512 * GI), gpu_node("n1", memory=512 * GI)],
        [running("mem", on("n0"), queue="a", memory=512 * GI), running("gpu", on("n1", 0, 1, 2, 3), queue="b")],
    )
    jobs = [one_gpu("a-job", "a", 0), one_gpu("b-job", "b", 1)]
    assert keys(schedule(snap, jobs, T0, FAIR)) == ["b-job", "a-job"]


def test_priority_comes_before_fair_share() -> None:
    snap = cluster([gpu_node("n0")], [running("heavy", on("n0", 0, 1, 2, 3, 4, 5), queue="a")])
    jobs = [one_gpu("a-urgent", "a", 10, priority=5), one_gpu("b-normal", "b", 0)]
    assert keys(schedule(snap, jobs, T0, FAIR)) == ["a-urgent", "b-normal"]


def test_fair_order_is_deterministic() -> None:
    jobs = [one_gpu(f"{queue}{i}", queue, i) for queue in "abc" for i in range(3)]
    snap = cluster([gpu_node("n0")])
    first = schedule(snap, jobs, T0, FAIR)
    assert keys(first) == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2"]
    assert schedule(snap, list(reversed(jobs)), T0, FAIR) == first
