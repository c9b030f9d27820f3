"""Backfill and strict FIFO: later jobs pass the first waiting gang only when they do not delay it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queue_builders import cluster, gpu_node, gpus_of, keys, on, pending, running
from scheduling_builders import T0, make_job

from phalanx.core.scheduling import (
    BACKFILL,
    BEST_EFFORT_FIFO,
    STRICT_FIFO,
    ClusterSnapshot,
    PendingJob,
    RunningJob,
    SchedulerConfig,
    SchedulingSession,
    schedule,
)

BACKFILLING = SchedulerConfig(queueing_strategy=BACKFILL)
STRICT = SchedulerConfig(queueing_strategy=STRICT_FIFO)


def busy(*, n1_full: bool, r1_ends: float | None = 100, r2_ends: float | None = 1000) -> ClusterSnapshot:
    """n0: GPUs 0-5 held until ``r1_ends``; n1: GPUs 0-3 (or all) held until ``r2_ends``."""
    n1 = on("n1", *range(8)) if n1_full else on("n1", 0, 1, 2, 3)
    return cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [running("r1", on("n0", *range(6)), ends=r1_ends), running("r2", n1, ends=r2_ends)],
    )


def big() -> PendingJob:
    return pending(make_job("big").replicas(1, gpu=8).priority(10), estimate=3600)


def small(name: str, estimate: float | None, *, gpus: int = 2) -> PendingJob:
    return pending(make_job(name).replicas(1, gpu=gpus), estimate=estimate)


def test_the_head_gets_a_reservation_and_says_when_it_starts() -> None:
    decisions = schedule(busy(n1_full=True), [big()], T0, BACKFILLING)
    assert decisions.waiting["default/big"] == (
        "needs 8 GPUs on one node; largest free block is 2 on node n0 (2 free in total); room is reserved for it: "
        "it can start in 1m40s (at 2026-01-01 00:01:40+00:00), as running jobs end"
    )


def test_a_job_that_ends_before_the_reserved_start_is_backfilled() -> None:
    decisions = schedule(busy(n1_full=True), [big(), small("short", 100)], T0, BACKFILLING)
    assert keys(decisions) == ["short"]


@pytest.mark.parametrize(
    ("estimate", "ending"),
    [
        pytest.param(101, "this job would run until 2026-01-01 00:01:41+00:00", id="ends-after-the-start"),
        pytest.param(None, "this job has no duration estimate", id="no-estimate"),
    ],
)
def test_a_job_that_would_delay_the_head_waits(estimate: float | None, ending: str) -> None:
    decisions = schedule(busy(n1_full=True), [big(), small("long", estimate)], T0, BACKFILLING)
    assert keys(decisions) == []
    assert decisions.waiting["default/long"] == (
        "the room it fits in is reserved for default/big, first in line, which starts on n0 in 1m40s "
        f"(at 2026-01-01 00:01:40+00:00), as running jobs end; {ending}"
    )
    # Without backfill the same job takes the GPUs the head is waiting for.
    assert keys(schedule(busy(n1_full=True), [big(), small("long", estimate)], T0)) == ["long"]


def test_a_long_job_is_backfilled_away_from_the_reserved_node() -> None:
    # n1 has 4 free GPUs until 1000 s: a long job goes there rather than on n0, which big waits for.
    decisions = schedule(busy(n1_full=False), [big(), small("long", 5000)], T0, BACKFILLING)
    assert keys(decisions) == ["long"]
    assert gpus_of(decisions, "long") == {"n1": {4, 5}}
    unreserved = schedule(busy(n1_full=False), [big(), small("long", 5000)], T0)
    assert set(gpus_of(unreserved, "long")) == {"n0"}


def test_jobs_backfilled_together_never_add_up_to_a_delay() -> None:
    # Two long jobs each fit n1's 4 free GPUs, but not both: the second would need n0's GPUs.
    jobs = [big(), small("long-a", 5000, gpus=4), small("long-b", 5000, gpus=2)]
    decisions = schedule(busy(n1_full=False), jobs, T0, BACKFILLING)
    assert keys(decisions) == ["long-a"]
    assert decisions.waiting["default/long-b"].startswith("the room it fits in is reserved for default/big")


def test_without_an_expected_end_the_reservation_has_no_start() -> None:
    decisions = schedule(busy(n1_full=True, r1_ends=None, r2_ends=None), [big(), small("short", 1)], T0, BACKFILLING)
    assert keys(decisions) == []
    assert decisions.waiting["default/big"].endswith(
        "; room is reserved for it once running jobs without an expected end finish"
    )
    assert decisions.waiting["default/short"] == (
        "the room it fits in is reserved for default/big, first in line, which starts on n0 once running jobs "
        "without an expected end finish; this job would run until 2026-01-01 00:00:01+00:00"
    )


def test_a_head_too_big_for_the_cluster_reserves_nothing() -> None:
    huge = pending(make_job("huge").replicas(1, gpu=16).priority(20), estimate=60)
    decisions = schedule(busy(n1_full=True), [huge, big(), small("long", 500)], T0, BACKFILLING)
    assert decisions.waiting["default/huge"] == (
        "a replica needs 16 GPUs but no node has that many: the largest has 8 GPUs (node n0)"
    )
    # The next waiting gang gets the reservation instead.
    assert "room is reserved for it" in decisions.waiting["default/big"]
    assert "default/long" in decisions.waiting


def test_strict_fifo_lets_nothing_pass_a_job_waiting_for_nodes() -> None:
    decisions = schedule(busy(n1_full=True), [big(), small("short", 1)], T0, STRICT)
    assert keys(decisions) == []
    assert decisions.waiting["default/short"] == (
        "waits behind default/big, first in line, which cannot start yet (strict FIFO)"
    )


def test_strict_fifo_blocks_only_the_queue_of_a_job_over_quota() -> None:
    from queue_builders import quota

    config = SchedulerConfig(queueing_strategy=STRICT_FIFO, queues=(quota("a", gpus=1),))
    jobs = [
        pending(make_job("over").replicas(1, gpu=2), queue="a"),
        pending(make_job("same-queue").replicas(1, gpu=1).created(1), queue="a"),
        pending(make_job("other-queue").replicas(1, gpu=1).created(2), queue="b"),
    ]
    decisions = schedule(cluster([gpu_node("n0")]), jobs, T0, config)
    assert keys(decisions) == ["other-queue"]
    assert decisions.waiting["default/same-queue"] == (
        "waits behind default/over, first in queue a, which is over its quota (strict FIFO)"
    )


def test_nothing_changes_for_the_head_when_nothing_running_is_known() -> None:
    snap = cluster([gpu_node("n0")])
    jobs = [pending(make_job("big").replicas(1, gpu=16)), small("s", None)]
    assert schedule(snap, jobs, T0, BACKFILLING) == schedule(snap, jobs, T0)


# --- the property: backfill never delays the head -------------------------------------------------------


def simulate(snap: ClusterSnapshot, jobs: list[PendingJob], strategy: str) -> dict[str, float]:
    """Run ``jobs`` to completion on ``snap`` (estimates are exact); return each job's start second."""
    session = SchedulingSession(snap, SchedulerConfig(queueing_strategy=strategy))
    ends = {job.key: (job.expected_end - T0).total_seconds() for job in snap.running if job.expected_end}
    durations = {job.key: job.duration_estimate or 0.0 for job in jobs}
    waiting = {job.key: job for job in jobs}
    starts: dict[str, float] = {}
    now = 0.0
    while waiting:
        for key, end in sorted(ends.items()):
            if end <= now:
                session.release(key)
                del ends[key]
        decisions = session.cycle(list(waiting.values()), T0 + timedelta(seconds=now))
        for admission in decisions.admitted:
            starts[admission.key] = now
            ends[admission.key] = now + durations[admission.key]
            del waiting[admission.key]
        if not ends:
            break
        now = min(ends.values())
    return starts


running_shapes = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(1, 20)), min_size=1, max_size=8
)  # (node, GPUs, end in tens of seconds)
pending_shapes = st.lists(
    st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 40)), min_size=1, max_size=8
)  # (replicas, GPUs each, duration in tens of seconds)


def build(
    running_spec: list[tuple[int, int, int]], head: tuple[int, int], rest: list[tuple[int, int, int]]
) -> tuple[ClusterSnapshot, list[PendingJob]]:
    nodes = [gpu_node(f"n{i}", gpus=4) for i in range(3)]
    free = {f"n{i}": list(range(4)) for i in range(3)}
    jobs: list[RunningJob] = []
    for number, (node, gpus, end) in enumerate(running_spec):
        name = f"n{node}"
        if len(free[name]) < gpus:
            continue
        taken, free[name] = free[name][:gpus], free[name][gpus:]
        jobs.append(running(f"run-{number}", on(name, *taken), ends=end * 10))
    replicas, gpus = head
    pending_jobs = [pending(make_job("head").replicas(replicas, gpu=gpus).priority(10), estimate=600)]
    for number, (count, each, duration) in enumerate(rest):
        builder = make_job(f"job-{number}").replicas(count, gpu=each).created(number)
        pending_jobs.append(pending(builder, estimate=duration * 10))
    return cluster(nodes, jobs), pending_jobs


@settings(max_examples=150, deadline=None, derandomize=True)
@given(running_shapes, st.tuples(st.integers(1, 3), st.integers(2, 4)), pending_shapes)
def test_backfill_never_delays_the_head(
    running_spec: list[tuple[int, int, int]], head: tuple[int, int], rest: list[tuple[int, int, int]]
) -> None:
    snap, jobs = build(running_spec, head, rest)
    strict = simulate(snap, jobs, STRICT_FIFO)
    backfill = simulate(snap, jobs, BACKFILL)
    assert backfill["default/head"] <= strict["default/head"]
    assert set(backfill) == set(strict) == {job.key for job in jobs}


def test_best_effort_can_delay_the_head_and_backfill_does_not() -> None:
    # n0 has 2 GPUs free and 2 more at 10 s; n1 and n2 are full until 300 s. Under best-effort FIFO a long
    # 2-GPU job takes n0's free pair at once, and the 4-GPU head waits until 300 s.
    snap, jobs = build([(0, 2, 1), (1, 4, 30), (2, 4, 30)], (1, 4), [(1, 2, 40)])
    best_effort = simulate(snap, jobs, BEST_EFFORT_FIFO)
    backfill = simulate(snap, jobs, BACKFILL)
    assert backfill["default/head"] == 10
    assert best_effort["default/head"] == 300
