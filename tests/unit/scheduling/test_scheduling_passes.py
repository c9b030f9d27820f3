"""The scheduling pass (``core.scheduling.passes``) over several passes, driven the way a backend drives it.

A tiny backend (``Backend``) keeps what the runtimes keep: running jobs, victims still stopping (their devices
held for one more pass), and the pass's nominations; each pass it builds the snapshot, calls ``plan_pass`` and
applies the plan as the embedded scheduler and the controller do (a victim stops, then is queued again).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest
from queue_builders import cluster, gpu_node, pending, quota
from scheduling_builders import T0, make_job

from phalanx.core.scheduling import NodeSnapshot, PendingJob, QueueQuota, RunningJob, SchedulerConfig
from phalanx.core.scheduling.config import DEFAULT_POLICY, cycle_config
from phalanx.core.scheduling.passes import (
    PassPlan,
    plan_pass,
    preemptor_reason,
    reserved_reason,
)

# docs/queues.md's worked example: 8 GPUs; team-a and team-b guaranteed 4 each in cohort research.
QUEUES = (
    quota("team-a", gpus=4, cohort="research", weight=2),
    quota("team-b", gpus=4, cohort="research", borrow=2),
)


def job(name: str, queue: str, *, workers: int, created: float) -> PendingJob:
    return pending(make_job(name).replicas(workers, gpu=2).created(created), queue=queue)


@dataclass
class Backend:
    """Applies plans as the embedded runtime does: a victim stops during the next pass, then is queued again."""

    nodes: list[NodeSnapshot]
    queues: tuple[QueueQuota, ...]
    pending: dict[str, PendingJob] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    stopping: dict[str, RunningJob] = field(default_factory=dict)
    nominated: dict[str, tuple[str, ...]] = field(default_factory=dict)
    specs: dict[str, PendingJob] = field(default_factory=dict)
    preemptions: list[str] = field(default_factory=list)
    passes: int = 0

    def submit(self, job: PendingJob) -> None:
        self.pending[job.key] = self.specs[job.key] = job

    def step(self) -> PassPlan:
        now = T0 + timedelta(seconds=10 + self.passes)
        self.passes += 1
        held = cluster(self.nodes, [*self.running.values(), *self.stopping.values()])
        snapshot = replace(held, running=tuple(self.running.values()))
        plan = plan_pass(
            snapshot,
            list(self.pending.values()),
            policy=DEFAULT_POLICY,
            now=now,
            queues=self.queues,
            stopping=bool(self.stopping),
            nominated=self.nominated,
        )
        # The victims of the previous pass have stopped by now: the controller queues them again.
        for key in list(self.stopping):
            del self.stopping[key]
            self.pending[key] = self.specs[key]
        for preemption in plan.preempted:
            self.stopping[preemption.victim] = self.running.pop(preemption.victim)
            self.preemptions.append(preemption.victim)
        for admission in plan.admitted:
            spec = self.pending.pop(admission.key)
            self.running[admission.key] = RunningJob(
                key=spec.key,
                priority=spec.priority,
                queue=spec.queue,
                started=now,
                replicas=spec.replicas,
                assignments=admission.assignments,
            )
        self.nominated = plan.nominated
        return plan


def test_reclaiming_borrowed_gpus_preempts_the_borrower_once_and_the_reclaimer_runs() -> None:
    backend = Backend([gpu_node("n0")], QUEUES)
    backend.submit(job("a-train", "team-a", workers=3, created=0))
    backend.step()
    backend.submit(job("b-train", "team-b", workers=1, created=1))
    backend.step()
    backend.submit(job("a-eval", "team-a", workers=1, created=2))
    backend.step()
    assert sorted(backend.running) == ["default/a-train", "default/b-train"]

    backend.submit(job("b-more", "team-b", workers=1, created=3))
    reclaim = backend.step()
    assert [p.victim for p in reclaim.preempted] == ["default/a-train"]
    assert reclaim.waiting["default/b-more"] == preemptor_reason(["default/a-train"])
    assert reclaim.nominated == {"default/b-more": ("default/a-train",)}

    # a-train's replicas still stop: nothing is admitted into the room being freed, and nothing else preempted.
    stopping = backend.step()
    assert stopping.admitted == () and stopping.preempted == ()
    assert stopping.waiting["default/b-more"] == preemptor_reason(["default/a-train"])

    # a-train is queued again and comes first by fair share (team-a holds nothing now), but the room is b-more's.
    for _ in range(8):
        backend.step()
    assert backend.preemptions == ["default/a-train"]
    assert "default/b-more" in backend.running
    assert "default/a-train" in backend.pending
    assert backend.nominated == {}


def test_a_nomination_reserves_the_room_against_every_other_job_while_victims_stop() -> None:
    backend = Backend([gpu_node("n0", gpus=4)], ())
    backend.submit(job("low", "default", workers=2, created=0))
    backend.step()
    backend.submit(replace(job("high", "default", workers=2, created=1), priority=100))
    first = backend.step()
    assert [p.victim for p in first.preempted] == ["default/low"]
    # One of low's two replicas has stopped, the other still holds its 2 GPUs; a small job arrives meanwhile.
    [low] = backend.stopping.values()
    half = replace(low, replicas=low.replicas[:1], assignments=low.assignments[:1])
    small = job("small", "default", workers=1, created=2)
    plan = plan_pass(
        replace(cluster(backend.nodes, [half]), running=()),
        [backend.pending["default/high"], small],
        policy=DEFAULT_POLICY,
        now=T0,
        stopping=True,
        nominated=backend.nominated,
    )
    # The 2 free GPUs would fit small, but they are being freed for high.
    assert plan.admitted == () and plan.preempted == ()
    assert [a.key for a in plan.deferred] == ["default/small"]
    assert plan.waiting["default/small"] == reserved_reason(["default/high"])
    assert plan.waiting["default/high"] == preemptor_reason(["default/low"])
    assert plan.nominated == {"default/high": ("default/low",)}


def test_a_nomination_lapses_when_its_job_does_not_fit_once_the_victims_have_stopped() -> None:
    # The nominee asks for more than the node has left after its victims stopped (a node lost GPUs, say).
    plan = plan_pass(
        cluster([gpu_node("n0", gpus=2)]),
        [job("big", "default", workers=2, created=0), job("small", "default", workers=1, created=1)],
        policy=DEFAULT_POLICY,
        now=T0,
        nominated={"default/big": ("default/gone",)},
    )
    assert [a.key for a in plan.admitted] == ["default/small"]
    assert plan.nominated == {}
    assert plan.waiting["default/big"].startswith("needs 4 GPUs"), plan.waiting["default/big"]


@pytest.mark.parametrize(
    ("policy", "stopping", "preemption"),
    [
        (DEFAULT_POLICY, False, True),
        (DEFAULT_POLICY, True, False),
        (SchedulerConfig(preemption=False), False, False),
    ],
    ids=["runtime-default", "victims-stopping", "policy-without-preemption"],
)
def test_a_pass_derives_its_settings_from_the_base_policy(
    policy: SchedulerConfig, stopping: bool, preemption: bool
) -> None:
    base = replace(policy, queue_order="shortest-first", queueing_strategy="backfill")
    settings = cycle_config(base, QUEUES, stopping=stopping)
    assert settings.preemption is preemption
    assert (settings.queues, settings.fair_share) == (QUEUES, True)
    assert (settings.queue_order, settings.queueing_strategy) == ("shortest-first", "backfill")
    assert cycle_config(base, (), stopping=stopping).fair_share is False
