"""Queue order: priority, then FIFO by creation, then key; admitted jobs come back in that order."""

from __future__ import annotations

import pytest
from scheduling_builders import admitted_keys, dgx, make_job, run, snapshot, waiting_reason

from phalanx.core.scheduling.queueing import queue_order


@pytest.mark.parametrize(
    ("jobs", "winner"),
    [
        pytest.param([("old-low", 0, 0), ("new-high", 10, 60)], "new-high", id="priority-beats-earlier"),
        pytest.param([("later", 0, 60), ("earlier", 0, 0)], "earlier", id="equal-priority-is-fifo"),
        pytest.param([("b-job", 0, 0), ("a-job", 0, 0)], "a-job", id="equal-priority-and-time-go-by-key"),
        pytest.param([("negative", -5, 0), ("zero", 0, 9)], "zero", id="negative-priority-goes-last"),
    ],
)
def test_the_first_job_in_queue_order_gets_the_only_room(jobs: list[tuple[str, int, int]], winner: str) -> None:
    # Every job wants all 8 GPUs; only one can have them.
    pending = [make_job(name).priority(rank).created(at).replicas(1, gpu=8) for name, rank, at in jobs]
    decisions = run(snapshot(dgx()), *pending)
    assert admitted_keys(decisions) == [winner]
    assert set(decisions.waiting) == {f"default/{name}" for name, _, _ in jobs} - {f"default/{winner}"}


def test_admitted_jobs_are_listed_in_decision_order() -> None:
    jobs = [
        make_job("c").replicas(1, gpu=1).priority(1).created(0),
        make_job("a").replicas(1, gpu=1).priority(5).created(3),
        make_job("b").replicas(1, gpu=1).priority(5).created(1),
    ]
    assert admitted_keys(run(snapshot(dgx()), *jobs)) == ["b", "a", "c"]


def test_queue_order_is_a_total_deterministic_order() -> None:
    jobs = [
        make_job("x").priority(1).created(5).obj(),
        make_job("y").priority(1).created(5).obj(),
        make_job("z").priority(2).created(9).obj(),
        make_job("w").priority(1).created(1).obj(),
    ]
    expected = ["default/z", "default/w", "default/x", "default/y"]
    assert [job.key for job in queue_order(jobs)] == expected
    assert [job.key for job in queue_order(reversed(jobs))] == expected


def test_a_lower_priority_job_waits_with_a_reason_naming_the_room_left() -> None:
    high = make_job("high").replicas(1, gpu=6).priority(100).created(30)
    low = make_job("low").replicas(1, gpu=4).priority(0).created(0)
    decisions = run(snapshot(dgx()), low, high)
    assert admitted_keys(decisions) == ["high"]
    assert waiting_reason(decisions, "low") == (
        "needs 4 GPUs on one node; largest free block is 2 on node dgx-0 (2 free in total)"
    )
