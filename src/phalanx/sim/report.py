"""Experiment reports: one directory per ``phalanx sim run``, readable as is and easy to post-process.

``write_report(directory, results, command=...)`` writes

- ``report.md``: what was simulated, the command that produced it, the metrics of every run as a table (one
  column per run), deadlocks, and the plots;
- ``metrics.csv``: one row per run, the variant then every ``metrics.METRICS`` column, full precision;
- ``jobs.csv``: one row per job and run: submission, start, end, queueing delay, JCT, GPUs, replicas, status,
  nodes, why a job that never started waited, and (for preempted jobs) its first start, run time and
  preemptions;
- ``allocation.png``: the GPU allocation ratio over time, one line per run;
- ``queueing_cdf.png``: the CDF of queueing delay, one line per run.

Plots use matplotlib's object API on an Agg canvas (no pyplot, no global backend switch), imported only when a
report is written, so ``import phalanx.sim`` stays light. Without matplotlib, ``ReportError`` names the
``sim`` extra to install.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.sim.engine import NOT_SUBMITTED, SimResult
from phalanx.sim.metrics import METRICS, MetricValue, allocation_curve, compute_metrics, queueing_delays

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HOUR = 3_600.0


class ReportError(RuntimeError):
    """A report cannot be written (matplotlib missing, the directory not writable)."""


@dataclass(frozen=True, slots=True)
class ReportFiles:
    """Where ``write_report`` put each file."""

    report: Path
    metrics: Path
    jobs: Path
    allocation_plot: Path
    queueing_plot: Path


def write_report(
    directory: Path,
    results: Sequence[SimResult],
    *,
    command: str,
    title: str = "Phalanx simulation",
    setup: Sequence[str] = (),
) -> ReportFiles:
    """Write the report of ``results`` into ``directory`` (created if needed; files there are replaced).

    Args:
        directory: the output directory.
        results: one result per run, in the order to show them; labels (``SimOptions.label``) must differ.
        command: the command line that produced the runs, quoted in ``report.md``.
        title: the report's heading.
        setup: lines describing the workload and the cluster, listed under the heading.

    Raises:
        ReportError: matplotlib is not installed, or the directory cannot be written.
        ValueError: no result, or two results with the same label.
    """
    if not results:
        raise ValueError("a report needs at least one run")
    labels = [result.options.label for result in results]
    if len(set(labels)) != len(labels):
        raise ValueError(f"runs need distinct variants, got {', '.join(labels)}")
    figure_class = _figure_class()
    files = ReportFiles(
        report=directory / "report.md",
        metrics=directory / "metrics.csv",
        jobs=directory / "jobs.csv",
        allocation_plot=directory / "allocation.png",
        queueing_plot=directory / "queueing_cdf.png",
    )
    metrics = [compute_metrics(result) for result in results]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write_metrics_csv(files.metrics, results, metrics)
        _write_jobs_csv(files.jobs, results)
        _plot_allocation(figure_class(figsize=(9, 4.5)), files.allocation_plot, results)
        _plot_queueing(figure_class(figsize=(9, 4.5)), files.queueing_plot, results)
        files.report.write_text(_markdown(results, metrics, command=command, title=title, setup=setup), "utf-8")
    except OSError as err:
        raise ReportError(f"cannot write the report to {directory}: {err.strerror or err}") from None
    return files


def check_plotting() -> None:
    """Fail now, not after a long simulation, when plots cannot be drawn.

    Raises:
        ReportError: matplotlib is not installed; the message names the ``sim`` extra.
    """
    _figure_class()


def _figure_class() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError(
            "the simulator's plots need matplotlib; install the sim extra: pip install 'phalanx[sim]'"
        ) from None
    return Figure


def _csv_value(value: MetricValue | str) -> str:
    return "" if value is None else str(value)


def _write_metrics_csv(path: Path, results: Sequence[SimResult], metrics: Sequence[dict[str, MetricValue]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "queue_order", "placement", "gang", "deadlock", *(c.name for c in METRICS)])
        for result, values in zip(results, metrics, strict=True):
            options = result.options
            writer.writerow(
                [
                    options.label,
                    options.queue_order,
                    options.placement,
                    "on" if options.gang else "off",
                    "yes" if result.deadlock else "no",
                    *(_csv_value(values[c.name]) for c in METRICS),
                ]
            )


JOB_COLUMNS = (
    "run",
    "job",
    "submit_s",
    "start_s",
    "end_s",
    "queueing_delay_s",
    "jct_s",
    "gpus",
    "replicas",
    "gpu_model",
    "status",
    "first_placed_s",
    "nodes",
    "reason",
    "first_start_s",
    "run_s",
    "preempted",
)


def _write_jobs_csv(path: Path, results: Sequence[SimResult]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        for result in results:
            label = result.options.label
            for outcome in result.jobs:
                job = outcome.job
                writer.writerow(
                    [
                        label,
                        job.key,
                        _csv_value(job.submit),
                        _csv_value(outcome.start),
                        _csv_value(outcome.end),
                        _csv_value(outcome.queueing_delay),
                        _csv_value(outcome.completion_time),
                        _csv_value(job.gpus),
                        len(job.replicas),
                        job.gpu_model or "",
                        outcome.status,
                        _csv_value(outcome.first_placed),
                        " ".join(outcome.nodes),
                        outcome.reason,
                        _csv_value(outcome.first_start if outcome.first_start is not None else outcome.start),
                        _csv_value(outcome.run_time),
                        outcome.preempted,
                    ]
                )


def _origin(results: Sequence[SimResult]) -> float:
    submits = [outcome.job.submit for result in results for outcome in result.jobs]
    return min(submits, default=0.0)


def _line_style(result: SimResult) -> str:
    # Pod-by-pod runs dashed: a gang run and its pod-by-pod twin often overlap for long stretches.
    return "-" if result.options.gang else "--"


def _plot_allocation(figure: Figure, path: Path, results: Sequence[SimResult]) -> None:
    origin = _origin(results)
    axes = figure.add_subplot()
    for result in results:
        times, ratios = allocation_curve(result)
        hours = [(t - origin) / HOUR for t in times]
        axes.step(
            hours,
            [100.0 * r for r in ratios],
            where="post",
            linewidth=0.8,
            linestyle=_line_style(result),
            label=result.options.label,
        )
    axes.set_xlabel("hours since the first submission")
    axes.set_ylabel("GPUs allocated (%)")
    axes.set_ylim(0, 105)
    axes.set_title("GPU allocation ratio over time")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _plot_queueing(figure: Figure, path: Path, results: Sequence[SimResult]) -> None:
    axes = figure.add_subplot()
    for result in results:
        delays = sorted(queueing_delays(result))
        if not delays:
            continue
        # The CDF over every submitted job: jobs that never started keep it below 1.
        submitted = sum(1 for outcome in result.jobs if outcome.status != NOT_SUBMITTED)
        fractions = [(i + 1) / submitted for i in range(len(delays))]
        axes.step(
            delays, fractions, where="post", linewidth=1.0, linestyle=_line_style(result), label=result.options.label
        )
    axes.set_xscale("symlog", linthresh=60.0)
    axes.set_xlabel("queueing delay (s; linear below 60 s, logarithmic above)")
    axes.set_ylabel("fraction of submitted jobs")
    axes.set_ylim(0, 1.02)
    axes.set_title("Queueing delay CDF")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _markdown(
    results: Sequence[SimResult],
    metrics: Sequence[dict[str, MetricValue]],
    *,
    command: str,
    title: str,
    setup: Sequence[str],
) -> str:
    lines = [f"# {title}", ""]
    lines += [f"- {line}" for line in setup]
    lines += ["", "Produced by:", "", "```console", f"$ {command}", "```", "", "## Metrics", ""]
    lines.append("| metric | " + " | ".join(f"`{r.options.label}`" for r in results) + " |")
    lines.append("|---|" + "---:|" * len(results))
    for column in METRICS:
        cells = " | ".join(column.format(values[column.name]) for values in metrics)
        lines.append(f"| {column.title} | {cells} |")
    deadlocks = [(r.options.label, r.deadlock) for r in results if r.deadlock is not None]
    if deadlocks:
        lines += ["", "## Deadlocks", ""]
        lines += [f"- `{label}`: {deadlock.describe()}" for label, deadlock in deadlocks]
    lines += [
        "",
        "Definitions: `docs/simulator.md`. Per-job data: `jobs.csv`; metrics at full precision: `metrics.csv`.",
        "",
        "## GPU allocation over time",
        "",
        "![GPU allocation ratio over time](allocation.png)",
        "",
        "## Queueing delay",
        "",
        "![Queueing delay CDF](queueing_cdf.png)",
        "",
    ]
    return "\n".join(lines)
