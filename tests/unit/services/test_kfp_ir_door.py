"""A compiled kfp v2 pipeline through the one door: stored as the Pipeline it becomes, runnable by a PipelineRun of
the same submission, refused by IR path with nothing stored; `convert` prints it; the DSL's documents pass too."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.core.pipelines.kfp_executor import uses_executor_input
from phalanx.model.errors import SpecError
from phalanx.model.kfp_component import parse_component
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.services.operations import Operations, convert_documents, validate_documents
from support.memory_backend import MemoryBackend

EXAMPLES = Path(__file__).parents[3] / "examples" / "pipelines"
IR = EXAMPLES / "kfp_v2_pipeline.yaml"


def ir() -> dict[str, Any]:
    [document] = read_documents(IR)
    return document


def run(name: str = "demo-1", **arguments: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": name},
        "spec": {"pipelineRef": {"name": "kfp-v2-demo"}, "arguments": arguments},
    }


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def ops(backend: MemoryBackend) -> Operations:
    return Operations(backend)


def test_the_ir_file_is_stored_as_its_pipeline_with_a_run_of_it(ops: Operations) -> None:
    ops.submit([ir(), run(count="20")], source=str(IR))
    pipeline = ops.get_pipeline("default", "kfp-v2-demo")
    assert pipeline.metadata.annotations["phalanx.dev/converted-from"] == "kfp PipelineSpec 2.1.0"
    assert [step.name for step in pipeline.spec.steps] == ["make-numbers", "scaled-sum", "report", "report-2"]
    lightweight = [
        step.name
        for step in pipeline.spec.steps
        if step.component and step.component.inline and uses_executor_input(parse_component(step.component.inline))
    ]
    assert lightweight == ["scaled-sum", "report", "report-2"]
    stored_run = ops.get_pipelinerun("default", "demo-1")
    assert stored_run.spec.arguments == {"count": "20"}


def test_submit_n_moves_the_converted_pipeline(ops: Operations) -> None:
    ops.submit([ir()], namespace="team")
    assert ops.get_pipeline("team", "kfp-v2-demo").metadata.namespace == "team"


def test_a_run_argument_of_the_wrong_type_is_refused_at_the_run(ops: Operations, backend: MemoryBackend) -> None:
    with pytest.raises(SpecError) as caught:
        ops.submit([ir(), run(count="many")])
    assert [(e.path, e.message) for e in caught.value.errors] == [
        ("spec.arguments.count", "document 2 (pipelinerun/demo-1): must be a whole number (type Integer), got 'many'")
    ]
    assert not [call for call in backend.calls if call[0] == "create"]


def test_an_unsupported_ir_feature_is_refused_by_path_and_nothing_is_stored(
    ops: Operations, backend: MemoryBackend
) -> None:
    document = ir()
    document["deploymentSpec"]["executors"]["exec-make-numbers"]["container"]["resources"] = {"cpuLimit": 2}
    document["root"]["dag"]["tasks"]["report"]["triggerPolicy"] = {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    with pytest.raises(SpecError) as caught:
        ops.submit([document, run()], source="pipeline.yaml")
    assert caught.value.source == "pipeline.yaml"
    assert {e.path for e in caught.value.errors} == {
        "deploymentSpec.executors.exec-make-numbers.container.resources",
        "root.dag.tasks.report.triggerPolicy.strategy",
    }
    assert all(e.message.startswith("document 1: ") for e in caught.value.errors)
    assert not [call for call in backend.calls if call[0] == "create"]


def test_a_kfp_kubernetes_platform_document_is_refused() -> None:
    with pytest.raises(SpecError) as caught:
        validate_documents([ir(), {"platforms": {"kubernetes": {}}}], builtin_jobtypes())
    assert [e.path for e in caught.value.errors] == ["platforms"]
    assert "kfp-kubernetes" in caught.value.errors[0].message


def test_convert_prints_the_pipeline_and_leaves_the_ir_as_it_was() -> None:
    document = ir()
    before = copy.deepcopy(document)
    [converted, other] = convert_documents([document, run()], builtin_jobtypes(), source=str(IR))
    assert document == before
    assert converted["kind"] == "Pipeline" and converted["metadata"]["name"] == "kfp-v2-demo"
    assert other == run()
    # What convert prints is itself a file submit accepts, with no trace of KFP left to read.
    validate_documents([yaml.safe_load(yaml.safe_dump(converted))], builtin_jobtypes())


def test_the_dsl_example_and_the_v1_example_pass_the_door(ops: Operations) -> None:
    spec = importlib.util.spec_from_file_location("dsl_pipeline", EXAMPLES / "dsl_pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pipeline = module.build()
    pipeline.submit(ops, arguments={"count": 20})
    assert ops.get_pipeline("default", "dsl-demo").spec.steps[1].parallel_for is not None
    assert ops.get_pipelinerun("default", "dsl-demo-run").spec.arguments == {"count": "20"}
    v1 = EXAMPLES / "v1_components.yaml"
    ops.submit(read_documents(v1), source=str(v1), component_dir=v1.parent)
    assert ops.get_pipeline("default", "v1-components").spec.steps[0].component is not None
