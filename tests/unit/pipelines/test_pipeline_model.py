"""Pipeline/PipelineRun shape: one error per problem, each at its field path with the fix."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.pipelines import StepKind, parse_pipeline, parse_pipeline_run


def _doc(*steps: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Pipeline",
        "metadata": {"name": "p"},
        "spec": {"steps": list(steps), **spec},
    }


def _errors(raw: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(raw)
    return {error.path: error.message for error in caught.value.errors}


COMPONENT = {"component": {"path": "components/c.yaml"}}


def test_the_design_example_parses() -> None:
    raw = _doc(
        {
            "name": "prepare",
            "component": {"path": "components/prepare.yaml"},
            "arguments": {"raw data": "gs://x", "rows": "{{params.shards}}"},
        },
        {
            "name": "train",
            "trainingJob": {"spec": {"replicas": {}}},
            "arguments": {"data": "x"},
            "inputs": [{"name": "data", "type": "Dataset"}],
            "outputs": [{"name": "model", "type": "Model"}],
            "after": ["prepare"],
        },
        {
            "name": "evaluate",
            "component": {"inline": {"name": "eval", "implementation": {}}},
            "parallelFor": {"items": "{{steps.prepare.outputs.shard list}}", "as": "shard"},
            "arguments": {"shard": "{{item}}"},
            "when": "{{steps.train.outputs.model}} != ''",
            "retries": 2,
            "cache": False,
        },
        parameters=[{"name": "lr", "type": "Float", "default": "0.01"}],
    )
    pipeline = parse_pipeline(raw)
    assert [step.kind for step in pipeline.spec.steps] == [
        StepKind.COMPONENT,
        StepKind.TRAINING_JOB,
        StepKind.COMPONENT,
    ]
    evaluate = pipeline.spec.steps[2]
    assert evaluate.retries == 2 and evaluate.cache is False
    assert evaluate.parallel_for is not None and evaluate.parallel_for.items == "{{steps.prepare.outputs.shard list}}"
    assert pipeline.spec.steps[0].cache is True
    assert pipeline.to_dict()["spec"]["steps"][2]["parallelFor"]["as"] == "shard"


@pytest.mark.parametrize(
    ("step", "path", "words"),
    [
        ({"name": "a"}, "spec.steps[0]", "exactly one of component"),
        ({"name": "a", **COMPONENT, "sweep": {"spec": {}}}, "spec.steps[0]", "got component, sweep"),
        ({"name": "Bad_Name", **COMPONENT}, "spec.steps[0].name", "e.g. 'bad-name'"),
        ({"name": "a", "component": {}}, "spec.steps[0].component", "exactly one of path"),
        ({"name": "a", "component": {"path": "/abs.yaml"}}, "spec.steps[0].component.path", "relative"),
        ({"name": "a", **COMPONENT, "retries": -1}, "spec.steps[0].retries", ">= 0"),
        ({"name": "a", **COMPONENT, "retries": 101}, "spec.steps[0].retries", "<= 100"),
        ({"name": "a", **COMPONENT, "cache": "yes"}, "spec.steps[0].cache", "true or false"),
        (
            {"name": "a", **COMPONENT, "parallelFor": {"items": [1], "as": "x y"}},
            "spec.steps[0].parallelFor.as",
            "must be a letter",
        ),
        ({"name": "a", **COMPONENT, "retry": 1}, "spec.steps[0].retry", "did you mean 'retries'"),
        ({"name": "a", **COMPONENT, "inputs": [{"name": "x"}]}, "spec.steps[0].inputs", "from the component"),
        (
            {"name": "a", "trainingJob": {"spec": {}}, "outputs": [{"name": "m"}, {"name": "m"}]},
            "spec.steps[0].outputs",
            "declared twice",
        ),
        (
            {"name": "a", "trainingJob": {"spec": {}}, "inputs": [{"name": "bad name"}]},
            "spec.steps[0].inputs[0].name",
            "e.g. 'learning_rate'",
        ),
    ],
    ids=[
        "no-kind",
        "two-kinds",
        "bad-name",
        "empty-component",
        "absolute-path",
        "negative-retries",
        "too-many-retries",
        "cache-not-bool",
        "loop-variable",
        "misspelt-field",
        "component-with-inputs",
        "duplicate-output",
        "bad-input-name",
    ],
)
def test_a_bad_step_is_refused_at_its_path(step: dict[str, Any], path: str, words: str) -> None:
    errors = _errors(_doc(step))
    assert path in errors, errors
    assert words in errors[path]


def test_every_duplicate_step_name_is_named() -> None:
    errors = _errors(_doc({"name": "a", **COMPONENT}, {"name": "b", **COMPONENT}, {"name": "a", **COMPONENT}))
    assert list(errors) == ["spec.steps[2].name"]
    assert "steps[0]" in errors["spec.steps[2].name"]


def test_duplicate_parameters_and_wrong_kind_are_refused_together() -> None:
    raw = _doc({"name": "a", **COMPONENT}, parameters=[{"name": "x"}, {"name": "x"}])
    raw["kind"] = "Pipelines"
    errors = _errors(raw)
    assert set(errors) == {"kind", "spec.parameters"}


def test_a_pipeline_needs_a_step() -> None:
    assert "spec.steps" in _errors(_doc())


def test_a_run_names_exactly_one_pipeline() -> None:
    run = parse_pipeline_run(
        {"metadata": {"name": "r"}, "spec": {"pipelineRef": {"name": "train-eval"}, "arguments": {"lr": "0.02"}}}
    )
    assert run.spec.pipeline_ref is not None and run.spec.arguments == {"lr": "0.02"}
    with pytest.raises(SpecError) as caught:
        parse_pipeline_run({"metadata": {"name": "r"}, "spec": {}})
    assert "exactly one of pipelineRef" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        parse_pipeline_run({"metadata": {"name": "r"}, "spec": {"pipelineRef": {"name": "Not OK"}}})
    assert caught.value.errors[0].path == "spec.pipelineRef.name"


def test_a_non_mapping_is_one_sentence() -> None:
    with pytest.raises(SpecError) as caught:
        parse_pipeline(["steps"])
    assert caught.value.errors[0].message == "a Pipeline must be a mapping with metadata and spec"
