"""`phalanx sim run` as a real process on the ITP cluster10 trace: report files and numbers that agree."""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
CLUSTER10 = TRACES / "itp_cluster10.csv"


def phalanx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CLUSTER10.is_file():
        pytest.fail(f"the shipped trace is missing: expected {CLUSTER10}")
    out = tmp_path_factory.mktemp("sim") / "report"
    done = phalanx(
        "sim",
        "run",
        "--trace",
        f"itp:{CLUSTER10}",
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--compare",
        "--out",
        str(out),
        cwd=tmp_path_factory.getbasetemp(),
    )
    assert done.returncode == 0, done.stderr
    assert f"report: {out / 'report.md'}" in done.stdout
    return out


def test_the_report_directory_has_every_file(report: Path) -> None:
    for name in ("report.md", "metrics.csv", "jobs.csv", "allocation.png", "queueing_cdf.png"):
        assert (report / name).stat().st_size > 0, name
    markdown = (report / "report.md").read_text(encoding="utf-8")
    assert "phalanx sim run --trace itp:" in markdown
    assert "4 nodes x 8 GPUs" in markdown


def test_compare_runs_gang_and_pod_by_pod_for_fifo_and_shortest_first(report: Path) -> None:
    runs = [row["run"] for row in read_csv(report / "metrics.csv")]
    assert runs == [
        "fifo/auto/gang",
        "fifo/auto/pod-by-pod",
        "shortest-first/auto/gang",
        "shortest-first/auto/pod-by-pod",
    ]


def test_metrics_agree_with_the_per_job_rows(report: Path) -> None:
    jobs = read_csv(report / "jobs.csv")
    for row in read_csv(report / "metrics.csv"):
        mine = [job for job in jobs if job["run"] == row["run"]]
        assert len(mine) == int(row["jobs"]) == 260
        finished = [job for job in mine if job["status"] == "finished"]
        assert len(finished) == int(row["jobs_finished"])
        assert int(row["jobs_finished"]) + int(row["jobs_unfinished"]) == 260
        jcts = [float(job["jct_s"]) for job in finished]
        assert float(row["jct_mean_s"]) == pytest.approx(statistics.mean(jcts))
        assert float(row["jct_p50_s"]) == pytest.approx(statistics.median(jcts))
        delays = [float(job["queueing_delay_s"]) for job in mine if job["start_s"]]
        assert float(row["queueing_mean_s"]) == pytest.approx(statistics.mean(delays))
        for job in finished:  # JCT = queueing delay + run time, and nothing starts before it is submitted
            assert float(job["jct_s"]) == pytest.approx(
                float(job["queueing_delay_s"]) + float(job["end_s"]) - float(job["start_s"])
            )
            assert float(job["start_s"]) >= float(job["submit_s"])
        ends = [float(job["end_s"]) for job in finished]
        assert float(row["makespan_s"]) == pytest.approx(max(ends) - min(float(job["submit_s"]) for job in mine))
        assert 0 < float(row["gpu_allocation_pct"]) <= 100
        assert float(row["gpu_busy_pct"]) <= float(row["gpu_allocation_pct"]) + 1e-9
        if row["gang"] == "on":
            assert float(row["partial_gang_idle_gpu_s"]) == 0.0
            assert row["gpu_busy_pct"] == row["gpu_allocation_pct"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--trace", "itp:nowhere.csv"], "nowhere.csv: no such file", id="missing-file"),
        pytest.param(
            ["--trace", "itp:bad.csv"], "bad.csv:3: column 'duration': 'long' is not a number", id="bad-number"
        ),
        pytest.param(["--trace", "itp:nocol.csv"], "the header lacks column(s) 'num_gpu'", id="bad-columns"),
        pytest.param(["--trace", "philly:x.csv"], "FORMAT one of itp", id="unknown-format"),
        pytest.param(["--generate", "poisson", "--placement", "diagonal"], "placement 'diagonal'", id="placement"),
        pytest.param(["--generate", "poisson", "--rate", "0"], "positive number of jobs per hour", id="zero-rate"),
        pytest.param(["--generate", "poisson", "--nodes", "0"], "--nodes", id="zero-nodes"),
        pytest.param([], "give exactly one workload", id="no-workload"),
    ],
)
def test_bad_input_exits_2_with_a_message_naming_the_problem(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "bad.csv").write_text("job_id,submission_time,duration,num_gpu\na,0,60,1\nb,5,long,1\n")
    (tmp_path / "nocol.csv").write_text("job_id,submission_time,duration\na,0,60\n")
    done = phalanx("sim", "run", *args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in " ".join((done.stdout + done.stderr).split())
    assert not (tmp_path / "out" / "report.md").exists()


def test_time_slicing_runs_least_attained_service_with_preemption_by_band(tmp_path: Path) -> None:
    out = tmp_path / "sliced"
    args = ["--trace", f"itp:{CLUSTER10}", "--nodes", "1", "--gpus-per-node", "8", "--compare"]
    orders = ["--queue-order", "fifo", "--queue-order", "least-attained-service"]
    done = phalanx("sim", "run", *args, *orders, "--time-slicing", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {row["run"]: row for row in read_csv(out / "metrics.csv")}
    # Pod by pod cannot time-slice: the least-attained-service order runs with gang admission only.
    assert list(rows) == ["fifo/auto/gang", "fifo/auto/pod-by-pod", "least-attained-service/auto/gang/time-slicing"]
    sliced = rows["least-attained-service/auto/gang/time-slicing"]
    assert int(sliced["preemptions"]) > 0 and int(rows["fifo/auto/gang"]["preemptions"]) == 0
    assert float(sliced["partial_gang_idle_gpu_s"]) == 0.0
    # Two 16-GPU jobs never fit the one 8-GPU node; everything else finishes, as under FIFO.
    assert sliced["jobs_finished"] == rows["fifo/auto/gang"]["jobs_finished"] == "258"
    jobs = [job for job in read_csv(out / "jobs.csv") if job["run"] == "least-attained-service/auto/gang/time-slicing"]
    preempted = [job for job in jobs if int(job["preempted"]) > 0]
    assert preempted
    for job in preempted:  # it ran in several runs and waited in between
        assert float(job["first_start_s"]) < float(job["start_s"])
        assert float(job["end_s"]) - float(job["first_start_s"]) > float(job["run_s"])
        assert float(job["queueing_delay_s"]) == pytest.approx(float(job["first_start_s"]) - float(job["submit_s"]))


def test_explaining_every_cycle_gives_the_same_report(tmp_path: Path) -> None:
    args = ["sim", "run", "--trace", f"itp:{CLUSTER10}", "--nodes", "1", "--gpus-per-node", "8", "--compare"]
    quiet = phalanx(*args, "--out", str(tmp_path / "quiet"), cwd=tmp_path)
    loud = phalanx(*args, "--explain", "--out", str(tmp_path / "loud"), cwd=tmp_path)
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    for name in ("metrics.csv", "jobs.csv"):
        assert read_csv(tmp_path / "quiet" / name) == read_csv(tmp_path / "loud" / name), name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--time-slicing"], "--time-slicing applies to --queue-order least-attained-service", id="fifo"),
        pytest.param(
            ["--queue-order", "least-attained-service", "--time-slicing", "--no-gang"],
            "--time-slicing needs gang admission",
            id="pod-by-pod",
        ),
        pytest.param(["--starve-limit", "2"], "--starve-limit needs --time-slicing", id="starve-alone"),
    ],
)
def test_time_slicing_options_that_cannot_work_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = phalanx("sim", "run", "--trace", f"itp:{CLUSTER10}", *args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in " ".join((done.stdout + done.stderr).split())


def test_a_scheduler_config_file_runs_as_its_flags_do_and_a_flag_given_wins(tmp_path: Path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\nqueueOrder: least-attained-service\n"
        "timeSlicing: {enabled: true, starveLimit: 2}\nqueueingStrategy: backfill\nplacement: pack\n"
        "preemption: false\n"
    )
    args = ["sim", "run", "--trace", f"itp:{CLUSTER10}", "--jobs", "80", "--nodes", "1", "--gpus-per-node", "8"]
    flags = ["--queue-order", "least-attained-service", "--time-slicing", "--starve-limit", "2"]
    flags += ["--queueing-strategy", "backfill", "--placement", "pack"]
    by_file = phalanx(*args, "--scheduler-config", str(config), "--out", str(tmp_path / "file"), cwd=tmp_path)
    by_flags = phalanx(*args, *flags, "--out", str(tmp_path / "flags"), cwd=tmp_path)
    assert by_file.returncode == by_flags.returncode == 0, by_file.stderr + by_flags.stderr
    for name in ("metrics.csv", "jobs.csv"):
        assert read_csv(tmp_path / "file" / name) == read_csv(tmp_path / "flags" / name), name
    [row] = read_csv(tmp_path / "file" / "metrics.csv")
    assert row["run"] == "least-attained-service/pack/gang/backfill/time-slicing/starve-2"

    overridden = phalanx(
        *args,
        "--scheduler-config",
        str(config),
        "--queueing-strategy",
        "strict-fifo",
        "--out",
        str(tmp_path / "o"),
        cwd=tmp_path,
    )
    assert overridden.returncode == 0, overridden.stderr
    [row] = read_csv(tmp_path / "o" / "metrics.csv")
    assert row["run"] == "least-attained-service/pack/gang/strict-fifo/time-slicing/starve-2"

    config.write_text("apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\nqueueOrder: lifo\n")
    bad = phalanx(*args, "--scheduler-config", str(config), "--out", str(tmp_path / "bad"), cwd=tmp_path)
    assert bad.returncode == 2
    assert "queueOrder: must be one of" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--queue-order", "lifo"],
            "--queue-order 'lifo' is not one of fifo, priority, shortest-first, least-attained-service",
            id="queue-order",
        ),
        pytest.param(
            ["--queueing-strategy", "nope"],
            "--queueing-strategy 'nope' is not one of best-effort-fifo, strict-fifo, backfill",
            id="queueing-strategy",
        ),
        pytest.param(
            ["--placement", "diagonal"],
            "--placement 'diagonal' is not one of auto, pack, spread, binpack, fragmentation, random",
            id="placement",
        ),
        pytest.param(
            ["--topology", "tight"], "--topology 'tight' is not one of none, preferred, required", id="topology"
        ),
    ],
)
def test_a_flag_value_out_of_its_choices_is_refused_naming_the_flag(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """The sentence names the flag the user typed, not the core's field (queue_order) or an internal job."""
    done = phalanx(
        "sim", "run", "--generate", "poisson", "--jobs", "5", *args, "--out", str(tmp_path / "o"), cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert message in said
    assert "check/options" not in said and "queue_order" not in said and "Traceback" not in said


def test_queue_order_priority_is_accepted_as_fifo_as_in_the_configuration_file(tmp_path: Path) -> None:
    """`queueOrder: priority` in a SchedulerConfiguration is fifo (priority always goes first); the flag agrees."""
    args = ["sim", "run", "--generate", "poisson", "--jobs", "20", "--nodes", "2"]
    config = tmp_path / "scheduler.yaml"
    config.write_text("apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\nqueueOrder: priority\n")
    by_flag = phalanx(*args, "--queue-order", "priority", "--out", str(tmp_path / "flag"), cwd=tmp_path)
    by_file = phalanx(
        *args, "--scheduler-config", str(config), "--no-preemption", "--out", str(tmp_path / "file"), cwd=tmp_path
    )
    assert by_flag.returncode == by_file.returncode == 0, by_flag.stderr + by_file.stderr
    [row] = read_csv(tmp_path / "flag" / "metrics.csv")
    assert row["run"] == "fifo/auto/gang"
    assert read_csv(tmp_path / "flag" / "jobs.csv") == read_csv(tmp_path / "file" / "jobs.csv")


def test_the_report_says_what_the_scheduler_configuration_file_held(tmp_path: Path) -> None:
    """Two files that differ only in their bands give different runs under the same label: the report must say
    which configuration ran, not only the file's name (which may change or be gone when the report is read)."""
    config = tmp_path / "scheduler.yaml"
    config.write_text(
        "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\nqueueOrder: least-attained-service\n"
        "timeSlicing: {enabled: true, thresholds: [16]}\n"
    )
    args = ["sim", "run", "--generate", "poisson", "--jobs", "20", "--nodes", "2", "--scheduler-config", str(config)]
    done = phalanx(*args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = (tmp_path / "o" / "report.md").read_text()
    line = next((row for row in report.splitlines() if row.startswith("- scheduler configuration")), "")
    assert f"- scheduler configuration ({config}):" in line, report
    assert '"queueOrder": "least-attained-service"' in line and '"thresholds": [16.0]' in line, line
