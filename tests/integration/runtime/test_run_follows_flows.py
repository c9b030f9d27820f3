"""`phalanx run` on the sweep and pipeline examples, as a new user runs them: it follows the Sweep or the
PipelineRun it submitted to its end, a line per trial or step instance as it changes, and exits with its result.

Before, `run` printed `sweep/lr-search created` and exited 0 at once (it followed TrainingJobs only), so a user
who ran the documented example saw "success" for a sweep that had not started. Real control plane, real trial
and step processes, the examples copied from the repository into a fresh working directory (their commands
name files relative to it, as the docs run them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import yaml

from conftest import REPO, Runtime
from phalanx.model.pipelines import PipelineRun
from support.waiting import wait_until


def copy_examples(runtime: Runtime) -> None:
    for kind in ("sweeps", "pipelines"):
        shutil.copytree(REPO / "examples" / kind, runtime.work_dir / "examples" / kind)


def test_run_follows_the_sweep_example_to_its_end_and_names_its_best_trial(runtime: Runtime) -> None:
    copy_examples(runtime)
    runtime.start_control_plane()
    result = runtime.cli("run", "examples/sweeps/sweep.yaml", timeout=300)
    assert result.returncode == 0, (result.stdout, result.stderr)
    out = result.stdout
    assert "sweep/lr-search created" in out
    for number in range(12):  # every trial of maxTrials: 12 shows up as it ends
        assert any(f"lr-search-{number} " in line for line in out.splitlines()), out
    assert "Succeeded" in out.splitlines()[-2] or "Succeeded" in out, out
    best = json.loads(runtime.cli("sweep", "best", "lr-search", "-o", "json", check=True).stdout)
    assert f"best: {best['name']}" in out, out
    # a trial the sweep stopped says so where a user looks at jobs, instead of inviting a resume
    with runtime.client() as client:
        stopped = [r.name for r in client.ops.get_sweep("default", "lr-search").status.results if r.phase == "Stopped"]
    # the example's early stopping acts (its trials' epochs are slow enough for the quarter-second log reads)
    assert stopped, out
    for trial in stopped:
        explained = runtime.cli("explain", trial, check=True).stdout
        assert "stopped early by sweep lr-search" in explained and "resume" not in explained, explained


def pipeline_of(command: list[str]) -> list[dict[str, Any]]:
    component = {"name": "step", "implementation": {"container": {"image": "python:3.12", "command": command}}}
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "one"},
        "spec": {"steps": [{"name": "only", "component": {"inline": component}}]},
    }
    run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "one-1"},
        "spec": {"pipelineRef": {"name": "one"}},
    }
    return [pipeline, run]


def test_run_follows_the_v1_components_pipeline_run_and_exits_1_when_a_run_fails(runtime: Runtime) -> None:
    copy_examples(runtime)
    runtime.start_control_plane()
    result = runtime.cli("run", "examples/pipelines/v1_components.yaml", timeout=300)
    assert result.returncode == 0, (result.stdout, result.stderr)
    out = result.stdout
    assert "pipelinerun/v1-components-1 created" in out
    # each instance as it ends, with its outputs: 1..20 sums to 210, times each factor
    for item, total in enumerate((210, 420, 630)):
        assert any(f"sums[{item}]" in line and f"total={total}" in line for line in out.splitlines()), out
    assert "the run succeeded" in out, out
    described = runtime.cli("describe", "pipelinerun", "v1-components-1", check=True).stdout
    assert "outputs: total=630" in described, described

    failing = runtime.work_dir / "failing.yaml"
    failing.write_text(yaml.safe_dump_all(pipeline_of(["false"]), sort_keys=False))
    result = runtime.cli("run", str(failing), timeout=300)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert any("only" in line and "Failed" in line for line in result.stdout.splitlines()), result.stdout


def test_run_of_a_pipeline_without_a_run_says_what_would_run_it(runtime: Runtime) -> None:
    # A new user ran `phalanx run examples/pipelines/kfp_v2_pipeline.yaml` (a Pipeline, no PipelineRun): it said
    # "configured" and nothing ran, with no word of why.
    runtime.start_control_plane()
    lone = runtime.work_dir / "lone.yaml"
    lone.write_text(yaml.safe_dump(pipeline_of(["true"])[0], sort_keys=False))
    result = runtime.cli("run", str(lone), timeout=60)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "pipeline/one created" in result.stdout, result.stdout
    assert "nothing to run" in result.stdout and "spec.pipelineRef.name: one" in result.stdout, result.stdout


def test_run_detach_still_returns_at_once(runtime: Runtime) -> None:
    copy_examples(runtime)
    runtime.start_control_plane()
    result = runtime.cli("run", "-d", "examples/pipelines/v1_components.yaml", timeout=60)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.strip().splitlines()[-1] == "pipelinerun/v1-components-1 created", result.stdout


def test_run_says_why_a_trial_waits_and_ends_when_its_sweep_is_deleted(runtime: Runtime) -> None:
    # Trials that fit no node wait in the queue: the follower says why (the job's own sentence) instead of
    # printing "Pending" and nothing more; deleting the sweep ends the follower with a sentence and exit 1.
    copy_examples(runtime)
    document = yaml.safe_load((runtime.work_dir / "examples" / "sweeps" / "sweep.yaml").read_text())
    document["metadata"]["name"] = "too-big"
    document["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["resources"]["cpu"] = 64
    big = runtime.work_dir / "big.yaml"
    big.write_text(yaml.safe_dump(document, sort_keys=False))
    runtime.start_control_plane()
    output = runtime.work_dir / "run.out"
    follower = runtime.cli_background("run", str(big), output=output)
    wait_until(lambda: "needs 64 CPUs" in output.read_text(), timeout=60, message="the follower to say why")
    assert any("too-big-0" in line and "Pending" in line for line in output.read_text().splitlines())
    runtime.cli("delete", "sweep", "too-big", check=True)
    assert follower.wait(60) == 1
    assert "sweep default/too-big not found" in output.read_text(), output.read_text()


def test_the_dsl_example_submitted_twice_says_so_and_reruns_from_the_cache_under_another_name(
    runtime: Runtime,
) -> None:
    # A new user ran `python examples/pipelines/dsl_pipeline.py --submit` a second time and got a traceback.
    copy_examples(runtime)
    runtime.start_control_plane()
    script = str(runtime.work_dir / "examples" / "pipelines" / "dsl_pipeline.py")
    env = {**os.environ, "PHALANX_HOME": str(runtime.state_dir)}

    def example(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=runtime.work_dir, timeout=60
        )

    first = example("--submit")
    assert first.returncode == 0 and "pipelinerun/dsl-demo-run created" in first.stdout, first
    again = example("--submit")
    assert again.returncode == 1 and "Traceback" not in again.stderr, again
    assert "dsl-demo-run already exists" in again.stderr and "--run NAME" in again.stderr, again.stderr

    def finished(name: str) -> PipelineRun | None:
        with runtime.client() as client:
            found = client.ops.get_pipelinerun("default", name)
        return found if found.status.phase in ("Succeeded", "Failed") else None

    wait_until(lambda: finished("dsl-demo-run"), timeout=120, message="the first run to finish")
    rerun = example("--submit", "--run", "dsl-demo-2")
    assert rerun.returncode == 0 and "pipelinerun/dsl-demo-2 created" in rerun.stdout, rerun
    second = wait_until(lambda: finished("dsl-demo-2"), timeout=120, message="the rerun to finish")
    assert second.status.phase == "Succeeded" and all(e.cache_hit for e in second.status.instances), second.status


def test_run_says_when_no_control_plane_runs_the_followed_sweep_and_when_one_is_back(runtime: Runtime) -> None:
    # `phalanx down` (or a crash) while `run` follows a sweep: nothing moves, and the follower says why instead
    # of waiting in silence; a control plane started again takes the sweep up and the follower says so.
    copy_examples(runtime)
    document = yaml.safe_load((runtime.work_dir / "examples" / "sweeps" / "sweep.yaml").read_text())
    document["metadata"]["name"] = "waits"
    document["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["resources"]["cpu"] = 64
    path = runtime.work_dir / "waits.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    plane = runtime.start_control_plane()
    output = runtime.work_dir / "run.out"
    follower = runtime.cli_background("run", str(path), output=output)
    wait_until(lambda: "needs 64 CPUs" in output.read_text(), timeout=60, message="the follower to follow")
    plane.stop()
    wait_until(lambda: "no control plane is running" in output.read_text(), timeout=30, message="the warning")
    runtime.start_control_plane()
    wait_until(lambda: "a control plane runs again" in output.read_text(), timeout=30, message="the all-clear")
    runtime.cli("delete", "sweep", "waits", check=True)
    assert follower.wait(60) == 1
