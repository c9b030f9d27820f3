"""Gang admission: whole gangs or nothing, minAvailable, rollback, capacity consumed within a cycle."""

from __future__ import annotations

import pytest
from scheduling_builders import (
    admission,
    admitted_keys,
    dgx,
    hold,
    make_job,
    run,
    snapshot,
    waiting_reason,
)


@pytest.mark.parametrize(
    ("replicas", "admitted"),
    [
        pytest.param(3, True, id="three-fit-all-placed"),
        pytest.param(4, False, id="fourth-does-not-fit-none-placed"),
    ],
)
def test_gang_is_all_or_nothing(replicas: int, admitted: bool) -> None:
    # Two of the eight GPUs are held, six are free: three 2-GPU replicas fit, a fourth does not.
    snap = snapshot(dgx(), [hold("dgx-0", gpus=[0, 4])])
    decisions = run(snap, make_job("gang").replicas(replicas, cpu=2000, gpu=2))
    if admitted:
        placed = admission(decisions, "gang").assignments
        assert [a.replica for a in placed] == [f"gang-worker-{i}" for i in range(replicas)]
        assert all(len(a.gpus) == 2 for a in placed)
        assert decisions.waiting == {}
    else:
        assert decisions.admitted == ()
        assert waiting_reason(decisions, "gang") == (
            "needs 8 GPUs in one gang; largest free block is 6 on node dgx-0 (6 free in total)"
        )


def test_two_jobs_competing_for_room_for_one_admit_exactly_one_whole() -> None:
    first = make_job("first").replicas(2, cpu=4000, gpu=4).created(0)
    second = make_job("second").replicas(2, cpu=4000, gpu=4).created(1)
    decisions = run(snapshot(dgx()), second, first)
    assert admitted_keys(decisions) == ["first"]
    assert len(admission(decisions, "first").assignments) == 2
    assert waiting_reason(decisions, "second") == (
        "needs 8 GPUs in one gang; largest free block is 0 on node dgx-0 (0 free in total)"
    )


def test_failed_gang_is_rolled_back_so_a_later_job_gets_its_room() -> None:
    # The head job places two of its three 4-GPU replicas before failing; its GPUs must be released.
    head = make_job("head").replicas(3, gpu=4).priority(10)
    tail = make_job("tail").replicas(2, gpu=4)
    decisions = run(snapshot(dgx()), head, tail)
    assert admitted_keys(decisions) == ["tail"]
    assert sorted(g for a in admission(decisions, "tail").assignments for g in a.gpus) == list(range(8))
    assert "needs 12 GPUs in one gang" in waiting_reason(decisions, "head")


def test_jobs_admitted_earlier_in_a_cycle_consume_capacity_for_later_ones() -> None:
    jobs = [make_job(name).replicas(1, cpu=1000, gpu=4).created(i) for i, name in enumerate("abc")]
    decisions = run(snapshot(dgx()), *jobs)
    assert admitted_keys(decisions) == ["a", "b"]
    a_gpus = set(admission(decisions, "a").assignments[0].gpus)
    b_gpus = set(admission(decisions, "b").assignments[0].gpus)
    assert a_gpus.isdisjoint(b_gpus)
    assert waiting_reason(decisions, "c").startswith("needs 4 GPUs on one node; largest free block is 0")


def test_best_effort_fifo_lets_a_small_job_pass_a_big_head() -> None:
    big = make_job("big").replicas(1, gpu=8).created(0)
    small = make_job("small").replicas(1, gpu=1).created(5)
    decisions = run(snapshot(dgx(), [hold("dgx-0", gpus=[0, 1, 2, 3])]), big, small)
    assert admitted_keys(decisions) == ["small"]
    assert waiting_reason(decisions, "big") == (
        "needs 8 GPUs on one node; largest free block is 4 on node dgx-0 (4 free in total)"
    )


def test_a_replica_larger_than_any_node_says_so() -> None:
    decisions = run(snapshot(dgx()), make_job("huge").replicas(1, gpu=16))
    assert waiting_reason(decisions, "huge") == (
        "a replica needs 16 GPUs but no node has that many: the largest has 8 GPUs (node dgx-0)"
    )


@pytest.mark.parametrize(
    ("min_available", "expected"),
    [
        pytest.param(2, ["gang-worker-0", "gang-worker-1"], id="min-2-admits-the-two-that-fit"),
        pytest.param(1, ["gang-worker-0", "gang-worker-1"], id="min-1-still-places-as-many-as-fit"),
        pytest.param(3, None, id="min-3-admits-nothing"),
        pytest.param(9, None, id="min-above-count-means-all"),
    ],
)
def test_min_available(min_available: int, expected: list[str] | None) -> None:
    # Four 3-GPU replicas on 8 GPUs: only two fit.
    job = make_job("gang").replicas(4, cpu=1000, gpu=3).min_available(min_available)
    decisions = run(snapshot(dgx()), job)
    if expected is None:
        assert decisions.admitted == ()
        assert "gang" in waiting_reason(decisions, "gang")
    else:
        assert [a.replica for a in admission(decisions, "gang").assignments] == expected


def test_min_available_skips_a_replica_that_fits_nowhere_and_places_later_ones() -> None:
    job = (
        make_job("elastic")
        .replicas(1, cpu=1000, gpu=6, role="launcher")
        .replicas(3, cpu=1000, gpu=1, role="worker")
        .min_available(3)
    )
    snap = snapshot(dgx(), [hold("dgx-0", gpus=[0, 1, 2, 3])])
    placed = admission(run(snap, job), "elastic").assignments
    assert [a.replica for a in placed] == ["elastic-worker-0", "elastic-worker-1", "elastic-worker-2"]


def test_min_available_reason_says_at_least() -> None:
    job = make_job("gang").replicas(4, cpu=40000).min_available(3)
    reason = waiting_reason(run(snapshot(dgx()), job), "gang")
    assert reason == (
        "needs at least 3 of 4 replicas (120 CPUs exclusive, 6Gi) together; only 1 fit: "
        "node dgx-0 has 64 CPUs free where 120 are needed"
    )


def test_a_job_with_nothing_left_to_place_is_admitted_empty() -> None:
    decisions = run(snapshot(dgx()), make_job("empty"))
    assert admission(decisions, "empty").assignments == ()


def test_partial_gang_never_holds_devices_visible_to_the_next_cycle() -> None:
    # Failing gang, then the same snapshot again: the outcome is identical (nothing leaked into the input).
    snap = snapshot(dgx())
    job = make_job("gang").replicas(3, gpu=4)
    assert run(snap, job) == run(snap, job)
    assert run(snap, make_job("whole").replicas(1, gpu=8)).admitted[0].assignments[0].gpus == tuple(range(8))
