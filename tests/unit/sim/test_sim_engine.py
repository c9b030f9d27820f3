"""The event loop on tiny clusters: gang vs pod-by-pod, deadlock, queue order, placement, determinism."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_builders import cluster, job, outcome

from phalanx.sim.engine import FINISHED, NOT_SUBMITTED, WAITING, SimOptions, check_options, simulate
from phalanx.sim.workloads import SimJob, ffdl_workload


def test_gang_admission_waits_for_room_and_holds_nothing_meanwhile() -> None:
    # Two 4-GPU nodes; x takes one until t=100; a needs both from t=10.
    jobs = [job("x", 0, 100, 4), job("a", 10, 50, 4, 4)]
    result = simulate(cluster(2, 4), jobs, SimOptions(gang=True))
    a = outcome(result, "a")
    assert (a.status, a.first_placed, a.start, a.end, a.queueing_delay) == (FINISHED, 100, 100, 150, 90)
    assert result.partial_gang_idle_gpu_seconds == 0.0
    assert result.timeline.allocated_gpus == result.timeline.running_gpus
    assert result.deadlock is None


def test_pod_by_pod_holds_the_placed_replica_idle_until_the_gang_is_complete() -> None:
    jobs = [job("x", 0, 100, 4), job("a", 10, 50, 4, 4)]
    result = simulate(cluster(2, 4), jobs, SimOptions(gang=False))
    a = outcome(result, "a")
    assert (a.first_placed, a.start, a.end) == (10, 100, 150)
    # a's first 4-GPU replica sat on node-001 from t=10 to t=100.
    assert result.partial_gang_idle_gpu_seconds == 4 * 90
    timeline = result.timeline
    at_10 = timeline.times.index(10)
    assert (timeline.allocated_gpus[at_10], timeline.running_gpus[at_10]) == (8.0, 4.0)
    assert a.nodes == ("node-000", "node-001")


def deadlock_case() -> list[SimJob]:
    # x holds node-000 until t=100. a (long) takes node-001 with its first replica at t=10. b (short) arrives
    # at t=20; when x ends, shortest-first gives b's first replica the freed node: each gang holds half.
    return [
        job("x", 0, 100, 4),
        job("a", 10, 1000, 4, 4),
        job("b", 20, 10, 4, 4),
        job("c", 5000, 10, 1),
        job("d", 6000, 10, 1),
    ]


def test_pod_by_pod_shortest_first_deadlocks_and_the_run_stops_with_a_report() -> None:
    result = simulate(cluster(2, 4), deadlock_case(), SimOptions(queue_order="shortest-first", gang=False))
    assert result.deadlock is not None
    assert result.deadlock.jobs == ("default/a", "default/b")
    assert result.deadlock.held_gpus == 8.0
    assert result.deadlock.time == 5000  # c arrived and could not be placed: nothing can ever move again
    assert "2 job(s) hold 8 GPU(s) in partial gangs" in result.deadlock.describe()
    statuses = {o.job.key: o.status for o in result.jobs}
    assert statuses == {
        "default/x": FINISHED,
        "default/a": WAITING,
        "default/b": WAITING,
        "default/c": WAITING,
        "default/d": NOT_SUBMITTED,
    }
    assert outcome(result, "c").reason  # the core's sentence on why it waits
    # a held 4 GPUs from t=10, b from t=100, both until the stop at t=5000.
    assert result.partial_gang_idle_gpu_seconds == 4 * (5000 - 10) + 4 * (5000 - 100)


def test_the_same_case_with_gang_admission_finishes_everything() -> None:
    result = simulate(cluster(2, 4), deadlock_case(), SimOptions(queue_order="shortest-first", gang=True))
    assert result.deadlock is None
    assert all(o.status == FINISHED for o in result.jobs)
    assert (outcome(result, "b").start, outcome(result, "a").start) == (100, 110)
    assert result.partial_gang_idle_gpu_seconds == 0.0


@pytest.mark.parametrize(
    ("queue_order", "starts"),
    [
        pytest.param("fifo", {"long": 100, "short": 1100}, id="fifo-serves-the-earlier-job"),
        pytest.param("shortest-first", {"short": 100, "long": 110}, id="shortest-first-serves-the-short-job"),
    ],
)
def test_queue_order_decides_who_gets_the_freed_node(queue_order: str, starts: dict[str, float]) -> None:
    jobs = [job("x", 0, 100, 4), job("long", 10, 1000, 4), job("short", 20, 10, 4)]
    result = simulate(cluster(1, 4), jobs, SimOptions(queue_order=queue_order))
    assert {key: outcome(result, key).start for key in starts} == starts


def test_a_completion_and_an_arrival_at_the_same_time_are_one_batch_release_first() -> None:
    result = simulate(cluster(1, 4), [job("x", 0, 100, 4), job("y", 100, 10, 4)])
    assert outcome(result, "y").queueing_delay == 0
    assert result.cycles == 2  # t=0 and t=100 (the last completion has nothing left to schedule)


def test_a_job_larger_than_any_node_waits_with_the_cores_reason_and_the_run_ends() -> None:
    result = simulate(cluster(1, 4), [job("big", 0, 10, 8), job("small", 5, 10, 1)])
    big = outcome(result, "big")
    assert (big.status, big.start) == (WAITING, None)
    assert "GPU" in big.reason
    assert outcome(result, "small").status == FINISHED
    assert result.deadlock is None  # nothing is held by half a job: it is not a deadlock


@pytest.mark.parametrize(
    ("placement", "node_of_b"),
    [pytest.param("pack", "node-000", id="pack-fills-the-busy-node"), pytest.param("spread", "node-001", id="spread")],
)
def test_the_placement_name_reaches_the_core(placement: str, node_of_b: str) -> None:
    result = simulate(cluster(2, 4), [job("a", 0, 100, 1), job("b", 1, 100, 1)], SimOptions(placement=placement))
    assert outcome(result, "a").nodes == ("node-000",)
    assert outcome(result, "b").nodes == (node_of_b,)


def test_gang_waste_is_exactly_zero_where_pod_by_pod_wastes_on_the_same_workload() -> None:
    snapshot = cluster(3, 4)
    jobs = ffdl_workload(150, intensity="heavy", gpus_by_model={"V100": 12}, seed=5)
    gang = simulate(snapshot, jobs, SimOptions(gang=True))
    pods = simulate(snapshot, jobs, SimOptions(gang=False))
    assert gang.partial_gang_idle_gpu_seconds == 0.0
    assert gang.timeline.allocated_gpus == gang.timeline.running_gpus
    assert all(o.first_placed == o.start for o in gang.jobs)
    assert pods.partial_gang_idle_gpu_seconds > 0
    assert any(o.first_placed is not None and o.start is not None and o.first_placed < o.start for o in pods.jobs)


def test_runs_are_deterministic_and_report_progress() -> None:
    jobs = ffdl_workload(60, intensity="heavy", gpus_by_model={"V100": 8}, seed=2)
    calls: list[tuple[int, int]] = []
    first = simulate(
        cluster(2, 4), jobs, SimOptions(gang=False), progress=lambda done, total: calls.append((done, total))
    )
    assert first == simulate(cluster(2, 4), jobs, SimOptions(gang=False))
    assert calls[-1] == (60, 60)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(SimOptions(placement="diagonal"), "placement 'diagonal'", id="placement"),
        pytest.param(SimOptions(topology="sideways"), "topology 'sideways'", id="topology"),
        pytest.param(SimOptions(queue_order="random-walk"), "queue_order 'random-walk'", id="queue-order"),
    ],
)
def test_options_the_core_does_not_know_are_refused_before_the_run(options: SimOptions, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_options(options)
    with pytest.raises(ValueError, match=message):
        simulate(cluster(1, 1), [job("a", 0, 1)], options)


def test_bad_workloads_are_refused() -> None:
    with pytest.raises(ValueError, match="appears more than once"):
        simulate(cluster(1, 1), [job("a", 0, 1), job("a", 5, 1)])
    with pytest.raises(ValueError, match="cannot be negative"):
        simulate(cluster(1, 1), [job("a", -1, 1)])


def test_with_preemption_a_high_priority_job_stops_a_low_one_which_resumes_where_it_stopped() -> None:
    low = job("default/low", 0, 100, 2)
    high = replace(job("default/high", 10, 10, 2), priority=100)
    preempting = simulate(cluster(1, 2), [low, high], SimOptions(preemption=True))
    assert preempting.preemptions == 1
    assert (outcome(preempting, "default/high").start, outcome(preempting, "default/high").end) == (10, 20)
    # 10 s served before the stop, 90 s left after the high-priority job gives the GPUs back at 20.
    assert (outcome(preempting, "default/low").start, outcome(preempting, "default/low").end) == (20, 110)
    waiting = simulate(cluster(1, 2), [low, high], SimOptions())
    assert waiting.preemptions == 0
    assert (outcome(waiting, "default/high").start, outcome(waiting, "default/low").end) == (100, 100)
