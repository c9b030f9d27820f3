"""The reconciler's inputs and outputs.

``plan(ReconcileInput) -> Plan`` (see ``planner.py``) reads the desired state (the job's spec), the observed
state (its replicas, staged data, stored outputs) and the time, and returns the job's next status plus the
actions that move the world towards the spec. It is level-triggered: it never remembers anything between calls
that is not in its input, and running it again on the same input plans nothing new.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from phalanx.model.jobs import ReplicaPlacement, TrainingJob, TrainingJobStatus
from phalanx.model.jobtypes import JobType
from phalanx.model.replicas import ReplicaPhase


@dataclass(frozen=True, slots=True)
class ObservedReplica:
    """A replica as the backend sees it (a Replica object in the embedded store, a Pod on Kubernetes)."""

    name: str
    role: str
    index: int
    attempt: int
    phase: ReplicaPhase
    exit_code: int | None = None
    deleting: bool = False
    start_time: datetime | None = None
    finish_time: datetime | None = None
    message: str = ""
    last_output: str = ""  # a failed replica's last line of output: what it said as it failed


@dataclass(frozen=True, slots=True)
class OutputsObservation:
    """Whether the job's outputs have been stored (the Storing phase), and what was found.

    ``not_collected``: the backend does not collect outputs here, and why (with the fix); the job then succeeds
    saying its outputs were not stored, never that they were.
    """

    stored: bool = False
    location: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    not_collected: str | None = None


@dataclass(frozen=True, slots=True)
class ReconcileInput:
    """Everything the planner may look at.

    Attributes:
        job: the job (spec and current status).
        jobtype: its JobType, or None if it no longer exists.
        replicas: the job's replicas as observed now.
        staged: True when the job's datasets are on its nodes (always True for a job without datasets).
        staging_error: why staging failed, if it did.
        outputs: what the Storing phase produced so far.
        now: the current time.
        unhealthy_gpus: the unhealthy GPUs of the nodes, node -> index -> why (``core.gpu_health.sick_gpus``):
            replicas placed on one are stopped and the job placed again.
        placed_by: the cluster's scheduler that places the job's Pods (``core.delegation.placing_scheduler``): a
            queued job is then admitted at once, its placements left to that scheduler. None: Phalanx's
            scheduler admits and places it.

    """

    job: TrainingJob
    jobtype: JobType | None
    replicas: tuple[ObservedReplica, ...]
    now: datetime
    staged: bool = True
    staging_error: str | None = None
    outputs: OutputsObservation = field(default_factory=OutputsObservation)
    unhealthy_gpus: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    placed_by: str | None = None


@dataclass(frozen=True, slots=True)
class CreateReplica:
    """Start a replica (the backend renders env from the JobType, then creates the Replica/Pod)."""

    role: str
    index: int
    attempt: int
    placement: ReplicaPlacement


@dataclass(frozen=True, slots=True)
class DeleteReplica:
    """Stop a replica and remove it once its processes are gone."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class StoreOutputs:
    """Save the job's outputs to their destination and collect its final metrics."""


@dataclass(frozen=True, slots=True)
class DeleteJob:
    """Remove the finished job (``ttlSecondsAfterFinished`` passed)."""

    reason: str


Action = CreateReplica | DeleteReplica | StoreOutputs | DeleteJob


@dataclass(frozen=True, slots=True)
class EventRecord:
    """An event to record about the job."""

    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the planner decided.

    Attributes:
        status: the job's next status (equal to the input's when nothing changed).
        actions: side effects for the backend to carry out, idempotently.
        events: events to record.
        requeue_after: seconds after which the job must be reconciled again even if nothing changes
            (backoff timers, deadlines, TTL); None when only a change can matter.

    """

    status: TrainingJobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[EventRecord, ...] = ()
    requeue_after: float | None = None
