"""Workloads: ITP rows become gangs of at most 8-GPU replicas; generators are seeded and follow their mixes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from phalanx.sim.traces import ItpJob
from phalanx.sim.workloads import (
    FFDL_DURATION,
    FFDL_GPU_MIX,
    LogNormal,
    ffdl_workload,
    gang_of,
    jobs_from_itp,
    mean_gang_size,
    poisson_workload,
    rate_for_load,
    split_gang,
)


@pytest.mark.parametrize(
    ("gpus", "replicas"),
    [
        pytest.param(64, (8,) * 8, id="64-is-8x8"),
        pytest.param(16, (8, 8), id="16-is-2x8"),
        pytest.param(8, (8,), id="8-is-one-server"),
        pytest.param(2, (2,), id="2-is-1x2"),
        pytest.param(12, (6, 6), id="12-is-balanced"),
        pytest.param(9, (5, 4), id="uneven-larger-first"),
        pytest.param(0, (0,), id="cpu-only"),
    ],
)
def test_gangs_split_into_ceil_n_over_8_balanced_replicas(gpus: int, replicas: tuple[int, ...]) -> None:
    assert split_gang(gpus) == replicas


def test_itp_rows_become_jobs_with_cpu_and_memory_per_gpu() -> None:
    (job, cpu_only) = jobs_from_itp([ItpJob("abc", 10.0, 600.0, 16), ItpJob("z", 11.0, 5.0, 0)], gpu_model="A100")
    assert (job.key, job.submit, job.duration, job.gpu_model, job.gpus) == ("itp/abc", 10.0, 600.0, "A100", 16.0)
    assert [(r.gpus, r.cpu_milli, r.memory) for r in job.replicas] == [(8, 32000, 8 * 32 * 2**30)] * 2
    assert [(r.gpus, r.cpu_milli) for r in cpu_only.replicas] == [(0, 4000)]


def test_poisson_workloads_are_a_function_of_the_seed() -> None:
    first = poisson_workload(200, rate_per_hour=10, seed=7)
    assert first == poisson_workload(200, rate_per_hour=10, seed=7)
    assert first != poisson_workload(200, rate_per_hour=10, seed=8)


def test_poisson_arrivals_follow_rate_mix_and_clipped_durations() -> None:
    jobs = poisson_workload(4000, rate_per_hour=60, gang_mix={1: 3, 8: 1}, duration=LogNormal(600, 2.0, 60, 3600))
    submits = [job.submit for job in jobs]
    assert submits == sorted(submits)
    assert np.mean(np.diff(submits)) == pytest.approx(60.0, rel=0.05)  # 60 per hour: a minute apart
    sizes = Counter(job.gpus for job in jobs)
    assert set(sizes) == {1.0, 8.0}
    assert sizes[1.0] / len(jobs) == pytest.approx(0.75, abs=0.03)
    assert min(job.duration for job in jobs) == 60 and max(job.duration for job in jobs) == 3600
    assert len({job.key for job in jobs}) == len(jobs)


def test_ffdl_jobs_are_one_gpu_learners_of_one_model_in_proportion_to_capacity() -> None:
    jobs = ffdl_workload(3000, intensity="heavy", gpus_by_model={"K80": 32, "P100": 16, "V100": 16}, seed=1)
    assert jobs == ffdl_workload(3000, intensity="heavy", gpus_by_model={"K80": 32, "P100": 16, "V100": 16}, seed=1)
    models = Counter(job.gpu_model for job in jobs)
    assert models["K80"] / len(jobs) == pytest.approx(0.5, abs=0.04)
    assert {len(job.replicas) for job in jobs} == {1, 2, 3, 4}
    assert all(replica.gpus == 1 for job in jobs for replica in job.replicas)
    assert all(job.key.startswith(f"ffdl/{job.gpu_model.lower()}-") for job in jobs if job.gpu_model)


def test_heavy_ffdl_load_arrives_faster_than_light() -> None:
    gpus = {"V100": 64}
    light = ffdl_workload(2000, intensity="light", gpus_by_model=gpus, seed=3)
    heavy = ffdl_workload(2000, intensity="heavy", gpus_by_model=gpus, seed=3)
    ratio = np.mean(np.diff([j.submit for j in light])) / np.mean(np.diff([j.submit for j in heavy]))
    assert ratio == pytest.approx(1.2 / 0.5, rel=0.1)
    # Offered load: rate * mean GPUs * mean run time over capacity.
    expected_rate = rate_for_load(
        1.2, capacity_gpus=64, mean_gpus=mean_gang_size(FFDL_GPU_MIX), mean_duration=FFDL_DURATION.mean
    )
    assert 3600 / np.mean(np.diff([j.submit for j in heavy])) == pytest.approx(expected_rate, rel=0.1)


def test_rate_for_load_arithmetic() -> None:
    # 50% of 100 GPUs = 50 GPUs busy; jobs of 2 GPUs for 1 hour: 25 jobs per hour.
    assert rate_for_load(0.5, capacity_gpus=100, mean_gpus=2, mean_duration=3600) == pytest.approx(25.0)
    assert mean_gang_size({1: 1, 3: 1}) == 2.0
    assert LogNormal(100, 0).mean == 100
    assert [r.gpus for r in gang_of(3, max_per_replica=1)] == [1, 1, 1]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: poisson_workload(0, rate_per_hour=1), "at least one job", id="no-job"),
        pytest.param(lambda: poisson_workload(5, rate_per_hour=0), "positive number of jobs per hour", id="zero-rate"),
        pytest.param(lambda: poisson_workload(5, rate_per_hour=1, gang_mix={1: -1}), "non-negative", id="bad-mix"),
        pytest.param(
            lambda: ffdl_workload(5, intensity="medium", gpus_by_model={"V100": 8}), "'medium'", id="intensity"
        ),
        pytest.param(lambda: ffdl_workload(5, intensity="light", gpus_by_model={"V100": 0}), "with GPUs", id="no-gpus"),
        pytest.param(lambda: LogNormal(0, 1), "median > 0", id="bad-distribution"),
        pytest.param(lambda: rate_for_load(0, capacity_gpus=8, mean_gpus=1, mean_duration=1), "positive", id="no-load"),
    ],
)
def test_nonsense_generator_parameters_are_refused(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=message):
        call()
