"""Scheduling: snapshot in, decisions out (DESIGN §4).

``schedule`` runs one cycle: order the pending jobs, admit whole gangs, choose exact devices (GPU indices,
exclusive CPUs, GPU shares) and explain every job left waiting. ``build_snapshot`` turns observed nodes and
held placements into the ``ClusterSnapshot`` a cycle starts from. Both are pure; backends do the I/O.
"""

from phalanx.core.scheduling.config import SchedulerConfig
from phalanx.core.scheduling.scheduler import schedule
from phalanx.core.scheduling.session import SchedulingSession
from phalanx.core.scheduling.snapshots import build_snapshot
from phalanx.core.scheduling.types import (
    Admission,
    ClusterSnapshot,
    CpuSlot,
    Decisions,
    DeviceAssignment,
    GpuSlot,
    NodeSnapshot,
    PendingJob,
    ReplicaRequest,
    TaskShape,
)

__all__ = [
    "Admission",
    "ClusterSnapshot",
    "CpuSlot",
    "Decisions",
    "DeviceAssignment",
    "GpuSlot",
    "NodeSnapshot",
    "PendingJob",
    "ReplicaRequest",
    "SchedulerConfig",
    "SchedulingSession",
    "TaskShape",
    "build_snapshot",
    "schedule",
]
