"""Pipelines on the real embedded runtime: KFP v1 component files run as step processes by a real control plane.

The pipeline: ``make`` writes a shard list (JsonArray) and a data folder (Dataset); ``work`` fans out over the
list, each item reading the folder (inputPath) and its shard (inputValue), one item failing once and retried;
``join`` fans the scores in; ``report`` runs on a true condition, ``never`` is skipped on a false one. Every
step process appends a line to a starts file first, so the tests count what ran: a rerun with nothing changed
starts nothing, and after a kill -9 of the control plane in the middle of a run no step runs twice.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import Runtime
from phalanx.model.pipelines import PipelineRun
from support.waiting import wait_until

STEP = str(Path(__file__).parent / "pipeline_step.py")


def component(name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], args: list[Any]) -> dict:
    return {
        "name": name,
        "inputs": [{"name": "starts", "type": "String"}, *inputs],
        "outputs": outputs,
        "implementation": {
            "container": {"image": "python:3.12", "command": [sys.executable, STEP, {"inputValue": "starts"}, *args]}
        },
    }


COMPONENTS = {
    "make": component(
        "make",
        [{"name": "count", "type": "Integer"}],
        [{"name": "shards", "type": "JsonArray"}, {"name": "data", "type": "Dataset"}],
        ["make", {"inputValue": "count"}, {"outputPath": "shards"}, {"outputPath": "data"}],
    ),
    "work": component(
        "work",
        [{"name": "data", "type": "Dataset"}, {"name": "shard"}, {"name": "flaky", "optional": True}],
        [{"name": "score", "type": "Float"}],
        [
            "work",
            {"inputPath": "data"},
            {"inputValue": "shard"},
            {"outputPath": "score"},
            {"if": {"cond": {"isPresent": "flaky"}, "then": [{"inputValue": "flaky"}]}},
        ],
    ),
    "join": component(
        "join",
        [{"name": "scores", "type": "JsonArray"}],
        [{"name": "best", "type": "Float"}],
        ["join", {"inputValue": "scores"}, {"outputPath": "best"}],
    ),
    "report": component("report", [{"name": "best", "type": "Float"}], [], ["report", {"inputValue": "best"}]),
}


def write_pipeline(runtime: Runtime, *, flaky: bool) -> Path:
    folder = runtime.work_dir / "flow"
    (folder / "components").mkdir(parents=True, exist_ok=True)
    for name, document in COMPONENTS.items():
        (folder / "components" / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    starts = {"starts": "{{params.starts}}"}
    work_arguments = {**starts, "data": "{{steps.make.outputs.data}}", "shard": "{{item}}"}
    if flaky:
        work_arguments["flaky"] = str(runtime.work_dir / "flaky")
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "fan"},
        "spec": {
            "parameters": [{"name": "starts", "type": "String"}, {"name": "count", "type": "Integer", "default": "3"}],
            "steps": [
                {
                    "name": "make",
                    "component": {"path": "components/make.yaml"},
                    "arguments": {**starts, "count": "{{params.count}}"},
                },
                {
                    "name": "work",
                    "component": {"path": "components/work.yaml"},
                    "parallelFor": {"items": "{{steps.make.outputs.shards}}", "as": "shard"},
                    "arguments": work_arguments,
                    "retries": 1,
                },
                {
                    "name": "join",
                    "component": {"path": "components/join.yaml"},
                    "arguments": {**starts, "scores": "{{steps.work.outputs.score}}"},
                },
                {
                    "name": "report",
                    "component": {"path": "components/report.yaml"},
                    "when": "{{steps.join.outputs.best}} > 0.5",
                    "arguments": {**starts, "best": "{{steps.join.outputs.best}}"},
                },
                {
                    "name": "never",
                    "component": {"path": "components/report.yaml"},
                    "when": "{{steps.join.outputs.best}} > 100",
                    "arguments": {**starts, "best": "{{steps.join.outputs.best}}"},
                },
            ],
        },
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline, sort_keys=False))
    return path


def submit_run(runtime: Runtime, name: str) -> None:
    run = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name},
        "spec": {"pipelineRef": {"name": "fan"}, "arguments": {"starts": str(starts_file(runtime))}},
    }
    path = runtime.work_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    runtime.cli("submit", "-f", str(path), check=True)


def starts_file(runtime: Runtime) -> Path:
    return runtime.work_dir / "starts.log"


def started(runtime: Runtime) -> list[str]:
    """The steps started so far: ``make``, ``work 0``... (the pids dropped)."""
    path = starts_file(runtime)
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted(line.rsplit(" ", 1)[0] for line in lines)


def get_run(runtime: Runtime, name: str, namespace: str = "default") -> PipelineRun:
    with runtime.client() as client:
        return client.ops.get_pipelinerun(namespace, name)


def wait_finished(runtime: Runtime, name: str, timeout: float = 120.0, namespace: str = "default") -> PipelineRun:
    def finished() -> PipelineRun | None:
        run = get_run(runtime, name, namespace)
        return run if run.status.phase in ("Succeeded", "Failed") else None

    run = wait_until(finished, timeout=timeout, message=f"pipelinerun {name} to finish")
    assert run.status.phase == "Succeeded", (
        run.status.message,
        runtime.cli("describe", "plr", name, "-n", namespace).stdout,
    )
    return run


ALL_ONCE = ["join", "make", "report", "work 0", "work 1", "work 2"]


def test_a_pipeline_of_component_steps_runs_then_reruns_from_the_cache_starting_nothing(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.cli("submit", "-f", str(write_pipeline(runtime, flaky=True)), check=True)
    submit_run(runtime, "first")
    run = wait_finished(runtime, "first")
    assert started(runtime) == sorted([*ALL_ONCE, "work 1"])  # work[1] failed once and was retried
    by_name = {(e.step, e.item): e for e in run.status.instances}
    assert by_name[("work", 1)].attempts == 2 and by_name[("work", 0)].attempts == 1
    assert by_name[("join", None)].outputs["best"] == "0.7"
    assert by_name[("never", None)].phase == "Skipped" and by_name[("report", None)].phase == "Succeeded"
    assert run.status.fanouts == {"work": [0, 1, 2]}
    data = Path(by_name[("make", None)].outputs["data"])
    assert sorted(p.name for p in data.iterdir()) == ["shard-0.txt", "shard-1.txt", "shard-2.txt"]

    before = started(runtime)
    submit_run(runtime, "again")
    rerun = wait_finished(runtime, "again")
    assert started(runtime) == before  # no step process started
    ran = [e for e in rerun.status.instances if e.phase != "Skipped"]
    assert len(ran) == 6 and all(e.cache_hit and e.attempts == 0 for e in ran)
    described = runtime.cli("describe", "pipelinerun", "again", check=True).stdout
    assert described.count("cached") == 6, described
    assert "fan-out over 3 items" in described and "StepCached" in described
    assert "outputs: best=0.7" in described, described  # each step's outputs, as docs/pipelines.md says

    # Another namespace never gets this one's outputs from the cache: its run starts every step itself.
    runtime.cli("submit", "-n", "team-b", "-f", str(write_pipeline(runtime, flaky=False)), check=True)
    runtime.cli("submit", "-n", "team-b", "-f", str(runtime.work_dir / "again.yaml"), check=True)
    other = wait_finished(runtime, "again", namespace="team-b")
    assert not any(e.cache_hit for e in other.status.instances)
    assert len(started(runtime)) == len(before) + len(ALL_ONCE), started(runtime)


def test_a_steps_output_is_usable_as_a_dataset_from_its_job(runtime: Runtime) -> None:
    runtime.start_control_plane()
    runtime.cli("submit", "-f", str(write_pipeline(runtime, flaky=False)), check=True)
    submit_run(runtime, "made")
    run = wait_finished(runtime, "made")
    job = next(e.job for e in run.status.instances if e.step == "make")
    dataset = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": "shards"},
        # a component output NAME is <NAME>/data in the step's outputs (KFP v1's layout)
        "spec": {"source": {"fromJob": {"job": job, "output": "data/data"}}},
    }
    path = runtime.work_dir / "dataset.yaml"
    path.write_text(yaml.safe_dump(dataset))
    runtime.cli("submit", "-f", str(path), check=True)
    with runtime.client() as client:
        ready = wait_until(
            lambda: (d := client.ops.get_dataset("default", "shards")).status.phase in ("Ready", "Failed") and d,
            timeout=60,
            message="dataset shards to be materialised",
        )
    assert ready.status.phase == "Ready", ready.status.message
    assert ready.status.files == 3


def test_kill_9_of_the_control_plane_mid_run_then_restart_finishes_with_no_step_run_twice(runtime: Runtime) -> None:
    (runtime.work_dir / "hold-1").write_text("")  # work[1] waits for go-1: the run is mid-way when killed
    store = runtime.work_dir / "artifact-store"  # and a store of the control plane's configuration
    plane = runtime.start_control_plane(extra=["--artifact-store", str(store)])
    runtime.cli("submit", "-f", str(write_pipeline(runtime, flaky=False)), check=True)
    submit_run(runtime, "killed")
    wait_until(
        lambda: {"work 0", "work 1", "work 2"} <= set(started(runtime)),
        timeout=90,
        message="the three work items to start",
    )
    plane.kill9()
    mid = get_run(runtime, "killed")
    assert mid.status.phase == "Running"
    runtime.start_control_plane(extra=["--artifact-store", str(store)])
    (runtime.work_dir / "go-1").write_text("")
    run = wait_finished(runtime, "killed")
    assert started(runtime) == ALL_ONCE  # nothing lost, nothing run twice
    data = next(e.outputs["data"] for e in run.status.instances if e.step == "make")
    assert Path(data).is_relative_to(store) and len(list(Path(data).iterdir())) == 3
    with runtime.client() as client:
        jobs = [j.metadata.name for j in client.ops.list_jobs("default")]
    assert sorted(j for j in jobs if j.startswith("killed-")) == sorted(
        ["killed-make-1", "killed-work-0-1", "killed-work-1-1", "killed-work-2-1", "killed-join-1", "killed-report-1"]
    )
