"""phalanx.dsl: the documents it writes pass the pipeline checks, references are wired by name, mistakes are early."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.pipelines.builders import accepted

from phalanx import dsl
from phalanx.model.errors import SpecError

EXAMPLES = Path(__file__).parents[3] / "examples" / "pipelines"
TRAIN = {"type": "generic", "replicas": {"worker": {"count": 1, "template": {"command": ["python", "t.py"]}}}}


def example() -> dsl.Pipeline:
    spec = importlib.util.spec_from_file_location("dsl_pipeline", EXAMPLES / "dsl_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()  # type: ignore[no-any-return]


def test_the_example_writes_a_pipeline_the_checks_accept() -> None:
    document = example().to_dict()
    pipeline = accepted(document)
    assert [step.name for step in pipeline.spec.steps] == ["numbers", "sums", "shout"]
    steps = {step["name"]: step for step in document["spec"]["steps"]}
    assert steps["sums"]["arguments"] == {"numbers": "{{steps.numbers.outputs.numbers}}", "factor": "{{item}}"}
    assert steps["sums"]["parallelFor"] == {"items": "{{params.factors}}"}
    assert steps["sums"]["retries"] == 1
    assert steps["shout"]["when"] == "{{params.count}} >= 10"
    # The component file is read when the step is defined and stored inline.
    assert steps["numbers"]["component"]["inline"]["name"] == "Make numbers"
    assert document["spec"]["parameters"][1] == {"name": "factors", "type": "JsonArray", "default": "[1,2,3]"}
    assert yaml.safe_load(example().to_yaml()) == document
    assert example().check().spec.steps[1].parallel_for is not None


def test_check_reports_what_the_door_would() -> None:
    p = dsl.Pipeline("broken")
    p.command("a", ["echo", dsl.input_value("x")], inputs={"x": "Integer"}, arguments={"x": "{{params.missing}}"})
    with pytest.raises(SpecError) as caught:
        p.check()
    assert [e.path for e in caught.value.errors] == ["spec.steps[0].arguments.x"]
    assert "no parameter 'missing'" in caught.value.errors[0].message


def test_steps_of_every_kind_and_their_options() -> None:
    p = dsl.Pipeline("all-kinds", namespace="team")
    lr = p.param("lr", "Float", default=0.01)
    train = p.training_job(
        "train", TRAIN, arguments={"lr": lr}, inputs={"lr": "Float"}, outputs={"model": "Model", "accuracy": "Float"}
    )
    tune = p.sweep("tune", {"maxTrials": 2}, arguments={"model": train.outputs["model"]})
    check = p.command(
        "check",
        ["echo", dsl.input_value("best"), dsl.input_value("mode"), dsl.output_path("log")],
        inputs={"best": "JsonObject", "mode": None},
        outputs={"log": None},
        arguments={"best": tune.outputs["bestParameters"], "mode": {"fast": True}},
        when=train.outputs["accuracy"] > 0.8,
        cache=False,
        after=[train, "tune"],
        parallel_for=[1, "two"],
    )
    document = p.to_dict()
    assert document["metadata"] == {"name": "all-kinds", "namespace": "team"}
    steps = {step["name"]: step for step in document["spec"]["steps"]}
    assert steps["train"]["trainingJob"] == {"spec": TRAIN}
    assert steps["train"]["outputs"] == [{"name": "model", "type": "Model"}, {"name": "accuracy", "type": "Float"}]
    assert steps["tune"]["arguments"] == {"model": "{{steps.train.outputs.model}}"}
    assert steps["check"]["arguments"] == {"best": "{{steps.tune.outputs.bestParameters}}", "mode": '{"fast":true}'}
    assert steps["check"]["when"] == "{{steps.train.outputs.accuracy}} > 0.8"
    assert steps["check"]["cache"] is False
    assert steps["check"]["after"] == ["train", "tune"]
    assert steps["check"]["parallelFor"] == {"items": [1, "two"]}
    assert steps["check"]["component"]["inline"]["implementation"]["container"]["command"] == [
        "echo",
        {"inputValue": "best"},
        {"inputValue": "mode"},
        {"outputPath": "log"},
    ]
    assert check.outputs["log"].text == "{{steps.check.outputs.log}}"


@pytest.mark.parametrize(
    ("condition", "text"),
    [
        (dsl.Ref("{{params.x}}") < 1, "{{params.x}} < 1"),
        (dsl.Ref("{{params.x}}") <= 1.5, "{{params.x}} <= 1.5"),
        (dsl.Ref("{{params.x}}").eq("adam"), "{{params.x}} == 'adam'"),
        (dsl.Ref("{{params.x}}").ne("it's"), '{{params.x}} != "it\'s"'),
        (dsl.Ref("{{params.x}}").eq(True), "{{params.x}} == true"),
        (dsl.Ref("{{params.x}}") >= dsl.ITEM, "{{params.x}} >= {{item}}"),
    ],
)
def test_conditions(condition: dsl.Condition, text: str) -> None:
    assert str(condition) == text


def test_mistakes_are_refused_when_made(tmp_path: Path) -> None:
    p = dsl.Pipeline("mistakes")
    step = p.command("a", ["true"], outputs={"out": None})
    with pytest.raises(KeyError, match="step 'a' has no output 'outt'; its outputs: 'out'"):
        step.outputs["outt"]
    with pytest.raises(ValueError, match="a step called 'a' is already defined"):
        p.command("a", ["true"])
    with pytest.raises(TypeError, match="unknown step options: retry"):
        p.command("b", ["true"], retry=2)
    with pytest.raises(ValueError, match="must be lowercase letters"):
        dsl.Pipeline("Bad_Name")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nimplementation: {container: {image: i, args: [{inputVal: x}]}}\n")
    with pytest.raises(SpecError, match="inputVal: unknown placeholder"):
        p.component("c", bad)


def test_a_component_file_that_cannot_be_read_is_a_spec_error_naming_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's trial: a mistyped component path raised a bare FileNotFoundError from deep in the DSL."""
    monkeypatch.chdir(tmp_path)
    p = dsl.Pipeline("files")
    with pytest.raises(SpecError) as missing:
        p.component("prepare", "components/prepare.yml")
    [error] = missing.value.errors
    assert error.message.startswith("the component of step 'prepare': cannot read components/prepare.yml")
    assert f"(relative to the current directory, {tmp_path})" in error.message
    assert "No such file or directory; give the path of a KFP component.yaml" in error.message
    broken = tmp_path / "broken.yaml"
    broken.write_text('name: x\nimplementation: {container: {image: "i}}\n')
    with pytest.raises(SpecError, match="not valid YAML at line 3, column 1"):
        p.component("broken", broken)
    two = tmp_path / "two.yaml"
    two.write_text("name: a\n---\nname: b\n")
    with pytest.raises(SpecError, match="holds 2 documents; a component file holds one component"):
        p.component("two", two)
    assert p.to_dict()["spec"]["steps"] == []  # nothing was added by the refused steps


def test_run_and_submit_send_the_pipeline_and_a_run_in_one_submission() -> None:
    p = dsl.Pipeline("sent")
    n = p.param("n", "Integer", default=1)
    p.command("a", ["echo", dsl.input_value("n")], inputs={"n": "Integer"}, arguments={"n": n})

    class Recorder:
        def __init__(self) -> None:
            self.sent: list[Any] = []

        def submit(self, spec: Any) -> list[str]:
            self.sent.append(spec)
            return ["created"]

    client = Recorder()
    assert p.submit(client, arguments={"n": 3}) == ["created"]
    [documents] = client.sent
    assert documents[0] == p.to_dict()
    assert documents[1] == {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "sent-run"},
        "spec": {"pipelineRef": {"name": "sent"}, "arguments": {"n": "3"}},
    }
    p.submit(client, run=False)
    assert client.sent[1] == [p.to_dict()]
