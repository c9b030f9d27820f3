"""One scheduling pass: what the embedded scheduler, phalanx-scheduler and the simulator decide each time they look.

A pass wraps the core cycle (``SchedulingSession.cycle``) in the rules every backend applies around it, so that
a policy proven in the simulator is the policy that runs:

1. **Per-pass settings from the base policy.** The run's ``SchedulerConfig`` (a configuration file, or
   ``config.DEFAULT_POLICY``) with this pass's queues filled in, fair share on when there are queues, and
   preemption and time slicing on only when the policy allows them and no victim of an earlier pass is still
   stopping: room already being freed is not bought twice by stopping more jobs (``config.cycle_config``).
2. **Nominated first.** A job that preempted others is *nominated*: the room its victims free is its own. The
   next passes try the nominated jobs before every other pending job, so a victim queued again cannot be
   admitted into the room freed for its preemptor (which, before this rule, let a reclaimed borrower be
   preempted and re-admitted over and over: issue 14, "Reclaim loops"). While a nominated job waits for its
   victims to stop, nothing else is admitted (the room is reserved for it); once they have stopped and it
   still does not fit, the nomination lapses.
3. **A preemptor waits for its victims.** The cycle hands a preemptor the devices its victims hold, but their
   replicas still run when the pass ends: the preemptor is not admitted in the pass that preempts, nor is any
   admission decided after it (it may have been given the rest of what the victims hold). They are
   ``deferred``: a backend that built a fresh session drops them; the simulator releases them from its session.
4. **Every waiting job gets a reason**: the core's, the preemptor's wait (``preemptor_reason``), the room
   reserved for a nominated job, or the queue's refusal given by the caller.

``plan_pass`` runs a pass from a frozen snapshot, as the runtimes do: when the cycle raises, it finds the pending
jobs that make it fail (``core.culprits``) and runs without them, and when the running jobs do not match the
nodes' use, it schedules without them (quotas and preemption off for that pass). ``run_pass`` runs a pass on a
session the caller keeps (the simulator). Both are pure: no I/O, no clock; the caller says when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from phalanx.core.culprits import find_culprits
from phalanx.core.scheduling.config import SchedulerConfig, cycle_config
from phalanx.core.scheduling.preemption import ServiceBands
from phalanx.core.scheduling.session import SchedulingSession
from phalanx.core.scheduling.types import (
    Admission,
    ClusterSnapshot,
    PendingJob,
    Preemption,
    QueueQuota,
)


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What a pass decided; the backend applies it in this order: preempt, admit, explain.

    Attributes:
        preempted: running jobs to stop (whole), in decision order.
        admitted: admissions to apply, in decision order; when one cannot be applied (the job changed since the
            snapshot), the later ones must not be either: they may have counted on its devices being taken.
        deferred: admissions the cycle decided that wait for victims to stop (the preemptor and every admission
            after it); a caller keeping a session releases them.
        waiting: job key -> one sentence saying why it waits, for every pending job not admitted (refused ones
            included).
        nominated: preemptor key -> its victims: the jobs the next pass tries first (pass it back as is).
        culprits: pending jobs left out because the cycle fails with them, with what it raised on each.
        errors: what the cycle raised before a fallback took over (for the caller's log).
        decided: False when the pass decided nothing (it failed whatever the pending jobs).
    """

    preempted: tuple[Preemption, ...] = ()
    admitted: tuple[Admission, ...] = ()
    deferred: tuple[Admission, ...] = ()
    waiting: dict[str, str] = field(default_factory=dict)
    nominated: dict[str, tuple[str, ...]] = field(default_factory=dict)
    culprits: dict[str, Exception] = field(default_factory=dict)
    errors: tuple[Exception, ...] = ()
    decided: bool = True


def preemptor_reason(victims: Iterable[str]) -> str:
    """What a job that preempted others waits for."""
    return f"preempted {', '.join(victims)} to make room; starts once their replicas have stopped"


def reserved_reason(nominees: Iterable[str]) -> str:
    """What a job waits for while room being freed is reserved for preemptors."""
    return (
        f"waits while the room being freed for {', '.join(nominees)} is reserved for it; "
        "scheduled again once it has started"
    )


def run_pass(
    session: SchedulingSession,
    pending: Sequence[PendingJob],
    *,
    now: datetime,
    nominated: Mapping[str, tuple[str, ...]] | None = None,
    stopping: bool = False,
    refusals: Mapping[str, str] | None = None,
    explain: bool | None = None,
) -> PassPlan:
    """One cycle on ``session``, nominated jobs first; preemptors wait for their victims.

    Args:
        session: the cluster as the pass starts (it keeps the deferred admissions' reservations: a caller that
            keeps it releases them).
        pending: the jobs that may be admitted (not those a queue refuses).
        now: the pass's time.
        nominated: the previous pass's ``PassPlan.nominated``.
        stopping: whether a victim of an earlier pass still holds its devices.
        refusals: job key -> why its queue does not take it; these jobs wait with that reason.
        explain: overrides ``SchedulerConfig.explain`` for this pass.

    Raises:
        ValueError: what ``SchedulingSession.cycle`` raises; nothing is decided then.
    """
    nominated = nominated or {}
    decisions = session.cycle(pending, now, explain=explain, first=frozenset(nominated))
    preemptors: dict[str, list[str]] = {}
    for preemption in decisions.preempted:
        preemptors.setdefault(preemption.preemptor, []).append(preemption.victim)
    decided_first = {admission.key for admission in decisions.admitted if admission.key in nominated}
    # A nominee that waits while its victims stop keeps the room they free; one that does not fit once they have
    # stopped loses its nomination (it would otherwise block every other job).
    reserving = [
        job.key
        for job in pending
        if job.key in nominated and job.key not in decided_first and job.key not in preemptors and stopping
    ]
    admitted: list[Admission] = []
    deferred: list[Admission] = []
    for admission in decisions.admitted:
        cut = admission.key in preemptors or (reserving and admission.key not in nominated)
        if cut or deferred:
            deferred.append(admission)
        else:
            admitted.append(admission)
    waiting = dict(decisions.waiting)
    for admission in deferred:
        if admission.key not in preemptors:
            waiting[admission.key] = reserved_reason(reserving or preemptors)
    for key in reserving:
        waiting[key] = preemptor_reason(nominated[key])
    waiting.update({key: preemptor_reason(victims) for key, victims in preemptors.items()})
    waiting.update(refusals or {})
    carried = {key: nominated[key] for key in reserving}
    carried.update({key: tuple(victims) for key, victims in preemptors.items()})
    return PassPlan(
        preempted=decisions.preempted,
        admitted=tuple(admitted),
        deferred=tuple(deferred),
        waiting=waiting,
        nominated=carried,
    )


def plan_pass(
    snapshot: ClusterSnapshot,
    pending: Sequence[PendingJob],
    *,
    policy: SchedulerConfig,
    now: datetime,
    queues: tuple[QueueQuota, ...] = (),
    stopping: bool = False,
    nominated: Mapping[str, tuple[str, ...]] | None = None,
    refusals: Mapping[str, str] | None = None,
    bands: ServiceBands | None = None,
) -> PassPlan:
    """One pass from a frozen snapshot (its ``running`` jobs included), as the runtimes run it.

    When the pass raises, the pending jobs that make it fail are looked for and left out (``culprits``); when it
    fails whatever the pending jobs (the running jobs do not match what the nodes count as used: a bug, or
    objects edited by hand), it runs without the running jobs, quotas and preemption off, rather than not at
    all. When that fails too, nothing is decided (the plan has only ``errors`` and ``culprits``).

    Args:
        snapshot: the nodes, what is held on them, and the running jobs behind it.
        pending: the jobs that may be admitted.
        policy: the run's base settings (``config.DEFAULT_POLICY`` when nobody configured them).
        now: the pass's time.
        queues: the queues' quotas observed now.
        stopping: whether a victim of an earlier pass still holds its devices.
        nominated: the previous pass's ``PassPlan.nominated``.
        refusals: job key -> why its queue does not take it.
        bands: with time slicing, the attained service and waiting times carried from earlier passes.
    """
    config = cycle_config(policy, queues, stopping=stopping)
    attempts = [(snapshot, config)]
    if snapshot.running:
        attempts.append((replace(snapshot, running=()), replace(config, preemption=False)))
    errors: list[Exception] = []
    for at, settings in attempts:

        def attempt(
            jobs: Sequence[PendingJob], at: ClusterSnapshot = at, settings: SchedulerConfig = settings
        ) -> PassPlan:
            return run_pass(
                SchedulingSession(at, settings, bands=bands),
                jobs,
                now=now,
                nominated=nominated,
                stopping=stopping,
                refusals=refusals,
            )

        try:
            return replace(attempt(pending), errors=tuple(errors))
        except Exception as err:
            errors.append(err)
        culprits = find_culprits(pending, lambda jobs: _raises(attempt, jobs) is not None)
        if culprits is None or (len(pending) > 1 and len(culprits) == len(pending)):
            # Not the pending jobs' doing (it fails without them, or with any of them: a node, say): try without
            # the running jobs, or give up this pass; no job is blamed.
            continue
        blamed = {
            job.key: _raises(attempt, [job]) or RuntimeError("the cycle fails with it and succeeds without it")
            for job in culprits
        }
        rest = [job for job in pending if job.key not in blamed]
        try:
            return replace(attempt(rest), culprits=blamed, errors=tuple(errors))
        except Exception as err:  # it passed a moment ago: the cycle is not a function of its inputs (a bug)
            errors.append(err)
            return PassPlan(culprits=blamed, errors=tuple(errors), decided=False)
    return PassPlan(errors=tuple(errors), decided=False)


def _raises(attempt: Callable[[Sequence[PendingJob]], PassPlan], jobs: Sequence[PendingJob]) -> Exception | None:
    """What the pass raises on ``jobs``, or None when it succeeds."""
    try:
        attempt(jobs)
    except Exception as err:
        return err
    return None
