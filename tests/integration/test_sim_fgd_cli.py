"""`phalanx sim fgd` as a real process: any openb-format trace, clear errors, and the published baselines.

The last test replays seed 42 of the protocol on the shipped openb default trace (1,213 nodes, ~10,800 pods per
policy). The published numbers are means over seeds 42-51 (traces-and-baselines.md §3: best-fit 93.08, packing
92.00, random 87.47, FGD 95.39 at 130 % arrived demand; per-seed spread about ±0.5); one seed landing within
a point of each is what validates the simulator here, the ten-seed means are in docs/experiments/.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "data" / "traces"
RESULT = re.compile(
    r"^RESULT policy=(\S+) allocation_at_100=([\d.]+) allocation_at_130=([\d.]+) frag_at_80=([\d.]+)$", re.M
)


def phalanx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli.main", "sim", "fgd", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def results(stdout: str) -> dict[str, tuple[float, float, float]]:
    return {m[0]: (float(m[1]), float(m[2]), float(m[3])) for m in RESULT.findall(stdout)}


def write_trace(directory: Path) -> tuple[Path, Path]:
    pods, nodes = directory / "pods.csv", directory / "nodes.csv"
    with pods.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                         "creation_time", "deletion_time", "scheduled_time"])  # fmt: skip
        for i in range(40):
            gpus, milli = [(1, 1000), (1, 300), (2, 1000), (0, 0)][i % 4]
            writer.writerow([f"p{i}", 2000 + 500 * (i % 3), 4096, gpus, milli, "A10|T4" if i % 5 == 0 else "", "LS",
                             "Running", i, "", i])  # fmt: skip
    with nodes.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i in range(8):
            writer.writerow([f"node-{i}", 32000, 65536, [1, 2, 4][i % 3], ["T4", "A10", "V100"][i % 3]])
    return pods, nodes


def test_a_pod_list_of_only_the_protocols_columns_gives_a_result(tmp_path: Path) -> None:
    """Issue 19: a pod list cut to name,cpu_milli,memory_mib,num_gpu,gpu_milli was refused; it is enough."""
    full, nodes = write_trace(tmp_path)
    with full.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    trimmed = tmp_path / "trimmed.csv"
    columns = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"]
    with trimmed.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([row[column] for column in columns] for row in rows)
    done = phalanx("--pods", str(trimmed), "--nodes", str(nodes), "--seeds", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert set(results(done.stdout)) == {"auto"}


def test_any_openb_format_trace_gives_a_result_line_and_a_report(tmp_path: Path) -> None:
    pods, nodes = write_trace(tmp_path)
    out = tmp_path / "report"
    done = phalanx("--pods", str(pods), "--nodes", str(nodes), "--seeds", "1-3", "--policy", "auto",
                   "--policy", "spread", "--out", str(out), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = results(done.stdout)
    assert set(found) == {"auto", "spread"}
    for alloc_100, alloc_130, frag in found.values():
        assert 0 < alloc_100 <= alloc_130 + 5 and alloc_130 <= 100 and 0 <= frag <= 100
    assert {p.name for p in out.iterdir()} == {"report.md", "curves.csv", "allocation.png", "fragmentation.png"}
    with (out / "curves.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["seed"] for row in rows} == {"1", "2", "3"}
    report = (out / "report.md").read_text()
    assert "RESULT policy=auto" in report
    # Where the idle GPUs are: three parts that add up to what was not allocated at 130 %.
    assert "Where the idle GPU capacity is" in done.stdout
    idle_rows = [line.split("|")[1:-1] for line in report.splitlines() if line.startswith(("| auto ", "| spread "))]
    idle = {cells[0].strip(): [float(cell) for cell in cells[1:]] for cells in idle_rows if len(cells) == 5}
    assert set(idle) == {"auto", "spread"}
    for policy, (total, cpu_bound, whole, shares) in idle.items():
        assert total == pytest.approx(cpu_bound + whole + shares, abs=0.02)
        # Allocation never drops, so what is idle at the end is at most what was idle at 130 % on the curve.
        assert 0 <= total <= 100 - found[policy][1] + 0.01


def test_a_mix_drawn_from_the_trace_is_replayed(tmp_path: Path) -> None:
    pods, nodes = write_trace(tmp_path)
    done = phalanx("--pods", str(pods), "--nodes", str(nodes), "--seeds", "1-2", "--mix", "gpushare=80", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mix gpushare80 (seed 1): 40 pods" in done.stderr
    (auto,) = results(done.stdout).values()
    plain = phalanx("--pods", str(pods), "--nodes", str(nodes), "--seeds", "1-2", cwd=tmp_path)
    assert results(plain.stdout)["auto"] != auto, "the mix is another workload than the trace"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "5-1"], "--seeds"),
        (["--policy", "tetris"], "--policy 'tetris'"),
        (["--nodes", "missing.csv"], "missing.csv"),
        (["--mix", "sharing=40"], "--mix: mix 'sharing=40': write a kind and a percentage"),
        (["--mix", "cpu=150"], "percent must be within 0..100"),
    ],
)
def test_bad_input_exits_2_and_names_the_fix(tmp_path: Path, args: list[str], message: str) -> None:
    pods, nodes = write_trace(tmp_path)
    base = {"--pods": str(pods), "--nodes": str(nodes)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    done = phalanx(*[item for pair in base.items() for item in pair], cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr + done.stdout


def test_seed_42_of_the_openb_default_trace_lands_on_the_published_baselines(tmp_path: Path) -> None:
    pods, nodes = TRACES / "openb_pod_list_default.csv", TRACES / "openb_node_list_gpu_node.csv"
    if not pods.is_file() or not nodes.is_file():
        pytest.fail(f"the shipped openb traces are missing from {TRACES}")
    policies = ["auto", "fragmentation", "binpack", "pack", "random"]
    done = phalanx("--pods", str(pods), "--nodes", str(nodes), "--seeds", "42",
                   *[arg for policy in policies for arg in ("--policy", policy)], cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    at_130 = {policy: values[1] for policy, values in results(done.stdout).items()}
    assert set(at_130) == set(policies)
    assert abs(at_130["binpack"] - 93.08) <= 1.0, at_130
    assert abs(at_130["pack"] - 92.00) <= 1.0, at_130
    assert abs(at_130["random"] - 87.47) <= 1.0, at_130
    # The default's packed measure against FGD's own (95.50 on this seed; FGD published 95.39 over ten).
    assert at_130["auto"] >= 95.65 and at_130["fragmentation"] >= 95.4, at_130
    assert at_130["auto"] > at_130["fragmentation"] > at_130["binpack"] > at_130["pack"] > at_130["random"]
