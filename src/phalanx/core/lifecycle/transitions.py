"""The job state machine as a table; ``transition`` is the only way a job's phase changes.

Every legal move is an edge below with the reason it exists. A move that is not in the table is a bug in the
caller and raises, so no backend can invent a phase path the others do not know. ``transition`` is pure: it
returns a new status carrying a condition for the new phase; events and side effects belong to the caller.
"""

from __future__ import annotations

from datetime import datetime

from phalanx.model.jobs import Condition, Phase, TrainingJobStatus

P = Phase

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    P.PENDING: frozenset(
        {
            P.QUEUED,  # accepted: wait for quota and room
            P.HALTED,  # submitted suspended: hold it until resumed
            P.FAILED,  # cannot ever run (its JobType vanished)
        }
    ),
    P.QUEUED: frozenset(
        {
            P.ADMITTED,  # the scheduler placed the whole gang
            P.HALTED,  # halted while waiting: nothing runs, nothing to stop
            P.FAILED,  # activeDeadlineSeconds passed while waiting
        }
    ),
    P.ADMITTED: frozenset(
        {
            P.DOWNLOADING,  # stage datasets on the chosen nodes
            P.HALTING,  # halted before anything started
            P.PREEMPTED,  # a higher-priority gang needs the room
            P.FAILED,  # deadline passed
        }
    ),
    P.DOWNLOADING: frozenset(
        {
            P.RUNNING,  # data staged, every replica started
            P.HALTING,
            P.PREEMPTED,
            P.FAILED,  # a dataset could not be staged, or a replica failed at start with no retry left
            P.RESTARTING,  # a replica failed while the gang was starting and may be retried
            P.QUEUED,  # a GPU of its placement turned unhealthy before its replicas started: place it again
        }
    ),
    P.RUNNING: frozenset(
        {
            P.STORING,  # the success policy is met: save outputs
            P.RESTARTING,  # a replica failed within backoffLimit
            P.QUEUED,  # a replica to start again is placed on an unhealthy GPU: place the job again
            P.FAILED,  # a replica failed with no retry left, or the deadline passed
            P.HALTING,  # the user halted it
            P.PREEMPTED,
        }
    ),
    P.RESTARTING: frozenset(
        {
            P.RUNNING,  # the failed replicas (or the whole gang) run again
            P.QUEUED,  # a GPU of its placement is unhealthy: place it again, on healthy GPUs
            P.FAILED,  # deadline passed during backoff
            P.HALTING,
            P.PREEMPTED,
        }
    ),
    P.STORING: frozenset(
        {
            P.SUCCEEDED,  # outputs saved
            P.FAILED,  # outputs could not be saved
        }
    ),
    P.PREEMPTED: frozenset({P.QUEUED}),  # victims wait again, whole
    P.HALTING: frozenset({P.HALTED}),  # every replica stopped
    P.HALTED: frozenset(
        {
            P.QUEUED,  # resumed
            P.FAILED,  # deadline passed while halted
        }
    ),
    P.SUCCEEDED: frozenset(),
    P.FAILED: frozenset(),
}

# Phases in which the job holds its placement (devices, CPU, memory) on nodes.
HOLDING_PHASES = frozenset({P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.STORING, P.HALTING})
# Phases in which the job is not finished.
ACTIVE_PHASES = frozenset(set(Phase) - {P.SUCCEEDED, P.FAILED})


class IllegalTransitionError(ValueError):
    """A phase change that the table does not allow."""

    def __init__(self, current: Phase, target: Phase) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none: it is final"
        super().__init__(f"a job cannot go from {current} to {target}; from {current} it may go to {allowed}")
        self.current = current
        self.target = target


def can_transition(current: Phase, target: Phase) -> bool:
    """Whether the table allows ``current → target``."""
    return target in TRANSITIONS[current]


def transition(
    status: TrainingJobStatus, target: Phase, *, reason: str, message: str, now: datetime
) -> TrainingJobStatus:
    """Return a copy of ``status`` in phase ``target`` with a condition recording why.

    The new phase's condition becomes True with this reason, message and time; the condition of the phase left
    becomes False (its time kept), so conditions show when each phase was last entered.

    Raises:
        IllegalTransitionError: the move is not in the table.
    """
    current = Phase(status.phase)
    if not can_transition(current, target):
        raise IllegalTransitionError(current, target)
    conditions = []
    for condition in status.conditions:
        if condition.type == target:
            continue
        if condition.type == current:
            condition = condition.model_copy(update={"status": "False"})
        conditions.append(condition)
    conditions.append(Condition(type=target, status="True", reason=reason, message=message, last_transition_time=now))
    update: dict[str, object] = {
        "phase": target,
        "reason": reason,
        "message": message,
        "conditions": conditions,
    }
    if target in (P.SUCCEEDED, P.FAILED):
        update["completion_time"] = now
    if target in (P.QUEUED, P.HALTED, P.SUCCEEDED, P.FAILED):
        update["placements"] = {}
    return status.model_copy(update=update)
