"""Reconciling: observe a job and its replicas, plan the next status and the actions that close the gap.

``plan`` is the entry point; the types of its input and output live in ``types``.
"""

from phalanx.core.reconcile.planner import plan
from phalanx.core.reconcile.types import (
    Action,
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    EventRecord,
    ObservedReplica,
    OutputsObservation,
    Plan,
    ReconcileInput,
    StoreOutputs,
)

__all__ = [
    "Action",
    "CreateReplica",
    "DeleteJob",
    "DeleteReplica",
    "EventRecord",
    "ObservedReplica",
    "OutputsObservation",
    "Plan",
    "ReconcileInput",
    "StoreOutputs",
    "plan",
]
