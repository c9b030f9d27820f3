"""The success and restart policies: when a job has succeeded, and what a replica failure leads to.

Both are pure functions of the job's spec, its JobType and the replicas observed, so the planner can ask them
at any time and get the same answer for the same world.

Success (from the JobType): the first of ``successRoles`` that the job has decides — every placed replica of
that role must have succeeded; when the job has none of those roles, every placed replica of every role that
is not a service role must have succeeded. Only placed replicas count, so a job admitted with
``minAvailable`` succeeds on the replicas it actually ran.

Restart (from the failed replica's role, else ``runPolicy``): ``Never`` fails the job; ``OnFailure`` retries;
``ExitCode`` retries only exit codes listed in ``retryableExitCodes`` (a replica with no exit code — lost, never
started — is retried, as it says nothing about the program). A role may set its own ``restartPolicy`` and
``retryableExitCodes`` (a Kubeflow Master that must not retry beside Workers that may); ``backoffLimit`` stays
job-wide: a retry past ``backoffLimit`` restarts, of any role, fails the job. Several replicas failing at once
count as one restart, and fail the job if any one of them may not be retried.

A failed replica without an exit code ended with an *unknown* exit status (its supervisor was killed before
recording one): it may have succeeded. It never counts as a success, so it is handled as a failure, but every
decision it causes carries the reason ``ExitStatusUnknown`` and says so: under ``Never`` the job fails rather
than risk running the program twice; under ``OnFailure`` and ``ExitCode`` it is restarted, saying why.

Cleanup (``runPolicy.cleanPodPolicy``): ``Running`` stops every replica still running when the job ends;
``None`` leaves them running (a parameter server after its workers succeeded) once the job succeeded or failed
for a replica's failure, as upstream does; they exit by themselves or with the job's deletion.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from phalanx.core.reconcile.types import ObservedReplica
from phalanx.model.jobs import CleanPodPolicy, Phase, ReplicaSpec, RestartPolicy, RunPolicy, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.replicas import ReplicaPhase, replica_name

# 2**60 seconds is far past any maxBackoffSeconds; capping the exponent keeps the float finite.
_MAX_BACKOFF_EXPONENT = 60


def deciding_roles(job: TrainingJob, jobtype: JobType) -> list[str]:
    """Return the roles whose replicas must all succeed for the job to succeed."""
    for role in jobtype.spec.success_roles:
        if role in job.spec.replicas:
            return [role]
    workers = [role for role in job.spec.replicas if role not in jobtype.spec.service_roles]
    return workers or list(job.spec.replicas)


def success_message(
    job: TrainingJob, jobtype: JobType, replicas: Mapping[str, ObservedReplica], placed: Collection[str]
) -> str | None:
    """Why the job has succeeded, or None while it has not.

    Args:
        job: the job.
        jobtype: its JobType.
        replicas: the replicas observed, by name.
        placed: names of the replicas that have a placement.

    """
    roles = deciding_roles(job, jobtype)
    deciding = [
        name
        for role in roles
        for index in range(job.spec.replicas[role].count)
        if (name := replica_name(job.metadata.name, role, index)) in placed
    ]
    if not deciding:
        return None
    for name in deciding:
        replica = replicas.get(name)
        if replica is None or replica.phase != ReplicaPhase.SUCCEEDED:
            return None
    return f"every {'/'.join(roles)} replica succeeded ({len(deciding)} of {len(deciding)})"


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """What a failure leads to.

    Attributes:
        retry: True to restart, False to fail the job.
        reason: the condition and event reason.
        message: one sentence naming the replica and its exit code.
        culprit: the replica the message names.

    """

    retry: bool
    reason: str
    message: str
    culprit: ObservedReplica


EXIT_STATUS_UNKNOWN = "ExitStatusUnknown"


def failure_reason(replica: ObservedReplica) -> str:
    """The condition and event reason for a failed replica: its exit status known or not."""
    return "ReplicaFailed" if replica.exit_code is not None else EXIT_STATUS_UNKNOWN


def describe_failure(replica: ObservedReplica) -> str:
    """Say how a replica failed: ``replica q-worker-1 failed with exit code 3`` or its message."""
    if replica.exit_code is not None:
        return f"replica {replica.name} failed with exit code {replica.exit_code}"
    detail = f": {replica.message}" if replica.message else " without an exit code"
    return f"replica {replica.name} failed{detail}"


def _with_output(message: str, replica: ObservedReplica) -> str:
    """``message``, then the replica's last line of output when it has one.

    That line is the cause itself most often (a traceback's last line), which a user would otherwise find only in
    the log. It comes last, so the decision reads first.
    """
    return f"{message}; its last output: {replica.last_output}" if replica.last_output else message


def decide_restart(
    policy: RunPolicy,
    failed: Sequence[ObservedReplica],
    *,
    restarts: int,
    roles: Mapping[str, ReplicaSpec] | None = None,
) -> RestartDecision:
    """Whether the job retries after ``failed`` replicas failed (at least one), given the restarts so far.

    Each failed replica is judged by its role's restartPolicy (``roles``: the job's replica specs; a role
    without one of its own follows ``policy``); one that may not be retried fails the job. ``backoffLimit``
    counts the job's restarts, whatever role caused them.
    """
    if not failed:
        raise ValueError("decide_restart needs at least one failed replica")
    for replica in failed:
        refused = _not_retried(policy, replica, roles or {})
        if refused is not None:
            return refused
    culprit = failed[0]
    if restarts >= policy.backoff_limit:
        return RestartDecision(
            False,
            "BackoffLimitExceeded",
            _with_output(
                f"{describe_failure(culprit)}; {restarts} restarts reached backoffLimit {policy.backoff_limit}", culprit
            ),
            culprit,
        )
    return RestartDecision(
        True,
        failure_reason(culprit),
        f"{describe_failure(culprit)}; restart {restarts + 1} of {policy.backoff_limit} "
        f"in {backoff_delay(policy, restarts):g}s",
        culprit,
    )


def _not_retried(
    policy: RunPolicy, replica: ObservedReplica, roles: Mapping[str, ReplicaSpec]
) -> RestartDecision | None:
    """The failure of the job when ``replica``'s role may not retry it; None when it may."""
    spec = roles.get(replica.role)
    own_policy = spec.restart_policy if spec is not None else None
    restart_policy = RestartPolicy(own_policy or policy.restart_policy)
    # A role's own policy is named as the role's, so a job whose roles differ says which one decided.
    whose = f"the {replica.role} role's restartPolicy" if own_policy else "restartPolicy"
    if restart_policy == RestartPolicy.NEVER:
        message = _with_output(f"{describe_failure(replica)}; {whose} is Never", replica)
        return RestartDecision(False, failure_reason(replica), message, replica)
    if restart_policy == RestartPolicy.EXIT_CODE and replica.exit_code is not None:
        own_codes = spec.retryable_exit_codes if spec is not None else None
        codes = own_codes if own_codes is not None else policy.retryable_exit_codes
        if replica.exit_code not in codes:
            listed = ", ".join(str(code) for code in codes) or "none"
            field = f"the {replica.role} role's retryableExitCodes" if own_codes is not None else "retryableExitCodes"
            return RestartDecision(
                False,
                "ReplicaFailed",
                _with_output(f"{describe_failure(replica)}, which is not retryable ({field}: {listed})", replica),
                replica,
            )
    return None


#: The failures after which a finished job's replicas still running stay up under cleanPodPolicy None: a
#: replica's failure, judged by its role's restartPolicy (upstream's "finished" job). After any other (deadline,
#: backoff limit, a GPU gone bad, a spec Phalanx cannot run) they are stopped, as upstream stops its Pods when a
#: job exceeds its limits.
_KEEPING_FAILURES = frozenset({"ReplicaFailed", EXIT_STATUS_UNKNOWN})


def keeps_running_replicas(policy: RunPolicy, phase: Phase, reason: str) -> bool:
    """Whether a job in ``phase`` (for ``reason``) leaves its replicas still running as they are.

    Only under ``cleanPodPolicy: None``, once the job has met its success policy (Storing, Succeeded) or failed
    for a replica's failure. Such replicas keep their resources until they exit or the job is deleted.
    """
    if policy.clean_pod_policy != CleanPodPolicy.NONE:
        return False
    if phase in (Phase.STORING, Phase.SUCCEEDED):
        return True
    return phase == Phase.FAILED and reason in _KEEPING_FAILURES


def backoff_delay(policy: RunPolicy, restarts: int) -> float:
    """Seconds to wait before restart number ``restarts + 1``: doubling from ``backoffSeconds``, capped."""
    delay = policy.backoff_seconds * 2.0 ** min(restarts, _MAX_BACKOFF_EXPONENT)
    return float(min(delay, policy.max_backoff_seconds))
