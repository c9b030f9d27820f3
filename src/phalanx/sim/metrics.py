"""Metrics of a simulated run: what ``report.md`` tabulates and ``metrics.csv`` lists, one column each.

Definitions (seconds unless said otherwise):

- **job completion time (JCT)** of a finished job: end - submission; average, p50 and p95 over finished jobs.
- **queueing delay** of a started job: first start - submission (start = the moment its last replica was
  placed; a preempted job counts its first run); average, p50 and p95 over started jobs. Jobs that never
  started are counted in ``jobs_unfinished`` and left out of both (their delay is censored, not zero).
- **waiting time** of a finished job: JCT - the time it ran (all its runs): the queueing delay plus, for a
  preempted job, every wait after a preemption; average over finished jobs.
- Percentiles interpolate linearly between the two nearest jobs (numpy's default).
- **makespan**: last completion - first submission.
- **GPU allocation ratio**: GPUs held by replicas (running jobs and partial gangs alike) over the cluster's
  GPUs, as a step curve over time; its time-weighted average runs from the first submission to the last
  event. **GPU busy ratio**: the same for GPUs of running jobs only; the two differ by the partial gangs.
- **partial-gang idle GPU-seconds**: GPU-seconds held by placed replicas of jobs that had not started; 0 with
  gang admission, by construction.
- **preemptions**: running jobs stopped to make room (priority preemption or time slicing); **promotions**:
  waiting jobs the starvation guard of time slicing moved back to the top band.

Each metric is a ``MetricColumn`` in ``METRICS``, computed from a ``SimResult`` alone; a new metric is one more
entry there (and, if it needs a new time series, one more field the engine samples). ``report.py`` and the CLI
iterate over ``METRICS`` and need no change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from phalanx.sim.engine import FINISHED, SimResult

MetricValue = float | int | None


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """One metric: its CSV column name, its heading in reports, how to compute and how to print it.

    Attributes:
        name: the ``metrics.csv`` column (snake_case).
        title: the heading in ``report.md`` and the CLI table.
        compute: the value for a run; None when undefined (e.g. no job finished).
        digits: decimals shown in reports (``metrics.csv`` keeps full precision).
    """

    name: str
    title: str
    compute: Callable[[SimResult], MetricValue]
    digits: int = 0

    def format(self, value: MetricValue) -> str:
        """The value as reports show it: ``-`` when undefined, thousands separated."""
        if value is None:
            return "-"
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:,.{self.digits}f}"


def completion_times(result: SimResult) -> list[float]:
    """JCT of every finished job, in input order."""
    return [t for outcome in result.jobs if (t := outcome.completion_time) is not None]


def queueing_delays(result: SimResult) -> list[float]:
    """Queueing delay of every started job, in input order."""
    return [d for outcome in result.jobs if (d := outcome.queueing_delay) is not None]


def waiting_times(result: SimResult) -> list[float]:
    """Waiting time (JCT minus run time) of every finished job, in input order."""
    return [w for outcome in result.jobs if outcome.status == FINISHED and (w := outcome.waiting_time) is not None]


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean, or None for no values."""
    return float(np.mean(values)) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100, linear interpolation), or None for no values."""
    return float(np.percentile(values, q)) if values else None


def time_weighted_mean(times: Sequence[float], values: Sequence[float]) -> float | None:
    """Mean of a step function that is ``values[i]`` on ``[times[i], times[i+1])``, over ``[times[0], times[-1]]``.

    The last value lasts no time; a single sample (or all at one time) returns the first value; no sample, None.
    """
    if not times:
        return None
    span = times[-1] - times[0]
    if span <= 0:
        return float(values[0])
    widths = np.diff(np.asarray(times, dtype=float))
    return float(np.dot(np.asarray(values[:-1], dtype=float), widths) / span)


def allocation_curve(result: SimResult) -> tuple[list[float], list[float]]:
    """The GPU allocation ratio after each event time: ``(times, ratios)``, ratios in 0..1."""
    capacity = result.capacity_gpus
    timeline = result.timeline
    ratios = [gpus / capacity if capacity else 0.0 for gpus in timeline.allocated_gpus]
    return list(timeline.times), ratios


def _allocation_ratio(result: SimResult) -> float | None:
    times, ratios = allocation_curve(result)
    return time_weighted_mean(times, ratios)


def _busy_ratio(result: SimResult) -> float | None:
    capacity = result.capacity_gpus
    timeline = result.timeline
    return time_weighted_mean(timeline.times, [g / capacity if capacity else 0.0 for g in timeline.running_gpus])


def _makespan(result: SimResult) -> float | None:
    ends = [outcome.end for outcome in result.jobs if outcome.end is not None]
    if not ends:
        return None
    return max(ends) - min(outcome.job.submit for outcome in result.jobs)


def _percent(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


METRICS: tuple[MetricColumn, ...] = (
    MetricColumn("jobs", "jobs", lambda r: len(r.jobs)),
    MetricColumn("jobs_finished", "finished", lambda r: sum(1 for o in r.jobs if o.status == FINISHED)),
    MetricColumn("jobs_unfinished", "unfinished", lambda r: sum(1 for o in r.jobs if o.status != FINISHED)),
    MetricColumn("jct_mean_s", "JCT mean (s)", lambda r: mean(completion_times(r))),
    MetricColumn("jct_p50_s", "JCT p50 (s)", lambda r: percentile(completion_times(r), 50)),
    MetricColumn("jct_p95_s", "JCT p95 (s)", lambda r: percentile(completion_times(r), 95)),
    MetricColumn("queueing_mean_s", "queueing mean (s)", lambda r: mean(queueing_delays(r))),
    MetricColumn("queueing_p50_s", "queueing p50 (s)", lambda r: percentile(queueing_delays(r), 50)),
    MetricColumn("queueing_p95_s", "queueing p95 (s)", lambda r: percentile(queueing_delays(r), 95)),
    MetricColumn("waiting_mean_s", "waiting mean (s)", lambda r: mean(waiting_times(r))),
    MetricColumn("makespan_s", "makespan (s)", _makespan),
    MetricColumn("gpu_allocation_pct", "GPU allocation (%)", lambda r: _percent(_allocation_ratio(r)), 1),
    MetricColumn("gpu_busy_pct", "GPU busy (%)", lambda r: _percent(_busy_ratio(r)), 1),
    MetricColumn("partial_gang_idle_gpu_s", "partial-gang idle GPU-s", lambda r: r.partial_gang_idle_gpu_seconds),
    MetricColumn("preemptions", "preemptions", lambda r: r.preemptions),
    MetricColumn("promotions", "promotions", lambda r: r.promotions),
)


def compute_metrics(result: SimResult) -> dict[str, MetricValue]:
    """Every metric of ``METRICS`` for ``result``, by column name, in column order."""
    return {column.name: column.compute(result) for column in METRICS}
