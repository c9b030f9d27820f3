"""Katib Experiments converted into Sweeps: what each field becomes, what is refused, and where errors point."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.sweeps.katib import validate_experiment
from phalanx.core.sweeps.substitute import trial_document
from phalanx.model.errors import SpecError
from phalanx.model.katib import (
    KATIB_STDOUT,
    METRICS_FILTER_ANNOTATION,
    METRICS_FORMAT_ANNOTATION,
    PARAMETER_NAMES_ANNOTATION,
    convert_experiment,
    is_experiment,
    sweep_parameter_names,
)
from phalanx.model.kubeflow import CONVERTED_FROM
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.sweeps import PARAMETER_NAME
from phalanx.model.validation import validate_job

JOBTYPES = builtin_jobtypes()
DATA = Path(__file__).parents[2] / "data" / "katib"


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((DATA / f"{name}.yaml").read_text())
    return document


def problems(document: dict[str, Any]) -> dict[str, str]:
    """``{path: message}`` of every problem the Experiment's validation finds (it must find one)."""
    with pytest.raises(SpecError) as caught:
        validate_experiment(document, JOBTYPES)
    return {error.path: error.message for error in caught.value.errors}


@pytest.mark.parametrize("name", sorted(path.stem for path in DATA.glob("*.yaml")))
def test_every_sample_experiment_is_a_valid_sweep(name: str) -> None:
    document = load(name)
    assert is_experiment(document)
    _, sweep, conversion = validate_experiment(document, JOBTYPES)
    assert sweep.metadata.name == document["metadata"]["name"]
    assert sweep.metadata.annotations[CONVERTED_FROM] == "Experiment.kubeflow.org/v1beta1"
    assert sweep.metadata.annotations[METRICS_FORMAT_ANNOTATION] == KATIB_STDOUT
    # Katib's parallelism default is 3; a Sweep's is 1: the converted one says so.
    assert sweep.spec.parallel_trials == document["spec"].get("parallelTrialCount", 3)
    assert sweep.spec.max_trials == document["spec"]["maxTrialCount"]
    assert sweep.spec.objective.metric == document["spec"]["objective"]["objectiveMetricName"]
    assert sweep.spec.objective.direction == document["spec"]["objective"]["type"]
    # Every trial parameter reference is gone from the template: a trial job validates as a TrainingJob.
    assert "trialParameters" not in json.dumps(conversion.sweep)
    validate_job(trial_document(sweep, 0, {p.name: p.sample_value() for p in sweep.spec.parameters}), JOBTYPES)


def test_random_experiment_renames_parameters_and_substitutes_trial_parameters() -> None:
    _, sweep, conversion = validate_experiment(load("random"), JOBTYPES)
    assert [p.name for p in sweep.spec.parameters] == ["learning_rate", "hidden_layers", "optimizer"]
    assert conversion.parameter_names == {
        "learning-rate": "learning_rate",
        "hiddenLayers": "hidden_layers",
        "optimizer": "optimizer",
    }
    assert json.loads(sweep.metadata.annotations[PARAMETER_NAMES_ANNOTATION]) == {
        "learning-rate": "learning_rate",
        "hiddenLayers": "hidden_layers",
    }
    lr = sweep.spec.parameters[0]
    assert (lr.type, lr.min, lr.max, lr.log) == ("double", 0.001, 0.1, True)
    assert sweep.spec.parameters[1].min == 1 and isinstance(sweep.spec.parameters[1].min, int)
    assert sweep.spec.parameters[2].values == ["sgd", "adam", "rmsprop"]
    assert (sweep.spec.algorithm.name, sweep.spec.algorithm.seed) == ("random", 11)
    assert (sweep.spec.objective.goal, sweep.spec.max_failed_trials) == (0.95, 2)
    job = trial_document(sweep, 4, {"learning_rate": 0.01, "hidden_layers": 3, "optimizer": "adam"})
    assert job["spec"]["type"] == "generic"
    worker = job["spec"]["replicas"]["worker"]
    assert worker["count"] == 1
    assert worker["template"]["command"][2:] == [
        "--lr=0.01",
        "--layers=3",
        "--optimizer=adam",
        "--run-name=fashion-random-4",
    ]
    assert job["spec"]["runPolicy"] == {"restartPolicy": "Never"}


def test_batch_job_fields_become_the_generic_jobs() -> None:
    _, sweep, _ = validate_experiment(load("batch-job"), JOBTYPES)
    assert sweep.metadata.labels == {"team": "tabular"}
    depth = sweep.spec.parameters[0]
    assert (depth.min, depth.max, depth.step) == (3, 9, 2)
    job = trial_document(sweep, 0, {"max_depth": 5, "booster": "dart"})
    spec = job["spec"]
    assert spec["runPolicy"] == {"backoffLimit": 2, "activeDeadlineSeconds": 3600, "restartPolicy": "OnFailure"}
    template = spec["replicas"]["worker"]["template"]
    assert template["env"] == {"BOOSTER": "dart", "RESULTS_NS": "default"}
    assert template["metadata"] == {"labels": {"app": "tabular"}}
    assert template["resources"] == {"cpu": "2", "memory": "4Gi"}
    assert job["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert job["metadata"]["annotations"][CONVERTED_FROM] == "Job.batch/v1"


def test_pytorchjob_trial_goes_through_the_kubeflow_converter() -> None:
    _, sweep, conversion = validate_experiment(load("pytorchjob"), JOBTYPES)
    assert conversion.trial is not None
    spec = sweep.spec.trial.spec
    assert spec["type"] == "pytorch"
    replicas = spec["replicas"]
    assert isinstance(replicas, dict)
    assert set(replicas) == {"master", "worker"}
    assert sweep.spec.trial.metadata.labels == {"team": "vision"}
    job = trial_document(sweep, 1, {"lr": 0.02, "momentum": 0.7})
    assert job["spec"]["replicas"]["worker"]["count"] == 2
    assert job["spec"]["replicas"]["master"]["template"]["command"][2:] == ["--lr=0.02", "--momentum=0.7"]


@pytest.mark.parametrize(
    ("name", "algorithm", "seed", "settings"),
    [
        ("tpe", "tpe", 3, {"multivariate": True, "n_startup_trials": 5, "n_ei_candidates": 32}),
        ("cmaes", "cmaes", 0, {"sigma0": 0.3, "restart_strategy": "ipop"}),
        ("bayesian", "gp", 9, {"n_startup_trials": 6}),
        ("grid", "grid", 0, {}),
    ],
)
def test_algorithm_settings_become_optuna_settings(
    name: str, algorithm: str, seed: int, settings: dict[str, Any]
) -> None:
    _, sweep, _ = validate_experiment(load(name), JOBTYPES)
    assert sweep.spec.algorithm.name == algorithm
    assert sweep.spec.algorithm.seed == seed
    assert sweep.spec.algorithm.settings == settings


def test_grid_parameters_are_typed_numbers() -> None:
    _, sweep, _ = validate_experiment(load("grid"), JOBTYPES)
    dropout, epochs, batch = sweep.spec.parameters
    assert (dropout.min, dropout.max, dropout.step) == (0.1, 0.4, 0.1)
    assert (epochs.min, epochs.max) == (2, 4)
    assert batch.values == [32, 64]


def test_medianstop_and_retain() -> None:
    _, sweep, _ = validate_experiment(load("medianstop"), JOBTYPES)
    early = sweep.spec.early_stopping
    assert early is not None
    assert (early.rule, early.minimum_trials, early.first_step) == ("median", 2, 3)
    run_policy = sweep.spec.trial.spec["runPolicy"]
    assert isinstance(run_policy, dict)
    assert run_policy["cleanPodPolicy"] == "None"


def edit(name: str, change: Any) -> dict[str, Any]:
    document = copy.deepcopy(load(name))
    change(document)
    return document


def spec_of(document: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = document["spec"]
    return spec


def container(document: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = spec_of(document)["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    return found


REFUSED = [
    (
        "normal distribution",
        lambda d: spec_of(d)["parameters"][0]["feasibleSpace"].update(distribution="normal"),
        "spec.parameters[0].feasibleSpace.distribution",
        "uniform",
    ),
    (
        "additional metrics",
        lambda d: spec_of(d)["objective"].update(additionalMetricNames=["train-accuracy"]),
        "spec.objective.additionalMetricNames",
        "objective metric only",
    ),
    (
        "latest strategy",
        lambda d: spec_of(d)["objective"].update(metricStrategies=[{"name": "val-accuracy", "value": "latest"}]),
        "spec.objective.metricStrategies[0]",
        "default strategy (max",
    ),
    (
        "hyperband",
        lambda d: spec_of(d)["algorithm"].update(algorithmName="hyperband", algorithmSettings=[]),
        "spec.algorithm.algorithmName",
        "earlyStopping rule hyperband",
    ),
    (
        "sobol",
        lambda d: spec_of(d)["algorithm"].update(algorithmName="sobol", algorithmSettings=[]),
        "spec.algorithm.algorithmName",
        "use one of random, grid",
    ),
    (
        "an unknown setting",
        lambda d: spec_of(d)["algorithm"]["algorithmSettings"].append({"name": "gamma", "value": "0.2"}),
        "spec.algorithm.algorithmSettings[1]",
        "its settings are random_state",
    ),
    (
        "a setting that is no number",
        lambda d: spec_of(d)["algorithm"]["algorithmSettings"][0].update(value="eleven"),
        "spec.algorithm.algorithmSettings[0].value",
        "must be a int",
    ),
    (
        "a sigma that is no number",
        lambda d: spec_of(d).update(
            algorithm={"algorithmName": "cmaes", "algorithmSettings": [{"name": "sigma", "value": "nan"}]}
        ),
        "spec.algorithm.algorithmSettings[0].value",
        "finite number > 0",
    ),
    (
        "a medianstop setting",
        lambda d: spec_of(d).update(
            earlyStopping={"algorithmName": "medianstop", "algorithmSettings": [{"name": "window", "value": "2"}]}
        ),
        "spec.earlyStopping.algorithmSettings[0]",
        "min_trials_required or start_step",
    ),
    (
        "nas",
        lambda d: spec_of(d).update(nasConfig={"graphConfig": {}}),
        "spec.nasConfig",
        "not supported",
    ),
    (
        "an unknown spec field",
        lambda d: spec_of(d).update(paralelTrialCount=2),
        "spec.paralelTrialCount",
        "unknown field",
    ),
    (
        "FromVolume",
        lambda d: spec_of(d).update(resumePolicy="FromVolume"),
        "spec.resumePolicy",
        "Never or LongRunning",
    ),
    (
        "no trial budget",
        lambda d: spec_of(d).pop("maxTrialCount"),
        "spec.maxTrialCount",
        "trial budget",
    ),
    (
        "a File collector",
        lambda d: spec_of(d).update(metricsCollectorSpec={"collector": {"kind": "File"}}),
        "spec.metricsCollectorSpec.collector",
        "only the StdOut collector",
    ),
    (
        "a filter with one group",
        lambda d: spec_of(d).update(metricsCollectorSpec={"source": {"filter": {"metricsFormat": ["(\\w+)=\\S+"]}}}),
        "spec.metricsCollectorSpec.source.filter.metricsFormat[0]",
        "two groups",
    ),
    (
        "a ConfigMap template",
        lambda d: spec_of(d)["trialTemplate"].update(configMap={"configMapName": "templates"}),
        "spec.trialTemplate.configMap",
        "not read",
    ),
    (
        "a custom success condition",
        lambda d: spec_of(d)["trialTemplate"].update(successCondition="status.succeeded"),
        "spec.trialTemplate.successCondition",
        "custom successCondition",
    ),
    (
        "another primary container",
        lambda d: spec_of(d)["trialTemplate"].update(primaryContainerName="main"),
        "spec.trialTemplate.primaryContainerName",
        "'main' is not the trial's container (trainer)",
    ),
    (
        "an undeclared trial parameter",
        lambda d: container(d)["command"].append("--seed=${trialParameters.seed}"),
        "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].command[6]",
        "${trialParameters.seed} is not a trial parameter",
    ),
    (
        "a reference to nothing",
        lambda d: spec_of(d)["trialTemplate"]["trialParameters"][1].update(reference="depth"),
        "spec.trialTemplate.trialParameters[1].reference",
        "names no parameter",
    ),
    (
        "an Argo Workflow",
        lambda d: spec_of(d)["trialTemplate"]["trialSpec"].update(apiVersion="argoproj.io/v1alpha1", kind="Workflow"),
        "spec.trialTemplate.trialSpec.kind",
        "is not one",
    ),
    (
        "parallel pods",
        lambda d: spec_of(d)["trialTemplate"]["trialSpec"]["spec"].update(parallelism=4),
        "spec.trialTemplate.trialSpec.spec.parallelism",
        "must be 1",
    ),
    (
        "a Job pod without restartPolicy",
        lambda d: spec_of(d)["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"].pop("restartPolicy"),
        "spec.trialTemplate.trialSpec.spec.template.spec.restartPolicy",
        "Never or OnFailure",
    ),
    (
        "a second container",
        lambda d: spec_of(d)["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"].append(
            {"name": "logger", "image": "busybox"}
        ),
        "spec.trialTemplate.trialSpec.spec.template.spec.containers[1]",
        "one program",
    ),
    (
        "an old API version",
        lambda d: d.update(apiVersion="kubeflow.org/v1alpha3"),
        "apiVersion",
        "write apiVersion: kubeflow.org/v1beta1",
    ),
]


@pytest.mark.parametrize(("case", "change", "path", "fix"), REFUSED, ids=[case[0] for case in REFUSED])
def test_what_cannot_be_honoured_is_refused_at_its_path(case: str, change: Any, path: str, fix: str) -> None:
    found = problems(edit("random", change))
    assert path in found, found
    assert fix in found[path]


# Problems the Sweep's own validation finds, reported at the Experiment's paths.
MAPPED = [
    (
        "random",
        lambda d: spec_of(d)["parameters"][0]["feasibleSpace"].update(max="0.0001"),
        "spec.parameters[0].feasibleSpace.max",
        "must be greater than min",
    ),
    (
        "random",
        lambda d: spec_of(d).update(maxTrialCount=0),
        "spec.maxTrialCount",
        "",
    ),
    (
        "random",
        lambda d: spec_of(d)["algorithm"]["algorithmSettings"][0].update(value="-1"),
        "spec.algorithm.algorithmSettings[0].value",
        "",
    ),
    (
        "random",
        lambda d: spec_of(d)["objective"].update(objectiveMetricName="val accuracy"),
        "spec.objective.objectiveMetricName",
        "not a metric name",
    ),
    (
        "random",
        lambda d: d["metadata"].update(name="a" * 62),
        "metadata.name",
        "shorten the name",
    ),
    (
        "random",
        lambda d: spec_of(d)["algorithm"].update(algorithmName="cmaes", algorithmSettings=[]),
        "spec.algorithm.algorithmName",
        "cmaes samples numbers only; 'optimizer'",
    ),
    (
        "grid",
        lambda d: spec_of(d)["parameters"][0]["feasibleSpace"].pop("step"),
        "spec.algorithm.algorithmName",
        "'dropout' is a continuous double",
    ),
    (
        "random",
        lambda d: spec_of(d)["parameters"][1]["feasibleSpace"].update(distribution="logUniform", step="2"),
        "spec.parameters[1].feasibleSpace.step",
        "step 1 only",
    ),
    (
        "medianstop",
        lambda d: spec_of(d)["earlyStopping"]["algorithmSettings"][1].update(value="0"),
        "spec.earlyStopping.algorithmSettings[1].value",
        "",
    ),
    (
        "batch-job",
        lambda d: container(d)["resources"]["limits"].update(cpu="lots"),
        "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].resources.limits.cpu",
        "invalid CPU quantity 'lots'",
    ),
    (
        "batch-job",
        lambda d: container(d)["env"].append({"name": "BAD NAME", "value": "x"}),
        "spec.trialTemplate.trialSpec.spec.template.spec.containers[0].env[2]",
        "not a valid variable name",
    ),
    (
        "pytorchjob",
        lambda d: spec_of(d)["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=-1),
        "spec.trialTemplate.trialSpec.spec.pytorchReplicaSpecs.Worker.replicas",
        "",
    ),
]


@pytest.mark.parametrize(("name", "change", "path", "words"), MAPPED)
def test_sweep_validation_errors_point_into_the_experiment(name: str, change: Any, path: str, words: str) -> None:
    found = problems(edit(name, change))
    assert any(where.startswith(path) for where in found), found
    assert any(words in message for where, message in found.items() if where.startswith(path)), found


def test_an_mpijob_trial_brings_its_own_jobtype() -> None:
    def to_mpi(document: dict[str, Any]) -> None:
        template = spec_of(document)["trialTemplate"]
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

    made, sweep, _ = validate_experiment(edit("pytorchjob", to_mpi), JOBTYPES)
    assert [jobtype.metadata.name for jobtype in made] == ["mpi-slots-2"]
    assert sweep.spec.trial.spec["type"] == "mpi-slots-2"


def test_conversion_refuses_everything_at_once() -> None:
    def break_twice(document: dict[str, Any]) -> None:
        spec_of(document)["parameters"][0]["feasibleSpace"]["distribution"] = "logNormal"
        spec_of(document)["nasConfig"] = {}

    with pytest.raises(SpecError) as caught:
        convert_experiment(edit("random", break_twice), JOBTYPES)
    assert {error.path for error in caught.value.errors} == {
        "spec.parameters[0].feasibleSpace.distribution",
        "spec.nasConfig",
    }


def test_a_trial_parameter_with_a_wrong_reference_is_refused_once_at_its_reference() -> None:
    """A new user's trial: the trialSpec's use of it was refused too, saying "list it", though it was listed."""
    problems_found = problems(
        edit("random", lambda d: spec_of(d)["trialTemplate"]["trialParameters"][1].update(reference="depth"))
    )
    assert [path for path in problems_found if "trialParameters" in path or "trialSpec" in path] == [
        "spec.trialTemplate.trialParameters[1].reference"
    ], problems_found


def test_a_stdout_filter_is_kept_for_the_collector() -> None:
    formats = ["([\\w-]+)=([+-]?\\d+(?:\\.\\d+)?)"]
    document = edit(
        "random",
        lambda d: spec_of(d).update(
            metricsCollectorSpec={"collector": {"kind": "StdOut"}, "source": {"filter": {"metricsFormat": formats}}}
        ),
    )
    _, sweep, _ = validate_experiment(document, JOBTYPES)
    assert json.loads(sweep.metadata.annotations[METRICS_FILTER_ANNOTATION]) == formats


@given(st.lists(st.text(min_size=1, max_size=80), min_size=1, max_size=12, unique=True))
def test_renamed_parameters_are_valid_unique_and_deterministic(names: list[str]) -> None:
    renamed = sweep_parameter_names(names)
    assert list(renamed) == names
    assert len(set(renamed.values())) == len(names)
    assert all(PARAMETER_NAME.fullmatch(name) and len(name) <= 63 for name in renamed.values())
    assert sweep_parameter_names(names) == renamed
    # A name that is already a valid Sweep name, listed first, keeps itself.
    if PARAMETER_NAME.fullmatch(names[0]) and len(names[0]) <= 63:
        assert renamed[names[0]] == names[0]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node of a document (the root excluded)."""
    found = [path] if path else []
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += nodes(value, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += nodes(value, (*path, index))
    return found


@given(st.sampled_from(sorted(path.stem for path in DATA.glob("*.yaml"))), st.data())
def test_any_value_anywhere_is_converted_or_refused_never_a_crash(name: str, data: st.DataObject) -> None:
    document = load(name)
    where = data.draw(st.sampled_from(nodes(document)))
    parent: Any = document
    for part in where[:-1]:
        parent = parent[part]
    parent[where[-1]] = data.draw(JSON)
    try:
        validate_experiment(document, JOBTYPES)
    except SpecError as error:
        assert error.errors and all(item.message for item in error.errors)


def as_trainingjob(document: dict[str, Any]) -> None:
    template = spec_of(document)["trialTemplate"]
    template.pop("primaryContainerName")
    template["trialSpec"] = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"labels": {"suite": "katib"}},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": 1, "template": {"image": "i", "command": ["t", "${trialParameters.lr}"]}}},
        },
    }


def test_a_trainingjob_trial_is_taken_as_it_is() -> None:
    _, sweep, _ = validate_experiment(edit("random", as_trainingjob), JOBTYPES)
    assert sweep.spec.trial.metadata.labels == {"suite": "katib"}
    job = trial_document(sweep, 0, {"learning_rate": 0.05, "hidden_layers": 1, "optimizer": "sgd"})
    assert job["spec"]["replicas"]["worker"]["template"]["command"] == ["t", "0.05"]


def test_a_trainingjob_trials_errors_point_into_its_spec() -> None:
    def zero(document: dict[str, Any]) -> None:
        as_trainingjob(document)
        spec_of(document)["trialTemplate"]["trialSpec"]["spec"]["replicas"]["worker"]["count"] = 0

    assert "spec.trialTemplate.trialSpec.spec.replicas.worker.count" in problems(edit("random", zero))


def test_a_parameter_can_stand_for_a_replica_count() -> None:
    def workers(document: dict[str, Any]) -> None:
        spec = spec_of(document)
        spec["parameters"].append(
            {"name": "workers", "parameterType": "int", "feasibleSpace": {"min": "1", "max": "3"}}
        )
        spec["trialTemplate"]["trialParameters"].append({"name": "workers", "reference": "workers"})
        spec["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = (
            "${trialParameters.workers}"
        )

    _, sweep, _ = validate_experiment(edit("pytorchjob", workers), JOBTYPES)
    job = trial_document(sweep, 0, {"lr": 0.02, "momentum": 0.6, "workers": 3})
    assert validate_job(job, JOBTYPES).spec.replicas["worker"].count == 3
