"""The executor-input contract of kfp v2 lightweight components: the JSON written, the real kfp executor reading it,
and the output file read back (the executor runs in this process: files under tmp_path only)."""

# No `from __future__ import annotations`: the kfp executor reads the annotations of `train` as objects.

import json
from pathlib import Path

import pytest
from kfp.dsl import Dataset, Input, Model, Output, OutputPath
from kfp.dsl.executor import Executor

from phalanx.core.pipelines.kfp_executor import (
    executor_input,
    executor_outputs,
    is_parameter_type,
    schema_title,
    uses_executor_input,
)
from phalanx.core.pipelines.placeholders import default_paths, resolve_command
from phalanx.model.errors import SpecError
from phalanx.model.kfp_component import parse_component


def lightweight(**extra: object) -> dict[str, object]:
    return {
        "name": "train",
        "inputs": [
            {"name": "epochs", "type": "Integer"},
            {"name": "lr", "type": "Float", "default": "0.1", "optional": True},
            {"name": "verbose", "type": "Boolean", "default": "false", "optional": True},
            {"name": "shards", "type": "JsonArray"},
            {"name": "tag", "type": "String", "optional": True},
            {"name": "data", "type": "Dataset"},
        ],
        "outputs": [
            {"name": "model", "type": "Model"},
            {"name": "count", "type": "Integer"},
            {"name": "Output", "type": "String"},
        ],
        "implementation": {
            "container": {
                "image": "python:3.11",
                "command": ["sh", "-ec", "run"],
                "args": ["--executor_input", {"executorInput": None}, "--function_to_execute", "train"],
                **extra,
            }
        },
    }


def train(
    epochs: int,
    shards: list,
    data: Input[Dataset],
    model: Output[Model],
    count: OutputPath(int),
    lr: float = 0.5,
    verbose: bool = True,
    tag: str = "none",
) -> str:
    with open(data.path) as source:
        rows = source.read().split()
    with open(model.path, "w") as sink:
        sink.write(f"{epochs} {lr} {verbose} {shards} {len(rows)} {tag}")
    with open(count, "w") as sink:
        sink.write(str(len(rows) * epochs))
    return f"trained {type(epochs).__name__} {type(lr).__name__} {type(verbose).__name__} {type(shards).__name__}"


def test_the_placeholder_is_found_through_concat_and_if() -> None:
    assert uses_executor_input(parse_component(lightweight()))
    plain = lightweight()
    plain["implementation"]["container"]["args"] = ["--x", {"concat": ["a", {"inputValue": "tag"}]}]  # type: ignore[index]
    assert not uses_executor_input(parse_component(plain))
    nested = lightweight()
    nested["implementation"]["container"]["args"] = [  # type: ignore[index]
        {"if": {"cond": True, "then": [{"concat": ["--in=", {"executorInput": {}}]}]}}
    ]
    assert uses_executor_input(parse_component(nested))


def test_the_placeholder_takes_no_value() -> None:
    bad = lightweight()
    bad["implementation"]["container"]["args"] = [{"executorInput": "x"}]  # type: ignore[index]
    with pytest.raises(SpecError) as caught:
        parse_component(bad)
    assert "implementation.container.args[0].executorInput: takes no value" in str(caught.value)


def test_executor_input_types_values_and_places_files() -> None:
    component = parse_component(lightweight())
    text = executor_input(
        component,
        values={"epochs": "3", "shards": "[1,2]", "tag": "v1"},
        artifacts={"data": "/in/data/data"},
        output_paths={"model": "/out/model/data", "count": "/out/count/data", "Output": "/out/Output/data"},
        output_file="/out/executor_output.json",
    )
    document = json.loads(text)
    # Defaults are filled in as the KFP driver does; the declared types decide the JSON types.
    assert document["inputs"]["parameterValues"] == {
        "epochs": 3,
        "lr": 0.1,
        "verbose": False,
        "shards": [1, 2],
        "tag": "v1",
    }
    assert document["inputs"]["artifacts"] == {
        "data": {
            "artifacts": [
                {"name": "data", "type": {"schemaTitle": "system.Dataset"}, "uri": "/in/data/data", "metadata": {}}
            ]
        }
    }
    assert document["outputs"]["artifacts"]["model"]["artifacts"][0]["uri"] == "/out/model/data"
    assert document["outputs"]["artifacts"]["model"]["artifacts"][0]["type"] == {"schemaTitle": "system.Model"}
    assert document["outputs"]["parameters"] == {
        "count": {"outputFile": "/out/count/data"},
        "Output": {"outputFile": "/out/Output/data"},
    }
    assert document["outputs"]["outputFile"] == "/out/executor_output.json"


def test_a_value_not_of_its_type_is_refused_by_argument() -> None:
    component = parse_component(lightweight())
    with pytest.raises(SpecError) as caught:
        executor_input(
            component,
            values={"epochs": "1.5", "shards": "{}"},
            artifacts={},
            output_paths={},
            output_file="/o",
        )
    message = str(caught.value)
    assert "arguments.epochs: must be a whole number (type Integer)" in message
    assert "arguments.shards: must be JSON an array (type JsonArray)" in message


def test_whole_floats_read_as_integers() -> None:
    # KFP's IR keeps list items and integer defaults as doubles (1.0); an Integer input takes them.
    component = parse_component(lightweight())
    text = executor_input(
        component, values={"epochs": "2.0", "shards": "[]"}, artifacts={}, output_paths={}, output_file="/o"
    )
    assert json.loads(text)["inputs"]["parameterValues"]["epochs"] == 2


def test_types() -> None:
    assert is_parameter_type("String") and is_parameter_type("int") and is_parameter_type("JsonObject")
    assert not is_parameter_type("Dataset") and not is_parameter_type(None)
    assert schema_title("Model") == "system.Model"
    assert schema_title("google.VertexModel") == "google.VertexModel"
    assert schema_title("CSV") == "system.Artifact"
    assert schema_title({"Dataset": {"format": "csv"}}) == "system.Dataset"


def test_resolve_command_puts_the_json_in_the_command_and_counts_every_input_and_output() -> None:
    component = parse_component(lightweight())
    inputs_dir, outputs = default_paths(component, inputs_dir="/in", outputs_dir="/out")
    text = executor_input(
        component,
        values={"epochs": "3", "shards": "[1]"},
        artifacts={"data": "/art/data"},
        output_paths=outputs,
        output_file="/out/executor_output.json",
    )
    resolved = resolve_command(
        component,
        values={"epochs": "3", "shards": "[1]"},
        artifacts={"data": "/art/data"},
        input_paths=inputs_dir,
        output_paths=outputs,
        executor_input=text,
    )
    assert resolved.args == ("--executor_input", text, "--function_to_execute", "train")
    assert resolved.inputs_by_value == {"epochs", "shards"}
    assert resolved.inputs_by_path == {"data": "/art/data"}
    assert resolved.outputs_by_path == outputs


def test_resolve_command_without_the_json_is_refused_by_path() -> None:
    component = parse_component(lightweight())
    with pytest.raises(SpecError) as caught:
        resolve_command(
            component,
            values={"epochs": "3", "shards": "[1]"},
            artifacts={"data": "/a"},
            input_paths={},
            output_paths={},
            prefix=("spec", "steps", 0, "component"),
        )
    assert "spec.steps[0].component.implementation.container.args[1].executorInput: the component reads KFP's" in str(
        caught.value
    )


def test_round_trip_through_the_real_kfp_executor(tmp_path: Path) -> None:
    component = parse_component(lightweight())
    data = tmp_path / "in" / "data"
    data.parent.mkdir()
    data.write_text("a b c d")
    _, outputs = default_paths(component, inputs_dir=str(tmp_path / "in"), outputs_dir=str(tmp_path / "out"))
    output_file = tmp_path / "out" / "executor_output.json"
    text = executor_input(
        component,
        values={"epochs": "2", "shards": "[1,2]", "verbose": "true"},
        artifacts={"data": str(data)},
        output_paths=outputs,
        output_file=str(output_file),
    )
    Executor(executor_input=json.loads(text), function_to_execute=train).execute()
    # Artifacts land at the paths given; an OutputPath parameter in its own file; the return value in the file.
    assert Path(outputs["model"]).read_text() == "2 0.1 True [1, 2] 4 none"
    assert Path(outputs["count"]).read_text() == "8"
    assert executor_outputs(output_file.read_text(), component) == {"Output": "trained int float bool list"}


def test_executor_outputs_render_values_and_drop_undeclared_names() -> None:
    component = parse_component(lightweight())
    text = json.dumps(
        {
            "parameterValues": {"count": 3, "Output": "x", "other": 1},
            "artifacts": {"model": {"artifacts": [{"uri": "/elsewhere"}]}},
        }
    )
    assert executor_outputs(text, component) == {"count": "3", "Output": "x"}
    assert executor_outputs(json.dumps({"parameterValues": {"Output": [1, {"a": True}]}}), component) == {
        "Output": '[1,{"a":true}]'
    }
    assert executor_outputs(json.dumps({"parameters": {"count": {"intValue": 4}}}), component) == {"count": "4"}
    assert executor_outputs("", component) == {}


@pytest.mark.parametrize("text", ["not json", "[1]"])
def test_executor_outputs_refuse_what_is_not_an_executor_output(text: str) -> None:
    with pytest.raises(ValueError, match="executor output file"):
        executor_outputs(text, parse_component(lightweight()))
