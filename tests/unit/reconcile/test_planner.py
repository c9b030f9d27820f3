"""The reconcile planner: every branch as a table row; timers, status, idempotence, never two copies."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.core.lifecycle import transition
from phalanx.core.reconcile import (
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    ObservedReplica,
    OutputsObservation,
    Plan,
    ReconcileInput,
    StoreOutputs,
    plan,
)
from phalanx.core.reconcile.policies import backoff_delay
from phalanx.model.jobs import Phase, ReplicaPlacement, RoleStatus, RunPolicy
from phalanx.model.replicas import ReplicaPhase

from .builders import T0, JobBuilder, at, build_input, carry_out, job, reconcile, replica, summarize

P = Phase
STORED = OutputsObservation(stored=True, location="file:///out/q", metrics={"loss": 0.25})


def case(
    case_id: str,
    job_: JobBuilder,
    replicas: tuple[Any, ...] = (),
    *,
    phase: Phase,
    actions: list[str] | None = None,
    reason: str | None = None,
    **inputs: Any,
) -> Any:
    return pytest.param(job_, replicas, inputs, (phase, actions or [], reason), id=case_id)


def two_workers() -> JobBuilder:
    return job("q").role("worker", 2)


W0, W1 = "q-worker-0", "q-worker-1"


def running_pair() -> tuple[Any, ...]:
    return (replica(W0).running(), replica(W1).running())


CASES = [
    # -- Pending ------------------------------------------------------------------------------------------
    case("pending-accepted", two_workers(), phase=P.QUEUED, reason="Accepted"),
    case("pending-suspended", two_workers().suspend(), phase=P.HALTED, reason="Suspended"),
    case("pending-no-jobtype", two_workers(), phase=P.FAILED, reason="JobTypeNotFound", jobtype=None),
    # -- Queued -------------------------------------------------------------------------------------------
    case("queued-waits", two_workers().phase(P.QUEUED), phase=P.QUEUED),
    case("queued-suspend-halts-directly", two_workers().phase(P.QUEUED).suspend(), phase=P.HALTED),
    case(
        "queued-deadline-from-creation",
        two_workers().phase(P.QUEUED).deadline(60),
        phase=P.FAILED,
        reason="DeadlineExceeded",
        now=at(60),
    ),
    case("queued-deadline-not-yet", two_workers().phase(P.QUEUED).deadline(60), phase=P.QUEUED, now=at(59)),
    case(
        "queued-no-jobtype",
        two_workers().phase(P.QUEUED),
        phase=P.FAILED,
        reason="JobTypeNotFound",
        jobtype=None,
    ),
    # -- Admitted -----------------------------------------------------------------------------------------
    case(
        "admitted-stages-and-creates",
        two_workers().phase(P.ADMITTED).placed(),
        phase=P.DOWNLOADING,
        actions=[f"create {W0}@0", f"create {W1}@0"],
        reason="Staging",
    ),
    case("admitted-not-staged-yet", two_workers().phase(P.ADMITTED).placed(), phase=P.DOWNLOADING, staged=False),
    case("admitted-suspend", two_workers().phase(P.ADMITTED).placed().suspend(), phase=P.HALTED),
    case(
        "admitted-deadline",
        two_workers().phase(P.ADMITTED).placed().deadline(10),
        phase=P.FAILED,
        reason="DeadlineExceeded",
        now=at(10),
    ),
    # -- Downloading --------------------------------------------------------------------------------------
    case(
        "downloading-creates-placed",
        two_workers().phase(P.DOWNLOADING).placed(),
        phase=P.DOWNLOADING,
        actions=[f"create {W0}@0", f"create {W1}@0"],
    ),
    case(
        "downloading-creates-only-missing",
        two_workers().phase(P.DOWNLOADING).placed(),
        (replica(W0).pending(),),
        phase=P.DOWNLOADING,
        actions=[f"create {W1}@0"],
    ),
    case(
        "downloading-min-available-creates-placed-only",
        job("q").role("worker", 3).min_available(2).phase(P.DOWNLOADING).placed(W0, W1),
        phase=P.DOWNLOADING,
        actions=[f"create {W0}@0", f"create {W1}@0"],
    ),
    case(
        "downloading-waits-for-staging",
        two_workers().phase(P.DOWNLOADING).placed(),
        phase=P.DOWNLOADING,
        staged=False,
    ),
    case(
        "downloading-waits-for-running",
        two_workers().phase(P.DOWNLOADING).placed(),
        (replica(W0).running(), replica(W1).pending()),
        phase=P.DOWNLOADING,
    ),
    case(
        "downloading-all-running",
        two_workers().phase(P.DOWNLOADING).placed(),
        running_pair(),
        phase=P.RUNNING,
        reason="Started",
    ),
    case(
        "downloading-running-or-succeeded",
        job("q").role("worker", 2).role("evaluator").phase(P.DOWNLOADING).placed(),
        (replica(W0).running(), replica(W1).running(), replica("q-evaluator-0").succeeded()),
        phase=P.RUNNING,
    ),
    case(
        "downloading-min-available-running",
        job("q").role("worker", 3).min_available(2).phase(P.DOWNLOADING).placed(W0, W1),
        running_pair(),
        phase=P.RUNNING,
    ),
    case(
        "downloading-never-recreates-a-deleting-name",
        two_workers().phase(P.DOWNLOADING).placed(),
        (replica(W0).running().deleting(),),
        phase=P.DOWNLOADING,
        actions=[f"create {W1}@0"],
    ),
    case(
        "downloading-staging-error",
        two_workers().phase(P.DOWNLOADING).placed(),
        (replica(W0).running(),),
        phase=P.FAILED,
        actions=[f"delete {W0}"],
        reason="StagingFailed",
        staging_error="s3://bucket/x: access denied",
    ),
    case(
        "downloading-replica-failed-retries",
        two_workers().phase(P.DOWNLOADING).placed().restart("OnFailure"),
        (replica(W0).running(), replica(W1).failed(2)),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
        reason="ReplicaFailed",
    ),
    case(
        "downloading-replica-failed-never",
        two_workers().phase(P.DOWNLOADING).placed(),
        (replica(W0).running(), replica(W1).failed(2)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="ReplicaFailed",
    ),
    case(
        "downloading-suspend",
        two_workers().phase(P.DOWNLOADING).placed().suspend(),
        (replica(W0).running(),),
        phase=P.HALTING,
        actions=[f"delete {W0}"],
        reason="HaltRequested",
    ),
    # -- Running: steady state and late placements ---------------------------------------------------------
    case("running-steady", two_workers().phase(P.RUNNING).placed(), running_pair(), phase=P.RUNNING),
    case(
        "running-creates-late-placement",
        job("q").role("worker", 3).min_available(2).phase(P.RUNNING).placed(W0, W1, "q-worker-2"),
        running_pair(),
        phase=P.RUNNING,
        actions=["create q-worker-2@0"],
    ),
    case(
        "running-late-placement-waits-for-staging",
        job("q").role("worker", 3).min_available(2).phase(P.RUNNING).placed(W0, W1, "q-worker-2"),
        running_pair(),
        phase=P.RUNNING,
        staged=False,
    ),
    case(
        "running-recreates-vanished-replica",
        two_workers().phase(P.RUNNING).placed().attempt(1),
        (replica(W0).running(),),
        phase=P.RUNNING,
        actions=[f"create {W1}@1"],
    ),
    # -- Running: success policy --------------------------------------------------------------------------
    case(
        "running-generic-every-replica-succeeded",
        two_workers().phase(P.RUNNING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.STORING,
        actions=["store"],
        reason="SuccessPolicyMet",
    ),
    case(
        "running-generic-one-still-running",
        two_workers().phase(P.RUNNING).placed(),
        (replica(W0).succeeded(), replica(W1).running()),
        phase=P.RUNNING,
    ),
    case(
        "running-pytorch-master-decides",
        job("q").type("pytorch").role("master").role("worker", 2).phase(P.RUNNING).placed(),
        (replica("q-master-0").succeeded(), replica(W0).running(), replica(W1).succeeded()),
        phase=P.STORING,
        actions=[f"delete {W0}", "store"],
    ),
    case(
        "running-pytorch-workers-done-master-not",
        job("q").type("pytorch").role("master").role("worker", 2).phase(P.RUNNING).placed(),
        (replica("q-master-0").running(), replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.RUNNING,
    ),
    case(
        "running-pytorch-without-master-workers-decide",
        job("q").type("pytorch").role("worker", 2).phase(P.RUNNING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.STORING,
        actions=["store"],
    ),
    case(
        "running-tensorflow-chief-decides-ps-stopped",
        job("q").type("tensorflow").role("chief").role("worker", 1).role("ps").phase(P.RUNNING).placed(),
        (replica("q-chief-0").succeeded(), replica(W0).running(), replica("q-ps-0").running()),
        phase=P.STORING,
        actions=[f"delete {W0}", "delete q-ps-0", "store"],
    ),
    case(
        "running-tensorflow-workers-decide-without-chief",
        job("q").type("tensorflow").role("worker", 2).role("ps").phase(P.RUNNING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded(), replica("q-ps-0").running()),
        phase=P.STORING,
        actions=["delete q-ps-0", "store"],
    ),
    case(
        "running-mpi-launcher-decides-workers-are-services",
        job("q").type("mpi").role("launcher").role("worker", 2).phase(P.RUNNING).placed(),
        (replica("q-launcher-0").succeeded(), *running_pair()),
        phase=P.STORING,
        actions=[f"delete {W0}", f"delete {W1}", "store"],
    ),
    case(
        "running-success-beats-a-simultaneous-failure",
        job("q").type("mpi").role("launcher").role("worker", 2).phase(P.RUNNING).placed(),
        (replica("q-launcher-0").succeeded(), replica(W0).failed(143), replica(W1).running()),
        phase=P.STORING,
        actions=[f"delete {W1}", "store"],
    ),
    # -- Running: failures --------------------------------------------------------------------------------
    case(
        "running-never-fails-the-job",
        two_workers().phase(P.RUNNING).placed(),
        (replica(W0).running(), replica(W1).failed(3)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="ReplicaFailed",
    ),
    case(
        "running-on-failure-restarts-the-failed-replica",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure", backoff_limit=2),
        (replica(W0).running(), replica(W1).failed(3)),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
        reason="ReplicaFailed",
    ),
    case(
        "running-gang-restart-deletes-every-replica",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure").gang_restart(),
        (replica(W0).running(), replica(W1).failed(3)),
        phase=P.RESTARTING,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
    case(
        "running-backoff-limit-reached",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure", backoff_limit=2).restarts(2),
        (replica(W0).running(), replica(W1).failed(3)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="BackoffLimitExceeded",
    ),
    case(
        "running-backoff-limit-zero",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure", backoff_limit=0),
        (replica(W0).running(), replica(W1).failed(3)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="BackoffLimitExceeded",
    ),
    case(
        "running-exit-code-retryable",
        two_workers().phase(P.RUNNING).placed().restart("ExitCode"),
        (replica(W0).running(), replica(W1).failed(137)),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
    ),
    case(
        "running-exit-code-custom-list",
        two_workers().phase(P.RUNNING).placed().restart("ExitCode", retryable=[42]),
        (replica(W0).running(), replica(W1).failed(42)),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
    ),
    case(
        "running-exit-code-not-retryable",
        two_workers().phase(P.RUNNING).placed().restart("ExitCode"),
        (replica(W0).running(), replica(W1).failed(1)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="ReplicaFailed",
    ),
    case(
        "running-exit-code-unknown-is-retried",
        two_workers().phase(P.RUNNING).placed().restart("ExitCode"),
        (replica(W0).running(), replica(W1).failed(None, "node lost")),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
    ),
    case(
        "running-two-failures-one-restart",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure"),
        (replica(W0).failed(3), replica(W1).failed(4)),
        phase=P.RESTARTING,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
    case(
        "running-failed-replica-already-deleting-is-ignored",
        two_workers().phase(P.RUNNING).placed(),
        (replica(W0).running(), replica(W1).failed(3).deleting()),
        phase=P.RUNNING,
    ),
    case(
        "running-gang-deletes-stale-attempt",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure").gang_restart().attempt(2),
        (replica(W0).running().attempt(2), replica(W1).running().attempt(1)),
        phase=P.RUNNING,
        actions=[f"delete {W1}"],
    ),
    case(
        "running-non-gang-keeps-older-attempts",
        two_workers().phase(P.RUNNING).placed().restart("OnFailure").attempt(2),
        (replica(W0).running().attempt(2), replica(W1).running().attempt(0)),
        phase=P.RUNNING,
    ),
    # -- Running: halting, deadline, garbage ---------------------------------------------------------------
    case(
        "running-suspend-halts",
        two_workers().phase(P.RUNNING).placed().suspend(),
        running_pair(),
        phase=P.HALTING,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="HaltRequested",
    ),
    case(
        "running-deadline-from-start",
        two_workers().phase(P.RUNNING).placed().deadline(100).started(at(50)),
        running_pair(),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="DeadlineExceeded",
        now=at(150),
    ),
    case(
        "running-deadline-counts-from-start-not-creation",
        two_workers().phase(P.RUNNING).placed().deadline(100).started(at(50)),
        running_pair(),
        phase=P.RUNNING,
        now=at(120),
    ),
    case(
        "running-no-jobtype",
        two_workers().phase(P.RUNNING).placed(),
        running_pair(),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="JobTypeNotFound",
        jobtype=None,
    ),
    case(
        "running-deletes-replica-of-unknown-role",
        two_workers().phase(P.RUNNING).placed(),
        (*running_pair(), replica("q-ghost-0").running()),
        phase=P.RUNNING,
        actions=["delete q-ghost-0"],
    ),
    case(
        "running-deletes-index-past-count",
        two_workers().phase(P.RUNNING).placed(),
        (*running_pair(), replica("q-worker-5").running()),
        phase=P.RUNNING,
        actions=["delete q-worker-5"],
    ),
    case(
        "running-deletes-unplaced-replica",
        job("q").role("worker", 2).min_available(1).phase(P.RUNNING).placed(W0),
        running_pair(),
        phase=P.RUNNING,
        actions=[f"delete {W1}"],
    ),
    # -- Restarting ---------------------------------------------------------------------------------------
    case(
        "restarting-waits-for-deletion",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(T0),
        (replica(W0).running(), replica(W1).failed(3).deleting()),
        phase=P.RESTARTING,
        now=at(5),
    ),
    case(
        "restarting-waits-for-backoff",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(4)),
        (replica(W0).running(),),
        phase=P.RESTARTING,
        now=at(3),
    ),
    case(
        "restarting-creates-after-backoff",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(4)),
        (replica(W0).running(),),
        phase=P.RESTARTING,
        actions=[f"create {W1}@1"],
        now=at(4),
    ),
    case(
        "restarting-gang-creates-all-with-new-attempt",
        two_workers()
        .phase(P.RESTARTING)
        .placed()
        .restart("OnFailure")
        .gang_restart()
        .restarts(1)
        .attempt(1)
        .next_retry(at(1)),
        phase=P.RESTARTING,
        actions=[f"create {W0}@1", f"create {W1}@1"],
        now=at(1),
    ),
    case(
        "restarting-all-running-again",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(1)),
        (replica(W0).running(), replica(W1).running().attempt(1)),
        phase=P.RUNNING,
        reason="Restarted",
        now=at(9),
    ),
    case(
        "restarting-replacement-fails-again-counts",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(1)),
        (replica(W0).running(), replica(W1).failed(3).attempt(1)),
        phase=P.RESTARTING,
        actions=[f"delete {W1}"],
        reason="ReplicaFailed",
        now=at(2),
    ),
    case(
        "restarting-replacement-fails-past-limit",
        two_workers()
        .phase(P.RESTARTING)
        .placed()
        .restart("OnFailure", backoff_limit=1)
        .restarts(1)
        .attempt(1)
        .next_retry(at(1)),
        (replica(W0).running(), replica(W1).failed(3).attempt(1)),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="BackoffLimitExceeded",
        now=at(2),
    ),
    case(
        "restarting-earlier-attempt-failure-is-folded",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(1)),
        (replica(W0).failed(3).attempt(0), replica(W1).running().attempt(1)),
        phase=P.RESTARTING,
        actions=[f"delete {W0}"],
        now=at(2),
    ),
    case(
        "restarting-suspend",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).suspend(),
        (replica(W0).running(),),
        phase=P.HALTING,
        actions=[f"delete {W0}"],
    ),
    case(
        "restarting-deadline",
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").deadline(30).started(T0).restarts(1),
        (replica(W0).running(),),
        phase=P.FAILED,
        actions=[f"delete {W0}"],
        reason="DeadlineExceeded",
        now=at(30),
    ),
    # -- Storing ------------------------------------------------------------------------------------------
    case(
        "storing-asks-to-store",
        two_workers().phase(P.STORING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.STORING,
        actions=["store"],
    ),
    case(
        "storing-stops-leftover-services",
        job("q").type("tensorflow").role("chief").role("ps").phase(P.STORING).placed(),
        (replica("q-chief-0").succeeded(), replica("q-ps-0").running()),
        phase=P.STORING,
        actions=["delete q-ps-0", "store"],
    ),
    case(
        "storing-stored-waits-for-services-to-stop",
        job("q").type("tensorflow").role("chief").role("ps").phase(P.STORING).placed(),
        (replica("q-chief-0").succeeded(), replica("q-ps-0").running().deleting()),
        phase=P.STORING,
        outputs=STORED,
    ),
    case(
        "storing-stored-succeeds",
        two_workers().phase(P.STORING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.SUCCEEDED,
        actions=[f"delete {W0}", f"delete {W1}"],
        reason="Succeeded",
        outputs=STORED,
    ),
    case(
        "storing-error-fails",
        two_workers().phase(P.STORING).placed(),
        (replica(W0).succeeded(),),
        phase=P.FAILED,
        actions=[f"delete {W0}"],
        reason="StoringFailed",
        outputs=OutputsObservation(error="bucket not writable"),
    ),
    case(
        "storing-ignores-suspend",
        two_workers().phase(P.STORING).placed().suspend(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        phase=P.STORING,
        actions=["store"],
    ),
    # -- Halting, Halted, Preempted -----------------------------------------------------------------------
    case(
        "halting-deletes-every-replica",
        two_workers().phase(P.HALTING).placed().suspend(),
        (replica(W0).running(), replica(W1).succeeded()),
        phase=P.HALTING,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
    case(
        "halting-waits",
        two_workers().phase(P.HALTING).placed().suspend(),
        (replica(W0).running().deleting(),),
        phase=P.HALTING,
    ),
    case("halting-done", two_workers().phase(P.HALTING).placed().suspend(), phase=P.HALTED, reason="Halted"),
    case("halted-stays", two_workers().phase(P.HALTED).suspend(), phase=P.HALTED),
    case("halted-resumed", two_workers().phase(P.HALTED), phase=P.QUEUED, reason="Resumed"),
    case(
        "halted-deadline",
        two_workers().phase(P.HALTED).suspend().deadline(60).started(T0),
        phase=P.FAILED,
        reason="DeadlineExceeded",
        now=at(61),
    ),
    case(
        "preempted-deletes-every-replica",
        two_workers().phase(P.PREEMPTED).placed(),
        running_pair(),
        phase=P.PREEMPTED,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
    case(
        "preempted-waits",
        two_workers().phase(P.PREEMPTED).placed(),
        (replica(W0).running().deleting(),),
        phase=P.PREEMPTED,
    ),
    case("preempted-requeued", two_workers().phase(P.PREEMPTED).placed(), phase=P.QUEUED, reason="Requeued"),
    case("preempted-then-halted", two_workers().phase(P.PREEMPTED).placed().suspend(), phase=P.HALTED),
    # -- Finished -----------------------------------------------------------------------------------------
    case(
        "succeeded-collects-replicas",
        two_workers().phase(P.SUCCEEDED),
        (replica(W0).succeeded(), replica(W1).succeeded().deleting()),
        phase=P.SUCCEEDED,
        actions=[f"delete {W0}"],
    ),
    case(
        "failed-collects-replicas",
        two_workers().phase(P.FAILED),
        running_pair(),
        phase=P.FAILED,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
    case(
        "finished-ttl-passed",
        two_workers().phase(P.SUCCEEDED).ttl(30),
        phase=P.SUCCEEDED,
        actions=["delete-job"],
        now=at(30),
    ),
    case("finished-ttl-not-yet", two_workers().phase(P.SUCCEEDED).ttl(30), phase=P.SUCCEEDED, now=at(29)),
    case("finished-ttl-zero", two_workers().phase(P.FAILED).ttl(0), phase=P.FAILED, actions=["delete-job"]),
    case(
        "job-being-deleted-stops-replicas",
        two_workers().phase(P.RUNNING).placed().deleting(),
        running_pair(),
        phase=P.RUNNING,
        actions=[f"delete {W0}", f"delete {W1}"],
    ),
]


@pytest.mark.parametrize(("job_", "replicas", "inputs", "expected"), CASES)
def test_plan(job_: JobBuilder, replicas: tuple[Any, ...], inputs: dict[str, Any], expected: Any) -> None:
    phase, actions, reason = expected
    result = reconcile(job_, replicas, **inputs)
    assert result.status.phase == phase
    assert summarize(result) == actions
    if reason is not None:
        assert result.status.reason == reason
    # Every table row is also a fixed point: carrying the plan out and planning again changes nothing.
    assert_settled(build_input(job_, replicas, **inputs), result)


def assert_settled(inp: ReconcileInput, result: Plan) -> None:
    again = plan(carry_out(inp, result))
    assert again.status == result.status
    assert again.events == ()
    repeatable = [a for a in again.actions if isinstance(a, StoreOutputs | DeleteJob)]
    assert list(again.actions) == repeatable, f"replanning planned {again.actions}"
    assert plan(inp) == result  # the same input gives the same plan


# -- status details ----------------------------------------------------------------------------------------
def test_restart_updates_counters_and_backoff_timer() -> None:
    result = reconcile(
        two_workers().phase(P.RUNNING).placed().restart("OnFailure", backoff_seconds=2).restarts(1).attempt(1),
        (replica(W0).running().attempt(0), replica(W1).failed(3).attempt(1)),
        now=at(100),
    )
    assert (result.status.restarts, result.status.attempt) == (2, 2)
    assert result.status.next_retry_time == at(104)
    assert result.requeue_after == 4.0


def test_backoff_limit_message_names_replica_code_and_limit() -> None:
    result = reconcile(
        job("q").role("worker", 2).phase(P.RUNNING).placed().restart("OnFailure", backoff_limit=3).restarts(3),
        (replica(W0).running(), replica(W1).failed(3)),
    )
    assert result.status.message == "replica q-worker-1 failed with exit code 3; 3 restarts reached backoffLimit 3"


@pytest.mark.parametrize(
    ("restarts", "expected"),
    [
        pytest.param(0, 1.0, id="first"),
        pytest.param(3, 8.0, id="doubles"),
        pytest.param(9, 300.0, id="capped"),
    ],
)
def test_backoff_doubles_then_caps(restarts: int, expected: float) -> None:
    assert backoff_delay(RunPolicy(), restarts) == expected


def test_backoff_survives_huge_restart_counts() -> None:
    assert backoff_delay(RunPolicy(backoff_limit=1000), 999) == 300.0


def test_create_replica_carries_its_placement_and_the_job_attempt() -> None:
    built = two_workers().phase(P.DOWNLOADING).placed().attempt(3).obj()
    result = reconcile(built)
    creates = [a for a in result.actions if isinstance(a, CreateReplica)]
    assert [(a.role, a.index, a.attempt) for a in creates] == [("worker", 0, 3), ("worker", 1, 3)]
    assert creates[1].placement == built.status.placements[W1]


def test_running_sets_start_time_once() -> None:
    result = reconcile(two_workers().phase(P.DOWNLOADING).placed(), running_pair(), now=at(7))
    assert result.status.start_time == at(7)
    again = reconcile(
        two_workers().phase(P.RESTARTING).placed().started(at(7)).next_retry(None), running_pair(), now=at(50)
    )
    assert again.status.phase == P.RUNNING
    assert again.status.start_time == at(7)
    assert again.status.next_retry_time is None


FULL = "the disk holding /state/runs is full; retried with backoff"


@pytest.mark.parametrize("phase", [P.DOWNLOADING, P.RESTARTING, P.RUNNING])
def test_replicas_that_cannot_be_launched_are_named_on_the_job(phase: Phase) -> None:
    waiting = (replica(W0).pending(FULL), replica(W1).running())
    result = reconcile(two_workers().phase(phase).placed().next_retry(None), waiting, now=at(7))
    assert result.status.phase == phase
    assert (result.status.reason, result.status.message) == ("NotStarted", f"1 replica(s) not started yet: {FULL}")
    assert not result.events  # a status, not an event on every pass


def test_a_running_job_says_so_again_once_its_replicas_are_launched() -> None:
    waited = reconcile(two_workers().phase(P.RUNNING).placed(), (replica(W0).pending(FULL), replica(W1).running()))
    job_ = two_workers().phase(P.RUNNING).placed().obj().model_copy(update={"status": waited.status})
    result = reconcile(job_, running_pair())
    assert (result.status.phase, result.status.reason) == (P.RUNNING, "Started")
    assert result.status.message == "all 2 replica(s) are running"


def test_succeeded_copies_artifacts_and_metrics() -> None:
    result = reconcile(
        two_workers().phase(P.STORING).placed(),
        (replica(W0).succeeded(), replica(W1).succeeded()),
        outputs=STORED,
    )
    assert result.status.artifacts == "file:///out/q"
    assert result.status.metrics == {"loss": 0.25}
    assert result.status.completion_time == T0
    assert result.status.placements == {}


def test_halting_bumps_attempt_and_halted_releases_placements() -> None:
    halting = reconcile(two_workers().phase(P.RUNNING).placed().suspend().attempt(2), running_pair())
    assert halting.status.attempt == 3
    assert halting.status.placements  # held until every replica is gone
    halted = reconcile(two_workers().phase(P.HALTING).placed().suspend().attempt(3))
    assert halted.status.phase == P.HALTED
    assert halted.status.placements == {}


def test_requeue_after_preemption_bumps_attempt() -> None:
    result = reconcile(two_workers().phase(P.PREEMPTED).placed().attempt(1))
    assert (result.status.phase, result.status.attempt, result.status.placements) == (P.QUEUED, 2, {})


def test_replica_statuses_and_observed_generation() -> None:
    result = reconcile(
        job("q").role("worker", 3).role("evaluator").phase(P.RUNNING).placed().generation(4),
        (
            replica(W0).running(),
            replica(W1).succeeded(),
            replica("q-worker-2").pending(),
            replica("q-evaluator-0").running(),
        ),
    )
    assert result.status.observed_generation == 4
    assert result.status.replica_statuses == {
        "worker": RoleStatus(active=2, succeeded=1, failed=0),
        "evaluator": RoleStatus(active=1),
    }


def test_replica_statuses_count_planned_creations_and_deletions() -> None:
    result = reconcile(
        two_workers().phase(P.RUNNING).placed().restart("OnFailure"),
        (replica(W0).running(), replica(W1).failed(3)),
    )
    assert result.status.replica_statuses == {"worker": RoleStatus(active=1, failed=1)}
    created = reconcile(two_workers().phase(P.DOWNLOADING).placed())
    assert created.status.replica_statuses == {"worker": RoleStatus(active=2)}


def test_replica_statuses_are_frozen_once_finished() -> None:
    failed = reconcile(two_workers().phase(P.RUNNING).placed(), (replica(W0).succeeded(), replica(W1).failed(3)))
    assert failed.status.replica_statuses == {"worker": RoleStatus(succeeded=1, failed=1)}
    after_gc = reconcile(two_workers().phase(P.FAILED).obj().model_copy(update={"status": failed.status}))
    assert after_gc.status.replica_statuses == failed.status.replica_statuses


# -- events and conditions ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("job_", "replicas", "events"),
    [
        pytest.param(two_workers(), (), [("Accepted", "Normal")], id="accepted"),
        pytest.param(two_workers().phase(P.ADMITTED).placed(), (), [("Staging", "Normal")], id="staging"),
        pytest.param(
            two_workers().phase(P.RUNNING).placed().restart("OnFailure"),
            (replica(W0).running(), replica(W1).failed(3)),
            [("ReplicaFailed", "Warning")],
            id="restart-is-a-warning",
        ),
        pytest.param(
            two_workers().phase(P.RUNNING).placed(),
            (replica(W0).running(), replica(W1).failed(3)),
            [("ReplicaFailed", "Warning")],
            id="failure-is-a-warning",
        ),
        pytest.param(
            two_workers().phase(P.PREEMPTED).placed().suspend(),
            (),
            [("Requeued", "Normal"), ("Halted", "Normal")],
            id="one-event-per-phase-change",
        ),
        pytest.param(
            two_workers().phase(P.STORING).placed(),
            (replica(W0).succeeded(), replica(W1).succeeded()),
            [],
            id="no-change-no-event",
        ),
    ],
)
def test_events(job_: JobBuilder, replicas: tuple[Any, ...], events: list[tuple[str, str]]) -> None:
    result = reconcile(job_, replicas)
    assert [(event.reason, event.type) for event in result.events] == events


def test_every_phase_change_records_a_condition() -> None:
    result = reconcile(two_workers().phase(P.PREEMPTED).placed().suspend())
    conditions = {c.type: (c.status, c.reason) for c in result.status.conditions}
    assert conditions == {"Queued": ("False", "Requeued"), "Halted": ("True", "Halted")}


def test_restart_during_restarting_records_an_event_without_a_phase_change() -> None:
    result = reconcile(
        two_workers().phase(P.RESTARTING).placed().restart("OnFailure").restarts(1).attempt(1).next_retry(at(1)),
        (replica(W0).running(), replica(W1).failed(3).attempt(1)),
        now=at(2),
    )
    assert result.status.conditions == []  # the builder's status had none and the phase did not change
    assert [(e.reason, e.type) for e in result.events] == [("ReplicaFailed", "Warning")]
    assert (result.status.restarts, result.status.attempt) == (2, 2)


# -- timers ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("job_", "replicas", "now", "expected"),
    [
        pytest.param(two_workers().phase(P.QUEUED).deadline(60), (), at(20), 40.0, id="deadline-from-creation"),
        pytest.param(
            two_workers().phase(P.RUNNING).placed().deadline(60).started(at(30)),
            running_pair(),
            at(40),
            50.0,
            id="deadline-from-start",
        ),
        pytest.param(
            two_workers().phase(P.RESTARTING).placed().next_retry(at(8)),
            (replica(W0).running(),),
            at(5),
            3.0,
            id="backoff",
        ),
        pytest.param(
            two_workers().phase(P.RESTARTING).placed().next_retry(at(8)).deadline(6),
            (replica(W0).running(),),
            at(5),
            1.0,
            id="earliest-timer-wins",
        ),
        pytest.param(two_workers().phase(P.FAILED).ttl(30).completed(at(10)), (), at(25), 15.0, id="ttl"),
        pytest.param(two_workers().phase(P.RUNNING).placed(), running_pair(), at(5), None, id="no-timer"),
        pytest.param(
            two_workers().phase(P.STORING).placed().deadline(1),
            (replica(W0).succeeded(), replica(W1).succeeded()),
            at(0),
            None,
            id="no-deadline-while-storing",
        ),
    ],
)
def test_requeue_after(job_: JobBuilder, replicas: tuple[Any, ...], now: Any, expected: float | None) -> None:
    assert reconcile(job_, replicas, now=now).requeue_after == expected


# -- idempotence: any input, carried out, replans to nothing new ---------------------------------------------
def sometimes() -> st.SearchStrategy[bool]:
    """True about one time in five."""
    return st.integers(0, 4).map(lambda n: n == 0)


@st.composite
def inputs(draw: st.DrawFn) -> ReconcileInput:
    kind = draw(st.sampled_from(["generic", "pytorch", "tensorflow", "mpi"]))
    builder = job("q").type(kind)
    roles = {
        "generic": [("worker", 3), ("evaluator", 1)],
        "pytorch": [("master", 1), ("worker", 3)],
        "tensorflow": [("chief", 1), ("worker", 2), ("ps", 1)],
        "mpi": [("launcher", 1), ("worker", 3)],
    }[kind]
    for role, most in roles:
        if kind == "mpi" or draw(st.booleans()):
            builder.role(role, draw(st.integers(1, most)))
    if not builder.names():
        builder.role("worker", 1)
    builder.restart(
        draw(st.sampled_from(["Never", "OnFailure", "ExitCode"])),
        backoff_limit=draw(st.integers(0, 3)),
        backoff_seconds=draw(st.sampled_from([0.0, 1.0, 5.0])),
        max_backoff_seconds=10.0,
    )
    if draw(st.booleans()):
        builder.gang_restart()
    builder.suspend(draw(sometimes()))
    if draw(sometimes()):
        builder.deadline(draw(st.integers(1, 200)))
    if draw(sometimes()):
        builder.ttl(draw(st.integers(0, 60)))
    phase = draw(st.sampled_from(list(Phase)))
    builder.phase(phase)
    names = builder.names()
    holding = phase in (P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.STORING, P.HALTING, P.PREEMPTED)
    if holding:
        builder.placed(*draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    builder.restarts(draw(st.integers(0, 3))).attempt(draw(st.integers(0, 3)))
    builder.next_retry(draw(st.sampled_from([None, at(-5), at(5)])))
    builder.started(draw(st.sampled_from([None, T0])))
    if phase in (P.SUCCEEDED, P.FAILED):
        builder.completed(draw(st.sampled_from([None, T0])))
    replicas = []
    for name in [*names, "q-ghost-0"]:
        if (name != "q-ghost-0" and not draw(sometimes())) or draw(sometimes()):
            r = replica(name).attempt(draw(st.integers(0, 3)))
            state = draw(st.sampled_from(["pending", "running", "running", "running", "succeeded", "failed"]))
            if state == "failed":
                r.failed(draw(st.sampled_from([None, 1, 137])))
            else:
                getattr(r, state)()
            if draw(sometimes()):
                r.deleting()
            replicas.append(r)
    outputs = draw(st.sampled_from([OutputsObservation(), STORED, OutputsObservation(error="disk full")]))
    return build_input(
        builder,
        replicas,
        now=at(draw(st.integers(0, 90))),
        staged=not draw(sometimes()),
        staging_error="unreachable" if draw(sometimes()) else None,
        outputs=outputs,
        # Worker i is placed on GPU i of node-(i % 2) (see builders): sometimes one of those GPUs is unhealthy.
        unhealthy_gpus={"node-0": {0: "XID 79"}} if draw(sometimes()) else {},
    )


@given(inputs())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_plan_carried_out_replans_to_nothing_new(inp: ReconcileInput) -> None:
    result = plan(inp)
    assert_settled(inp, result)


@given(inputs(), st.booleans())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_jobtype_never_crashes_and_settles(inp: ReconcileInput, keep: bool) -> None:
    inp = inp if keep else replace(inp, jobtype=None)
    assert_settled(inp, plan(inp))


@given(inputs())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_never_two_copies(inp: ReconcileInput) -> None:
    result = plan(inp)
    taken = {r.name for r in inp.replicas}
    created = [a for a in result.actions if isinstance(a, CreateReplica)]
    names = [f"{inp.job.metadata.name}-{a.role}-{a.index}" for a in created]
    assert not taken & set(names)
    assert len(names) == len(set(names))
    deleted = [a.name for a in result.actions if isinstance(a, DeleteReplica)]
    assert len(deleted) == len(set(deleted))
    assert not {r.name for r in inp.replicas if r.deleting} & set(deleted)


# -- a whole life on a simulated executor -----------------------------------------------------------------
class Executor:
    """Replicas start a tick after creation, finish when told, and vanish a tick after deletion."""

    def __init__(
        self,
        fail: dict[tuple[str, int], int] | None = None,
        runs_for: int = 3,
        serves: set[str] | None = None,
    ) -> None:
        self.fail = fail or {}
        self.runs_for = runs_for
        self.serves = serves or set()
        self.age: dict[tuple[str, int], int] = {}

    def tick(self, replicas: tuple[ObservedReplica, ...]) -> tuple[ObservedReplica, ...]:
        after = []
        for r in replicas:
            if r.deleting:
                continue  # gone
            key = (r.name, r.attempt)
            self.age[key] = self.age.get(key, 0) + 1
            if r.phase == ReplicaPhase.PENDING:
                r = replace(r, phase=ReplicaPhase.RUNNING)
            elif r.phase == ReplicaPhase.RUNNING and key in self.fail:
                r = replace(r, phase=ReplicaPhase.FAILED, exit_code=self.fail[key])
            elif r.phase == ReplicaPhase.RUNNING and self.age[key] > self.runs_for and r.name not in self.serves:
                r = replace(r, phase=ReplicaPhase.SUCCEEDED, exit_code=0)
            after.append(r)
        return tuple(after)


def live_through(builder: JobBuilder, executor: Executor, *, ticks: int = 60) -> tuple[list[Phase], list[str]]:
    """Run a job from submission to its end: scheduler admits, executor runs, storing stores."""
    inp = build_input(builder)
    phases: list[Phase] = []
    log: list[str] = []
    store_asked = False
    for tick in range(ticks):
        now = at(tick)
        status = inp.job.status
        if status.phase == P.QUEUED:  # the scheduler: place the whole gang
            placements = {
                f"q-{role}-{i}": ReplicaPlacement(node="n0")
                for role, spec in inp.job.spec.replicas.items()
                for i in range(spec.count)
            }
            admitted = transition(status, P.ADMITTED, reason="Admitted", message="placed", now=now)
            inp = replace(
                inp,
                job=inp.job.model_copy(update={"status": admitted.model_copy(update={"placements": placements})}),
            )
        outputs = STORED if store_asked else OutputsObservation()
        inp = replace(inp, now=now, outputs=outputs, replicas=executor.tick(inp.replicas))
        result = plan(inp)
        log += summarize(result)
        store_asked |= any(isinstance(a, StoreOutputs) for a in result.actions)
        inp = carry_out(inp, result)  # raises TwoCopiesError on a second copy
        if not phases or phases[-1] != result.status.phase:
            phases.append(Phase(result.status.phase))
        if result.status.phase in (P.SUCCEEDED, P.FAILED) and not inp.replicas:
            break
    return phases, log


def test_life_with_one_restart() -> None:
    phases, log = live_through(two_workers().restart("OnFailure", backoff_seconds=2), Executor(fail={(W1, 0): 137}))
    assert phases == [P.QUEUED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.RUNNING, P.STORING, P.SUCCEEDED]
    assert log.count(f"create {W1}@1") == 1
    assert f"create {W0}@1" not in log  # only the failed replica restarts


def test_life_with_gang_restart() -> None:
    phases, log = live_through(two_workers().restart("OnFailure").gang_restart(), Executor(fail={(W1, 0): 1}))
    assert phases[-1] == P.SUCCEEDED
    assert {f"create {W0}@1", f"create {W1}@1"} <= set(log)


def test_life_past_backoff_limit() -> None:
    failures = {(W1, attempt): 1 for attempt in range(5)}
    phases, _ = live_through(two_workers().restart("OnFailure", backoff_limit=2, backoff_seconds=0), Executor(failures))
    assert phases[-1] == P.FAILED
    assert phases.count(P.RESTARTING) == 2


def test_life_of_a_tensorflow_job_stops_its_ps() -> None:
    builder = job("q").type("tensorflow").role("chief").role("worker", 2).role("ps")
    phases, log = live_through(builder, Executor(runs_for=2, serves={"q-ps-0"}))
    assert phases[-1] == P.SUCCEEDED
    assert "delete q-ps-0" in log  # the parameter server never ends by itself; success stops it


def test_stored_status_survives_a_controller_crash_between_status_and_actions() -> None:
    """Restarting was saved but the deletion was lost: the replan deletes it and counts nothing twice."""
    first_inp = build_input(
        two_workers().phase(P.RUNNING).placed().restart("OnFailure"),
        (replica(W0).running(), replica(W1).failed(3)),
    )
    first = plan(first_inp)
    crashed = replace(first_inp, job=first_inp.job.model_copy(update={"status": first.status}))
    again = plan(crashed)
    assert summarize(again) == [f"delete {W1}"]
    assert again.status.restarts == first.status.restarts == 1


def test_gang_crash_recovery_deletes_every_old_attempt() -> None:
    first_inp = build_input(
        two_workers().phase(P.RUNNING).placed().restart("OnFailure").gang_restart(),
        (replica(W0).running(), replica(W1).failed(3)),
    )
    first = plan(first_inp)
    crashed = replace(first_inp, job=first_inp.job.model_copy(update={"status": first.status}))
    again = plan(crashed)
    assert sorted(summarize(again)) == [f"delete {W0}", f"delete {W1}"]
    assert again.status.restarts == 1


def test_plan_time_is_only_the_input_time() -> None:
    inp = build_input(two_workers().phase(P.RUNNING).placed().restart("OnFailure"), (replica(W1).failed(3),))
    later = replace(inp, now=inp.now + timedelta(days=365))
    assert plan(later).status.next_retry_time == later.now + timedelta(seconds=1)


# -- a restartPolicy per role -----------------------------------------------------------------------------
M0 = "q-master-0"


def master_and_workers() -> JobBuilder:
    """A job whose workers retry and whose master does not (upstream's XGBoost examples: Master Never)."""
    return (
        job("q")
        .type("xgboost")
        .role("master")
        .role("worker", 2)
        .restart("OnFailure", backoff_limit=2, backoff_seconds=0)
        .role_restart("master", "Never")
    )


def test_life_of_a_job_whose_worker_role_retries() -> None:
    phases, log = live_through(master_and_workers(), Executor(fail={(W1, 0): 1}, runs_for=6))
    assert phases == [P.QUEUED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.RUNNING, P.STORING, P.SUCCEEDED]
    assert log.count(f"create {W1}@1") == 1
    assert f"create {M0}@1" not in log  # only the failed worker starts again


def test_life_of_a_job_whose_master_role_does_not_retry() -> None:
    phases, log = live_through(master_and_workers(), Executor(fail={(M0, 0): 1}))
    assert phases[-1] == P.FAILED
    assert P.RESTARTING not in phases
    assert not [line for line in log if line.endswith("@1")]


def test_a_master_failing_with_a_worker_fails_the_job() -> None:
    running = (replica(M0).failed(1), replica(W0).failed(1), replica(W1).running())
    result = reconcile(master_and_workers().phase(P.RUNNING).placed(), running)
    assert (result.status.phase, result.status.reason) == (P.FAILED, "ReplicaFailed")
    said = "replica q-master-0 failed with exit code 1; the master role's restartPolicy is Never"
    assert said in result.status.message


def test_worker_restarts_count_against_the_jobs_backoff_limit() -> None:
    failures = {(W1, attempt): 1 for attempt in range(5)}
    phases, _ = live_through(master_and_workers(), Executor(failures, runs_for=20))
    assert phases[-1] == P.FAILED
    assert phases.count(P.RESTARTING) == 2


# -- cleanPodPolicy None: replicas still running when the job ends keep running ---------------------------
def tensorflow_job(policy: str = "None") -> JobBuilder:
    return job("q").type("tensorflow").role("chief").role("worker", 2).role("ps").clean_pod_policy(policy)


def test_life_of_a_job_that_leaves_its_ps_running() -> None:
    phases, log = live_through(tensorflow_job(), Executor(runs_for=2, serves={"q-ps-0"}), ticks=30)
    assert phases[-1] == P.SUCCEEDED
    assert "delete q-ps-0" not in log  # it serves on after the job succeeded
    assert "delete q-chief-0" in log  # finished replicas are collected as before


def test_a_succeeded_job_keeps_a_running_replica_and_collects_it_once_it_exits() -> None:
    succeeded = tensorflow_job().phase(P.SUCCEEDED)
    running = (replica("q-chief-0").succeeded(), replica("q-ps-0").running())
    assert summarize(reconcile(succeeded, running)) == ["delete q-chief-0"]
    exited = (replica("q-ps-0").succeeded(),)
    assert summarize(reconcile(succeeded, exited)) == ["delete q-ps-0"]


def test_storing_neither_stops_nor_waits_for_a_kept_replica() -> None:
    storing = tensorflow_job().phase(P.STORING).placed()
    world = (replica("q-chief-0").succeeded(), replica("q-ps-0").running())
    result = reconcile(storing, world, outputs=STORED)
    assert result.status.phase == P.SUCCEEDED
    assert summarize(result) == ["delete q-chief-0"]


def test_success_says_which_replicas_keep_running() -> None:
    world = (
        replica("q-chief-0").succeeded(),
        replica("q-worker-0").succeeded(),
        replica("q-worker-1").succeeded(),
        replica("q-ps-0").running(),
    )
    result = reconcile(tensorflow_job().phase(P.RUNNING).placed(), world)
    assert ("ReplicasKept", "q-ps-0 keep running (cleanPodPolicy None) until they exit or the job is deleted") in [
        (event.reason, event.message) for event in result.events
    ]
    assert "delete q-ps-0" not in summarize(result)


@pytest.mark.parametrize(
    ("phase", "reason", "kept"),
    [
        (P.FAILED, "ReplicaFailed", True),
        (P.FAILED, "ExitStatusUnknown", True),
        (P.FAILED, "DeadlineExceeded", False),
        (P.FAILED, "BackoffLimitExceeded", False),
        (P.FAILED, "GPUUnhealthy", False),
    ],
    ids=["replica-failed", "exit-status-unknown", "deadline", "backoff-limit", "gpu-unhealthy"],
)
def test_a_failed_job_keeps_running_replicas_only_after_a_replicas_failure(
    phase: Phase, reason: str, kept: bool
) -> None:
    failed = tensorflow_job().phase(phase).reason(reason)
    result = reconcile(failed, (replica("q-ps-0").running(),))
    assert summarize(result) == ([] if kept else ["delete q-ps-0"])


@pytest.mark.parametrize("ending", ["deleted", "ttl"])
def test_a_kept_replica_stops_when_the_job_is_deleted_or_its_ttl_passes(ending: str) -> None:
    builder = tensorflow_job().phase(P.SUCCEEDED)
    builder = builder.deleting() if ending == "deleted" else builder.ttl(5)
    result = reconcile(builder, (replica("q-ps-0").running(),), now=at(10))
    assert "delete q-ps-0" in summarize(result)


def test_running_is_the_default_and_stops_what_still_runs() -> None:
    result = reconcile(tensorflow_job("Running").phase(P.SUCCEEDED), (replica("q-ps-0").running(),))
    assert summarize(result) == ["delete q-ps-0"]


def test_a_trial_its_sweep_stopped_says_so_when_halted_instead_of_inviting_a_resume() -> None:
    # A new user's `phalanx get jobs` after the sweep example: the stopped trials said "resume it to queue it
    # again", which would run them outside their sweep's count. The mark the sweep writes names the reason.
    built = two_workers().phase(P.HALTING).placed().suspend().obj()
    reason = "trial 6 stopped at step 3: its best val_loss so far, 0.66, is worse than 0.35 (median rule)"
    built.metadata.labels["phalanx.dev/sweep"] = "lr-search"
    built.metadata.annotations["phalanx.dev/trial-stopped"] = reason
    result = reconcile(built)
    assert result.status.phase == P.HALTED
    assert result.status.message == f"stopped early by sweep lr-search: {reason}"
    plain = reconcile(two_workers().phase(P.HALTING).placed().suspend())
    assert plain.status.message == "every replica stopped; resume it to queue it again"
