"""The counts check searches rely on never refuses a gang that fits, before or after giving room back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from queue_builders import cluster, gpu_node, on, running
from scheduling_builders import make_job
from test_scheduling_purity import build_jobs, busy_cluster, job_shapes

from phalanx.core.scheduling.demands import demand_of
from phalanx.core.scheduling.gang import GangPlacement, needed_replicas, place_gang
from phalanx.core.scheduling.headroom import FreedRoom, could_hold
from phalanx.core.scheduling.holdings import snapshot_holdings
from phalanx.core.scheduling.working import WorkingCluster


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(job_shapes, min_size=1, max_size=6))
def test_the_counts_never_refuse_a_gang_that_places(shapes: list[tuple]) -> None:  # type: ignore[type-arg]
    working = WorkingCluster(busy_cluster())
    for job in build_jobs(shapes):
        allowed = could_hold(working.table, [demand_of(r) for r in job.replicas], needed_replicas(job))
        placed = isinstance(place_gang(working, job), GangPlacement)
        assert allowed or not placed


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(range(4)), min_size=1, max_size=4, unique=True), st.integers(1, 8), st.integers(1, 3))
def test_freed_room_counts_at_least_what_giving_back_frees(given_back: list[int], gpus: int, replicas: int) -> None:
    # Four jobs of 2 GPUs each: GPUs 0-1 and 4-5 of both nodes.
    runs = [running(f"r{i}", on(f"n{i % 2}", 4 * (i // 2), 4 * (i // 2) + 1)) for i in range(4)]
    snap = cluster([gpu_node("n0"), gpu_node("n1")], runs)
    holdings = snapshot_holdings(snap)
    working = WorkingCluster(snap)
    chosen = [holdings[i] for i in given_back]
    freed = FreedRoom(working.table)
    freed.add(r for holding in chosen for r in holding.reservations)
    demands = [demand_of(r) for r in make_job("g").replicas(replicas, gpu=gpus).obj().replicas]
    before = could_hold(working.table, demands, replicas, freed)
    for holding in chosen:
        for reservation in holding.reservations:
            working.undo(reservation)
    after = could_hold(working.table, demands, replicas)
    assert before or not after
    freed.add((r for holding in chosen for r in holding.reservations), -1)
    assert not freed.gpus.any() and not freed.memory.any()
