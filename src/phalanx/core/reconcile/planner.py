"""The reconcile planner: ``plan(ReconcileInput) -> Plan`` for one job, level-triggered and idempotent.

It owns what happens to a job between the scheduler's decisions: phase changes (always through
``core.lifecycle.transition``), which replicas to create and delete, restarts with backoff, halting, storing
outputs, garbage collection and timers. It reads only its input — no clock, no store — and remembers nothing
between calls, so a control plane that crashes and restarts picks up exactly where it was.

How it works: a mutable draft holds the job's status and a *projected* world (the observed replicas with this
plan's own deletions and creations applied). The step for the current phase runs; if it changed the phase the
step of the new phase runs too, until the phase settles. So a plan already contains every consequence of its
input, and replanning on the world it leads to plans nothing new (only ``StoreOutputs`` and ``DeleteJob``
repeat; both are idempotent by contract).

A replica placed on a GPU that turned unhealthy (``ReconcileInput.unhealthy_gpus``, ``core.gpu_health``) fails
for the restart policy (reason ``GPUUnhealthy``); every replica then stops and the job goes back to Queued to be
placed on healthy GPUs, since the scheduler places whole gangs and the old placement cannot be kept.

Invariants:
    - A replica is never created while a replica of the same name exists, even one being deleted: two copies
      of one replica never run at once.
    - Replicas are created only with a placement, only when the job's data is staged, and only in
      Downloading, Running and Restarting.
    - ``status.attempt`` counts how often the job's replicas were stopped to start again (every restart, every
      halt, every preemption), and a replica is created with the job's current attempt: a replica's attempt
      grows each time its name is reused, so ``(name, attempt)`` names one process in logs and run dirs.
    - ``status.replica_statuses`` describe the projected world; once the job has finished they are frozen, so
      they keep telling how it ended after its replicas are garbage-collected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from phalanx.core.delegation import cluster_placements, gang_min_count
from phalanx.core.gpu_health import lost_replicas
from phalanx.core.lifecycle import transition
from phalanx.core.reconcile.policies import backoff_delay, decide_restart, keeps_running_replicas, success_message
from phalanx.core.reconcile.types import (
    Action,
    CreateReplica,
    DeleteJob,
    DeleteReplica,
    EventRecord,
    ObservedReplica,
    Plan,
    ReconcileInput,
    StoreOutputs,
)
from phalanx.core.rendezvous import replica_names
from phalanx.core.sweeps.substitute import SWEEP_LABEL
from phalanx.core.sweeps.trials import STOPPED_ANNOTATION
from phalanx.model.jobs import TERMINAL_PHASES, Phase, RoleStatus, TrainingJobStatus
from phalanx.model.replicas import ReplicaPhase, replica_name

P = Phase
# Phases in which activeDeadlineSeconds can fail the job (Pending moves on at once; Storing has already met
# the success policy; Halting and Preempted only wait for replicas to stop).
_DEADLINE_PHASES = frozenset({P.QUEUED, P.ADMITTED, P.DOWNLOADING, P.RUNNING, P.RESTARTING, P.HALTED})
_UNFINISHED = frozenset({ReplicaPhase.PENDING, ReplicaPhase.RUNNING})
_STARTED = frozenset({ReplicaPhase.RUNNING, ReplicaPhase.SUCCEEDED})
GPU_UNHEALTHY = "GPUUnhealthy"
# The longest chain of phase changes one plan can make is Preempted -> Queued -> Halted, or
# Running -> Storing -> Succeeded; more than this is a cycle, which is a bug.
_MAX_STEPS = len(Phase)


def plan(inp: ReconcileInput) -> Plan:
    """Decide the job's next status and the actions that move the world towards its spec.

    Args:
        inp: the job, its JobType, its replicas as observed, staging and storing results, and the time.

    Returns:
        The plan: next status, actions (idempotent), events, and when to look again if nothing changes.

    """
    draft = _Draft(inp)
    if inp.job.metadata.deletion_timestamp is not None:
        for name in sorted(draft.world):
            draft.delete(name, "JobDeleted")
        return Plan(status=inp.job.status, actions=tuple(draft.actions))
    finished_before = draft.phase in TERMINAL_PHASES
    draft.delete_strays()
    for _ in range(_MAX_STEPS):
        before = draft.phase
        _STEPS[before](draft)
        if draft.phase == before:
            break
    else:
        raise RuntimeError(f"job {inp.job.key}: phase changes did not settle (now {draft.phase})")
    draft.delete_strays()
    updates: dict[str, object] = {"observed_generation": inp.job.metadata.generation}
    if not finished_before:
        updates["replica_statuses"] = draft.role_statuses()
    draft.update(**updates)
    return Plan(
        status=draft.status,
        actions=tuple(draft.actions),
        events=tuple(draft.events),
        requeue_after=_requeue_after(draft),
    )


class _Draft:
    """The plan being built: the job's next status and the world as it will be once the actions are done."""

    def __init__(self, inp: ReconcileInput) -> None:
        self.inp = inp
        self.job = inp.job
        self.jobtype = inp.jobtype
        self.policy = inp.job.spec.run_policy
        self.now = inp.now
        self.status: TrainingJobStatus = inp.job.status
        self.world: dict[str, ObservedReplica] = {replica.name: replica for replica in inp.replicas}
        self.actions: list[Action] = []
        self.events: list[EventRecord] = []
        self.order = replica_names(inp.job, inp.jobtype)
        self._storing_requested = False
        self._job_deleted = False

    @property
    def phase(self) -> Phase:
        return Phase(self.status.phase)

    # -- status -------------------------------------------------------------------------------------------
    def move(self, target: Phase, reason: str, message: str, *, warning: bool = False, **updates: object) -> None:
        """Change phase through the lifecycle table, record an event, then apply ``updates``."""
        status = transition(self.status, target, reason=reason, message=message, now=self.now)
        self.status = status.model_copy(update=updates) if updates else status
        self.note(reason, message, warning=warning)

    def fail(self, reason: str, message: str) -> None:
        """Move to Failed with a Warning event; the Failed step then removes every replica."""
        self.move(P.FAILED, reason, message, warning=True)

    def note(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an event."""
        self.events.append(EventRecord(reason=reason, message=message, type="Warning" if warning else "Normal"))

    def update(self, **fields: object) -> None:
        """Change status fields that are not the phase."""
        self.status = self.status.model_copy(update=fields)

    # -- world --------------------------------------------------------------------------------------------
    def delete(self, name: str, reason: str) -> None:
        """Ask for a replica to stop, unless it is already going."""
        replica = self.world.get(name)
        if replica is None or replica.deleting:
            return
        self.world[name] = replace(replica, deleting=True)
        self.actions.append(DeleteReplica(name=name, reason=reason))

    def create(self, role: str, index: int, name: str) -> None:
        """Start a placed replica, unless one of that name exists (running, finished or going away)."""
        placement = self.status.placements.get(name)
        if name in self.world or placement is None:
            return
        attempt = self.status.attempt
        self.world[name] = ObservedReplica(
            name=name, role=role, index=index, attempt=attempt, phase=ReplicaPhase.PENDING
        )
        self.actions.append(CreateReplica(role=role, index=index, attempt=attempt, placement=placement))

    def store_outputs(self) -> None:
        if not self._storing_requested:
            self._storing_requested = True
            self.actions.append(StoreOutputs())

    def delete_job(self, reason: str) -> None:
        if not self._job_deleted:
            self._job_deleted = True
            self.actions.append(DeleteJob(reason=reason))

    def placed(self) -> list[tuple[str, int, str]]:
        """Return the job's replicas that have a placement, in rank order."""
        return [entry for entry in self.order if entry[2] in self.status.placements]

    def live(self) -> list[ObservedReplica]:
        """Return the replicas not being deleted: the job's in rank order, then strays by name."""
        ranked = [name for _, _, name in self.order]
        names = [name for name in ranked if name in self.world]
        names += sorted(set(self.world) - set(ranked))
        return [self.world[name] for name in names if not self.world[name].deleting]

    def delete_strays(self) -> None:
        """Delete replicas outside the spec (unknown role, index past the count) or without a placement."""
        known = {name for _, _, name in self.order}
        # A finished job has no placements; the replicas it leaves running (cleanPodPolicy None) stay.
        kept = self.keeps_running()
        for replica in self.live():
            expected = replica_name(self.job.metadata.name, replica.role, replica.index)
            if replica.name not in known or replica.name != expected:
                self.delete(replica.name, "NotInSpec")
            elif replica.name not in self.status.placements and not (kept and replica.phase in _UNFINISHED):
                self.delete(replica.name, "NotPlaced")

    def keeps_running(self) -> bool:
        """Whether the replicas still running are left running (``cleanPodPolicy: None`` once the job ended)."""
        return keeps_running_replicas(self.policy, self.phase, self.status.reason)

    def role_statuses(self) -> dict[str, RoleStatus]:
        counts = {role: [0, 0, 0] for role in self.job.spec.replicas}
        known = {name for _, _, name in self.order}
        for replica in self.world.values():
            if replica.name not in known:
                continue
            if replica.phase == ReplicaPhase.SUCCEEDED:
                counts[replica.role][1] += 1
            elif replica.phase == ReplicaPhase.FAILED:
                counts[replica.role][2] += 1
            elif not replica.deleting:
                counts[replica.role][0] += 1
        return {
            role: RoleStatus(active=active, succeeded=succeeded, failed=failed)
            for role, (active, succeeded, failed) in counts.items()
        }


# -- steps, one per phase ---------------------------------------------------------------------------------
def _step_pending(d: _Draft) -> None:
    if d.jobtype is None:
        d.fail("JobTypeNotFound", f"job type {d.job.spec.type!r} does not exist")
    elif d.policy.suspend:
        d.move(P.HALTED, "Suspended", "submitted halted (runPolicy.suspend); resume it to queue it")
    else:
        d.move(P.QUEUED, "Accepted", "waiting for quota and room")


def _step_queued(d: _Draft) -> None:
    if _failed_for_jobtype_or_deadline(d):
        return
    if d.policy.suspend:
        d.move(P.HALTED, "Halted", "halted while queued; resume it to queue it again")
    elif d.inp.placed_by is not None:
        # Placed by the cluster's scheduler (core.delegation): nothing of Phalanx's admits it, so it is admitted
        # here, every replica placed on a node that scheduler will pick, as one gang.
        placements = cluster_placements(d.job, d.jobtype)
        d.move(
            P.ADMITTED,
            "Delegated",
            f"its {len(placements)} Pod(s) are left to the cluster's scheduler {d.inp.placed_by!r}, which places "
            f"at least {gang_min_count(d.job)} of them together or none",
            placements=placements,
            admitted_time=d.now,
        )


def _step_admitted(d: _Draft) -> None:
    if _stopped(d):
        return
    said = "staging the job's data on its nodes" if d.job.spec.datasets else "starting its replicas (no data to stage)"
    d.move(P.DOWNLOADING, "Staging", said)


def _step_downloading(d: _Draft) -> None:
    if _stopped(d):
        return
    if d.inp.staging_error is not None:
        d.fail("StagingFailed", f"staging the job's data failed: {d.inp.staging_error}")
        return
    if _handled_failures(d) or _placed_again_off_unhealthy(d):
        return
    _delete_stale_attempts(d)
    _create_missing(d)
    _say_why_not_started(d)
    if _all_started(d):
        started = len(d.placed())
        d.move(
            P.RUNNING,
            "Started",
            f"all {started} replica(s) are running",
            start_time=d.status.start_time or d.now,
        )


def _step_running(d: _Draft) -> None:
    if _stopped(d):
        return
    assert d.jobtype is not None  # _stopped fails the job without one
    placed = {name for _, _, name in d.placed()}
    message = success_message(d.job, d.jobtype, d.world, placed)
    if message is not None:
        d.move(P.STORING, "SuccessPolicyMet", f"{message}; storing outputs")
        _stop_unfinished(d, "SuccessPolicyMet")
        kept = [replica.name for replica in d.live() if replica.phase in _UNFINISHED]
        if kept:
            d.note(
                "ReplicasKept",
                f"{', '.join(kept)} keep running (cleanPodPolicy None) until they exit or the job is deleted",
            )
        return
    if _handled_failures(d) or _placed_again_off_unhealthy(d):
        return
    _delete_stale_attempts(d)
    _create_missing(d)
    _say_why_not_started(d)


def _step_restarting(d: _Draft) -> None:
    if _stopped(d) or _handled_failures(d):
        return
    _delete_stale_attempts(d)
    # Start again only once every stopped replica is gone (no old process may still talk to the new ones)
    # and the backoff has passed.
    if any(replica.deleting for replica in d.world.values()):
        return
    if d.status.next_retry_time is not None and d.now < d.status.next_retry_time:
        return
    if _placed_again_off_unhealthy(d):
        return
    _create_missing(d)
    _say_why_not_started(d)
    if _all_started(d):
        d.move(
            P.RUNNING,
            "Restarted",
            f"all {len(d.placed())} replica(s) are running again (attempt {d.status.attempt}, "
            f"restart {d.status.restarts} of {d.policy.backoff_limit})",
            next_retry_time=None,
        )


def _step_storing(d: _Draft) -> None:
    _stop_unfinished(d, "SuccessPolicyMet")
    keeping = d.keeps_running()
    outputs = d.inp.outputs
    if outputs.error is not None:
        d.fail("StoringFailed", f"storing outputs failed: {outputs.error}")
        return
    if not outputs.stored:
        d.store_outputs()
        return
    # Placements are released on Succeeded: wait until stopped replicas have let go of their devices. Replicas
    # left running (cleanPodPolicy None) hold theirs as occupants of their nodes until they exit.
    if not keeping and any(replica.phase in _UNFINISHED for replica in d.world.values()):
        return
    where = f" at {outputs.location}" if outputs.location else ""
    said = f"outputs not stored: {outputs.not_collected}" if outputs.not_collected else f"outputs stored{where}"
    d.move(
        P.SUCCEEDED,
        "Succeeded",
        said,
        artifacts=outputs.location,
        metrics=dict(outputs.metrics),
    )


def _step_halting(d: _Draft) -> None:
    for replica in d.live():
        d.delete(replica.name, "Halting")
    if not d.world:
        d.move(P.HALTED, "Halted", _halted_message(d))


def _halted_message(d: _Draft) -> str:
    """Why the job is Halted; a sweep's stopped trial says its sweep's reason (resuming it is no use to anyone)."""
    stopped = d.job.metadata.annotations.get(STOPPED_ANNOTATION)
    if stopped:
        return f"stopped early by sweep {d.job.metadata.labels.get(SWEEP_LABEL, '?')}: {stopped}"
    return "every replica stopped; resume it to queue it again"


def _step_halted(d: _Draft) -> None:
    if _deadline_passed(d):
        d.fail("DeadlineExceeded", _deadline_message(d))
    elif not d.policy.suspend:
        d.move(P.QUEUED, "Resumed", "resumed; waiting for quota and room")


def _step_preempted(d: _Draft) -> None:
    for replica in d.live():
        d.delete(replica.name, "Preempted")
    if not d.world:
        d.move(
            P.QUEUED,
            "Requeued",
            "preempted: every replica stopped; waiting to be admitted again",
            attempt=d.status.attempt + 1,
        )


def _step_finished(d: _Draft) -> None:
    expiry = _ttl_expiry(d)
    expired = expiry is not None and expiry <= d.now
    keeping = d.keeps_running() and not expired
    for replica in d.live():
        if not (keeping and replica.phase in _UNFINISHED):
            d.delete(replica.name, "JobFinished")
    if expired:
        d.delete_job(f"ttlSecondsAfterFinished={d.policy.ttl_seconds_after_finished} passed")


_STEPS: dict[Phase, Callable[[_Draft], None]] = {
    P.PENDING: _step_pending,
    P.QUEUED: _step_queued,
    P.ADMITTED: _step_admitted,
    P.DOWNLOADING: _step_downloading,
    P.RUNNING: _step_running,
    P.RESTARTING: _step_restarting,
    P.STORING: _step_storing,
    P.HALTING: _step_halting,
    P.HALTED: _step_halted,
    P.PREEMPTED: _step_preempted,
    P.SUCCEEDED: _step_finished,
    P.FAILED: _step_finished,
}


# -- shared rules -----------------------------------------------------------------------------------------
def _failed_for_jobtype_or_deadline(d: _Draft) -> bool:
    if d.jobtype is None:
        d.fail("JobTypeNotFound", f"job type {d.job.spec.type!r} no longer exists")
        return True
    if _deadline_passed(d):
        d.fail("DeadlineExceeded", _deadline_message(d))
        return True
    return False


def _stopped(d: _Draft) -> bool:
    """Fail or halt a job that may hold replicas: JobType gone, deadline passed, halt asked."""
    if _failed_for_jobtype_or_deadline(d):
        return True
    if d.policy.suspend:
        d.move(
            P.HALTING,
            "HaltRequested",
            "halting (runPolicy.suspend): stopping every replica",
            attempt=d.status.attempt + 1,
            next_retry_time=None,
        )
        return True
    return False


def _handled_failures(d: _Draft) -> bool:
    """Apply the restart policy to failed replicas; True when it changed the job (restart or failure).

    In Restarting, a failed replica of an earlier attempt belongs to the restart under way (it failed with
    the replica that caused it, or it is the cause and its deletion was interrupted): it is deleted without
    counting again. A replica of the current attempt failing counts as a new restart.
    """
    failed = [
        d.world[name]
        for _, _, name in d.placed()
        if name in d.world and d.world[name].phase == ReplicaPhase.FAILED and not d.world[name].deleting
    ]
    if d.phase == P.RESTARTING:
        for replica in failed:
            if replica.attempt < d.status.attempt:
                d.delete(replica.name, "ReplicaFailed")
        failed = [replica for replica in failed if replica.attempt >= d.status.attempt]
    lost = _lost_to_unhealthy_gpus(d)
    if not failed and not lost:
        return False
    decision = decide_restart(d.policy, lost + failed, restarts=d.status.restarts, roles=d.job.spec.replicas)
    if lost and decision.culprit is lost[0] and decision.reason != "BackoffLimitExceeded":
        decision = replace(decision, reason=GPU_UNHEALTHY)
    if not decision.retry:
        d.fail(decision.reason, decision.message)
        return True
    gang = d.policy.gang_restart
    # The scheduler places whole gangs: a replica that needs other devices takes the whole job with it.
    victims = d.live() if gang or lost else failed
    message = decision.message + (
        f"; stopping all {len(victims)} replica(s) to place the job again on healthy GPUs"
        if lost
        else (f"; restarting all {len(victims)} replica(s) together" if gang else "")
    )
    delay = backoff_delay(d.policy, d.status.restarts)
    updates: dict[str, object] = {
        "restarts": d.status.restarts + 1,
        "attempt": d.status.attempt + 1,
        "next_retry_time": d.now + timedelta(seconds=delay),
    }
    if d.phase == P.RESTARTING:
        d.update(reason=decision.reason, message=message, **updates)
        d.note(decision.reason, message, warning=True)
    else:
        d.move(P.RESTARTING, decision.reason, message, warning=True, **updates)
    for replica in victims:
        d.delete(replica.name, GPU_UNHEALTHY if lost else "GangRestart" if gang else "ReplicaFailed")
    return True


def _lost_to_unhealthy_gpus(d: _Draft) -> list[ObservedReplica]:
    """The unfinished replicas whose placement holds an unhealthy GPU, as failures saying so (no exit code).

    A device failure is not the program's, but it counts as a restart (so ``backoffLimit`` bounds a GPU that
    keeps failing) and ``restartPolicy: Never`` fails the job rather than run it twice.
    """
    if not d.inp.unhealthy_gpus:
        return []
    lost = lost_replicas(d.status.placements, d.inp.unhealthy_gpus)
    return [
        replace(replica, phase=ReplicaPhase.FAILED, exit_code=None, message=lost[replica.name])
        for replica in d.live()
        if replica.name in lost and replica.phase in _UNFINISHED
    ]


def _placed_again_off_unhealthy(d: _Draft) -> bool:
    """Before (re)starting replicas: one to start on an unhealthy GPU sends the job back to the queue.

    Every replica stops first (a new placement may put any of them elsewhere); the job then waits in Queued,
    where the scheduler places it on healthy GPUs. A replica that exists (finished, say) is not started again,
    so its placement does not count. True when it acted.
    """
    to_start = {name: p for name, p in d.status.placements.items() if name not in d.world}
    lost = lost_replicas(to_start, d.inp.unhealthy_gpus) if d.inp.unhealthy_gpus and to_start else {}
    if not lost:
        return False
    if d.world:
        for replica in d.live():
            d.delete(replica.name, GPU_UNHEALTHY)
        return True
    name, why = next(iter(lost.items()))
    d.move(
        P.QUEUED,
        GPU_UNHEALTHY,
        f"{why}, where replica {name} was placed; waiting to be placed again on healthy GPUs",
        warning=True,
        attempt=d.status.attempt + 1,
        next_retry_time=None,
    )
    return True


def _delete_stale_attempts(d: _Draft) -> None:
    # With gangRestart every replica runs the job's current attempt; an older one left running (a restart
    # whose deletions were interrupted) would join the new gang's rendezvous.
    if d.policy.gang_restart:
        for replica in d.live():
            if replica.attempt < d.status.attempt:
                d.delete(replica.name, "GangRestart")


def _create_missing(d: _Draft) -> None:
    if not d.inp.staged:
        return
    for role, index, name in d.placed():
        d.create(role, index, name)


def _all_started(d: _Draft) -> bool:
    placed = d.placed()
    return bool(placed) and all(
        name in d.world and not d.world[name].deleting and d.world[name].phase in _STARTED for _, _, name in placed
    )


def _say_why_not_started(d: _Draft) -> None:
    """Name on the job why placed replicas wait to start, when they say so (the machine cannot launch them)."""
    waiting = [
        replica
        for _, _, name in d.placed()
        if (replica := d.world.get(name)) is not None
        and replica.phase == ReplicaPhase.PENDING
        and not replica.deleting
        and replica.message
    ]
    if waiting:
        d.update(reason="NotStarted", message=f"{len(waiting)} replica(s) not started yet: {waiting[0].message}")
    elif d.status.reason == "NotStarted" and d.phase == P.RUNNING and _all_started(d):
        # A running job whose replica had to be launched again: the reason is over, say so.
        d.update(reason="Started", message=f"all {len(d.placed())} replica(s) are running")


def _stop_unfinished(d: _Draft, reason: str) -> None:
    if d.keeps_running():
        return
    for replica in d.live():
        if replica.phase in _UNFINISHED:
            d.delete(replica.name, reason)


def _deadline(d: _Draft) -> datetime | None:
    seconds = d.policy.active_deadline_seconds
    anchor = d.status.start_time or d.job.metadata.creation_timestamp
    if seconds is None or anchor is None:
        return None
    return anchor + timedelta(seconds=seconds)


def _deadline_passed(d: _Draft) -> bool:
    deadline = _deadline(d)
    return deadline is not None and d.now >= deadline


def _deadline_message(d: _Draft) -> str:
    since = "it started" if d.status.start_time else "it was created"
    return f"activeDeadlineSeconds={d.policy.active_deadline_seconds} passed since {since}"


def _ttl_expiry(d: _Draft) -> datetime | None:
    ttl = d.policy.ttl_seconds_after_finished
    if ttl is None or d.status.completion_time is None:
        return None
    return d.status.completion_time + timedelta(seconds=ttl)


def _requeue_after(d: _Draft) -> float | None:
    """Seconds until a timer of the final phase fires: deadline, backoff, TTL."""
    timers: list[datetime] = []
    phase = d.phase
    deadline = _deadline(d)
    if phase in _DEADLINE_PHASES and deadline is not None:
        timers.append(deadline)
    if phase == P.RESTARTING and d.status.next_retry_time is not None:
        timers.append(d.status.next_retry_time)
    expiry = _ttl_expiry(d)
    if phase in TERMINAL_PHASES and expiry is not None:
        timers.append(expiry)
    remaining = [(timer - d.now).total_seconds() for timer in timers if timer > d.now]
    return min(remaining) if remaining else None
