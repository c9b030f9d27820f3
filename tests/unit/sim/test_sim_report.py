"""Report directories: the five files, consistent with the results, and a clear error without matplotlib."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from sim_builders import cluster, job

from phalanx.sim.engine import SimOptions, SimResult, simulate
from phalanx.sim.metrics import METRICS
from phalanx.sim.report import ReportError, check_plotting, write_report

PNG = b"\x89PNG\r\n\x1a\n"


def results() -> list[SimResult]:
    jobs = [job("x", 0, 100, 4), job("a", 10, 50, 4, 4), job("big", 20, 5, 8)]
    return [simulate(cluster(2, 4), jobs, SimOptions(gang=gang)) for gang in (True, False)]


def test_a_report_directory_has_markdown_csvs_and_plots(tmp_path: Path) -> None:
    runs = results()
    files = write_report(tmp_path / "out", runs, command="phalanx sim run --x", setup=["workload: three jobs"])
    markdown = files.report.read_text(encoding="utf-8")
    assert "$ phalanx sim run --x" in markdown and "- workload: three jobs" in markdown
    assert "`fifo/auto/gang`" in markdown and "`fifo/auto/pod-by-pod`" in markdown
    assert all(column.title in markdown for column in METRICS)
    for plot in (files.allocation_plot, files.queueing_plot):
        assert plot.read_bytes().startswith(PNG)
    with files.metrics.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["run"] for row in rows] == ["fifo/auto/gang", "fifo/auto/pod-by-pod"]
    assert [float(row["partial_gang_idle_gpu_s"]) for row in rows] == [0.0, 4 * 90]
    assert [row["jobs_unfinished"] for row in rows] == ["1", "1"]
    with files.jobs.open(encoding="utf-8") as handle:
        jobs = list(csv.DictReader(handle))
    assert len(jobs) == 2 * 3
    big = [row for row in jobs if row["job"] == "default/big"]
    assert [(row["status"], row["start_s"]) for row in big] == [("waiting", "")] * 2
    assert all(row["reason"] for row in big)


def test_runs_need_distinct_variants(tmp_path: Path) -> None:
    run = results()[0]
    with pytest.raises(ValueError, match="distinct variants"):
        write_report(tmp_path, [run, run], command="x")
    with pytest.raises(ValueError, match="at least one run"):
        write_report(tmp_path, [], command="x")


def test_without_matplotlib_the_error_names_the_sim_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    with pytest.raises(ReportError, match=r"pip install 'phalanx\[sim\]'"):
        check_plotting()
