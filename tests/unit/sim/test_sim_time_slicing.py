"""Least-attained-service with time slicing in the simulator: demotion, resumption, penalties, wake-ups.

Default bands: 3,600 and 36,000 GPU-seconds. On one 8-GPU node, an 8-GPU job leaves band 0 after 450 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_builders import cluster, job, outcome

from phalanx.sim.engine import FINISHED, SimOptions, check_options, simulate

SLICING = SimOptions(queue_order="least-attained-service", time_slicing=True)


def test_a_short_job_preempts_a_long_demoted_one_which_resumes_where_it_stopped() -> None:
    jobs = [job("long", 0, 10_000, 8), job("short", 1_000, 100, 8)]
    sliced = simulate(cluster(1, 8), jobs, SLICING)
    short, long = outcome(sliced, "short"), outcome(sliced, "long")
    assert (short.start, short.end, short.queueing_delay) == (1_000, 1_100, 0)
    # long ran 1,000 s, waited 100 s, and finished its remaining 9,000 s from 1,100.
    assert (long.first_start, long.start, long.end, long.preempted) == (0, 1_100, 10_100, 1)
    assert long.run_time == 10_000 and long.waiting_time == 100 and long.queueing_delay == 0
    assert sliced.preemptions == 1
    # Least-attained-service without time slicing is FIFO here: short waits for long.
    plain = simulate(cluster(1, 8), jobs, SimOptions(queue_order="least-attained-service"))
    assert (outcome(plain, "short").start, outcome(plain, "long").end) == (10_000, 10_000)
    assert plain.preemptions == 0


def test_a_restart_penalty_lengthens_the_resumed_run() -> None:
    jobs = [job("long", 0, 10_000, 8), job("short", 1_000, 100, 8)]
    result = simulate(
        cluster(1, 8), jobs, SimOptions(queue_order="least-attained-service", time_slicing=True, restart_penalty=60)
    )
    assert outcome(result, "long").end == 10_160
    assert outcome(result, "long").run_time == 10_060


def test_a_band_change_between_events_is_an_event_of_its_own() -> None:
    # short arrives while long is still in band 0: it waits until long crosses 3,600 GPU-s at 450 s, and that
    # moment is a cycle although nothing arrives or ends then.
    jobs = [job("long", 0, 10_000, 8), job("short", 100, 100, 8)]
    result = simulate(cluster(1, 8), jobs, SLICING)
    assert (outcome(result, "short").start, outcome(result, "short").end) == (450, 550)
    assert outcome(result, "long").end == 10_100
    assert 450 in result.timeline.times


def test_the_starvation_guard_brings_a_long_waiting_job_back() -> None:
    # long is preempted at 450 s by a stream of 1-hour jobs that keep the node busy. Without the guard it waits
    # until the stream leaves the node to it; with it, it is promoted once it has waited as long as it ran since
    # its last promotion, and runs (and is preempted) again in between: the guard trades preemptions for it.
    stream = [job(f"s{i}", 400 + 10 * i, 3_600, 8) for i in range(4)]
    jobs = [job("long", 0, 10_000, 8), *stream]
    starving = simulate(cluster(1, 8), jobs, SLICING)
    guarded = simulate(cluster(1, 8), jobs, replace(SLICING, starve_limit=1.0))
    assert all(o.status == FINISHED for o in (*starving.jobs, *guarded.jobs))
    assert starving.promotions == 0 and outcome(starving, "long").preempted == 1
    assert outcome(starving, "long").start == 13_600  # when the last stream job ends
    assert guarded.promotions >= 1 and outcome(guarded, "long").preempted > 1
    assert guarded.preemptions > starving.preemptions


def test_time_slicing_is_only_for_gangs_and_least_attained_service() -> None:
    with pytest.raises(ValueError, match="needs gang admission"):
        check_options(SimOptions(queue_order="least-attained-service", time_slicing=True, gang=False))
    with pytest.raises(ValueError, match="las_preempt needs queue_order"):
        check_options(SimOptions(time_slicing=True))
    with pytest.raises(ValueError, match="restart penalty cannot be negative"):
        check_options(SimOptions(restart_penalty=-1))


def test_the_label_names_the_variant() -> None:
    assert SLICING.label == "least-attained-service/auto/gang/time-slicing"
    options = SimOptions(queue_order="least-attained-service", time_slicing=True, starve_limit=2, restart_penalty=30)
    assert options.label == "least-attained-service/auto/gang/time-slicing/starve-2/restart-30s"
