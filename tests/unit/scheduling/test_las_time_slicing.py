"""Least-attained-service with time slicing (Tiresias-like): bands demote running jobs, starved ones come back.

A ``SchedulingSession`` with ``las_preempt`` keeps every job's attained GPU-seconds across cycles. Thresholds
here are 100 and 1,000 GPU-seconds: an 8-GPU job leaves band 0 after 12.5 s and band 1 after 125 s.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from queue_builders import cluster, gpu_node, keys, on, running, victims
from scheduling_builders import T0, make_job

from phalanx.core.scheduling import PendingJob, SchedulerConfig, SchedulingSession, schedule

LAS = SchedulerConfig(queue_order="least-attained-service", las_preempt=True, las_thresholds=(100.0, 1000.0))


def job(name: str, gpus: int = 8, *, created: float = 0.0, attained: float = 0.0, priority: int = 0) -> PendingJob:
    """``default/<name>``: one replica of ``gpus`` GPUs, submitted at ``created``, ``attained`` GPU-s already."""
    built = make_job(name).replicas(1, gpu=gpus, cpu=1000).created(created).priority(priority).obj()
    return replace(built, attained_service=attained)


def gang(name: str, replicas: int, gpus: int, *, created: float = 0.0, attained: float = 0.0) -> PendingJob:
    built = make_job(name).replicas(replicas, gpu=gpus, cpu=1000).created(created).obj()
    return replace(built, attained_service=attained)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def session(nodes: int = 1, config: SchedulerConfig = LAS) -> SchedulingSession:
    return SchedulingSession(cluster([gpu_node(f"n{i}") for i in range(nodes)]), config)


def test_the_most_demoted_running_job_is_preempted_first() -> None:
    cycles = session()
    # a: 4 GPUs from nothing (band 1 after 25 s); b: 4 GPUs, 900 GPU-s from an earlier run (band 2 after 25 s).
    first = cycles.cycle([job("a", 4), job("b", 4, attained=900.0)], at(0))
    assert keys(first) == ["a", "b"]
    # At 30 s a has 120 GPU-s (band 1) and b 1,020 (band 2): a newcomer (band 0) stops b, the lower band.
    decisions = cycles.cycle([job("c", 4, created=30)], at(30))
    assert victims(decisions) == ["b"]
    assert keys(decisions) == ["c"]
    assert decisions.preempted[0].reason == (
        "preempted to make room for default/c: least attained service, its attained GPU time put it in band 2, "
        "below default/c's band 0 (same priority 0)"
    )
    assert not cycles.holds("default/b")


def test_a_running_job_is_preempted_once_it_leaves_the_waiting_jobs_band() -> None:
    cycles = session()
    assert keys(cycles.cycle([job("a")], at(0))) == ["a"]
    # At 10 s a has 80 GPU-s: band 0, like the newcomer; nothing is preempted within a band.
    waiting = cycles.cycle([job("b", created=10)], at(10))
    assert keys(waiting) == [] and victims(waiting) == []
    assert "preemption cannot help" in waiting.waiting["default/b"]
    # The session says when a leaves band 0: 100 GPU-s at 12.5 s, rounded up to whole seconds.
    assert cycles.next_band_change(at(10)) == at(13)
    demoted = cycles.cycle([job("b", created=10)], at(13))
    assert victims(demoted) == ["a"] and keys(demoted) == ["b"]


def test_no_preemption_within_a_band() -> None:
    cycles = session()
    cycles.cycle([job("a")], at(0))
    # At 20 s a has 160 GPU-s (band 1); b was preempted earlier with 150 GPU-s (band 1 too): it waits.
    decisions = cycles.cycle([job("b", attained=150.0)], at(20))
    assert keys(decisions) == [] and victims(decisions) == []
    assert decisions.waiting["default/b"].endswith(
        "; preemption cannot help: no running job it may preempt holds what it lacks"
    )


def test_real_priority_always_wins_over_bands() -> None:
    cycles = session()
    cycles.cycle([job("high", priority=10)], at(0))
    # high has run into band 2 (1,600 GPU-s); a low-priority newcomer in band 0 still may not stop it.
    low = cycles.cycle([job("low", created=200)], at(200))
    assert keys(low) == [] and victims(low) == []

    cycles = session()
    cycles.cycle([job("low")], at(0))
    # A higher-priority job in a worse band than the running low-priority one: bands never let it preempt
    # (low runs in band 1 at 20 s, high has 5,000 GPU-s) and, without priority preemption, it waits.
    high = cycles.cycle([job("high", priority=10, attained=5000.0)], at(20))
    assert keys(high) == [] and victims(high) == []
    # With priority preemption on too, priority decides, whatever the bands.
    both = session(config=replace(LAS, preemption=True))
    both.cycle([job("low")], at(0))
    decisions = both.cycle([job("high", priority=10, attained=5000.0)], at(20))
    assert victims(decisions) == ["low"] and keys(decisions) == ["high"]
    assert "whose priority 10 is above its 0" in decisions.preempted[0].reason


def test_a_gang_is_preempted_whole_and_a_gang_preempts_whole() -> None:
    cycles = session(nodes=2)
    # g: 2 replicas x 8 GPUs, one per node.
    assert keys(cycles.cycle([gang("g", 2, 8)], at(0))) == ["g"]
    # At 20 s g has 320 GPU-s (band 1): one 8-GPU newcomer stops all of g, and a second one takes the other node.
    decisions = cycles.cycle([job("s", created=20), job("t", created=21)], at(20))
    assert victims(decisions) == ["g"]
    assert keys(decisions) == ["s", "t"]
    assert {a.node for admission in decisions.admitted for a in admission.assignments} == {"n0", "n1"}
    assert not cycles.holds("default/g")

    cycles = session(nodes=2)
    assert keys(cycles.cycle([job("x"), job("y")], at(0))) == ["x", "y"]
    # A waiting gang of two 8-GPU replicas stops both demoted jobs and starts whole.
    decisions = cycles.cycle([gang("w", 2, 8, created=30)], at(30))
    assert sorted(victims(decisions)) == ["x", "y"]
    assert keys(decisions) == ["w"]
    assert len(decisions.admitted[0].assignments) == 2


def test_a_job_admitted_over_a_waiting_one_is_not_preempted_by_it_in_the_next_cycle() -> None:
    cycles = session()
    # a (99 GPU-s already, first in line) gets the node over b; one second later a is in band 1.
    first = cycles.cycle([job("a", attained=99.0), job("b", created=0.5)], at(0))
    assert keys(first) == ["a"]
    protected = cycles.cycle([job("b", created=0.5)], at(1))
    assert keys(protected) == [] and victims(protected) == []
    later = cycles.cycle([job("b", created=0.5)], at(2))
    assert victims(later) == ["a"] and keys(later) == ["b"]


def test_a_job_that_arrives_after_the_admission_may_preempt_at_once() -> None:
    cycles = session()
    assert keys(cycles.cycle([job("a", attained=99.0)], at(0))) == ["a"]
    decisions = cycles.cycle([job("c", created=1)], at(1))
    assert victims(decisions) == ["a"] and keys(decisions) == ["c"]


def test_a_starved_job_is_promoted_to_the_top_band_and_preempts() -> None:
    cycles = session(config=replace(LAS, las_starve_limit=1.0))
    cycles.cycle([job("a")], at(0))
    # At 50 s a (400 GPU-s, band 1) is stopped for b; it ran 50 s and now waits with its 400 GPU-s.
    decisions = cycles.cycle([job("b", created=50)], at(50))
    assert victims(decisions) == ["a"]
    back = job("a", attained=400.0)
    # b leaves band 0 at 62.5 s (13 s rounded up); a reaches its starvation limit at 100 s.
    assert cycles.next_band_change(at(50)) == at(63)
    assert keys(cycles.cycle([back], at(63))) == []
    assert cycles.promotions == 0
    # At 100 s a has waited 50 s, as long as it ran: back to band 0, where it preempts b (band 1, 400 GPU-s).
    promoted = cycles.cycle([back], at(100))
    assert cycles.promotions == 1
    assert victims(promoted) == ["b"] and keys(promoted) == ["a"]
    # Its service counts from zero again for the bands: 12.5 s later it is in band 1 again.
    assert cycles.next_band_change(at(100)) == at(113)


def test_without_the_guard_a_demoted_job_waits_for_room() -> None:
    cycles = session()
    cycles.cycle([job("a")], at(0))
    assert victims(cycles.cycle([job("b", created=50)], at(50))) == ["a"]
    # At 100 s both have 400 GPU-s (band 1): a waits, never promoted, until b ends or falls to band 2.
    assert keys(cycles.cycle([job("a", attained=400.0)], at(100))) == []
    assert cycles.promotions == 0
    assert cycles.next_band_change(at(100)) == at(175)  # b reaches 1,000 GPU-s at 175 s
    assert victims(cycles.cycle([job("a", attained=400.0)], at(175))) == ["b"]


def test_within_a_band_the_waiting_jobs_keep_fifo_order() -> None:
    cycles = session()
    decisions = cycles.cycle(
        [job("late", created=5, attained=50.0), job("early", created=1, attained=90.0), job("worn", attained=500.0)],
        at(10),
    )
    # early and late are both in band 0 (first come first), worn in band 1 waits behind them.
    assert keys(decisions) == ["early"]
    assert list(decisions.waiting) == ["default/late", "default/worn"]


def test_the_switch_needs_least_attained_service_and_the_guard_needs_the_switch() -> None:
    with pytest.raises(ValueError, match="las_preempt needs queue_order 'least-attained-service'"):
        SchedulerConfig(las_preempt=True)
    with pytest.raises(ValueError, match="las_starve_limit needs las_preempt"):
        SchedulerConfig(queue_order="least-attained-service", las_starve_limit=2.0)
    with pytest.raises(ValueError, match="las_starve_limit must be 0"):
        replace(LAS, las_starve_limit=-1.0)


def test_off_by_default_nothing_is_preempted_by_band() -> None:
    plain = SchedulingSession(
        cluster([gpu_node("n0")]), SchedulerConfig(queue_order="least-attained-service", las_thresholds=(100.0,))
    )
    plain.cycle([job("a")], at(0))
    decisions = plain.cycle([job("b", created=100)], at(100))
    assert keys(decisions) == [] and victims(decisions) == []
    assert plain.next_band_change(at(100)) is None


def test_one_shot_schedule_ranks_running_jobs_from_their_start() -> None:
    # schedule() builds a session per cycle: a running job handed in counts its service from ``started``.
    snap = cluster([gpu_node("n0")], [running("old", on("n0", *range(8)), started=0.0)])
    decisions = schedule(snap, [job("new", created=30)], at(30), LAS)
    assert victims(decisions) == ["old"] and keys(decisions) == ["new"]
