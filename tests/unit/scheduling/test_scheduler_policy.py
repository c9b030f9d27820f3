"""The base policy as the runtimes use it: default placement, attained service across cycles, bands handed on.

The runtimes rebuild the snapshot every cycle, so what least-attained-service needs across cycles lives in the
scheduler (``core.scheduling.attained.AttainedService``) and in the core's ``ServiceBands`` handed to each new
session. Thresholds here are 100 and 1,000 GPU-seconds.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from queue_builders import cluster, gpu_node, keys, on, running, victims
from scheduling_builders import T0, make_job

from phalanx.core.scheduling import PendingJob, SchedulerConfig, schedule
from phalanx.core.scheduling.attained import AttainedService

LAS = SchedulerConfig(queue_order="least-attained-service", las_preempt=True, las_thresholds=(100.0, 1000.0))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(name: str, gpus: int = 8, *, created: float = 0.0, attained: float = 0.0) -> PendingJob:
    built = make_job(name).replicas(1, gpu=gpus, cpu=1000).created(created).obj()
    return replace(built, attained_service=attained)


def test_jobs_asking_for_auto_get_the_policy_placement_and_others_keep_theirs() -> None:
    nodes = [gpu_node("n0"), gpu_node("n1")]
    spread = SchedulerConfig(placement="spread")
    # One 2-GPU job on n0 already: spread puts the next auto job on the emptier node, pack next to it.
    snap = cluster(nodes, [running("busy", on("n0", 0, 1))])
    auto = make_job("auto").replicas(1, gpu=2, cpu=1000).obj()
    packed = make_job("packed").replicas(1, gpu=2, cpu=1000).placement("pack").obj()
    decisions = schedule(snap, [auto], at(0), spread)
    assert {a.node for a in decisions.admitted[0].assignments} == {"n1"}
    decisions = schedule(snap, [packed], at(0), spread)
    assert {a.node for a in decisions.admitted[0].assignments} == {"n0"}


def test_a_running_job_s_earlier_runs_count_towards_its_band() -> None:
    # Started 5 s ago with 8 GPUs: 40 GPU-s in this run, band 0; with 900 GPU-s before, band 1 and preemptible.
    fresh = running("old", on("n0", *range(8)), started=-5)
    snap = cluster([gpu_node("n0")], [fresh])
    assert victims(schedule(snap, [job("new", created=0)], at(0), LAS)) == []
    served = replace(fresh, attained_service=900.0)
    snap = cluster([gpu_node("n0")], [served])
    decisions = schedule(snap, [job("new", created=0)], at(0), LAS)
    assert victims(decisions) == ["old"]
    assert keys(decisions) == ["new"]


def test_attained_service_counts_each_run_until_the_last_cycle_that_saw_it() -> None:
    ledger = AttainedService()
    first = running("a", on("n0", 0, 1), started=0)  # 2 GPUs
    assert ledger.observe([first], at(10), ["default/a"])[0].attained_service == 0.0
    ledger.observe([first], at(30), ["default/a"])  # still running at 30 s
    ledger.observe([], at(40), ["default/a"])  # preempted in the cycle at 30 s: gone at 40 s
    assert ledger.before("default/a") == 60.0
    again = running("a", on("n0", 0, 1, 2, 3), started=50)  # 4 GPUs from 50 s
    [seen] = ledger.observe([again], at(60), ["default/a"])
    assert seen.attained_service == 60.0
    ledger.observe([replace(again, started=at(70))], at(80), ["default/a"])  # a new run: the last one ended at 60 s
    assert ledger.before("default/a") == 60.0 + 4 * 10
    ledger.observe([], at(90), [])  # the job is gone: forgotten
    assert ledger.before("default/a") == 0.0


def test_bands_are_kept_across_sessions_only_with_time_slicing() -> None:
    ledger = AttainedService()
    assert ledger.bands(SchedulerConfig()) is None
    bands = ledger.bands(LAS)
    assert bands is not None and ledger.bands(LAS) is bands
    # The waiting job's starvation guard needs the cycles' history: a session that forgets it never promotes.
    starving = replace(LAS, las_starve_limit=1.0)
    ledger = AttainedService()
    kept = ledger.bands(starving)
    snap = cluster([gpu_node("n0")], [running("hog", on("n0", *range(8)), started=0, preemptible=False)])
    served = job("a", attained=200.0)  # ran 25 s on 8 GPUs earlier: band 1
    for second in (0, 20, 40):
        schedule(snap, [served], at(second), starving, bands=kept)
    assert kept is not None and kept.promotions == 1
