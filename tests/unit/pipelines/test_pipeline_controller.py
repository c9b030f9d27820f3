"""The pipeline controller over the memory backend with a tmp-dir artifact store: each action, restarts, caching.

Jobs do not run here: a test plays a step's process by writing the files its job's ``phalanx.dev/step-outputs``
annotation names and setting the job's phase, as the runtime would.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.support.memory_backend import MemoryBackend

from phalanx.adapters.artifacts import ArtifactStore
from phalanx.core.pipelines.plan import observation
from phalanx.core.pipelines.steps import (
    ATTEMPT_LABEL,
    EXECUTOR_OUTPUT_ANNOTATION,
    MAX_STEP_OBJECT_NAME,
    OUTPUTS_ANNOTATION,
    RUN_UID_LABEL,
    STEP_LABEL,
    step_object_name,
)
from phalanx.core.rendezvous import Endpoint, render_replica_env
from phalanx.model.base import validated_copy
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.pipelines import (
    Pipeline,
    PipelineRun,
    PipelineRunStatus,
    RunPhase,
    StepPhase,
    StepStatus,
    parse_pipeline,
    parse_pipeline_run,
)
from phalanx.model.sweeps import BestTrial, Sweep, SweepPhase
from phalanx.services.pipelines.controller import PipelineController


class FixedClock:
    def now(self) -> datetime:
        return datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


MAKE = {
    "name": "make",
    "inputs": [{"name": "count", "type": "Integer"}],
    "outputs": [{"name": "shards", "type": "JsonArray"}, {"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {
            "image": "python:3.12",
            "command": [
                *["python3", "make.py", {"inputValue": "count"}],
                *[{"outputPath": "shards"}, {"outputPath": "data"}],
            ],
        }
    },
}
WORK = {
    "name": "work",
    "inputs": [{"name": "data", "type": "Dataset"}, {"name": "shard"}],
    "outputs": [{"name": "score", "type": "Float"}],
    "implementation": {
        "container": {
            "image": "python:3.12",
            "command": ["python3", "work.py", {"inputPath": "data"}, {"inputValue": "shard"}, {"outputPath": "score"}],
        }
    },
}
JOIN = {
    "name": "join",
    "inputs": [{"name": "scores", "type": "JsonArray"}],
    "outputs": [{"name": "best", "type": "Float"}],
    "implementation": {
        "container": {
            "image": "python:3.12",
            "command": ["python3", "join.py", {"inputValue": "scores"}, {"outputPath": "best"}],
        }
    },
}


def fan_pipeline(*, retries: int = 0, when: str | None = None) -> dict[str, Any]:
    join: dict[str, Any] = {
        "name": "join",
        "component": {"inline": JOIN},
        "arguments": {"scores": "{{steps.work.outputs.score}}"},
    }
    if when is not None:
        join["when"] = when
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "fan"},
        "spec": {
            "parameters": [{"name": "count", "type": "Integer", "default": "2"}],
            "steps": [
                {"name": "make", "component": {"inline": MAKE}, "arguments": {"count": "{{params.count}}"}},
                {
                    "name": "work",
                    "component": {"inline": WORK},
                    "parallelFor": {"items": "{{steps.make.outputs.shards}}"},
                    "arguments": {"data": "{{steps.make.outputs.data}}", "shard": "{{item}}"},
                    "retries": retries,
                },
                join,
            ],
        },
    }


def run_document(name: str, pipeline: str = "fan", **arguments: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name},
        "spec": {"pipelineRef": {"name": pipeline}, "arguments": arguments},
    }


class World:
    """A memory backend with the built-in JobTypes, a tmp-dir artifact store and a controller over both."""

    def __init__(self, root: Path) -> None:
        self.backend = MemoryBackend()
        for jobtype in builtin_jobtypes().values():
            self.backend.create(jobtype)
        self.store = ArtifactStore(root / "artifacts")
        self.controller = PipelineController(self.backend, self.store, FixedClock())

    def submit(self, pipeline: dict[str, Any], *runs: dict[str, Any]) -> None:
        if self.backend.get(Pipeline, "default", pipeline["metadata"]["name"]) is None:
            self.backend.create(parse_pipeline(pipeline))
        for run in runs:
            self.backend.create(parse_pipeline_run(run))

    def settle(self) -> None:
        for _ in range(50):
            if not self.controller.sync():
                return
        raise AssertionError("the controller never settled")

    def run(self, name: str) -> PipelineRun:
        found = self.backend.get(PipelineRun, "default", name)
        assert found is not None
        return found

    def jobs(self) -> dict[str, TrainingJob]:
        return {job.metadata.name: job for job in self.backend.list(TrainingJob)}

    def finish(self, name: str, files: dict[str, str | dict[str, str]], *, phase: Phase = Phase.SUCCEEDED) -> None:
        """Play job ``name``'s process: write its outputs (a text, or a folder of files), then end it."""
        job = self.jobs()[name]
        paths = json.loads(job.metadata.annotations[OUTPUTS_ANNOTATION])
        for output, content in files.items():
            target = Path(paths[output])
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, dict):
                target.mkdir(parents=True, exist_ok=True)
                for file, text in content.items():
                    (target / file).write_text(text)
            else:
                target.write_text(content)
        self.backend.write_status(job, {"phase": phase, "message": "exit code 1" if phase is Phase.FAILED else ""})

    def instance(self, run: str, step: str, item: int | None = None) -> StepStatus:
        return next(e for e in self.run(run).status.instances if e.step == step and e.item == item)

    def creates(self, kind: str = "TrainingJob") -> list[str]:
        return [name for verb, k, name in self.backend.calls if verb == "create" and k == kind]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def play_fan(world: World, run: str) -> None:
    """Run the fan pipeline's jobs to the end: make -> work[0], work[1] -> join."""
    world.settle()
    world.finish(f"{run}-make-1", {"shards": "[0, 1]", "data": {"rows.csv": "a,b\n1,2\n"}})
    world.settle()
    for item in (0, 1):
        world.finish(f"{run}-work-{item}-1", {"score": str(0.5 + item / 10)})
    world.settle()
    world.finish(f"{run}-join-1", {"best": "0.6"})
    world.settle()


def test_a_component_step_is_a_one_replica_generic_job_with_the_resolved_command(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1", count="3"))
    world.settle()
    job = world.jobs()["r1-make-1"]
    assert job.spec.type == "generic" and list(job.spec.replicas) == ["worker"]
    assert job.spec.replicas["worker"].count == 1
    paths = json.loads(job.metadata.annotations[OUTPUTS_ANNOTATION])
    command = [*job.spec.replicas["worker"].template.command, *job.spec.replicas["worker"].template.args]
    assert command == ["python3", "make.py", "3", paths["shards"], paths["data"]]
    assert paths["data"].endswith("/make/all/a1/outputs/data/data")
    assert job.spec.outputs.store_to == str(Path(paths["data"]).parents[1])  # a fromJob Dataset reads the outputs
    assert job.metadata.labels[STEP_LABEL] == "make" and job.metadata.labels[ATTEMPT_LABEL] == "1"
    assert job.metadata.labels[RUN_UID_LABEL] == world.run("r1").metadata.uid
    entry = world.instance("r1", "make")
    assert (entry.phase, entry.attempts, entry.job) == (StepPhase.RUNNING, 1, "r1-make-1")
    assert world.run("r1").status.phase == RunPhase.RUNNING
    assert [e.reason for e in world.backend.events_of(world.run("r1"))] == ["StepStarted"]


def test_fan_out_over_an_output_then_fan_in_runs_to_success(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    run = world.run("r1")
    assert run.status.phase == RunPhase.SUCCEEDED, run.status.message
    assert run.status.fanouts == {"work": [0, 1]}
    assert run.status.joined == ["work"]
    # the artifact went by location and digest; the parameter by value
    make = world.instance("r1", "make")
    assert make.outputs["shards"] == "[0, 1]"
    assert Path(make.outputs["data"], "rows.csv").read_text() == "a,b\n1,2\n"
    assert set(make.output_digests) == {"data"}
    work1 = world.jobs()["r1-work-1-1"].spec.replicas["worker"].template
    assert work1.command[2:4] == [make.outputs["data"], "1"]
    join = world.jobs()["r1-join-1"].spec.replicas["worker"].template
    assert join.command[2] == "[0.5, 0.6]"  # the fan-in list of the items' values, in item order
    reasons = [e.reason for e in world.backend.events_of(run)]
    assert reasons.count("StepSucceeded") == 4 and reasons[-1] == "RunSucceeded"
    assert "FannedOut" in reasons and "FannedIn" in reasons


def test_a_rerun_with_nothing_changed_completes_from_the_cache_starting_no_job(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    before = set(world.jobs())
    world.submit(fan_pipeline(), run_document("r2"))
    world.settle()
    run = world.run("r2")
    assert run.status.phase == RunPhase.SUCCEEDED, run.status.message
    assert set(world.jobs()) == before  # no job for r2
    assert all(entry.cache_hit and entry.attempts == 0 for entry in run.status.instances)
    first, again = world.instance("r1", "make"), world.instance("r2", "make")
    assert again.output_digests == first.output_digests
    assert again.outputs["data"] != first.outputs["data"]  # copied into r2's own folder
    assert Path(again.outputs["data"], "rows.csv").read_text() == "a,b\n1,2\n"
    assert [e.reason for e in world.backend.events_of(run)].count("StepCached") == 4


def test_a_changed_argument_misses_the_cache_for_the_steps_it_reaches(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    world.submit(fan_pipeline(), run_document("r2", count="5"))
    world.settle()
    assert "r2-make-1" in world.jobs()


def test_a_cached_result_whose_artifacts_are_gone_runs_the_step_again(world: World, tmp_path: Path) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    data = Path(world.instance("r1", "make").outputs["data"])
    for file in data.iterdir():
        file.unlink()
    data.rmdir()
    world.submit(fan_pipeline(), run_document("r2"))
    world.settle()
    assert "r2-make-1" in world.jobs()
    assert "CacheMiss" in [e.reason for e in world.backend.events_of(world.run("r2"))]


def test_a_failed_step_is_retried_as_a_new_job_and_then_succeeds(world: World) -> None:
    world.submit(fan_pipeline(retries=1), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0]", "data": {"x": "1"}})
    world.settle()
    world.finish("r1-work-0-1", {}, phase=Phase.FAILED)
    world.settle()
    assert "r1-work-0-2" in world.jobs()
    entry = world.instance("r1", "work", 0)
    assert (entry.phase, entry.attempts, entry.job) == (StepPhase.RUNNING, 2, "r1-work-0-2")
    world.finish("r1-work-0-2", {"score": "0.9"})
    world.settle()
    world.finish("r1-join-1", {"best": "0.9"})
    world.settle()
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED
    reasons = [e.reason for e in world.backend.events_of(world.run("r1"))]
    assert reasons.count("StepFailed") == 1 and reasons.count("StepRetried") == 1


def test_a_step_failing_for_good_fails_the_run(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0]", "data": {"x": "1"}})
    world.settle()
    world.finish("r1-work-0-1", {}, phase=Phase.FAILED)
    world.settle()
    run = world.run("r1")
    assert run.status.phase == RunPhase.FAILED
    assert "work[0]" in (run.status.message or "")
    assert "r1-join-1" not in world.jobs()


def test_an_output_the_process_did_not_write_fails_the_attempt(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0]"})  # no data
    world.settle()
    entry = world.instance("r1", "make")
    assert entry.phase == StepPhase.FAILED
    assert "did not write its output 'data'" in (entry.message or "")


def test_a_false_condition_skips_the_step(world: World) -> None:
    world.submit(fan_pipeline(when="{{steps.make.outputs.shards}} == []"), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0]", "data": {"x": "1"}})
    world.settle()
    world.finish("r1-work-0-1", {"score": "0.1"})
    world.settle()
    assert world.instance("r1", "join").phase == StepPhase.SKIPPED
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED
    assert "r1-join-1" not in world.jobs()


def test_a_lost_status_write_adopts_the_created_job_and_never_creates_it_again(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.backend.conflicts["write_status"] = 1  # the pass that creates the job loses its status write
    world.controller.sync()
    assert world.run("r1").status.instances == []
    # a new controller (a restarted control plane) with the same store
    world.controller = PipelineController(world.backend, world.store, FixedClock())
    world.settle()
    assert world.creates() == ["r1-make-1"]
    assert world.instance("r1", "make").phase == StepPhase.RUNNING
    world.finish("r1-make-1", {"shards": "[]", "data": {"x": "1"}})
    world.settle()
    assert world.creates() == ["r1-make-1"]


def test_a_restart_after_a_job_finished_collects_it_once_and_goes_on(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0, 1]", "data": {"x": "1"}})
    world.controller = PipelineController(world.backend, world.store, FixedClock())
    world.settle()
    assert world.creates() == ["r1-make-1", "r1-work-0-1", "r1-work-1-1"]
    assert world.instance("r1", "make").phase == StepPhase.SUCCEEDED


def test_jobs_of_an_earlier_run_of_the_same_name_are_not_taken_for_this_ones(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    old = world.jobs()["r1-make-1"]
    world.backend.delete(PipelineRun, "default", "r1")
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    run = world.run("r1")
    assert run.metadata.uid != old.metadata.labels[RUN_UID_LABEL]
    assert run.status.instances == []
    assert "of an earlier run of this name still exists" in (run.status.message or "")
    world.backend.delete_job("default", "r1-make-1")
    world.settle()
    assert world.jobs()["r1-make-1"].metadata.labels[RUN_UID_LABEL] == run.metadata.uid


def test_a_job_deleted_under_a_running_step_fails_that_attempt(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    world.backend.delete_job("default", "r1-make-1")
    world.settle()
    entry = world.instance("r1", "make")
    assert entry.phase == StepPhase.FAILED and "is gone" in (entry.message or "")


def test_a_run_of_a_pipeline_not_stored_waits_saying_so(world: World) -> None:
    world.backend.create(parse_pipeline_run(run_document("r1", pipeline="nope")))
    world.settle()
    run = world.run("r1")
    assert run.status.phase == RunPhase.PENDING
    assert "spec.pipelineRef.name: pipeline nope is not stored" in (run.status.message or "")


def training_pipeline() -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "train"},
        "spec": {
            "steps": [
                {"name": "make", "component": {"inline": MAKE}, "arguments": {"count": "1"}},
                {
                    "name": "train",
                    "trainingJob": {
                        "spec": {
                            "type": "generic",
                            "replicas": {
                                "worker": {
                                    "count": 2,
                                    "template": {"command": ["python3", "train.py", "${inputs.data}", "${inputs.lr}"]},
                                }
                            },
                        }
                    },
                    "arguments": {"data": "{{steps.make.outputs.data}}", "lr": "0.1"},
                    "inputs": [{"name": "data", "type": "Dataset"}],
                    "outputs": [{"name": "model", "type": "Model"}, {"name": "accuracy", "type": "Float"}],
                },
            ]
        },
    }


def test_a_training_job_step_gets_its_inputs_and_phalanx_outputs_in_every_replica(world: World) -> None:
    world.submit(training_pipeline(), run_document("r1", pipeline="train"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[]", "data": {"x": "1"}})
    world.settle()
    job = world.jobs()["r1-train-1"]
    data = world.instance("r1", "make").outputs["data"]
    template = job.spec.replicas["worker"].template
    assert template.command == ["python3", "train.py", data, "0.1"]
    outputs_dir = template.env["PHALANX_OUTPUTS"]
    assert outputs_dir.endswith("/train/all/a1/outputs")
    world.finish("r1-train-1", {"model": {"weights.bin": "w"}, "accuracy": "0.93"})
    world.settle()
    entry = world.instance("r1", "train")
    assert entry.outputs["accuracy"] == "0.93"
    assert entry.outputs["model"] == f"{outputs_dir}/model"
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED


SWEEP_SPEC = {
    "parameters": [{"name": "lr", "type": "double", "min": 0.001, "max": 0.1}],
    "algorithm": {"name": "random", "seed": 1},
    "objective": {"metric": "loss", "direction": "minimize"},
    "maxTrials": 2,
    "trial": {
        "spec": {"replicas": {"worker": {"count": 1, "template": {"command": ["python3", "t.py", "${params.lr}"]}}}}
    },
}


def test_a_sweep_step_creates_a_sweep_and_its_best_trial_gives_the_outputs(world: World) -> None:
    pipeline = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "tune"},
        "spec": {
            "steps": [
                {"name": "tune", "sweep": {"spec": SWEEP_SPEC}, "outputs": [{"name": "lr", "type": "Float"}]},
                {
                    "name": "final",
                    "trainingJob": {"spec": {"replicas": {"worker": {"count": 1, "template": {"command": ["t"]}}}}},
                    "arguments": {"lr": "{{steps.tune.outputs.lr}}", "best": "{{steps.tune.outputs.bestValue}}"},
                },
            ]
        },
    }
    world.submit(pipeline, run_document("r1", pipeline="tune"))
    world.settle()
    sweep = world.backend.get(Sweep, "default", "r1-tune-1")
    assert sweep is not None and sweep.metadata.labels[STEP_LABEL] == "tune"
    best = BestTrial(name="r1-tune-1-0", number=0, parameters={"lr": 0.01}, value=0.25)
    world.backend.write_status(sweep, {"phase": SweepPhase.SUCCEEDED, "best_trial": best})
    world.settle()
    entry = world.instance("r1", "tune")
    assert entry.outputs == {
        "lr": "0.01",
        "bestParameters": '{"lr": 0.01}',
        "bestValue": "0.25",
        "bestTrial": "r1-tune-1-0",
    }
    assert "r1-final-1" in world.jobs()


def test_step_object_names_are_deterministic_dns_labels_and_long_ones_are_hash_shortened() -> None:
    assert step_object_name("run", "train", None, 1) == "run-train-1"
    assert step_object_name("run", "train", 3, 2) == "run-train-3-2"
    long_a = step_object_name("r" * 40, "s" * 40, 7, 1)
    long_b = step_object_name("r" * 40, "s" * 40, 8, 1)
    assert len(long_a) <= MAX_STEP_OBJECT_NAME and long_a != long_b
    assert long_a.endswith("-1") and long_a == step_object_name("r" * 40, "s" * 40, 7, 1)


def test_an_observation_read_back_from_a_stored_status_has_phase_members() -> None:
    stored = PipelineRunStatus.model_validate({"instances": [{"step": "a", "phase": "Succeeded"}]})
    assert observation(stored).instances[("a", None)].phase is StepPhase.SUCCEEDED


def test_a_pipeline_changed_under_a_started_run_fails_it_naming_the_steps(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"))
    world.settle()
    stored = world.backend.get(Pipeline, "default", "fan")
    assert stored is not None
    changed = fan_pipeline()
    changed["spec"]["steps"][2]["component"]["inline"]["implementation"]["container"]["image"] = "python:3.13"
    world.backend.replace(parse_pipeline({**changed, "metadata": stored.metadata.to_dict()}))
    world.settle()
    run = world.run("r1")
    assert run.status.phase == RunPhase.FAILED
    assert "pipeline fan changed while it ran (steps join differ" in (run.status.message or "")
    assert world.creates() == ["r1-make-1"]


def test_the_runtime_gives_a_training_steps_replicas_phalanx_outputs_and_no_other_template_phalanx_name(
    world: World,
) -> None:
    world.submit(training_pipeline(), run_document("r1", pipeline="train"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[]", "data": {"x": "1"}})
    world.settle()
    job = world.jobs()["r1-train-1"]
    template = job.spec.replicas["worker"].template
    sneaky = validated_copy(template, env={**template.env, "PHALANX_RANK": "99"})
    replicas = {"worker": validated_copy(job.spec.replicas["worker"], template=sneaky)}
    job = validated_copy(job, spec=validated_copy(job.spec, replicas=replicas))
    names = ["r1-train-1-worker-0", "r1-train-1-worker-1"]
    env = render_replica_env(
        job,
        builtin_jobtypes()["generic"],
        "worker",
        0,
        {name: Endpoint("127.0.0.1", 29500 + i) for i, name in enumerate(names)},
        node_of=dict.fromkeys(names, "n0"),
        output_dir="/out",
        hostfile_path="/hostfile",
    )
    assert env["PHALANX_OUTPUTS"] == template.env["PHALANX_OUTPUTS"]
    assert env["PHALANX_RANK"] == "0" and env["PHALANX_OUTPUT_DIR"] == "/out"


def test_with_an_object_store_outputs_are_uploaded_inputs_staged_and_the_cache_copies_in_the_store(
    tmp_path: Path,
) -> None:
    url = f"memory://pipelines-{uuid.uuid4().hex[:8]}"
    world = World(tmp_path)
    world.store = ArtifactStore(url, staging=tmp_path / "staging")
    world.controller = PipelineController(world.backend, world.store, FixedClock())
    world.submit(fan_pipeline(), run_document("r1"))
    play_fan(world, "r1")
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED
    data = world.instance("r1", "make").outputs["data"]
    assert data.startswith(f"{url}/_runs/default/r1/") and data.endswith("/outputs/data/data")
    # work[1] read the data from a local copy staged for it, not from the store's URL
    staged = world.jobs()["r1-work-1-1"].spec.replicas["worker"].template.command[2]
    assert Path(staged, "rows.csv").read_text() == "a,b\n1,2\n" and staged.startswith(str(tmp_path / "staging"))
    assert world.jobs()["r1-make-1"].spec.outputs.store_to is None  # a bucket is no folder the runtime stores to
    world.submit(fan_pipeline(), run_document("r2"))
    world.settle()
    again = world.instance("r2", "make")
    assert again.cache_hit and again.outputs["data"].startswith(f"{url}/_runs/default/r2/")
    assert world.store.stage_input(again.outputs["data"], tmp_path / "back").joinpath("rows.csv").exists()


class BrokenStoreError(Exception):
    """The backend's own fault, for the test below."""


def test_a_failing_run_does_not_stop_the_others_but_the_backends_own_fault_ends_the_pass(world: World) -> None:
    world.submit(fan_pipeline(), run_document("r1"), run_document("r2"))
    original = world.backend.list

    def failing_list(kind: Any, namespace: str | None = None, **selection: Any) -> Any:
        if kind is TrainingJob and namespace == "default" and failing["on"]:
            raise failing["error"]
        return original(kind, namespace, **selection)

    failing: dict[str, Any] = {"on": True, "error": RuntimeError("boom")}
    world.backend.list = failing_list  # type: ignore[method-assign]
    world.controller = PipelineController(world.backend, world.store, FixedClock(), passthrough=(BrokenStoreError,))
    assert world.controller.sync() is False  # both runs failed their pass, logged, nothing written
    failing["error"] = BrokenStoreError("locked")
    with pytest.raises(BrokenStoreError):
        world.controller.sync()
    failing["on"] = False
    world.settle()
    assert set(world.jobs()) == {"r1-make-1", "r2-make-1"}


LIGHT = {
    "name": "light",
    "inputs": [{"name": "data", "type": "Dataset"}, {"name": "factor", "type": "Integer"}],
    "outputs": [{"name": "Output", "type": "Integer"}],
    "implementation": {
        "container": {
            "image": "python:3.12",
            "command": ["python3", "-m", "kfp.dsl.executor_main", "--executor_input", {"executorInput": {}}],
        }
    },
}


def test_a_kfp_v2_lightweight_step_gets_its_executor_input_and_its_return_value_is_collected(world: World) -> None:
    pipeline = fan_pipeline()
    pipeline["spec"]["steps"][2] = {
        "name": "join",
        "component": {"inline": LIGHT},
        "arguments": {"data": "{{steps.make.outputs.data}}", "factor": "3"},
    }
    world.submit(pipeline, run_document("r1"))
    world.settle()
    world.finish("r1-make-1", {"shards": "[0]", "data": {"x": "1"}})
    world.settle()
    world.finish("r1-work-0-1", {"score": "0.5"})
    world.settle()
    job = world.jobs()["r1-join-1"]
    output_file = job.metadata.annotations[EXECUTOR_OUTPUT_ANNOTATION]
    assert output_file.endswith("/join/all/a1/outputs/executor_output.json")
    executor_input = json.loads(job.spec.replicas["worker"].template.command[-1])
    assert executor_input["outputs"]["outputFile"] == output_file
    assert executor_input["inputs"]["parameterValues"]["factor"] == 3
    Path(output_file).write_text(json.dumps({"parameterValues": {"Output": 42}}))
    world.backend.write_status(job, {"phase": Phase.SUCCEEDED})
    world.settle()
    assert world.instance("r1", "join").outputs == {"Output": "42"}
    assert world.run("r1").status.phase == RunPhase.SUCCEEDED
