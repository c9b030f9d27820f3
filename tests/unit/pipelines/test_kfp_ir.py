"""KFP v2 IR -> Pipeline: pipelines compiled here by the real kfp SDK, converted, and checked as the door checks them.

No ``from __future__ import annotations``: the kfp SDK reads the components' annotations as objects.
"""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Model, Output
from tests.unit.pipelines.builders import accepted

from phalanx.core.pipelines.kfp_executor import uses_executor_input
from phalanx.core.pipelines.kfp_ir import pipeline_from_ir
from phalanx.model.errors import SpecError
from phalanx.model.kfp_component import parse_component
from phalanx.model.kfp_ir import is_kfp_ir

IMAGE = "python:3.11"


def compiled(pipeline: Any, tmp_path: Path) -> dict[str, Any]:
    target = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, str(target))
    document = yaml.safe_load(target.read_text())
    assert is_kfp_ir(document)
    return document


def steps_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["name"]: step for step in document["spec"]["steps"]}


def refusals(document: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        pipeline_from_ir(document)
    return [f"{error.path}: {error.message}" for error in caught.value.errors]


# ---- components ------------------------------------------------------------------------------------------


@dsl.container_component
def make_data(rows: int, out: Output[Dataset], count: dsl.OutputPath(int)):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=["sh", "-c"],
        args=[
            f"seq {rows} > {out.path}; echo {rows} > {count}",
            dsl.ConcatPlaceholder(["--rows=", rows]),
            dsl.IfPresentPlaceholder(input_name="rows", then=["--given"], else_=["--none"]),
        ],
    )


@dsl.container_component
def train(data: Input[Dataset], lr: float, model: Output[Model], tag: str = "v1"):
    return dsl.ContainerSpec(
        image=IMAGE, command=["train", "--data", data.path, "--lr", lr, f"--tag={tag}", "--model", model.path]
    )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def add(a: int, b: int = 2) -> int:
    return a + b


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def total(xs: list) -> int:
    return sum(xs)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def shards(n: int) -> list:
    return list(range(n))


def test_container_components_with_parameters_and_artifacts(tmp_path: Path) -> None:
    @dsl.pipeline(name="Demo Pipe", description="d")
    def pipe(rows: int = 10, lr: float = 1.0, flag: bool = True, names: list = [1, 2], opts: dict = {"a": 1.5}):  # noqa: B006
        data = make_data(rows=rows)
        train(data=data.outputs["out"], lr=lr).set_caching_options(False).set_retry(num_retries=3)

    document = pipeline_from_ir(compiled(pipe, tmp_path))
    pipeline = accepted(document)
    assert pipeline.metadata.name == "demo-pipe"
    assert document["metadata"]["annotations"]["phalanx.dev/converted-from"] == "kfp PipelineSpec 2.1.0"
    # Types from the IR, defaults as Phalanx values: 10 not 10.0, a Float keeps its point, whole numbers in JSON
    # lose the .0 the IR adds.
    assert document["spec"]["parameters"] == [
        {"name": "flag", "type": "Boolean", "default": "true"},
        {"name": "lr", "type": "Float", "default": "1.0"},
        {"name": "names", "type": "JsonArray", "default": "[1,2]"},
        {"name": "opts", "type": "JsonObject", "default": '{"a":1.5}'},
        {"name": "rows", "type": "Integer", "default": "10"},
    ]
    steps = steps_of(document)
    assert steps["make-data"]["arguments"] == {"rows": "{{params.rows}}"}
    assert steps["make-data"]["cache"] is True
    assert steps["train"]["arguments"] == {"data": "{{steps.make-data.outputs.out}}", "lr": "{{params.lr}}"}
    assert steps["train"]["after"] == ["make-data"]
    assert steps["train"]["retries"] == 3
    assert steps["train"]["cache"] is False
    component = steps["make-data"]["component"]["inline"]
    assert component["inputs"] == [{"name": "rows", "type": "Integer"}]
    assert component["outputs"] == [{"name": "count", "type": "Integer"}, {"name": "out", "type": "Dataset"}]
    container = component["implementation"]["container"]
    assert container["command"] == ["sh", "-c"]
    assert container["args"] == [
        {
            "concat": [
                "seq ",
                {"inputValue": "rows"},
                " > ",
                {"outputPath": "out"},
                "; echo ",
                {"inputValue": "rows"},
                " > ",
                {"outputPath": "count"},
            ]
        },
        {"concat": ["--rows=", {"inputValue": "rows"}]},
        {"if": {"cond": {"isPresent": "rows"}, "then": ["--given"], "else": ["--none"]}},
    ]
    train_args = steps["train"]["component"]["inline"]["implementation"]["container"]["command"]
    assert train_args == [
        "train",
        "--data",
        {"inputPath": "data"},
        "--lr",
        {"inputValue": "lr"},
        {"concat": ["--tag=", {"inputValue": "tag"}]},
        "--model",
        {"outputPath": "model"},
    ]
    assert steps["train"]["component"]["inline"]["inputs"][1] == {
        "name": "tag",
        "type": "String",
        "default": "v1",
        "optional": True,
    }


def test_parallel_for_over_a_literal_a_parameter_and_an_output_with_fan_in(tmp_path: Path) -> None:
    @dsl.pipeline(name="loops")
    def pipe(n: int = 3, values: list = [4, 5]):  # noqa: B006
        made = shards(n=n)
        with dsl.ParallelFor([1, 2, 3]) as i:
            literal = add(a=i)
        with dsl.ParallelFor(values, parallelism=2) as v:
            add(a=v, b=n)
        with dsl.ParallelFor(made.output) as s:
            add(a=s)
        total(xs=dsl.Collected(literal.output))

    document = pipeline_from_ir(compiled(pipe, tmp_path))
    accepted(document)
    steps = steps_of(document)
    assert steps["add"]["parallelFor"] == {"items": [1, 2, 3]}
    assert steps["add"]["arguments"] == {"a": "{{item}}"}
    assert steps["add-2"]["parallelFor"] == {"items": "{{params.values}}"}
    assert steps["add-2"]["arguments"] == {"a": "{{item}}", "b": "{{params.n}}"}
    assert steps["add-3"]["parallelFor"] == {"items": "{{steps.shards.outputs.Output}}"}
    assert steps["add-3"]["after"] == ["shards"]
    # dsl.Collected: the fan-in of the loop's step, the JSON list of its outputs.
    assert steps["total"]["arguments"] == {"xs": "{{steps.add.outputs.Output}}"}
    assert steps["total"]["after"] == ["add"]


@pytest.mark.filterwarnings("ignore:dsl.Condition is deprecated")  # still written by kfp v1-era pipelines
def test_if_else_and_condition_become_when(tmp_path: Path) -> None:
    @dsl.pipeline(name="conditions")
    def pipe(name: str = "n", threshold: float = 0.5):
        first = add(a=1)
        with dsl.If(first.output > 5):
            add(a=2)
        with dsl.Else():
            add(a=3)
        with dsl.Condition(name == "n"):
            add(a=4)
        with dsl.If(threshold >= 0.25), dsl.ParallelFor([7, 8]) as item:
            add(a=item)

    document = pipeline_from_ir(compiled(pipe, tmp_path))
    accepted(document)
    whens = {name: step.get("when") for name, step in steps_of(document).items()}
    assert whens == {
        "add": None,
        "add-2": "{{steps.add.outputs.Output}} > 5",
        "add-3": "{{steps.add.outputs.Output}} <= 5",  # dsl.Else: !(a > 5)
        "add-4": "{{params.name}} == 'n'",
        "add-5": "{{params.threshold}} >= 0.25",
    }
    assert steps_of(document)["add-5"]["parallelFor"] == {"items": [7, 8]}
    assert steps_of(document)["add-2"]["after"] == ["add"]


def test_a_lightweight_component_reads_the_executor_input(tmp_path: Path) -> None:
    @dsl.pipeline(name="light")
    def pipe(a: int = 1):
        add(a=a)

    document = pipeline_from_ir(compiled(pipe, tmp_path))
    pipeline = accepted(document)
    step = pipeline.spec.steps[0]
    assert step.component is not None and step.component.inline is not None
    component = parse_component(step.component.inline)
    assert uses_executor_input(component)
    container = component.implementation.container
    assert container.args is not None and container.args[0] == "--executor_input"
    assert step.component.inline["implementation"]["container"]["args"][1] == {"executorInput": {}}  # type: ignore[index]
    assert "kfp.dsl.executor_main" in str(container.command)
    assert [(i.name, i.type, i.default) for i in component.inputs] == [("a", "Integer", None), ("b", "Integer", "2")]
    assert [(o.name, o.type) for o in component.outputs] == [("Output", "Integer")]


def test_a_sub_pipeline_used_once_is_flattened_its_output_wired_through(tmp_path: Path) -> None:
    @dsl.pipeline
    def inner(x: int) -> int:
        first = add(a=x)
        return add(a=first.output).output

    @dsl.pipeline(name="outer")
    def outer(n: int = 1):
        sub = inner(x=n).set_caching_options(False)
        add(a=sub.output, b=5)

    document = pipeline_from_ir(compiled(outer, tmp_path))
    accepted(document)
    steps = steps_of(document)
    # Its task named like one outside takes the sub-pipeline's name first; caching off on it is off inside.
    assert steps["inner-add"]["arguments"] == {"a": "{{params.n}}"}
    assert steps["inner-add"]["cache"] is False and steps["add-2"]["cache"] is False
    assert steps["add-2"]["arguments"] == {"a": "{{steps.inner-add.outputs.Output}}"}
    assert steps["add"]["arguments"] == {"a": "{{steps.add-2.outputs.Output}}", "b": "5"}
    assert steps["add"]["cache"] is True
    assert steps["add"]["after"] == ["add-2", "inner-add"]


# ---- refusals by path ------------------------------------------------------------------------------------


def test_importer_exit_handler_elif_and_nested_loops_are_refused_by_path(tmp_path: Path) -> None:
    @dsl.component(base_image=IMAGE, install_kfp_package=False)
    def notify(status: dsl.PipelineTaskFinalStatus) -> None:
        print(status.state)

    @dsl.pipeline(name="refused")
    def pipe(n: int = 1):
        dsl.importer(artifact_uri="gs://bucket/data.csv", artifact_class=Dataset)
        with dsl.ExitHandler(notify()):
            first = add(a=n)
            with dsl.If(first.output > 1):
                add(a=1)
            with dsl.Elif(first.output > 0):
                add(a=2)
            with dsl.ParallelFor([1, 2]) as i, dsl.ParallelFor([3, 4]) as j:
                add(a=i, b=j)

    found = refusals(compiled(pipe, tmp_path))
    text = "\n".join(found)
    assert "deploymentSpec.executors.exec-importer.importer: dsl.importer is not supported" in text
    assert "root.dag.tasks.notify.triggerPolicy.strategy: 'ALL_UPSTREAM_TASKS_COMPLETED': tasks that run after" in text
    assert "root.dag.tasks.notify.inputs.parameters.status.taskFinalStatus: exit handlers" in text
    assert ".triggerPolicy.condition: " in text and "(dsl.Elif) is not supported" in text
    assert any(
        line.startswith("components.comp-for-loop-")
        and ".parameterIterator: a ParallelFor inside a ParallelFor" in line
        for line in found
    )


def test_a_loop_body_whose_tasks_feed_each_other_is_refused(tmp_path: Path) -> None:
    @dsl.pipeline(name="chained")
    def pipe():
        with dsl.ParallelFor([1, 2]) as i:
            first = add(a=i)
            add(a=first.output)

    found = refusals(compiled(pipe, tmp_path))
    assert len(found) == 1
    assert found[0].startswith("components.comp-for-loop-2.dag.tasks.add-2.inputs.parameters.a.taskOutputParameter:")
    assert "reads an output of 'add' inside the same ParallelFor" in found[0]


def test_item_fields_resources_run_placeholders_and_artifact_lists_are_refused(tmp_path: Path) -> None:
    @dsl.component(base_image=IMAGE, install_kfp_package=False)
    def merge(parts: Input[list[Dataset]]) -> int:
        return len(parts)

    @dsl.component(base_image=IMAGE, install_kfp_package=False)
    def part(out: Output[Dataset]):
        open(out.path, "w").close()

    @dsl.component(base_image=IMAGE, install_kfp_package=False)
    def say(text: str) -> str:
        return text

    @dsl.pipeline(name="more")
    def pipe():
        with dsl.ParallelFor([{"a": 1}, {"a": 2}]) as item:
            add(a=item.a)
        add(a=1).set_cpu_limit("2")
        say(text=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
        with dsl.ParallelFor([1, 2]):
            made = part()
        merge(parts=dsl.Collected(made.outputs["out"]))

    text = "\n".join(refusals(compiled(pipe, tmp_path)))
    assert "inputs.parameters.a.parameterExpressionSelector: selecting a field of a value" in text
    assert "deploymentSpec.executors.exec-add-2.container.resources: container resources are not supported" in text
    assert "root.dag.tasks.say.inputs.parameters.text.runtimeValue.constant: '{{$.pipeline_job_name}}'" in text
    assert "components.comp-merge.inputDefinitions.artifacts.parts.isArtifactList: lists of artifacts" in text


def test_hand_edited_fields_and_placeholders_are_refused_by_path(tmp_path: Path) -> None:
    @dsl.pipeline(name="edited")
    def pipe(rows: int = 1):
        data = make_data(rows=rows)
        train(data=data.outputs["out"], lr=0.1)

    document = compiled(pipe, tmp_path)
    document["root"]["dag"]["tasks"]["train"]["cachingOptions"]["cacheKey"] = "mine"
    document["root"]["dag"]["tasks"]["make-data"]["mystery"] = 1
    document["deploymentSpec"]["executors"]["exec-train"]["container"]["args"] = ["{{$.inputs.artifacts['data'].uri}}"]
    document["platforms"] = {}
    document["root"]["inputDefinitions"]["artifacts"] = {"seed": {"artifactType": {"schemaTitle": "system.Dataset"}}}
    assert sorted(refusals(document)) == sorted(
        [
            "platforms: PipelineSpec field 'platforms' is not supported; remove it",
            "root.inputDefinitions.artifacts.seed: pipeline-level artifact inputs are not supported; pass a path "
            "or URI as a string parameter",
            "root.dag.tasks.make-data.mystery: task field 'mystery' is not supported; remove it",
            "root.dag.tasks.train.cachingOptions.cacheKey: cachingOptions field 'cacheKey' is not supported; remove it",
            "deploymentSpec.executors.exec-train.container.args[0]: placeholder \"{{$.inputs.artifacts['data'].uri}}\" "
            "is not supported: artifact URIs and metadata belong to KFP's artifact store; read the artifact's .path "
            "instead",
        ]
    )


def test_a_placeholder_naming_no_input_is_refused_at_its_executor(tmp_path: Path) -> None:
    @dsl.pipeline(name="dangling")
    def pipe(rows: int = 1):
        make_data(rows=rows)

    document = compiled(pipe, tmp_path)
    document["deploymentSpec"]["executors"]["exec-make-data"]["container"]["command"] = [
        "echo",
        "{{$.inputs.parameters['rowz']}}",
    ]
    found = refusals(document)
    assert found == [
        "deploymentSpec.executors.exec-make-data: as a component, implementation.container.command[1].inputValue: "
        "the component has no input 'rowz'; did you mean 'rows'?"
    ]


def test_long_and_odd_task_names_become_step_names(tmp_path: Path) -> None:
    @dsl.component(base_image=IMAGE, install_kfp_package=False)
    def a_component_with_a_very_long_name_for_its_task(x: int) -> int:
        return x

    @dsl.pipeline(name="123 names!")
    def pipe():
        a_component_with_a_very_long_name_for_its_task(x=1)
        a_component_with_a_very_long_name_for_its_task(x=2)

    document = pipeline_from_ir(compiled(pipe, tmp_path))
    accepted(document)
    names = [step["name"] for step in document["spec"]["steps"]]
    assert len(set(names)) == 2 and all(len(name) <= 40 for name in names)
    assert document["metadata"]["name"] == "p-123-names"


def test_the_converted_document_is_plain_json() -> None:
    # What `phalanx convert` prints and what the store keeps: JSON values only.
    source = Path(__file__).parents[3] / "examples" / "pipelines" / "kfp_v2_pipeline.yaml"
    document = pipeline_from_ir(yaml.safe_load(source.read_text()))
    assert json.loads(json.dumps(document)) == document
    accepted(document)
    # Steps come upstream first, whatever order the IR lists its tasks in.
    assert [step["name"] for step in document["spec"]["steps"]] == ["make-numbers", "scaled-sum", "report", "report-2"]
