"""GPU health decided once (core.gpu_health) and what the planner makes of a replica on an unhealthy GPU."""

from __future__ import annotations

from dataclasses import replace

from phalanx.core.gpu_health import (
    FAULT_INJECTED,
    gpu_health_changes,
    lost_replicas,
    sick_gpus,
    unhealthy_reasons,
    with_health,
)
from phalanx.core.lifecycle import transition
from phalanx.core.reconcile import DeleteReplica, plan
from phalanx.model.jobs import Phase, ReplicaPlacement
from phalanx.model.meta import ObjectMeta
from phalanx.model.nodes import GpuInfo, Node, NodeStatus

from .builders import at, build_input, carry_out, job, reconcile, replica, summarize

P = Phase
W0, W1 = "q-worker-0", "q-worker-1"
# The builders place worker i on node-(i % 2), GPU i: worker 0 holds GPU 0 of node-0.
SICK_GPU0 = {"node-0": {0: "uncorrected ECC errors"}}


def node(name: str = "n0", *gpus: GpuInfo) -> Node:
    return Node(metadata=ObjectMeta(name=name), status=NodeStatus(gpus=list(gpus)))


# -- the health decision -------------------------------------------------------------------------------------------
def test_a_gpu_is_unhealthy_when_discovery_says_so_or_a_fault_names_it() -> None:
    n = node("n0", GpuInfo(index=0), GpuInfo(index=1, healthy=False), GpuInfo(index=2), GpuInfo(index=3))
    reasons = unhealthy_reasons(n, {2: ["XID 79: GPU has fallen off the bus"]}, faults={3, 9})
    assert reasons == {1: ["unhealthy"], 2: ["XID 79: GPU has fallen off the bus"], 3: [FAULT_INJECTED]}


def test_an_unhealthy_gpu_keeps_the_reason_its_discoverer_gave() -> None:
    n = node("n0", GpuInfo(index=0, healthy=False, problem="marked unhealthy in the simulated inventory"))
    assert unhealthy_reasons(n) == {0: ["marked unhealthy in the simulated inventory"]}


def test_with_health_marks_and_clears_gpus() -> None:
    n = node("n0", GpuInfo(index=0), GpuInfo(index=1, healthy=False, problem="old"))
    marked = with_health(n, {0: ["ECC", "XID 48"]})
    assert [(g.index, g.healthy, g.problem) for g in marked.status.gpus] == [(0, False, "ECC; XID 48"), (1, True, "")]
    assert gpu_health_changes(n, marked) == ([0], [1])
    assert gpu_health_changes(marked, marked) == ([], [])


def test_lost_replicas_name_the_gpu_and_why() -> None:
    sick = sick_gpus([node("n0", GpuInfo(index=0), GpuInfo(index=1, healthy=False, problem="XID 79"))])
    assert sick == {"n0": {1: "XID 79"}}
    placements = {
        "a": ReplicaPlacement(node="n0", gpus=[0]),
        "b": ReplicaPlacement(node="n0", gpus=[0, 1]),
        "c": ReplicaPlacement(node="n1", gpus=[1]),
    }
    assert lost_replicas(placements, sick) == {"b": "GPU 1 of node n0 is unhealthy (XID 79)"}


# -- the planner ---------------------------------------------------------------------------------------------------
def test_a_replica_on_an_unhealthy_gpu_is_stopped_and_the_job_restarts() -> None:
    result = reconcile(
        job("q").role("worker", 2).phase(P.RUNNING).placed().restart("OnFailure", backoff_seconds=0),
        (replica(W0).running(), replica(W1).running()),
        unhealthy_gpus=SICK_GPU0,
    )
    assert result.status.phase == P.RESTARTING
    assert result.status.reason == "GPUUnhealthy"
    assert (result.status.restarts, result.status.attempt) == (1, 1)
    # Without gangRestart too: the scheduler places whole gangs, so every replica stops.
    assert summarize(result) == [f"delete {W0}", f"delete {W1}"]
    assert "GPU 0 of node node-0 is unhealthy (uncorrected ECC errors)" in result.status.message
    assert all(a.reason == "GPUUnhealthy" for a in result.actions if isinstance(a, DeleteReplica))


def test_once_stopped_the_job_waits_to_be_placed_again() -> None:
    stopping = reconcile(
        job("q").role("worker", 2).phase(P.RUNNING).placed().restart("OnFailure", backoff_seconds=0),
        (replica(W0).running(), replica(W1).running()),
        unhealthy_gpus=SICK_GPU0,
    )
    gone = replace(
        build_input(job("q").role("worker", 2), unhealthy_gpus=SICK_GPU0),
        job=carry_out(build_input(job("q")), stopping).job.model_copy(),
        replicas=(),
    )
    result = plan(gone)
    assert result.status.phase == P.QUEUED
    assert result.status.reason == "GPUUnhealthy"
    assert result.status.placements == {}
    assert result.status.attempt == 2  # the stopped replicas' attempt is never reused
    assert result.actions == ()


def test_restart_policy_never_fails_the_job() -> None:
    result = reconcile(
        job("q").role("worker", 1).phase(P.RUNNING).placed().restart("Never"),
        (replica(W0).running(),),
        unhealthy_gpus=SICK_GPU0,
    )
    assert result.status.phase == P.FAILED
    assert result.status.reason == "GPUUnhealthy"
    assert "restartPolicy is Never" in result.status.message


def test_a_gpu_failure_counts_against_the_backoff_limit() -> None:
    result = reconcile(
        job("q").role("worker", 1).phase(P.RUNNING).placed().restart("OnFailure", backoff_limit=2).restarts(2),
        (replica(W0).running(),),
        unhealthy_gpus=SICK_GPU0,
    )
    assert result.status.phase == P.FAILED
    assert result.status.reason == "BackoffLimitExceeded"


def test_replicas_on_healthy_gpus_and_finished_ones_are_left_alone() -> None:
    healthy = reconcile(
        job("q").role("worker", 2).phase(P.RUNNING).placed(),
        (replica(W0).running(), replica(W1).running()),
        unhealthy_gpus={"node-0": {1: "ECC"}, "node-1": {0: "ECC"}},
    )
    assert healthy.status.phase == P.RUNNING and healthy.actions == ()
    finished = reconcile(
        job("q").role("worker", 2).phase(P.RUNNING).placed(),
        (replica(W0).succeeded(), replica(W1).running()),
        unhealthy_gpus=SICK_GPU0,
    )
    assert finished.status.phase == P.RUNNING and finished.actions == ()


def test_a_job_staging_on_an_unhealthy_gpu_is_placed_again_before_it_starts() -> None:
    result = reconcile(
        job("q").role("worker", 2).phase(P.DOWNLOADING).placed().attempt(1),
        staged=False,
        unhealthy_gpus=SICK_GPU0,
    )
    assert result.status.phase == P.QUEUED
    assert result.status.restarts == 0  # nothing ran: nothing to count
    assert result.status.attempt == 2


def test_life_across_a_gpu_failure() -> None:
    """Running on GPU 0, GPU 0 fails: stopped, requeued, placed on GPU 1, runs to the end; one restart."""
    inp = build_input(job("q").role("worker", 1).restart("OnFailure", backoff_seconds=0))
    phases: list[Phase] = []
    gpus_used: list[int] = []
    sick: dict[str, dict[int, str]] = {}
    for tick in range(30):
        status = inp.job.status
        if status.phase == P.QUEUED:  # the scheduler: the lowest healthy GPU
            gpu = min({0, 1} - set(sick.get("n0", {})))
            gpus_used.append(gpu)
            admitted = transition(status, P.ADMITTED, reason="Admitted", message="placed", now=at(tick))
            placed = admitted.model_copy(update={"placements": {W0: ReplicaPlacement(node="n0", gpus=[gpu])}})
            inp = replace(inp, job=inp.job.model_copy(update={"status": placed}))
        if tick == 5:
            sick = {"n0": {0: "XID 79"}}
        replicas = tuple(
            r
            for r in inp.replicas
            if not r.deleting  # a deleted replica is gone by the next tick
        )
        replicas = tuple(replace(r, phase=r.phase.RUNNING) if r.phase == r.phase.PENDING else r for r in replicas)
        inp = replace(inp, now=at(tick), replicas=replicas, unhealthy_gpus=sick)
        result = plan(inp)
        inp = carry_out(inp, result)
        if not phases or phases[-1] != result.status.phase:
            phases.append(Phase(result.status.phase))
    assert gpus_used == [0, 1]
    assert phases == [P.QUEUED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.QUEUED, P.DOWNLOADING, P.RUNNING]
    assert inp.job.status.restarts == 1
    assert [r.attempt for r in inp.replicas] == [2]


def test_a_missing_replica_is_not_started_on_an_unhealthy_gpu() -> None:
    """Found by the planner's property test: Running, the replica gone, its GPU unhealthy: placed again instead."""
    result = reconcile(
        job("q").role("worker", 1).phase(P.RUNNING).placed().restart("Never"),
        unhealthy_gpus=SICK_GPU0,
    )
    assert result.status.phase == P.QUEUED
    assert result.actions == ()
