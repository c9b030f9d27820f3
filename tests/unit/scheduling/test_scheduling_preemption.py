"""Preemption: the fewest, cheapest whole gangs are stopped for a higher-priority gang, and never thrash."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from queue_builders import cluster, gpu_node, gpus_of, keys, on, pending, running, victims
from scheduling_builders import T0, make_job

from phalanx.core.scheduling import GpuSlot, RunningJob, SchedulerConfig, SchedulingSession, cycles, schedule
from phalanx.core.scheduling.gang import place_gang
from phalanx.core.scheduling.preemption import MAX_TRIALS

PREEMPT = SchedulerConfig(preemption=True)


GI_8 = 8 * 2**30


def test_without_preemption_a_higher_priority_job_only_waits() -> None:
    snap = cluster([gpu_node("n0")], [running("low", on("n0", *range(8)), priority=0)])
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=4).priority(10).obj()], T0)
    assert keys(decisions) == []
    assert decisions.preempted == ()
    assert decisions.waiting["default/high"] == (
        "needs 4 GPUs on one node; largest free block is 0 on node n0 (0 free in total)"
    )


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param(
            [running("a", on("n0", 0, 1, 2, 3), priority=5), running("b", on("n0", 4, 5, 6, 7), priority=1)],
            ["b"],
            id="lowest-priority-first",
        ),
        pytest.param(
            [running("old", on("n0", 0, 1, 2, 3), started=10), running("young", on("n0", 4, 5, 6, 7), started=20)],
            ["young"],
            id="most-recently-started-first",
        ),
        pytest.param(
            [
                running("young", on("n0", 0, 1, 2, 3), started=20),
                running("saved", on("n0", 4, 5, 6, 7), started=10, checkpointed=True),
            ],
            ["saved"],
            id="checkpointed-first",
        ),
        pytest.param(
            [
                running("kept", on("n0", 0, 1, 2, 3), preemptible=False),
                running("other", on("n0", 4, 5, 6, 7), priority=3),
            ],
            ["other"],
            id="never-a-non-preemptible-job",
        ),
    ],
)
def test_the_cheapest_victim_is_chosen(jobs: list[RunningJob], expected: list[str]) -> None:
    snap = cluster([gpu_node("n0")], jobs)
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=4).priority(10).obj()], T0, PREEMPT)
    assert keys(decisions) == ["high"]
    assert victims(decisions) == expected
    assert [p.preemptor for p in decisions.preempted] == ["default/high"] * len(expected)


def test_lower_priority_comes_before_fewer_victims_and_the_reprieve_keeps_the_set_minimal() -> None:
    # Four 1-GPU jobs of priority 0 and one 4-GPU job of priority 1 fill the node. For 4 GPUs, stopping the
    # big job alone would be one victim, but it has the higher priority: the four small ones go.
    small = [running(f"s{i}", on("n0", i), priority=0, started=i) for i in range(4)]
    big = running("big", on("n0", 4, 5, 6, 7), priority=1)
    snap = cluster([gpu_node("n0")], [*small, big])
    four = schedule(snap, [make_job("high").replicas(1, gpu=4).priority(10).obj()], T0, PREEMPT)
    assert sorted(victims(four)) == ["s0", "s1", "s2", "s3"]
    three = schedule(snap, [make_job("high").replicas(1, gpu=3).priority(10).obj()], T0, PREEMPT)
    # Three GPUs: taking the three youngest small jobs suffices; the oldest one is reprieved.
    assert sorted(victims(three)) == ["s1", "s2", "s3"]
    assert gpus_of(three, "high") == {"n0": {1, 2, 3}}


def test_a_victim_is_reprieved_when_the_gang_fits_without_it() -> None:
    # The youngest job is on n1, where the gang cannot go anyway (n1's other GPUs are held by a job of
    # priority 20); the search takes it first, then the job on n0, and the reprieve gives n1's job back.
    snap = cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [
            running("on-n0", on("n0", *range(8)), started=1),
            running("on-n1", on("n1", 0, 1), started=50),
            running("guard", on("n1", *range(2, 8)), priority=20),
        ],
    )
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert keys(decisions) == ["high"]
    assert victims(decisions) == ["on-n0"]


def test_a_gang_victim_is_stopped_whole_and_frees_every_node() -> None:
    snap = cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [running("wide", on("n0", *range(8)), on("n1", *range(8)), priority=0)],
    )
    decisions = schedule(snap, [make_job("high").replicas(2, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert victims(decisions) == ["wide"]
    assert gpus_of(decisions, "high") == {"n0": set(range(8)), "n1": set(range(8))}


def test_a_gang_that_needs_two_victims_gets_both() -> None:
    snap = cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [running("a", on("n0", *range(8)), started=1), running("b", on("n1", *range(8)), started=2)],
    )
    decisions = schedule(snap, [make_job("high").replicas(2, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert victims(decisions) == ["b", "a"]


@pytest.mark.parametrize(
    ("victim_priority", "preempts"),
    [
        pytest.param(9, True, id="lower"),
        pytest.param(10, False, id="equal-never"),
        pytest.param(11, False, id="higher-never"),
    ],
)
def test_only_strictly_lower_priorities_are_preempted(victim_priority: int, preempts: bool) -> None:
    snap = cluster([gpu_node("n0")], [running("held", on("n0", *range(8)), priority=victim_priority)])
    decisions = schedule(snap, [make_job("new").replicas(1, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert (victims(decisions) == ["held"]) is preempts
    if not preempts:
        assert decisions.waiting["default/new"].endswith(
            "; preemption cannot help: no running job it may preempt holds what it lacks"
        )


def test_preemption_does_not_thrash_between_two_jobs() -> None:
    # The victim comes back as a pending job of lower priority: it cannot preempt its preemptor in turn.
    session = SchedulingSession(cluster([gpu_node("n0")], [running("low", on("n0", *range(8)))]), PREEMPT)
    first = session.cycle([make_job("high").replicas(1, gpu=8).priority(10).obj()], T0)
    assert victims(first) == ["low"]
    assert not session.holds("default/low") and session.holds("default/high")
    second = session.cycle([make_job("low").replicas(1, gpu=8).priority(0).obj()], T0)
    assert keys(second) == [] and second.preempted == ()


def test_cpu_only_work_is_not_stopped_for_a_gpu_gang() -> None:
    snap = cluster(
        [gpu_node("n0")],
        [running("gpus", on("n0", *range(8)), priority=5, memory=GI_8), running("cpu-only", on("n0"), priority=0)],
    )
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert victims(decisions) == ["gpus"]


def test_jobs_admitted_in_the_same_cycle_are_never_victims() -> None:
    snap = cluster([gpu_node("n0")])
    jobs = [
        make_job("first").replicas(1, gpu=8).priority(5).obj(),
        make_job("second").replicas(1, gpu=8).priority(1).obj(),
    ]
    decisions = schedule(snap, jobs, T0, PREEMPT)
    assert keys(decisions) == ["first"]
    assert decisions.preempted == ()


def test_preemption_that_cannot_make_room_changes_nothing() -> None:
    # Even with every lower-priority job stopped, 16 GPUs on one node do not exist.
    snap = cluster([gpu_node("n0")], [running("low", on("n0", 0, 1))])
    decisions = schedule(snap, [make_job("huge").replicas(1, gpu=16).priority(10).obj()], T0, PREEMPT)
    assert decisions.preempted == ()
    two_node = cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [running("low", on("n0", *range(8))), running("top", on("n1", *range(8)), priority=50)],
    )
    waiting = schedule(two_node, [make_job("gang").replicas(2, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert waiting.preempted == () and keys(waiting) == []
    assert waiting.waiting["default/gang"].endswith(
        "; preemption cannot help: stopping the running jobs it may preempt would not make room"
    )
    # The failed search gave everything back: a job that fits the free room is still refused as before.
    after = schedule(
        two_node,
        [make_job("gang").replicas(2, gpu=8).priority(10).obj(), make_job("one").replicas(1, gpu=1).obj()],
        T0,
        PREEMPT,
    )
    assert "default/one" in after.waiting


def test_victim_reasons_say_for_whom() -> None:
    snap = cluster([gpu_node("n0")], [running("low", on("n0", *range(8)), priority=-5)])
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=8).priority(100).obj()], T0, PREEMPT)
    (preemption,) = decisions.preempted
    assert preemption.reason == "preempted to make room for default/high, whose priority 100 is above its -5"


def test_preemption_is_deterministic() -> None:
    jobs_running = [
        running(f"r{i}", on(f"n{i % 3}", *range(4 * (i // 3), 4 * (i // 3) + 4)), priority=i % 2, started=i)
        for i in range(6)
    ]
    snap = cluster([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")], jobs_running)
    jobs = [
        make_job("a").replicas(2, gpu=4).priority(5).obj(),
        make_job("b").replicas(1, gpu=8).priority(3).created(1).obj(),
    ]
    first = schedule(snap, jobs, T0, PREEMPT)
    assert first.preempted
    assert schedule(snap, list(reversed(jobs)), T0, PREEMPT) == first


def test_the_search_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Eight nodes whose GPUs sit on two NUMA nodes without NVLink; a guard of priority 99 holds one GPU of
    # each NUMA node, so a 4-GPU replica with topology "required" can never fit, though counts say it might.
    # 48 one-GPU jobs could be preempted: the search tries at most MAX_TRIALS placements, then gives up.
    nodes = [
        replace(gpu_node(f"n{i}"), gpus=tuple(GpuSlot(index=g, model="A100", numa=g % 2) for g in range(8)))
        for i in range(8)
    ]
    jobs = [running(f"guard-{n}", on(f"n{n}", 0, 1), priority=99) for n in range(8)]
    jobs += [running(f"s{n}-{g}", on(f"n{n}", g), started=n * 8 + g) for n in range(8) for g in range(2, 8)]
    calls = 0
    real = place_gang

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(cycles, "place_gang", counting)
    job = make_job("picky").replicas(1, gpu=4).topology("required").priority(10).obj()
    decisions = schedule(cluster(nodes, jobs), [job], T0, PREEMPT)
    assert decisions.preempted == () and keys(decisions) == []
    assert calls == 1 + MAX_TRIALS


def test_the_node_that_needs_the_fewest_victims_is_freed() -> None:
    # n0 holds eight young 1-GPU jobs, n1 one old 8-GPU job, all of priority 0: stopping the one job frees a
    # whole node, though the young ones come first in least-loss order.
    jobs = [running(f"small-{g}", on("n0", g), started=100 + g) for g in range(8)]
    jobs.append(running("whole", on("n1", *range(8)), started=0))
    snap = cluster([gpu_node("n0"), gpu_node("n1")], jobs)
    decisions = schedule(snap, [make_job("high").replicas(1, gpu=8).priority(10).obj()], T0, PREEMPT)
    assert victims(decisions) == ["whole"]
    assert gpus_of(decisions, "high") == {"n1": set(range(8))}


def test_fair_share_reranks_a_queue_whose_job_was_preempted() -> None:
    # All three pending jobs have priority 5. Queue b's running job is preempted by a's urgent job in the
    # middle of that priority's turn; b's share drops to 0 and its pending job then goes before c's job,
    # though c's is older and c held less than b when the turn began.
    snap = cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [running("b-run", on("n0", *range(8)), queue="b", priority=0), running("c-run", on("n1", 0, 1), queue="c")],
    )
    jobs = [
        pending(make_job("urgent").replicas(1, gpu=8).priority(5), queue="a"),
        pending(make_job("c-next").replicas(1, gpu=6).priority(5).created(1), queue="c"),
        pending(make_job("b-next").replicas(1, gpu=6).priority(5).created(2), queue="b"),
    ]
    decisions = schedule(snap, jobs, T0, SchedulerConfig(preemption=True, fair_share=True))
    assert victims(decisions) == ["b-run"]
    assert keys(decisions) == ["urgent", "b-next"]
