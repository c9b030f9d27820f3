"""The restart policy: a replica whose exit status is unknown (never read as a known code, always said), and a
restartPolicy per role (each failed replica judged by its role's, backoffLimit job-wide)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from phalanx.core.reconcile.policies import EXIT_STATUS_UNKNOWN, decide_restart
from phalanx.core.reconcile.types import ObservedReplica
from phalanx.model.jobs import ReplicaSpec, RunPolicy
from phalanx.model.replicas import ReplicaPhase

UNKNOWN = ObservedReplica(
    name="j-worker-0",
    role="worker",
    index=0,
    attempt=0,
    phase=ReplicaPhase.FAILED,
    exit_code=None,
    message="its exit status is unknown: its supervisor ended without recording it",
)


@pytest.mark.parametrize(
    ("restart_policy", "retry"),
    [("Never", False), ("OnFailure", True), ("ExitCode", True)],
    ids=["never-fails-saying-why", "on-failure-restarts-saying-why", "exit-code-retries-as-lost"],
)
def test_an_unknown_exit_status_is_named_in_every_decision(restart_policy: str, retry: bool) -> None:
    decision = decide_restart(RunPolicy(restart_policy=restart_policy, backoff_limit=3), [UNKNOWN], restarts=0)
    assert decision.retry is retry
    assert decision.reason == EXIT_STATUS_UNKNOWN
    assert "exit status is unknown" in decision.message
    assert "137" not in decision.message and "exit code" not in decision.message


def test_a_known_exit_code_keeps_its_reason() -> None:
    known = replace(UNKNOWN, exit_code=3, message="")
    decision = decide_restart(RunPolicy(restart_policy="Never"), [known], restarts=0)
    assert (decision.retry, decision.reason) == (False, "ReplicaFailed")
    assert "exit code 3" in decision.message


# -- a restartPolicy per role -----------------------------------------------------------------------------
def failed_replica(role: str, exit_code: int | None) -> ObservedReplica:
    return replace(UNKNOWN, name=f"j-{role}-0", role=role, exit_code=exit_code, message="")


def xgboost_like(**run: object) -> tuple[RunPolicy, dict[str, ReplicaSpec]]:
    """A master that must not retry beside workers that retry the codes of a kill, as upstream's XGBoost examples."""
    roles = {
        "master": ReplicaSpec(restart_policy="Never"),
        "worker": ReplicaSpec(restart_policy="ExitCode", retryable_exit_codes=list(range(128, 256))),
    }
    return RunPolicy.model_validate({"backoffLimit": 3, **run}), roles


@pytest.mark.parametrize(
    ("failed", "restarts", "retry", "reason", "said"),
    [
        ([("worker", 137)], 0, True, "ReplicaFailed", "restart 1 of 3"),
        ([("worker", 1)], 0, False, "ReplicaFailed", "not retryable (the worker role's retryableExitCodes: 128,"),
        ([("worker", None)], 0, True, EXIT_STATUS_UNKNOWN, "restart 1 of 3"),
        ([("master", 137)], 0, False, "ReplicaFailed", "the master role's restartPolicy is Never"),
        ([("master", None)], 0, False, EXIT_STATUS_UNKNOWN, "the master role's restartPolicy is Never"),
        ([("worker", 137), ("master", 1)], 0, False, "ReplicaFailed", "j-master-0 failed with exit code 1"),
        ([("worker", 137)], 3, False, "BackoffLimitExceeded", "3 restarts reached backoffLimit 3"),
    ],
    ids=[
        "worker-killed-retries",
        "worker-error-fails",
        "worker-lost-retries",
        "master-never",
        "master-unknown-never",
        "any-refusal-fails-the-job",
        "backoff-limit-is-job-wide",
    ],
)
def test_each_failed_replica_is_judged_by_its_roles_policy(
    failed: list[tuple[str, int | None]], restarts: int, retry: bool, reason: str, said: str
) -> None:
    policy, roles = xgboost_like()
    replicas = [failed_replica(role, code) for role, code in failed]
    decision = decide_restart(policy, replicas, restarts=restarts, roles=roles)
    assert (decision.retry, decision.reason) == (retry, reason)
    assert said in decision.message


def test_a_role_without_its_own_policy_follows_the_jobs() -> None:
    roles = {"master": ReplicaSpec(restart_policy="Never"), "worker": ReplicaSpec()}
    policy = RunPolicy(restart_policy="ExitCode", retryable_exit_codes=[3])
    worker = decide_restart(policy, [failed_replica("worker", 3)], restarts=0, roles=roles)
    other = decide_restart(policy, [failed_replica("worker", 4)], restarts=0, roles=roles)
    assert worker.retry and not other.retry
    assert "(retryableExitCodes: 3)" in other.message  # the job's codes, named as the job's


def test_a_role_may_retry_under_a_job_that_never_does() -> None:
    roles = {"worker": ReplicaSpec(restart_policy="OnFailure"), "chief": ReplicaSpec()}
    policy = RunPolicy(restart_policy="Never")
    assert decide_restart(policy, [failed_replica("worker", 1)], restarts=0, roles=roles).retry
    chief = decide_restart(policy, [failed_replica("chief", 1)], restarts=0, roles=roles)
    assert not chief.retry and chief.message.endswith("; restartPolicy is Never")


@pytest.mark.parametrize(
    ("restart_policy", "restarts", "decision_words"),
    [("Never", 0, "restartPolicy is Never"), ("OnFailure", 3, "3 restarts reached backoffLimit 3")],
    ids=["never", "backoff-limit"],
)
def test_a_failure_ends_with_what_the_replica_last_said(
    restart_policy: str, restarts: int, decision_words: str
) -> None:
    # A new user's trials failed with "exit code 2" alone; the cause ("can't open file ...") was only in the log.
    said = "python: can't open file 'examples/sweeps/train.py': [Errno 2] No such file or directory"
    failed = replace(UNKNOWN, exit_code=2, message="", last_output=said)
    decision = decide_restart(RunPolicy(restart_policy=restart_policy, backoff_limit=3), [failed], restarts=restarts)
    assert decision.message == f"replica j-worker-0 failed with exit code 2; {decision_words}; its last output: {said}"
    silent = decide_restart(
        RunPolicy(restart_policy=restart_policy, backoff_limit=3), [replace(failed, last_output="")], restarts=restarts
    )
    assert silent.message == f"replica j-worker-0 failed with exit code 2; {decision_words}"
