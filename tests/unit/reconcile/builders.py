"""Fluent builders for planner tests, and a tiny simulated world that carries a plan out.

job("q").role("worker", 2).restart("OnFailure", backoff_limit=2).gang_restart().phase(Running).placed().obj()
replica("q-worker-0").running().obj()
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

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
from phalanx.model.jobs import Phase, ReplicaPlacement, TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.replicas import ReplicaPhase, replica_name
from phalanx.model.validation import validate_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOBTYPES = builtin_jobtypes()


def at(seconds: float) -> datetime:
    """T0 plus some seconds."""
    return T0 + timedelta(seconds=seconds)


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._type = "generic"
        self._roles: dict[str, int] = {}
        self._role_policies: dict[str, dict[str, Any]] = {}
        self._run_policy: dict[str, Any] = {}
        self._scheduling: dict[str, Any] = {}
        self._status: dict[str, Any] = {}
        self._placed: list[str] | None = None
        self._placed_all = False
        self._generation = 1
        self._created: datetime | None = T0
        self._deleting = False

    def type(self, name: str) -> JobBuilder:
        self._type = name
        return self

    def role(self, role: str, count: int = 1) -> JobBuilder:
        self._roles[role] = count
        return self

    def restart(
        self,
        policy: str,
        *,
        backoff_limit: int | None = None,
        backoff_seconds: float | None = None,
        max_backoff_seconds: float | None = None,
        retryable: list[int] | None = None,
    ) -> JobBuilder:
        self._run_policy["restartPolicy"] = policy
        for key, value in (
            ("backoffLimit", backoff_limit),
            ("backoffSeconds", backoff_seconds),
            ("maxBackoffSeconds", max_backoff_seconds),
            ("retryableExitCodes", retryable),
        ):
            if value is not None:
                self._run_policy[key] = value
        return self

    def role_restart(self, role: str, policy: str, *, retryable: list[int] | None = None) -> JobBuilder:
        """Give ``role`` its own restartPolicy (and retryableExitCodes), over the job's."""
        self._role_policies[role] = {"restartPolicy": policy}
        if retryable is not None:
            self._role_policies[role]["retryableExitCodes"] = retryable
        return self

    def reason(self, reason: str) -> JobBuilder:
        self._status["reason"] = reason
        return self

    def clean_pod_policy(self, policy: str) -> JobBuilder:
        self._run_policy["cleanPodPolicy"] = policy
        return self

    def gang_restart(self) -> JobBuilder:
        self._run_policy["gangRestart"] = True
        return self

    def suspend(self, on: bool = True) -> JobBuilder:
        self._run_policy["suspend"] = on
        return self

    def deadline(self, seconds: int) -> JobBuilder:
        self._run_policy["activeDeadlineSeconds"] = seconds
        return self

    def ttl(self, seconds: int) -> JobBuilder:
        self._run_policy["ttlSecondsAfterFinished"] = seconds
        return self

    def min_available(self, count: int) -> JobBuilder:
        self._scheduling["minAvailable"] = count
        return self

    def phase(self, phase: Phase) -> JobBuilder:
        self._status["phase"] = phase
        if phase in (Phase.SUCCEEDED, Phase.FAILED):
            self._status.setdefault("completion_time", T0)
        return self

    def placed(self, *names: str) -> JobBuilder:
        """Place the named replicas, or every replica when none is named."""
        self._placed_all = not names
        self._placed = list(names)
        return self

    def restarts(self, count: int) -> JobBuilder:
        self._status["restarts"] = count
        return self

    def attempt(self, attempt: int) -> JobBuilder:
        self._status["attempt"] = attempt
        return self

    def next_retry(self, when: datetime | None) -> JobBuilder:
        self._status["next_retry_time"] = when
        return self

    def started(self, when: datetime | None = T0) -> JobBuilder:
        self._status["start_time"] = when
        return self

    def completed(self, when: datetime | None) -> JobBuilder:
        self._status["completion_time"] = when
        return self

    def created(self, when: datetime | None) -> JobBuilder:
        self._created = when
        return self

    def generation(self, generation: int) -> JobBuilder:
        self._generation = generation
        return self

    def deleting(self) -> JobBuilder:
        self._deleting = True
        return self

    def names(self) -> list[str]:
        return [replica_name(self._name, role, i) for role, count in self._roles.items() for i in range(count)]

    def obj(self) -> TrainingJob:
        roles = self._roles or {"worker": 1}
        raw = {
            "metadata": {"name": self._name, "uid": f"uid-{self._name}", "generation": self._generation},
            "spec": {
                "type": self._type,
                "replicas": {
                    role: {
                        "count": count,
                        "template": {"command": ["python", "train.py"]},
                        **self._role_policies.get(role, {}),
                    }
                    for role, count in roles.items()
                },
                "runPolicy": self._run_policy,
                "scheduling": self._scheduling,
            },
        }
        job = validate_job(raw, JOBTYPES)
        meta = job.metadata.model_copy(
            update={"creation_timestamp": self._created, "deletion_timestamp": T0 if self._deleting else None}
        )
        placed = self.names() if self._placed_all else (self._placed or [])
        status = job.status.model_copy(
            update={
                **self._status,
                "placements": {name: ReplicaPlacement(node=f"node-{i % 2}", gpus=[i]) for i, name in enumerate(placed)},
            }
        )
        return job.model_copy(update={"metadata": meta, "status": status})


class ReplicaBuilder:
    def __init__(self, name: str) -> None:
        _, role, index = name.rsplit("-", 2)
        self._fields: dict[str, Any] = {
            "name": name,
            "role": role,
            "index": int(index),
            "attempt": 0,
            "phase": ReplicaPhase.PENDING,
        }

    def pending(self, message: str = "") -> ReplicaBuilder:
        self._fields.update(phase=ReplicaPhase.PENDING, message=message)
        return self

    def running(self) -> ReplicaBuilder:
        self._fields["phase"] = ReplicaPhase.RUNNING
        return self

    def succeeded(self) -> ReplicaBuilder:
        self._fields.update(phase=ReplicaPhase.SUCCEEDED, exit_code=0)
        return self

    def failed(self, exit_code: int | None = 1, message: str = "") -> ReplicaBuilder:
        self._fields.update(phase=ReplicaPhase.FAILED, exit_code=exit_code, message=message)
        return self

    def deleting(self) -> ReplicaBuilder:
        self._fields["deleting"] = True
        return self

    def attempt(self, attempt: int) -> ReplicaBuilder:
        self._fields["attempt"] = attempt
        return self

    def obj(self) -> ObservedReplica:
        return ObservedReplica(**self._fields)


def job(name: str = "q") -> JobBuilder:
    return JobBuilder(name)


def replica(name: str) -> ReplicaBuilder:
    return ReplicaBuilder(name)


_DEFAULT: Any = object()


def build_input(
    job_: JobBuilder | TrainingJob,
    replicas: Iterable[ReplicaBuilder | ObservedReplica] = (),
    *,
    now: datetime = T0,
    staged: bool = True,
    staging_error: str | None = None,
    outputs: OutputsObservation | None = None,
    jobtype: JobType | None = _DEFAULT,
    unhealthy_gpus: dict[str, dict[int, str]] | None = None,
) -> ReconcileInput:
    built = job_.obj() if isinstance(job_, JobBuilder) else job_
    return ReconcileInput(
        job=built,
        jobtype=JOBTYPES[built.spec.type] if jobtype is _DEFAULT else jobtype,
        replicas=tuple(r.obj() if isinstance(r, ReplicaBuilder) else r for r in replicas),
        now=now,
        staged=staged,
        staging_error=staging_error,
        outputs=outputs or OutputsObservation(),
        unhealthy_gpus=unhealthy_gpus or {},
    )


def reconcile(
    job_: JobBuilder | TrainingJob, replicas: Iterable[ReplicaBuilder | ObservedReplica] = (), **inputs: Any
) -> Plan:
    return plan(build_input(job_, replicas, **inputs))


def summarize(result: Plan) -> list[str]:
    """The plan's actions as short strings: ``create q-worker-0@1``, ``delete q-worker-1``, ``store``."""
    job_name = "q"
    lines = []
    for action in result.actions:
        if isinstance(action, CreateReplica):
            lines.append(f"create {replica_name(job_name, action.role, action.index)}@{action.attempt}")
        elif isinstance(action, DeleteReplica):
            lines.append(f"delete {action.name}")
        elif isinstance(action, StoreOutputs):
            lines.append("store")
        elif isinstance(action, DeleteJob):
            lines.append("delete-job")
    return lines


class TwoCopiesError(AssertionError):
    """A plan created a replica whose name was still taken."""


def carry_out(inp: ReconcileInput, result: Plan) -> ReconcileInput:
    """Carry ``result`` out: deletions marked, creations pending, the status saved."""
    world = {r.name: r for r in inp.replicas}
    for action in result.actions:
        if isinstance(action, CreateReplica):
            name = replica_name(inp.job.metadata.name, action.role, action.index)
            if name in world:
                raise TwoCopiesError(f"{name} created while {world[name]} exists")
            world[name] = ObservedReplica(
                name=name,
                role=action.role,
                index=action.index,
                attempt=action.attempt,
                phase=ReplicaPhase.PENDING,
            )
        elif isinstance(action, DeleteReplica) and action.name in world:
            world[action.name] = replace(world[action.name], deleting=True)
    job_ = inp.job.model_copy(update={"status": result.status})
    return replace(inp, job=job_, replicas=tuple(world.values()))
