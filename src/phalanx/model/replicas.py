"""Replica: one running copy of a role, the embedded runtime's Pod.

The controller creates Replica objects with a placement; the executor runs them and reports status; deleting a
replica sets ``deletionTimestamp`` and the executor removes the object once its process group is gone. A name is
``<job>-<role>-<index>``, so two copies of one replica can never exist at once.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from phalanx.model.base import ApiModel
from phalanx.model.jobs import ReplicaPlacement
from phalanx.model.meta import ObjectMeta
from phalanx.model.pods import EnvFromSource, EnvVarSource


class ReplicaPhase(StrEnum):
    """What the executor observed of a replica."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


def replica_name(job_name: str, role: str, index: int) -> str:
    """The stable name of a replica; the same across restarts."""
    return f"{job_name}-{role}-{index}"


class ReplicaObjectSpec(ApiModel):
    """What to run, fully rendered: the executor needs nothing else."""

    job_name: str
    job_uid: str
    role: str
    index: int = Field(ge=0)
    attempt: int = Field(default=0, ge=0)
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    working_dir: str | None = None
    placement: ReplicaPlacement
    cpu_milli: int = Field(default=0, description="CPU reserved for the replica, in millicores")
    memory: int = Field(default=0, description="memory reserved for the replica, in bytes")
    cpu_limit_milli: int = Field(default=0, ge=0, description="its CPU ceiling (resources.limits); 0: cpu_milli")
    memory_limit: int = Field(default=0, ge=0, description="its memory ceiling (resources.limits); 0: memory")
    files: dict[str, str] = Field(default_factory=dict, description="relative path -> content (e.g. hostfile)")
    env_sources: dict[str, EnvVarSource] = Field(
        default_factory=dict,
        description="env variables read at launch from the state directory's secrets and configmaps",
    )
    env_from: list[EnvFromSource] = Field(default_factory=list, description="as env_sources, every key")


#: How much of a failed replica's last output line its status keeps (``ReplicaObjectStatus.last_output``).
LAST_OUTPUT_CHARS = 300


def last_output_of(text: str) -> str:
    """The last non-blank line of ``text`` (a log's end, a Pod's termination message), cut to ``LAST_OUTPUT_CHARS``.

    Control characters become spaces: one would garble a terminal's line, a NUL the store's text. "" for none.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = "".join(c if c.isprintable() else " " for c in lines[-1])
    return line if len(line) <= LAST_OUTPUT_CHARS else line[: LAST_OUTPUT_CHARS - 1] + "…"


class ReplicaObjectStatus(ApiModel):
    """What the executor saw."""

    nul_bytes_allowed = True  # observed free text: it may quote a program's output

    phase: ReplicaPhase = ReplicaPhase.PENDING
    pid: int | None = None
    process_start_ticks: int | None = Field(default=None, description="guards against pid reuse")
    exit_code: int | None = None
    start_time: datetime | None = None
    finish_time: datetime | None = None
    message: str = ""
    log_path: str | None = None
    last_output: str = Field(
        default="",
        max_length=LAST_OUTPUT_CHARS,
        description="a failed replica's last line of output (its error, most often), as a Pod's termination "
        "message falls back to its log",
    )
    gpu_claim: str = Field(
        default="",
        max_length=253,
        description="on Kubernetes with DRA: the ResourceClaim that holds its GPUs; empty: none",
    )
    gpu_claim_allocated: bool = Field(
        default=False, description="its ResourceClaim is allocated its placement's GPUs (its Pod is bound)"
    )
    bound: bool = Field(
        default=True,
        description="it is on its node; false on Kubernetes for a Pod the scheduler has not bound yet, whose node "
        "in the placement is only the planned one",
    )


class Replica(ApiModel):
    """One replica of a job."""

    api_version: Literal["phalanx.dev/v1alpha1"] = "phalanx.dev/v1alpha1"
    kind: Literal["Replica"] = "Replica"
    metadata: ObjectMeta
    spec: ReplicaObjectSpec
    status: ReplicaObjectStatus = Field(default_factory=ReplicaObjectStatus)
