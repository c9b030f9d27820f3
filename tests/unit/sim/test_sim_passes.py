"""The simulator runs the runtimes' scheduling pass: queues, reclaim, and a preemptor that waits for its victims."""

from __future__ import annotations

from dataclasses import replace

from sim_builders import cluster, job, outcome

from phalanx.core.scheduling import QueueQuota, QuotaAmounts
from phalanx.sim.engine import SimOptions, simulate

# docs/queues.md's worked example on one 8-GPU node: team-a and team-b guaranteed 4 GPUs each.
QUEUES = (
    QueueQuota(name="team-a", nominal=QuotaAmounts(gpus=4), cohort="research", weight=2),
    QueueQuota(name="team-b", nominal=QuotaAmounts(gpus=4), cohort="research", borrowing_limit=QuotaAmounts(gpus=2)),
)


def test_reclaim_preempts_the_borrower_once_and_the_reclaimer_starts_when_the_borrower_stops() -> None:
    jobs = [
        replace(job("a-train", 0, 1_000, 2, 2, 2), queue="team-a"),
        replace(job("b-train", 10, 1_000, 2), queue="team-b"),
        replace(job("a-eval", 20, 100, 2), queue="team-a"),
        replace(job("b-more", 30, 100, 2), queue="team-b"),
    ]
    result = simulate(cluster(1, 8), jobs, SimOptions(preemption=True, queues=QUEUES))
    train, more, evaluation = outcome(result, "a-train"), outcome(result, "b-more"), outcome(result, "a-eval")
    assert result.preemptions == 1 and train.preempted == 1
    # The borrower's first run ends when b-more arrives; b-more starts then, in the pass after the one that
    # preempted (same virtual time: a victim's stop takes effect at the next pass).
    assert train.runs[0] == (0, 30)
    assert more.runs == ((30, 130),)
    # a-eval (team-a, within its quota once a-train stopped) takes 2 of the 4 GPUs left; a-train waits for 6.
    assert evaluation.runs == ((30, 130),)
    assert train.runs[1][0] >= 130
