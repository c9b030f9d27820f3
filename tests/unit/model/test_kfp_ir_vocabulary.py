"""model.kfp_ir: IR command-line items as KFP v1 ones, IR values as Phalanx strings, IR types."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.model.errors import FieldError
from phalanx.model.kfp_ir import artifact_type, convert_item, is_kfp_ir, parameter_type, render_value


def converted(item: Any) -> tuple[Any, list[str]]:
    problems: list[FieldError] = []
    result = convert_item(item, "x", problems)
    return result, [f"{p.path}: {p.message}" for p in problems]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("plain", "plain"),
        ("{{$}}", {"executorInput": {}}),
        ("{{$.inputs.parameters['a']}}", {"inputValue": "a"}),
        ("--in={{$.inputs.artifacts['d'].path}}", {"concat": ["--in=", {"inputPath": "d"}]}),
        (
            "{{$.outputs.artifacts['m'].path}}:{{$.outputs.parameters['n'].output_file}}",
            {"concat": [{"outputPath": "m"}, ":", {"outputPath": "n"}]},
        ),
        (
            '{"Concat": ["a", {"IfPresent": {"InputName": "b", "Then": "{{$.inputs.parameters[\'b\']}}"}}]}',
            {"concat": ["a", {"if": {"cond": {"isPresent": "b"}, "then": [{"inputValue": "b"}]}}]},
        ),
        (
            '{"IfPresent": {"InputName": "b", "Then": ["--b"], "Else": ["--no-b"]}}',
            {"if": {"cond": {"isPresent": "b"}, "then": ["--b"], "else": ["--no-b"]}},
        ),
        ('{"Concat": [broken', '{"Concat": [broken'),  # not JSON: a string like any other
    ],
)
def test_items(item: str, expected: Any) -> None:
    assert converted(item) == (expected, [])


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ("{{$.inputs.artifacts['d'].uri}}", "artifact URIs and metadata belong to KFP's artifact store"),
        ("{{$.pipeline_job_name}}", "run-level values (job name, task name, pipeline root...)"),
        ('{"IfPresent": {"InputName": "b", "Then": [], "Otherwise": []}}', "x.IfPresent.Otherwise: IfPresent field"),
        ('{"Concat": [1]}', "x.Concat[0]: not a placeholder Phalanx knows: 1"),
        (3, "x: a command-line item is a string, got 3"),
    ],
)
def test_refused_items(item: Any, problem: str) -> None:
    _, problems = converted(item)
    assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (10.0, "Integer", "10"),
        (1.0, "Float", "1.0"),
        (2, "Float", "2.0"),
        (0.25, "Float", "0.25"),
        (True, "Boolean", "true"),
        ("a b", "String", "a b"),
        ([1.0, 2.5, {"k": 3.0}], "JsonArray", '[1,2.5,{"k":3}]'),
        ({"a": [1.0]}, None, '{"a":[1]}'),
    ],
)
def test_values(value: Any, kind: str | None, text: str) -> None:
    assert render_value(value, kind) == text


def test_types() -> None:
    problems: list[FieldError] = []
    assert parameter_type({"parameterType": "STRUCT"}, "p", problems) == "JsonObject"
    assert parameter_type({"type": "INT"}, "p", problems) == "Integer"  # the deprecated field
    assert parameter_type({"parameterType": "TASK_FINAL_STATUS"}, "p", problems) is None
    assert parameter_type({}, "q", problems) is None
    assert [p.path for p in problems] == ["p.parameterType", "q.parameterType"]
    assert artifact_type({"artifactType": {"schemaTitle": "system.Model"}}) == "Model"
    assert artifact_type({"artifactType": {"schemaTitle": "google.VertexDataset"}}) == "google.VertexDataset"
    assert artifact_type({}) == "Artifact"
    assert is_kfp_ir({"pipelineInfo": {}, "root": {}}) and not is_kfp_ir({"kind": "Pipeline"}) and not is_kfp_ir([])
