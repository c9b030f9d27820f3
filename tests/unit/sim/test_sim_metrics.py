"""Metrics arithmetic on hand-built results: every number checked against a hand computation."""

from __future__ import annotations

import pytest
from sim_builders import job

from phalanx.sim.engine import FINISHED, WAITING, JobOutcome, SimOptions, SimResult, Timeline
from phalanx.sim.metrics import (
    METRICS,
    MetricColumn,
    allocation_curve,
    compute_metrics,
    mean,
    percentile,
    time_weighted_mean,
)


def hand_result() -> SimResult:
    # Three jobs on 4 GPUs: a (1 GPU) runs 0..100; b (2 GPUs) waits 50 s, runs 60..160; c never starts.
    jobs = (
        JobOutcome(job("a", 0, 100, 1), FINISHED, start=0, end=100, first_placed=0),
        JobOutcome(job("b", 10, 100, 2), FINISHED, start=60, end=160, first_placed=60),
        JobOutcome(job("c", 20, 100, 8), WAITING, reason="too big"),
    )
    timeline = Timeline(
        times=(0, 10, 20, 60, 100, 160),
        allocated_gpus=(1, 1, 1, 3, 2, 0),
        running_gpus=(1, 1, 1, 3, 2, 0),
        pending_jobs=(0, 1, 2, 1, 1, 1),
        running_jobs=(1, 1, 1, 2, 1, 0),
    )
    return SimResult(SimOptions(), 4, jobs, timeline, partial_gang_idle_gpu_seconds=0.0)


def test_metrics_of_a_hand_built_run() -> None:
    values = compute_metrics(hand_result())
    assert values["jobs"] == 3
    assert (values["jobs_finished"], values["jobs_unfinished"]) == (2, 1)
    assert values["jct_mean_s"] == pytest.approx((100 + 150) / 2)
    assert values["jct_p50_s"] == pytest.approx(125.0)
    assert values["jct_p95_s"] == pytest.approx(100 + 0.95 * 50)
    assert values["queueing_mean_s"] == pytest.approx((0 + 50) / 2)
    assert values["makespan_s"] == 160
    # GPUs held: 1 for 60 s, 3 for 40 s, 2 for 60 s, over 160 s of 4 GPUs.
    assert values["gpu_allocation_pct"] == pytest.approx(100 * (1 * 60 + 3 * 40 + 2 * 60) / 160 / 4)
    assert values["gpu_busy_pct"] == values["gpu_allocation_pct"]
    assert values["partial_gang_idle_gpu_s"] == 0.0
    assert list(values) == [column.name for column in METRICS]


def test_the_allocation_curve_is_the_held_share_after_each_event() -> None:
    times, ratios = allocation_curve(hand_result())
    assert times == [0, 10, 20, 60, 100, 160]
    assert ratios == [0.25, 0.25, 0.25, 0.75, 0.5, 0.0]


@pytest.mark.parametrize(
    ("times", "values", "expected"),
    [
        pytest.param([0, 10, 30], [1.0, 0.5, 0.0], 20 / 30, id="steps"),
        pytest.param([5], [0.7], 0.7, id="one-sample"),
        pytest.param([5, 5], [0.2, 0.9], 0.2, id="no-span"),
        pytest.param([], [], None, id="empty"),
    ],
)
def test_time_weighted_mean(times: list[float], values: list[float], expected: float | None) -> None:
    assert time_weighted_mean(times, values) == (pytest.approx(expected) if expected is not None else None)


def test_mean_and_percentiles_interpolate_and_are_undefined_without_values() -> None:
    assert mean([1, 2, 6]) == 3
    assert percentile([0, 10], 50) == 5
    assert percentile([1, 2, 3, 4, 100], 95) == pytest.approx(4 + 0.8 * 96)
    assert mean([]) is None and percentile([], 50) is None


def test_an_empty_run_has_undefined_times_not_zeros() -> None:
    empty = SimResult(SimOptions(), 4, (), Timeline((), (), (), (), ()), 0.0)
    values = compute_metrics(empty)
    assert values["jct_mean_s"] is None and values["makespan_s"] is None and values["gpu_allocation_pct"] is None
    assert values["jobs"] == 0


def test_metric_columns_format_for_reports() -> None:
    column = MetricColumn("x", "x", lambda result: None, digits=1)
    assert (column.format(None), column.format(1234567), column.format(12.345)) == ("-", "1,234,567", "12.3")
