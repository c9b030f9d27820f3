"""SchedulerConfiguration: the one file that tunes the scheduler of every backend (docs/scheduling.md).

In the spirit of Kubernetes' KubeSchedulerConfiguration: a document with ``apiVersion`` and ``kind``, read by
``phalanx up --scheduler-config``, ``phalanx-scheduler --config`` (a ConfigMap in the install manifests) and
``phalanx sim --scheduler-config``, so the same file gives the same decisions everywhere. Every field has a
default; an empty configuration (``apiVersion`` and ``kind`` only) is what the runtimes do when given none.

This module is the API object only; ``core.scheduling.configuration`` turns it into the core's
``SchedulerConfig``. Unknown fields are refused, like everywhere else: a misspelt ``queueingStrategy`` must not
quietly run best-effort FIFO.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from phalanx.model.base import ApiModel
from phalanx.model.bounds import MAX_LAS_THRESHOLD, MAX_LAS_THRESHOLDS, MAX_STARVE_LIMIT

SCHEDULER_CONFIGURATION = "SchedulerConfiguration"

QueueOrder = Literal["fifo", "priority", "shortest-first", "least-attained-service"]
QueueingStrategy = Literal["best-effort-fifo", "strict-fifo", "backfill"]
PlacementPolicy = Literal["auto", "pack", "spread", "binpack", "fragmentation", "random"]


class TimeSlicing(ApiModel):
    """Least-attained-service bands, and whether a job in a higher band may preempt one that fell below it."""

    enabled: StrictBool = Field(
        default=False, description="preempt running jobs whose attained GPU-seconds put them in a lower band"
    )
    thresholds: list[float] = Field(
        default_factory=lambda: [3_600.0, 36_000.0],
        min_length=1,
        max_length=MAX_LAS_THRESHOLDS,
        description="band limits in GPU-seconds, ascending (also the bands of the least-attained-service order)",
    )
    starve_limit: float = Field(
        default=0.0,
        ge=0,
        le=MAX_STARVE_LIMIT,
        description="promote a waiting job to the top band once it waited this many times as long as it ran; 0: never",
    )

    @field_validator("thresholds")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        if any(not 0 < t <= MAX_LAS_THRESHOLD for t in value) or value != sorted(set(value)):
            raise ValueError(
                f"must be distinct positive GPU-second amounts of at most {MAX_LAS_THRESHOLD:g} in ascending order, "
                f"e.g. [3600, 36000]; got {value}"
            )
        return value

    @model_validator(mode="after")
    def _starving_needs_slicing(self) -> TimeSlicing:
        if self.starve_limit and not self.enabled:
            raise ValueError("starveLimit: applies only with time slicing; set enabled: true or remove starveLimit")
        return self


class SchedulerConfiguration(ApiModel):
    """How the scheduler orders, admits, places and preempts (every field optional)."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["SchedulerConfiguration"] = "SchedulerConfiguration"
    queue_order: QueueOrder = Field(
        default="fifo",
        description="order among jobs of equal priority; priority always goes first, so 'priority' is 'fifo'",
    )
    time_slicing: TimeSlicing | None = Field(
        default=None, description="least-attained-service bands and time slicing (queueOrder least-attained-service)"
    )
    queueing_strategy: QueueingStrategy = Field(
        default="best-effort-fifo", description="what may pass a job that cannot start yet"
    )
    placement: PlacementPolicy = Field(
        default="auto", description="placement of the jobs that ask for auto (the default); others keep theirs"
    )
    preemption: StrictBool = Field(
        default=True, description="let a waiting job stop lower-priority ones and reclaim its queue's lent quota"
    )

    @model_validator(mode="after")
    def _slicing_needs_las(self) -> SchedulerConfiguration:
        if self.time_slicing is not None and self.queue_order != "least-attained-service":
            raise ValueError(
                "timeSlicing: applies to queueOrder least-attained-service only; set queueOrder: "
                f"least-attained-service or remove timeSlicing (queueOrder is {self.queue_order})"
            )
        return self
