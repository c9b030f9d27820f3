"""Sweeps, Katib Experiments, Pipelines and PipelineRuns through the one door (``validate_documents``) and the
operations over the in-memory port: what is stored (components inline), what is refused (by path, nothing
created), what is deleted with what."""

from __future__ import annotations

import copy
import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.core.pipelines.components import COMPONENT_PATHS_ANNOTATION
from phalanx.model.base import validated_copy
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.model.pipelines import Pipeline, PipelineRun, RunPhase
from phalanx.model.pods import EMBEDDED_REFUSALS
from phalanx.model.sweeps import Sweep
from phalanx.services.operations import OperationError, Operations, convert_documents, validate_documents
from support.memory_backend import MemoryBackend

KATIB = Path(__file__).parents[2] / "data" / "katib"

TEMPLATE = {"command": ["python", "train.py", "--lr", "${params.lr}"]}


def sweep(name: str = "lr-search", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "parameters": [{"name": "lr", "type": "double", "min": 0.001, "max": 0.1, "log": True}],
        "algorithm": {"name": "random", "seed": 3},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 4,
        "trial": {"spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": TEMPLATE}}}},
    }
    body.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Sweep", "metadata": {"name": name}, "spec": body}


PREP = {
    "name": "prep",
    "inputs": [{"name": "rows", "type": "Integer", "default": "10"}],
    "outputs": [{"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {"image": "python:3.11", "command": ["prep", {"inputValue": "rows"}, {"outputPath": "data"}]}
    },
}
TRAIN = {
    "name": "train",
    "inputs": [{"name": "data", "type": "Dataset"}, {"name": "lr", "type": "Float"}],
    "outputs": [{"name": "model", "type": "Model"}, {"name": "accuracy", "type": "Float"}],
    "implementation": {
        "container": {
            "image": "python:3.11",
            "command": ["train", {"inputPath": "data"}, {"inputValue": "lr"}, {"outputPath": "model"}],
            "args": [{"outputPath": "accuracy"}],
        }
    },
}


def pipeline(name: str = "train-eval", steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": name},
        "spec": {
            "parameters": [{"name": "lr", "type": "Float", "default": "0.01"}],
            "steps": steps
            if steps is not None
            else [
                {"name": "prep", "component": {"path": "components/prep.yaml"}},
                {
                    "name": "train",
                    "component": {"path": "components/train.yaml"},
                    "arguments": {"data": "{{steps.prep.outputs.data}}", "lr": "{{params.lr}}"},
                },
            ],
        },
    }


def run(name: str = "run-1", pipeline_name: str = "train-eval", **arguments: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name},
        "spec": {"pipelineRef": {"name": pipeline_name}, "arguments": arguments},
    }


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def ops(backend: MemoryBackend) -> Operations:
    return Operations(backend)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A directory holding the components the pipelines name."""
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "prep.yaml").write_text(yaml.safe_dump(PREP))
    (tmp_path / "components" / "train.yaml").write_text(yaml.safe_dump(TRAIN))
    return tmp_path


def refused(ops: Operations, documents: list[dict[str, Any]], directory: Path | None = None) -> dict[str, str]:
    """Submit, expecting a refusal; the problems by path."""
    with pytest.raises(SpecError) as caught:
        ops.submit(documents, component_dir=directory)
    return {error.path: error.message for error in caught.value.errors}


def nothing_stored(backend: MemoryBackend) -> None:
    assert not [call for call in backend.calls if call[0] == "create"]


# -- sweeps and Katib Experiments ----------------------------------------------------------------------------------


def test_a_sweep_is_stored_and_listed_and_moved_by_namespace(ops: Operations) -> None:
    created = ops.submit([sweep()], namespace="research")
    assert [(c.kind, c.namespace, c.name) for c in created] == [("Sweep", "research", "lr-search")]
    (stored,) = ops.list_sweeps("research")
    assert isinstance(stored, Sweep) and stored.spec.max_trials == 4
    assert ops.get_sweep("research", "lr-search").metadata.uid is not None
    assert ops.list_sweeps("default") == []


def test_a_sweep_of_a_taken_name_is_refused_naming_the_fix(ops: Operations) -> None:
    ops.submit([sweep()])
    with pytest.raises(
        OperationError, match=r"sweep default/lr-search already exists .*phalanx delete sweep lr-search"
    ):
        ops.submit([sweep()])


def test_an_unsampleable_search_space_is_refused_by_path_before_anything_is_created(
    ops: Operations, backend: MemoryBackend
) -> None:
    bad = sweep(parameters=[{"name": "lr", "type": "double", "min": 0.1, "max": 0.001}])
    problems = refused(ops, [pipeline(steps=[{"name": "a", "trainingJob": {"spec": {"type": "generic"}}}]), bad])
    assert any(path.startswith("spec.parameters[0]") for path in problems), problems
    nothing_stored(backend)


def test_a_grid_over_an_unstepped_double_is_refused_at_the_algorithm(ops: Operations) -> None:
    problems = refused(ops, [sweep(algorithm={"name": "grid"})])
    assert "spec.algorithm.name" in problems and "lr" in problems["spec.algorithm.name"]


def test_a_trial_template_naming_an_unknown_parameter_is_refused_at_its_path(ops: Operations) -> None:
    template = {"command": ["python", "train.py", "${params.momentum}"]}
    spec = {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}
    problems = refused(ops, [sweep(trial={"spec": spec})])
    assert any("spec.trial.spec.replicas.worker.template.command" in path for path in problems), problems


def test_a_katib_experiment_is_stored_as_its_sweep_keeping_the_conversions_annotations(ops: Operations) -> None:
    documents = read_documents(KATIB / "random.yaml")
    ops.submit(documents)
    (stored,) = ops.list_sweeps("research")
    assert stored.metadata.name == "fashion-random"
    assert stored.metadata.annotations["phalanx.dev/converted-from"] == "Experiment.kubeflow.org/v1beta1"
    assert [p.name for p in stored.spec.parameters] == ["learning_rate", "hidden_layers", "optimizer"]


def test_a_katib_experiment_of_a_pytorchjob_trial_becomes_a_sweep_of_pytorch_trials(ops: Operations) -> None:
    documents = read_documents(KATIB / "pytorchjob.yaml")
    (sweep_obj,) = [o for o in ops.validate(documents) if isinstance(o, Sweep)]
    assert sweep_obj.spec.trial.spec["type"] == "pytorch"
    assert set(sweep_obj.spec.trial.spec["replicas"]) == {"master", "worker"}  # type: ignore[arg-type]


def test_a_katib_experiment_moves_with_submit_n(ops: Operations) -> None:
    ops.submit(read_documents(KATIB / "random.yaml"), namespace="elsewhere")
    assert [s.metadata.namespace for s in ops.list_sweeps()] == ["elsewhere"]


def test_a_bad_katib_experiment_is_refused_at_its_experiment_path(ops: Operations, backend: MemoryBackend) -> None:
    (document,) = read_documents(KATIB / "random.yaml")
    document["spec"]["algorithm"]["algorithmName"] = "simulated-annealing"
    problems = refused(ops, [document])
    assert "spec.algorithm.algorithmName" in problems, problems
    nothing_stored(backend)


def test_convert_prints_the_sweep_an_experiment_becomes() -> None:
    documents = read_documents(KATIB / "random.yaml")
    (converted,) = convert_documents(documents, builtin_jobtypes(), source=str(KATIB / "random.yaml"))
    assert converted["kind"] == "Sweep" and converted["metadata"]["name"] == "fashion-random"


def test_deleting_a_sweep_deletes_its_trials_and_only_them(ops: Operations, backend: MemoryBackend) -> None:
    ops.submit([sweep()])
    for name, labels in (("lr-search-0", {"phalanx.dev/sweep": "lr-search"}), ("other", {"phalanx.dev/sweep": "x"})):
        job = {"kind": "TrainingJob", "metadata": {"name": name, "labels": labels}}
        job["spec"] = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}}
        ops.submit([job])
    assert ops.delete_sweep("default", "lr-search") == ["lr-search-0"]
    assert [j.metadata.name for j in ops.list_jobs()] == ["other"]
    assert ops.list_sweeps() == []
    with pytest.raises(OperationError, match="sweep default/lr-search not found"):
        ops.delete_sweep("default", "lr-search")


# -- pipelines ---------------------------------------------------------------------------------------------------


def test_a_pipeline_is_stored_with_its_component_files_inline(ops: Operations, files: Path) -> None:
    ops.submit([pipeline()], component_dir=files)
    stored = ops.get_pipeline("default", "train-eval")
    assert [step.component.inline for step in stored.spec.steps if step.component] == [PREP, TRAIN]
    assert all(step.component and step.component.path is None for step in stored.spec.steps)
    paths = json.loads(stored.metadata.annotations[COMPONENT_PATHS_ANNOTATION])
    assert paths == {"prep": "components/prep.yaml", "train": "components/train.yaml"}


def test_component_paths_start_at_the_directory_of_the_source_file(
    ops: Operations, files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "pipeline.yaml").write_text(yaml.safe_dump(pipeline()))
    monkeypatch.chdir(files.parent)
    ops.submit(read_documents(files / "pipeline.yaml"), source=f"{files.name}/pipeline.yaml")
    assert ops.get_pipeline("default", "train-eval").spec.steps[0].component is not None


def test_a_missing_component_file_is_refused_at_its_path_and_nothing_is_stored(
    ops: Operations, backend: MemoryBackend, files: Path
) -> None:
    document = pipeline()
    document["spec"]["steps"][1]["component"]["path"] = "components/nope.yaml"
    problems = refused(ops, [pipeline("other"), document], files)
    assert list(problems) == ["spec.steps[1].component.path"]
    assert "components/nope.yaml" in problems["spec.steps[1].component.path"]
    assert "no such file" in problems["spec.steps[1].component.path"]
    nothing_stored(backend)


def test_component_paths_in_documents_from_no_file_are_refused(ops: Operations, backend: MemoryBackend) -> None:
    problems = refused(ops, [pipeline()], None)
    assert "came from no file" in problems["spec.steps[0].component.path"]
    nothing_stored(backend)


def test_a_bad_placeholder_in_a_component_file_is_refused_naming_the_file_and_its_path(
    ops: Operations, files: Path
) -> None:
    bad = copy.deepcopy(TRAIN)
    bad["implementation"]["container"]["command"][2] = {"inputValue": "learning_rate"}
    (files / "components" / "train.yaml").write_text(yaml.safe_dump(bad))
    problems = refused(ops, [pipeline()], files)
    message = problems["spec.steps[1].component.path"]
    assert "components/train.yaml: not a valid KFP v1 component" in message
    assert "implementation.container.command[2]" in message and "learning_rate" in message


def test_a_cycle_is_refused_naming_it(ops: Operations, backend: MemoryBackend) -> None:
    steps = [
        {"name": "a", "trainingJob": {"spec": {"type": "generic"}}, "after": ["b"]},
        {"name": "b", "trainingJob": {"spec": {"type": "generic"}}, "after": ["a"]},
    ]
    problems = refused(ops, [pipeline(steps=steps)])
    assert "a -> b -> a" in problems["spec.steps[0]"]
    nothing_stored(backend)


def test_an_unknown_step_reference_is_refused_at_the_argument(ops: Operations, files: Path) -> None:
    document = pipeline()
    document["spec"]["steps"][1]["arguments"]["data"] = "{{steps.prepare.outputs.data}}"
    problems = refused(ops, [document], files)
    assert "no step is called 'prepare'" in problems["spec.steps[1].arguments.data"]


def test_a_type_mismatch_between_an_output_and_an_input_is_refused(ops: Operations, files: Path) -> None:
    document = pipeline()
    document["spec"]["steps"].append(
        {
            "name": "again",
            "component": {"path": "components/train.yaml"},
            "arguments": {"data": "{{steps.train.outputs.model}}", "lr": "0.1"},
        }
    )
    problems = refused(ops, [document], files)
    assert "is of type Model but input 'data' wants Dataset" in problems["spec.steps[2].arguments.data"]


def test_a_training_job_step_is_checked_as_a_job_against_the_jobtypes(ops: Operations) -> None:
    spec = {"type": "nosuchtype", "replicas": {"worker": {"count": 1, "template": {"command": ["${inputs.x}"]}}}}
    steps = [{"name": "train", "trainingJob": {"spec": spec}, "arguments": {"x": "go"}}]
    problems = refused(ops, [pipeline(steps=steps)])
    assert "spec.steps[0].trainingJob.spec.type" in problems, problems


def test_a_sweep_step_is_checked_as_a_sweep(ops: Operations) -> None:
    body = sweep(algorithm={"name": "grid"})["spec"]
    steps = [{"name": "tune", "sweep": {"spec": body}}]
    problems = refused(ops, [pipeline(steps=steps)])
    assert "grid" in problems["spec.steps[0].sweep.spec.algorithm.name"]


def test_a_sweep_step_may_read_its_inputs_in_the_trial_template(ops: Operations, files: Path) -> None:
    body = sweep()["spec"]
    template = {"command": ["python", "t.py", "${params.lr}", "${inputs.data}"]}
    body["trial"]["spec"]["replicas"]["worker"]["template"] = template
    document = pipeline()
    document["spec"]["steps"].append(
        {"name": "tune", "sweep": {"spec": body}, "arguments": {"data": "{{steps.prep.outputs.data}}"}}
    )
    ops.submit([document], component_dir=files)
    assert [s.name for s in ops.get_pipeline("default", "train-eval").spec.steps] == ["prep", "train", "tune"]


def test_submitting_a_pipeline_again_configures_it(ops: Operations, files: Path) -> None:
    ops.submit([pipeline()], component_dir=files)
    document = pipeline()
    document["spec"]["parameters"][0]["default"] = "0.5"
    (again,) = ops.submit([document], component_dir=files)
    assert again.configured
    assert ops.get_pipeline("default", "train-eval").spec.parameters[0].default == "0.5"


# -- pipeline runs -----------------------------------------------------------------------------------------------


def test_a_run_of_a_pipeline_in_the_same_file_binds_its_arguments(ops: Operations, files: Path) -> None:
    created = ops.submit([run(lr="0.2"), pipeline()], component_dir=files)
    assert [c.kind for c in created] == ["Pipeline", "PipelineRun"]  # the pipeline first, whatever the file order
    stored = ops.get_pipelinerun("default", "run-1")
    assert isinstance(stored, PipelineRun) and stored.spec.arguments == {"lr": "0.2"}


def test_a_run_naming_no_pipeline_is_refused_at_its_reference(ops: Operations, backend: MemoryBackend) -> None:
    problems = refused(ops, [run(pipeline_name="nope")])
    assert "pipeline default/nope does not exist" in problems["spec.pipelineRef.name"]
    nothing_stored(backend)


def test_a_run_of_a_stored_pipeline_refuses_an_unknown_argument_and_a_wrong_type(
    ops: Operations, backend: MemoryBackend, files: Path
) -> None:
    ops.submit([pipeline()], component_dir=files)
    backend.calls.clear()
    problems = refused(ops, [run(lr="fast", epochs="3")])
    assert "type Float" in problems["spec.arguments.lr"]
    assert "no parameter 'epochs'" in problems["spec.arguments.epochs"]
    nothing_stored(backend)


def test_a_run_with_an_inline_pipeline_spec_is_checked_whole(ops: Operations, files: Path) -> None:
    document = run()
    document["spec"] = {"pipelineSpec": pipeline()["spec"], "arguments": {"lr": "0.3"}}
    document["spec"]["pipelineSpec"]["steps"][1]["arguments"]["data"] = "{{steps.nope.outputs.data}}"
    problems = refused(ops, [document], files)
    assert "no step is called 'nope'" in problems["spec.pipelineSpec.steps[1].arguments.data"]
    document["spec"]["pipelineSpec"]["steps"][1]["arguments"]["data"] = "{{steps.prep.outputs.data}}"
    ops.submit([document], component_dir=files)
    stored = ops.get_pipelinerun("default", "run-1")
    assert stored.spec.pipeline_spec is not None and stored.spec.pipeline_spec.steps[0].component is not None
    assert stored.spec.pipeline_spec.steps[0].component.inline == PREP
    assert COMPONENT_PATHS_ANNOTATION in stored.metadata.annotations


def test_deleting_a_pipeline_named_by_runs_is_refused_naming_them(
    ops: Operations, backend: MemoryBackend, files: Path
) -> None:
    ops.submit([pipeline(), run("run-1"), run("run-2")], component_dir=files)
    with pytest.raises(OperationError, match=r"named by pipelineruns: run-1 \(Pending\), run-2 \(Pending\)"):
        ops.delete_pipeline("default", "train-eval")
    assert ops.get_pipeline("default", "train-eval") is not None
    ops.delete_pipelinerun("default", "run-1")
    ops.delete_pipelinerun("default", "run-2")
    assert isinstance(ops.delete_pipeline("default", "train-eval"), Pipeline)
    assert ops.list_pipelines() == []


def test_deleting_a_run_deletes_its_step_jobs_and_sweeps(ops: Operations, backend: MemoryBackend, files: Path) -> None:
    ops.submit([pipeline(), run("run-1")], component_dir=files)
    label = {"phalanx.dev/pipelinerun": "run-1"}
    step = {"kind": "TrainingJob", "metadata": {"name": "run-1-prep-0", "labels": label}}
    step["spec"] = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["true"]}}}}
    tuning = sweep("run-1-tune")
    tuning["metadata"]["labels"] = label
    trial = copy.deepcopy(step)
    trial["metadata"] = {"name": "run-1-tune-0", "labels": {"phalanx.dev/sweep": "run-1-tune"}}
    ops.submit([step, tuning, trial])
    deleted = ops.delete_pipelinerun("default", "run-1")
    assert deleted == ["sweep/run-1-tune", "trainingjob/run-1-prep-0", "trainingjob/run-1-tune-0"]
    assert ops.list_jobs() == [] and ops.list_sweeps() == [] and ops.list_pipelineruns() == []


def test_the_runs_phase_is_named_when_its_name_is_taken(ops: Operations, backend: MemoryBackend, files: Path) -> None:
    ops.submit([pipeline(), run()], component_dir=files)
    key = ("PipelineRun", "default", "run-1")
    backend.objects[key] = backend.objects[key].model_copy(
        update={"status": backend.objects[key].status.model_copy(update={"phase": RunPhase.SUCCEEDED})}
    )
    with pytest.raises(OperationError, match=r"pipelinerun default/run-1 already exists \(it is Succeeded\)"):
        ops.submit([run()])


def test_validate_documents_alone_leaves_runs_of_unknown_pipelines_to_the_operations() -> None:
    (parsed,) = validate_documents([run(pipeline_name="elsewhere")], builtin_jobtypes())
    assert isinstance(parsed, PipelineRun)


def test_submit_annotations_reach_sweeps_pipelines_and_runs_not_queues(ops: Operations, files: Path) -> None:
    ops.submit([pipeline(), run(), sweep()], component_dir=files, annotations={"phalanx.dev/submit-dir": "/w"})
    assert ops.get_sweep("default", "lr-search").metadata.annotations["phalanx.dev/submit-dir"] == "/w"
    assert ops.get_pipelinerun("default", "run-1").metadata.annotations["phalanx.dev/submit-dir"] == "/w"
    assert ops.get_pipeline("default", "train-eval").metadata.annotations["phalanx.dev/submit-dir"] == "/w"
    assert not [o for o in ops.list_jobs() if isinstance(o, TrainingJob)]


# -- the backend's refusals reach the templates ------------------------------------------------------------------


def embedded_refusals(documents: list[dict[str, Any]]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_documents(
            documents, builtin_jobtypes(), pod_field_refusals=EMBEDDED_REFUSALS, cluster_scheduling=False
        )
    return {error.path: error.message for error in caught.value.errors}


def test_a_trial_template_setting_a_pod_field_the_backend_refuses_is_refused_at_submit() -> None:
    document = sweep()
    document["spec"]["trial"]["spec"]["replicas"]["worker"]["template"]["serviceAccountName"] = "robot"
    document["spec"]["trial"]["spec"]["scheduling"] = {"schedulerName": "volcano"}
    problems = embedded_refusals([document])
    assert "no service accounts" in problems["spec.trial.spec.replicas.worker.template.serviceAccountName"]
    assert "this runtime has none" in problems["spec.trial.spec.scheduling.schedulerName"]


def test_a_refused_pod_field_of_a_katib_trial_is_named_at_its_experiment_path() -> None:
    (document,) = read_documents(KATIB / "pytorchjob.yaml")
    worker = document["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["serviceAccountName"] = "robot"
    problems = embedded_refusals([document])
    assert list(problems) == [
        "spec.trialTemplate.trialSpec.spec.pytorchReplicaSpecs.Worker.template.spec.serviceAccountName"
    ]


def test_a_refused_pod_field_of_a_job_step_or_a_sweep_steps_trial_is_named_in_the_pipeline() -> None:
    template = {"command": ["train", "${inputs.x}"], "serviceAccountName": "robot"}
    job = {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}
    tuning = sweep()["spec"]
    tuning["trial"]["spec"]["replicas"]["worker"]["template"]["serviceAccountName"] = "robot"
    steps = [
        {"name": "train", "trainingJob": {"spec": job}, "arguments": {"x": "1"}},
        {"name": "tune", "sweep": {"spec": tuning}},
    ]
    problems = embedded_refusals([pipeline(steps=steps)])
    assert set(problems) == {
        "spec.steps[0].trainingJob.spec.replicas.worker.template.serviceAccountName",
        "spec.steps[1].sweep.spec.trial.spec.replicas.worker.template.serviceAccountName",
    }


def test_an_experiment_of_an_mpijob_trial_stores_the_jobtype_it_makes_before_its_sweep(
    ops: Operations, backend: MemoryBackend
) -> None:
    (document,) = read_documents(KATIB / "pytorchjob.yaml")
    template = document["spec"]["trialTemplate"]
    pod = template["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["trialSpec"] = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "spec": {
            "slotsPerWorker": 2,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": copy.deepcopy(pod)},
                "Worker": {"replicas": 2, "template": copy.deepcopy(pod)},
            },
        },
    }
    created = ops.submit([document])
    assert [(c.kind, c.name) for c in created] == [("JobType", "mpi-slots-2"), ("Sweep", "mnist-ddp")]
    assert ops.get_sweep("default", "mnist-ddp").spec.trial.spec["type"] == "mpi-slots-2"
    assert ops.jobtypes()["mpi-slots-2"].metadata.name == "mpi-slots-2"


def test_a_component_that_cannot_be_read_does_not_hide_the_pipelines_other_problems(
    ops: Operations, files: Path
) -> None:
    document = pipeline()
    document["spec"]["steps"][1]["component"]["path"] = "components/nope.yaml"
    document["spec"]["steps"][0]["after"] = ["train"]
    document["spec"]["steps"][1]["after"] = ["prep"]
    problems = refused(ops, [document], files)
    assert set(problems) == {"spec.steps[1].component.path", "spec.steps[0]"}  # no "not loaded" beside the file's
    assert "cycle prep -> train -> prep" in problems["spec.steps[0]"]


def test_a_pipeline_past_the_limits_once_its_components_are_inline_is_refused_in_one_sentence(
    ops: Operations, backend: MemoryBackend, files: Path
) -> None:
    large = {**PREP, "metadata": {"annotations": {f"note-{i}": "x" for i in range(30_000)}}}
    (files / "components" / "prep.yaml").write_text(yaml.safe_dump(large))  # within a file's limits alone
    steps = [{"name": f"s{i}", "component": {"path": "components/prep.yaml"}} for i in range(5)]
    problems = refused(ops, [pipeline(steps=steps)], files)
    assert list(problems) == ["spec.steps"]
    assert "with its component files inline" in problems["spec.steps"] and "100,000 values" in problems["spec.steps"]
    nothing_stored(backend)


@pytest.mark.parametrize(
    "stopping",
    [
        {"rule": "median", "minTrials": 2, "startStep": 3},
        {"rule": "successiveHalving", "minResource": 2, "reductionFactor": 3},
        {"rule": "hyperband", "minResource": 1, "maxResource": 27},
    ],
)
def test_a_sweep_with_early_stopping_is_stored_annotated_and_copies_validate(
    ops: Operations, stopping: dict[str, Any]
) -> None:
    # The submit annotations are added with a validated copy, which writes every field (null ones too).
    ops.submit([sweep(earlyStopping=stopping)], annotations={"phalanx.dev/submit-dir": "/w"})
    stored = ops.get_sweep("default", "lr-search")
    assert stored.spec.early_stopping is not None and stored.spec.early_stopping.rule == stopping["rule"]
    assert validated_copy(stored, metadata=stored.metadata) == stored


def test_a_sweep_algorithms_settings_are_checked_by_path_on_every_backend() -> None:
    document = sweep(algorithm={"name": "tpe", "seed": 1, "settings": {"n_startup_trials": 5, "bogus": 1}})
    for here in (True, False):
        with pytest.raises(SpecError) as caught:
            validate_documents([document], builtin_jobtypes(), algorithms_here=here)
        assert [e.path for e in caught.value.errors] == ["spec.algorithm.settings.bogus"]
        assert "not a setting of tpe" in caught.value.errors[0].message


def test_an_algorithm_whose_libraries_are_missing_is_refused_only_where_it_would_run() -> None:
    # The test extra has Optuna but never torch (gigabytes), which gp needs.
    assert find_spec("optuna") is not None and find_spec("torch") is None
    document = sweep(algorithm={"name": "gp", "seed": 1})
    with pytest.raises(SpecError) as caught:
        validate_documents([document], builtin_jobtypes(), algorithms_here=True)
    assert caught.value.errors[0].path == "spec.algorithm.name"
    assert "PyTorch" in caught.value.errors[0].message and "use tpe" in caught.value.errors[0].message
    # On a cluster the operator's image runs the algorithm: the CLI's installation says nothing about it.
    [accepted] = validate_documents([document], builtin_jobtypes(), algorithms_here=False)
    assert isinstance(accepted, Sweep)


def test_a_katib_experiments_algorithm_setting_is_refused_at_its_experiment_path() -> None:
    experiment = yaml.safe_load((KATIB / "cmaes.yaml").read_text())
    experiment["spec"]["algorithm"]["algorithmSettings"] = [{"name": "restart_strategy", "value": "ipop"}]
    with pytest.raises(SpecError) as caught:
        validate_documents([experiment], builtin_jobtypes(), algorithms_here=False)
    paths = [e.path for e in caught.value.errors]
    assert any(path.startswith("spec.algorithm.algorithmSettings") for path in paths), paths


def test_a_sweep_steps_algorithm_is_checked_like_a_sweeps_at_its_path_in_the_pipeline() -> None:
    tuning = sweep(algorithm={"name": "gp", "seed": 1, "settings": {"bogus": 1}})["spec"]
    document = pipeline(steps=[{"name": "tune", "sweep": {"spec": tuning}}])
    with pytest.raises(SpecError) as caught:
        validate_documents([document], builtin_jobtypes(), algorithms_here=True)
    paths = [e.path for e in caught.value.errors]
    assert paths == ["spec.steps[0].sweep.spec.algorithm.name", "spec.steps[0].sweep.spec.algorithm.settings.bogus"]
    with pytest.raises(SpecError) as caught:  # on a cluster, the settings alone
        validate_documents([document], builtin_jobtypes(), algorithms_here=False)
    assert [e.path for e in caught.value.errors] == ["spec.steps[0].sweep.spec.algorithm.settings.bogus"]


def test_a_component_file_submitted_alone_says_it_is_a_pipeline_step(ops: Operations) -> None:
    # A new user ran `phalanx run examples/pipelines/components/make_numbers.yaml`: it was read as a
    # TrainingJob, refused for a missing metadata and spec and unknown fields, and never called a component.
    component = yaml.safe_load(
        (Path(__file__).parents[3] / "examples" / "pipelines" / "components" / "make_numbers.yaml").read_text()
    )
    with pytest.raises(SpecError) as refused:
        validate_documents([component], builtin_jobtypes())
    (error,) = refused.value.errors
    assert error.path == "implementation" and "component file" in error.message and "component: {path" in error.message
