"""The restart policy on a replica whose exit status is unknown: never read as a known code, always said."""

from __future__ import annotations

from dataclasses import replace

import pytest

from phalanx.core.reconcile.policies import EXIT_STATUS_UNKNOWN, decide_restart
from phalanx.core.reconcile.types import ObservedReplica
from phalanx.model.jobs import RunPolicy
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
