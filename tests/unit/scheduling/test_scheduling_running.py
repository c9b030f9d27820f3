"""Running jobs as input: checked against the nodes' use, released exactly, and no change without new inputs."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queue_builders import cluster, gpu_node, keys, on, pending, quota, running, victims
from scheduling_builders import GI, T0, make_job
from test_scheduling_purity import build_jobs, busy_cluster, job_shapes

from phalanx.core.scheduling import (
    BACKFILL,
    ClusterSnapshot,
    DeviceAssignment,
    PendingJob,
    ReplicaRequest,
    RunningJob,
    SchedulerConfig,
    SchedulingSession,
    schedule,
)
from phalanx.core.scheduling.holdings import holding_of, rebuild_reservation
from phalanx.model.resources import ResourceVector


def test_a_running_job_is_rebuilt_as_build_snapshot_counts_it() -> None:
    shared = ReplicaRequest(name="s", role="w", resources=ResourceVector(cpu_milli=1500, memory=GI, gpu_milli=300))
    exclusive = ReplicaRequest(name="e", role="w", resources=ResourceVector(cpu_milli=2000, memory=GI, gpu=2))
    share = rebuild_reservation(DeviceAssignment(replica="s", node="n", gpus=(3,), gpu_milli=300), shared)
    whole = rebuild_reservation(DeviceAssignment(replica="e", node="n", cpus=(4, 5), gpus=(0, 1)), exclusive)
    assert (share.cpus, share.shared_cpu_milli, share.memory, share.gpus, share.gpu_milli) == ((), 1500, GI, (3,), 300)
    assert (whole.cpus, whole.shared_cpu_milli, whole.gpus, whole.gpu_milli) == ((4, 5), 0, (0, 1), 1000)
    job = RunningJob(
        key="ns/j",
        priority=0,
        queue="q",
        started=T0,
        replicas=(shared, exclusive),
        assignments=(DeviceAssignment(replica="e", node="n", cpus=(4, 5), gpus=(0, 1)),),
    )
    holding = holding_of(job)
    assert (holding.usage.cpu_milli, holding.usage.gpu_milli, holding.nodes) == (2000, 2000, frozenset({"n"}))


def overclaimed(job: RunningJob) -> ClusterSnapshot:
    """A snapshot listing ``job`` whose nodes do not count what it holds."""
    return ClusterSnapshot(nodes=(gpu_node("n0"),), running=(job,))


@pytest.mark.parametrize(
    ("snap", "message"),
    [
        pytest.param(
            cluster([gpu_node("n0")], [running("a", on("n0", 0)), running("a", on("n0", 1))]),
            "running jobs listed more than once: default/a",
            id="duplicate",
        ),
        pytest.param(
            overclaimed(running("a", on("n0", 0))), "running job default/a on node n0: more memory", id="not-counted"
        ),
        pytest.param(
            replace(
                cluster([gpu_node("n0")], [running("a", on("n0", 0))]),
                running=(replace(running("a", on("n0", 0)), replicas=()),),
            ),
            "unknown replica 'a-worker-0'",
            id="unknown-replica",
        ),
        pytest.param(
            replace(
                cluster([gpu_node("n0")], [running("a", on("n0", 0))]),
                running=(running("a", on("n0", 0)), running("b", on("n0", 0))),
            ),
            "running job default/b on node n0",
            id="gpu-claimed-twice",
        ),
    ],
)
def test_running_jobs_the_nodes_do_not_account_for_are_refused(snap: ClusterSnapshot, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(snap, [], T0)


def test_a_cpu_claimed_twice_is_refused() -> None:
    request = ReplicaRequest(name="r", role="w", resources=ResourceVector(cpu_milli=1000))
    first = RunningJob("ns/a", 0, "q", T0, (request,), (DeviceAssignment(replica="r", node="n0", cpus=(3,)),))
    second = replace(first, key="ns/b")
    node = replace(gpu_node("n0"), used_exclusive_cpus=frozenset({3}))
    with pytest.raises(ValueError, match="CPU 3 is also held by ns/a"):
        schedule(ClusterSnapshot(nodes=(node,), running=(first, second)), [], T0)


def test_running_jobs_on_nodes_that_went_away_are_ignored() -> None:
    gone = running("gone", on("n9", 0))
    snap = replace(cluster([gpu_node("n0")]), running=(gone,))
    assert keys(schedule(snap, [make_job("a").replicas(1, gpu=8).obj()], T0)) == ["a"]


def test_a_pending_job_that_is_also_running_is_refused() -> None:
    snap = cluster([gpu_node("n0")], [running("a", on("n0", 0))])
    with pytest.raises(ValueError, match="already admitted in this session: default/a"):
        schedule(snap, [make_job("a").replicas(1, gpu=1).obj()], T0)


def test_releasing_a_running_job_of_the_snapshot_frees_exactly_its_devices() -> None:
    session = SchedulingSession(cluster([gpu_node("n0")], [running("r", on("n0", 0, 1, 2, 3), on("n0", 4, 5))]))
    assert session.holds("default/r")
    assert keys(session.cycle([make_job("a").replicas(1, gpu=3).obj()], T0)) == []
    session.release("default/r")
    assert not session.holds("default/r")
    assert keys(session.cycle([make_job("a").replicas(1, gpu=8).obj()], T0)) == ["a"]
    with pytest.raises(KeyError):
        session.release("default/r")


def test_an_admitted_job_becomes_a_running_one() -> None:
    session = SchedulingSession(cluster([gpu_node("n0")]))
    now = T0 + timedelta(minutes=5)
    job = pending(make_job("a").replicas(2, gpu=1).priority(3), estimate=600, preemptible=False)
    session.cycle([job], now)
    (held,) = session.running()
    assert (held.key, held.priority, held.queue, held.started, held.preemptible) == (
        "default/a",
        3,
        "default",
        now,
        False,
    )
    assert held.expected_end == now + timedelta(seconds=600)
    assert [a.replica for a in held.assignments] == ["a-worker-0", "a-worker-1"]


def test_a_checkpoint_makes_a_job_the_preferred_victim() -> None:
    config = SchedulerConfig(preemption=True)
    jobs = [running("old", on("n0", 0, 1, 2, 3), started=0), running("young", on("n0", 4, 5, 6, 7), started=10)]
    session = SchedulingSession(cluster([gpu_node("n0")], jobs), config)
    session.mark_checkpointed("default/old")
    assert session.running()[0].checkpointed
    decisions = session.cycle([make_job("high").replicas(1, gpu=4).priority(9).obj()], T0)
    assert victims(decisions) == ["old"]
    assert session.holds("default/young") and not session.holds("default/old")


# --- behaviour without the new inputs -------------------------------------------------------------------


def with_running(snap: ClusterSnapshot) -> ClusterSnapshot:
    """``snap`` with running jobs that explain the GPUs it counts as used."""
    jobs = []
    for node in snap.nodes:
        for index, milli in sorted(node.used_gpus.items()):
            if milli == 1000:
                jobs.append(running(f"{node.name}-{index}", on(node.name, index), memory=0))
    return replace(snap, running=tuple(jobs))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(job_shapes, min_size=1, max_size=6))
def test_running_jobs_and_default_settings_change_no_decision(shapes: list[tuple]) -> None:  # type: ignore[type-arg]
    snap = busy_cluster()
    jobs = build_jobs(shapes)
    expected = schedule(snap, jobs, T0)
    assert with_running(snap).running, "the scenario must describe some running work"
    assert schedule(with_running(snap), jobs, T0) == expected
    assert schedule(snap, jobs, T0, SchedulerConfig()) == expected
    # Preemption with nothing running known admits the same (no job of the cycle is a victim in the cycle
    # that admitted it); reasons may only add a sentence.
    policies = schedule(snap, jobs, T0, SchedulerConfig(preemption=True))
    assert policies.admitted == expected.admitted and policies.preempted == ()
    assert all(policies.waiting[key].startswith(reason) for key, reason in expected.waiting.items())


# --- everything on: still a pure function ---------------------------------------------------------------

ALL_ON = SchedulerConfig(
    queues=(quota("a", gpus=4, cohort="c"), quota("b", gpus=4, cohort="c", borrow=2), quota("solo", gpus=2)),
    fair_share=True,
    queueing_strategy=BACKFILL,
    preemption=True,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 3),
            st.integers(1, 4),
            st.integers(-1, 2),
            st.sampled_from(["a", "b", "solo", "none"]),
            st.one_of(st.none(), st.integers(10, 500)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_with_every_policy_on_decisions_are_deterministic_and_consistent(
    shapes: list[tuple[int, int, int, str, int | None]],
) -> None:
    runs = [
        running("ra", on("n0", 0, 1, 2, 3), queue="a", ends=100),
        running("rb", on("n0", 4, 5, 6, 7), on("n1", 0, 1), queue="b", priority=1, ends=300),
        running("rn", on("n1", 2, 3), queue="none", priority=-1),
    ]
    snap = cluster([gpu_node("n0"), gpu_node("n1")], runs)
    jobs: list[PendingJob] = []
    for number, (count, gpus, priority, queue, estimate) in enumerate(shapes):
        builder = make_job(f"j{number}").replicas(count, gpu=gpus).priority(priority).created(number % 3)
        jobs.append(pending(builder, queue=queue, estimate=estimate))
    decisions = schedule(snap, jobs, T0, ALL_ON)
    assert schedule(replace(snap, running=tuple(reversed(runs))), list(reversed(jobs)), T0, ALL_ON) == decisions
    admitted = {admission.key for admission in decisions.admitted}
    assert admitted.isdisjoint(decisions.waiting) and admitted | set(decisions.waiting) == {j.key for j in jobs}
    by_key = {job.key: job for job in jobs}
    held = {job.key: job for job in runs}
    for preemption in decisions.preempted:
        victim, preemptor = held[preemption.victim], by_key[preemption.preemptor]
        assert preemption.preemptor in admitted
        reclaim = preemptor.queue in ("a", "b") and victim.queue in ("a", "b") and victim.queue != preemptor.queue
        assert victim.priority < preemptor.priority or reclaim
