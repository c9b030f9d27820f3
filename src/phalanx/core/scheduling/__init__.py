"""Scheduling: snapshot in, decisions out (DESIGN §4).

``schedule`` runs one cycle: order the pending jobs (priority, fair share across queues), admit whole gangs
within their queues' quotas, choose exact devices (GPU indices, exclusive CPUs, GPU shares), hold room for the
first waiting gang (backfill), preempt running gangs when allowed, and explain every job left waiting.
``build_snapshot`` turns observed nodes and held placements into the ``ClusterSnapshot`` a cycle starts from.
Both are pure; backends do the I/O.
"""

from phalanx.core.scheduling.config import (
    BACKFILL,
    BEST_EFFORT_FIFO,
    STRICT_FIFO,
    SchedulerConfig,
)
from phalanx.core.scheduling.scheduler import schedule
from phalanx.core.scheduling.session import SchedulingSession
from phalanx.core.scheduling.snapshots import build_snapshot
from phalanx.core.scheduling.types import (
    Admission,
    ClusterSnapshot,
    CpuSlot,
    DatasetNeed,
    Decisions,
    DeviceAssignment,
    GpuSlot,
    NodeSnapshot,
    PendingJob,
    Preemption,
    QueueQuota,
    QuotaAmounts,
    ReplicaRequest,
    RunningJob,
    TaskShape,
)

__all__ = [
    "BACKFILL",
    "BEST_EFFORT_FIFO",
    "STRICT_FIFO",
    "Admission",
    "ClusterSnapshot",
    "CpuSlot",
    "DatasetNeed",
    "Decisions",
    "DeviceAssignment",
    "GpuSlot",
    "NodeSnapshot",
    "PendingJob",
    "Preemption",
    "QueueQuota",
    "QuotaAmounts",
    "ReplicaRequest",
    "RunningJob",
    "SchedulerConfig",
    "SchedulingSession",
    "TaskShape",
    "build_snapshot",
    "schedule",
]
