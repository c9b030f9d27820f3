"""The CLI property through real processes: `phalanx submit` of hostile files against a real control plane.

A few cases of the corpus, the ones that once reached users as tracebacks or took the control plane down, each
run as ``phalanx submit --dry-run`` and ``phalanx submit`` processes with a timeout. Every answer must be clean
(no traceback, a documented exit code, ``error:`` lines); the control plane must still lead after each; and a
good job must still run to Succeeded at the end (issue 13: after a poison pill, a good job still runs).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from fuzz.corpus import cases
from integration.runtime.conftest import ControlPlaneProcess, Runtime
from phalanx.services.embedded.daemon import current_leader

SECONDS_PER_RUN = 20.0
DOCUMENTED_EXIT_CODES = {0, 1, 2, 3}
CASES = {case.name: case for case in cases()}
CHOSEN = [
    "yaml-bomb-in-job-9",
    "encoding-utf-16",
    "quantity-cpu-00",
    "name-job-02",
    "duplicate-spec",
    "duration-active-00",
    "count-100-roles-x-4096",
    "field-valid",
]


def check_clean(result: subprocess.CompletedProcess[str] | None, what: str) -> None:
    assert result is not None, f"{what}: no answer within {SECONDS_PER_RUN:.0f}s"
    shown = f"{what} -> {result.returncode}\nstdout: {result.stdout[-500:]}\nstderr: {result.stderr[-1500:]}"
    assert "Traceback" not in result.stdout + result.stderr, f"a traceback reached the user: {shown}"
    assert result.returncode in DOCUMENTED_EXIT_CODES, f"undocumented exit code: {shown}"
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines and lines[0].startswith("error: "), f"a failure that does not start with 'error: ': {shown}"


def run_cli(runtime: Runtime, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return runtime.cli(*args, timeout=SECONDS_PER_RUN)
    except subprocess.TimeoutExpired:
        return None


def assert_leading(runtime: Runtime, plane: ControlPlaneProcess, after: str) -> None:
    assert plane.process.poll() is None, f"the control plane exited after {after}:\n{plane.log()[-3000:]}"
    with runtime.client() as client:
        leader = current_leader(client.store)
    assert leader is not None and leader.pid == plane.process.pid, f"the control plane stopped leading after {after}"


@pytest.mark.parametrize("name", CHOSEN)
def test_a_hostile_file_through_real_processes(
    name: str, fuzz_runtime: Runtime, control_plane: ControlPlaneProcess
) -> None:
    case = CASES[name]
    path = fuzz_runtime.work_dir / case.filename
    path.write_bytes(case.content)
    dry_run = run_cli(fuzz_runtime, "submit", "--dry-run", str(path))
    check_clean(dry_run, f"phalanx submit --dry-run {name}")
    submit = run_cli(fuzz_runtime, "submit", str(path))
    check_clean(submit, f"phalanx submit {name}")
    assert_leading(fuzz_runtime, control_plane, f"phalanx submit {name}")
    if case.verdict == "refuse":
        assert submit is not None and submit.returncode == 2, f"{name} must be refused: {submit}"


def test_a_bad_namespace_override_is_refused_and_a_good_one_shown(
    fuzz_runtime: Runtime, control_plane: ControlPlaneProcess
) -> None:
    path = fuzz_runtime.work_dir / "override.yaml"
    path.write_bytes(CASES["field-valid"].content)
    refused = run_cli(fuzz_runtime, "submit", "-n", "Team-A", str(path))
    check_clean(refused, "phalanx submit -n Team-A")
    assert refused is not None and refused.returncode == 2, f"-n Team-A must be refused: {refused}"
    assert_leading(fuzz_runtime, control_plane, "phalanx submit -n Team-A")
    shown = run_cli(fuzz_runtime, "submit", "--dry-run", "-n", "team-b", str(path))
    check_clean(shown, "phalanx submit --dry-run -n team-b")
    assert shown is not None
    assert [doc["metadata"]["namespace"] for doc in yaml.safe_load_all(shown.stdout)] == ["team-b"]


def test_a_good_job_still_runs_after_the_hostile_files(
    fuzz_runtime: Runtime, control_plane: ControlPlaneProcess
) -> None:
    path = fuzz_runtime.work_dir / "good-after-hostile.yaml"
    document = {
        "metadata": {"name": "good-after-hostile"},
        "spec": {"replicas": {"worker": {"template": {"command": ["true"], "resources": {"cpu": "100m"}}}}},
    }
    path.write_text(yaml.safe_dump(document))
    result = fuzz_runtime.cli("run", str(path), "--no-logs", timeout=90)
    check_clean(result, "phalanx run good-after-hostile")
    assert result.returncode == 0, f"the good job did not succeed: {result.stdout[-500:]} {result.stderr[-500:]}"
    assert_leading(fuzz_runtime, control_plane, "the good job")
