"""Queue: how much a team's jobs may hold at once, what they may borrow, their fair share and priorities.

This module is the API object only. The embedded runtime and phalanx-scheduler enforce quota, cohort
borrowing, fair share and the namespace and priority-class filters through the scheduler core
(docs/scheduling.md).

A job names its queue by ``spec.scheduling.queue`` (``default`` unless it says otherwise). On Kubernetes a
Queue is cluster-scoped, like Kueue's ClusterQueue and Volcano's Queue: handing out quota is the cluster
administrator's decision, and a namespaced Queue would let anyone who may create objects in a namespace grant
their own jobs quota. ``spec.namespaces`` says whose jobs may use the queue (docs/kubernetes.md).

Quantities are written as in a TrainingJob (``cpu: 64``, ``memory: 256Gi``) and held as integers (millicores,
bytes). A resource left out of ``quota`` is not limited by the queue; ``0`` means none of it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from phalanx.model.base import ApiModel
from phalanx.model.bounds import MAX_QUEUE_WEIGHT, MAX_QUOTA_CPU_MILLI, MAX_QUOTA_GPU, MAX_QUOTA_MEMORY
from phalanx.model.jobs import PRIORITY_CLASSES, MemoryBytes, MilliCpu
from phalanx.model.meta import ObjectMeta, check_dns_label
from phalanx.model.resources import cpu_at_most, memory_at_most


def _known_priority_class(name: str) -> str:
    if name not in PRIORITY_CLASSES:
        raise ValueError(f"unknown priority class {name!r}; use one of {', '.join(PRIORITY_CLASSES)}")
    return name


def _namespace_name(name: str) -> str:
    return check_dns_label(name, "namespace")


def _cohort_name(name: str) -> str:
    return check_dns_label(name, "cohort")


PriorityClassName = Annotated[
    str,
    AfterValidator(_known_priority_class),
    WithJsonSchema({"type": "string", "enum": list(PRIORITY_CLASSES)}),
]
NamespaceName = Annotated[str, AfterValidator(_namespace_name)]
# A whole cluster's worth, finite: quota arithmetic must never meet an unbounded number (model.bounds).
QuotaCpu = Annotated[MilliCpu, AfterValidator(cpu_at_most(MAX_QUOTA_CPU_MILLI, "in a queue"))]
QuotaMemory = Annotated[MemoryBytes, AfterValidator(memory_at_most(MAX_QUOTA_MEMORY, "in a queue"))]


class ResourceAmounts(ApiModel):
    """An amount of each resource a queue accounts for; a resource left out is not counted."""

    cpu: QuotaCpu | None = Field(default=None, ge=0, description="cores, e.g. 64 or '500m'")
    memory: QuotaMemory | None = Field(default=None, ge=0, description="bytes, e.g. '256Gi'")
    gpu: int | None = Field(default=None, ge=0, le=MAX_QUOTA_GPU, description="whole GPUs")

    def named(self) -> dict[str, int]:
        """The amounts that are set, by resource name (cpu in millicores, memory in bytes)."""
        values = {"cpu": self.cpu, "memory": self.memory, "gpu": self.gpu}
        return {name: value for name, value in values.items() if value is not None}


class QueueSpec(ApiModel):
    """Quota, borrowing, fair share and the priorities allowed."""

    quota: ResourceAmounts = Field(
        default_factory=ResourceAmounts,
        description="what the queue's admitted jobs may hold at once (nominal quota); a resource left out is "
        "not limited by this queue",
    )
    cohort: Annotated[str, AfterValidator(_cohort_name)] | None = Field(
        default=None,
        description="queues of one cohort lend each other the quota they leave idle",
    )
    borrowing_limit: ResourceAmounts | None = Field(
        default=None,
        description="at most this much beyond quota may be borrowed from the cohort; a resource left out may "
        "borrow without limit (needs cohort)",
    )
    weight: float = Field(
        default=1.0,
        gt=0,
        le=MAX_QUEUE_WEIGHT,
        allow_inf_nan=False,
        description="share of the cohort's idle quota relative to the other queues of the cohort (fair share)",
    )
    priority_classes: list[PriorityClassName] = Field(
        default_factory=list,
        description="priority classes a job of this queue may use; empty: all of them",
    )
    namespaces: list[NamespaceName] = Field(
        default_factory=list,
        description="namespaces whose jobs may use this queue; empty: every namespace",
    )

    @model_validator(mode="after")
    def _borrowing_needs_a_cohort_and_a_quota(self) -> QueueSpec:
        if self.borrowing_limit is None:
            return self
        if self.cohort is None:
            raise ValueError("borrowingLimit: a queue borrows only from its cohort; set cohort, e.g. cohort: research")
        quota = self.quota.named()
        for name in self.borrowing_limit.named():
            if name not in quota:
                raise ValueError(
                    f"borrowingLimit.{name}: quota.{name} is not set, so the queue is not limited in {name} and "
                    f"never borrows it; set quota.{name} or drop borrowingLimit.{name}"
                )
        return self


class QueueStatus(ApiModel):
    """What the scheduler last counted for the queue."""

    admitted: int = Field(default=0, ge=0, description="jobs of this queue that hold resources")
    pending: int = Field(default=0, ge=0, description="jobs of this queue waiting to be admitted")
    usage: ResourceAmounts = Field(
        default_factory=ResourceAmounts,
        description="what the admitted jobs hold; above quota when the queue borrows",
    )


class Queue(ApiModel):
    """A queue of jobs with quota, borrowing within a cohort, fair-share weight and allowed priorities."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: QueueSpec = Field(default_factory=QueueSpec)
    status: QueueStatus = Field(default_factory=QueueStatus)
