"""The structural-schema rules and the small validator, on hand-written schemas, and the conversion from pydantic
JSON schema on small models: each construct a model could use, and what Kubernetes makes of it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, JsonValue

from phalanx.adapters.kubernetes.schemas import SchemaConversionError, openapi_schema
from phalanx.adapters.kubernetes.structural import check_structural, schema_at, validate_value
from phalanx.model.base import ApiModel
from phalanx.model.jobs import MemoryBytes, MilliCpu


def root(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"metadata": {"type": "object"}, **properties}}


# -- check_structural ------------------------------------------------------------------------------------------


def test_a_plain_schema_is_structural() -> None:
    schema = root(
        spec={
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "default": 1},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "cpu": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+m?$"},
                "cpu2": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "args": {"type": "array", "items": {"type": "string"}},
                "anything": {"x-kubernetes-preserve-unknown-fields": True},
            },
        }
    )
    assert check_structural(schema) == []


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({"$ref": "#/$defs/Spec"}, "keyword '$ref' is not allowed", id="ref"),
        pytest.param({"type": "object", "title": "Spec"}, "keyword 'title' is not allowed", id="title"),
        pytest.param({"properties": {}}, "spec: type must be set", id="no-type"),
        pytest.param(
            {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "array"}]}}},
            "spec.x: anyOf is allowed only as the int-or-string pattern",
            id="union-of-types",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "spec: properties and additionalProperties exclude each other",
            id="properties-and-map",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
            "additionalProperties must be a schema",
            id="additional-false",
        ),
        pytest.param({"type": "array"}, "spec: an array needs items", id="array-without-items"),
        pytest.param(
            {"type": "integer", "minimum": 0, "exclusiveMinimum": 0},
            "exclusiveMinimum must be a boolean",
            id="numeric-exclusive-minimum",
        ),
        pytest.param(
            {"type": "string", "x-kubernetes-int-or-string": True},
            "x-kubernetes-int-or-string needs type to be empty",
            id="int-or-string-with-type",
        ),
        pytest.param({"type": "integer", "default": "one"}, "default: spec: must be of type integer", id="default"),
        pytest.param({"type": "string", "enum": ["a", 1]}, "spec: must be of type string", id="enum-type"),
        pytest.param({"type": "object", "required": ["a"]}, "required names fields that are not properties", id="req"),
        pytest.param({"type": "string", "const": "x"}, "keyword 'const' is not allowed", id="const"),
        pytest.param({"type": "tuple"}, "unknown type 'tuple'", id="unknown-type"),
    ],
)
def test_each_rule_is_checked_with_its_path(spec: dict[str, Any], problem: str) -> None:
    problems = check_structural(root(spec=spec))
    assert any(problem in p for p in problems), problems


def test_the_root_must_leave_metadata_to_kubernetes() -> None:
    schema = root()
    schema["properties"]["metadata"] = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert any(p.startswith("metadata: must be exactly") for p in check_structural(schema))


def test_the_root_is_an_object_without_a_map() -> None:
    problems = check_structural({"type": "string", "additionalProperties": {"type": "string"}})
    assert "(root): type must be object" in problems
    assert "(root): additionalProperties must not be used at the root" in problems


def test_schema_at_follows_properties_and_map_values() -> None:
    schema = root(
        spec={"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    )
    assert schema_at(schema, ".spec.m.anykey") == {"type": "integer"}
    assert schema_at(schema, ".spec.missing") is None


# -- validate_value ---------------------------------------------------------------------------------------------

QUANTITY = {"x-kubernetes-int-or-string": True, "pattern": r"^[0-9.]+m?$"}


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        pytest.param(2, True, id="int"),
        pytest.param("1.5", True, id="string"),
        pytest.param("500m", True, id="millicores"),
        pytest.param(1.5, False, id="float"),  # the API server's int-or-string is integer or string only
        pytest.param(True, False, id="bool"),
        pytest.param("lots", False, id="pattern"),
        pytest.param([1], False, id="list"),
    ],
)
def test_int_or_string_reads_as_the_api_server_does(value: Any, accepted: bool) -> None:
    assert (validate_value(value, QUANTITY) == []) is accepted


def test_objects_report_missing_unknown_and_out_of_range_fields_by_path() -> None:
    schema = {
        "type": "object",
        "required": ["name", "count"],
        "properties": {
            "name": {"type": "string", "enum": ["a", "b"]},
            "count": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            "when": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    problems = validate_value({"name": "c", "count": 0, "when": "yesterday", "tags": ["x", 3], "extra": 1}, schema)
    assert problems == [
        "name: must be one of ['a', 'b'], got 'c'",
        "count: must be > 0, got 0",
        "when: 'yesterday' is not a date-time (RFC 3339)",
        "tags[1]: must be of type string, got int 3",
        "extra: unknown field (the API server prunes it or, strict, refuses it)",
    ]
    assert validate_value({"count": 1}, schema) == ["name: required field is missing"]


def test_null_fields_are_dropped_like_the_api_server_does_but_null_values_elsewhere_are_not() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert validate_value({"a": None}, schema) == []
    assert validate_value(None, {"type": "string"}) == ["(root): must not be null"]
    assert validate_value(None, {"type": "string", "nullable": True}) == []


def test_booleans_are_not_integers_and_integers_are_numbers() -> None:
    assert validate_value(True, {"type": "integer"}) != []
    assert validate_value(3, {"type": "number"}) == []
    assert validate_value("2024-05-01T10:00:00Z", {"type": "string", "format": "date-time"}) == []


# -- conversion from pydantic ---------------------------------------------------------------------------------


class Inner(ApiModel):
    """An inner object."""

    level: int = Field(default=1, ge=0)


class Sample(ApiModel):
    """A sample covering what the API models use."""

    name: str
    note: str | None = None
    inner: Inner = Field(default_factory=Inner, description="the inner object, described here")
    maybe_inner: Inner | None = None
    by_name: dict[str, Inner] = Field(default_factory=dict)
    cpu: MilliCpu | None = Field(default=None, gt=0)
    memory: MemoryBytes = Field(default=1024)
    mode: str = Field(default="a", pattern="^[ab]$")
    strictly_positive: float = Field(default=1.0, gt=0)
    tags: set[str] = Field(default_factory=set)


def converted() -> dict[str, Any]:
    return openapi_schema(Sample)


def test_references_are_inlined_and_the_property_description_wins() -> None:
    inner = converted()["properties"]["inner"]
    assert inner["type"] == "object"
    assert inner["description"] == "the inner object, described here"
    assert inner["properties"]["level"] == {"type": "integer", "default": 1, "minimum": 0}


def test_optional_fields_become_their_type_and_are_not_required() -> None:
    schema = converted()
    assert schema["required"] == ["name"]
    assert schema["properties"]["note"] == {"type": "string"}
    assert schema["properties"]["maybeInner"]["properties"]["level"]["type"] == "integer"


def test_maps_become_objects_with_additional_properties() -> None:
    by_name = converted()["properties"]["byName"]
    assert by_name["type"] == "object"
    assert by_name["additionalProperties"]["properties"]["level"]["type"] == "integer"


def test_quantities_become_int_or_string_without_bounds_or_defaults_in_held_units() -> None:
    properties = converted()["properties"]
    assert properties["cpu"]["x-kubernetes-int-or-string"] is True
    assert "type" not in properties["cpu"] and "minimum" not in properties["cpu"]
    assert properties["memory"]["x-kubernetes-int-or-string"] is True
    assert "default" not in properties["memory"]  # pydantic states it in bytes held, not in the notation written
    assert "pattern" in properties["cpu"]


def test_exclusive_bounds_use_the_openapi_3_0_boolean_form_and_titles_are_dropped() -> None:
    schema = converted()
    assert schema["properties"]["strictlyPositive"] == {
        "type": "number",
        "default": 1.0,
        "minimum": 0,
        "exclusiveMinimum": True,
    }
    assert "title" not in str(schema)
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}  # uniqueItems dropped


def test_the_converted_sample_is_structural() -> None:
    schema = converted()
    schema["properties"]["metadata"] = {"type": "object"}
    assert check_structural(schema) == []


class Unstructured(BaseModel):
    value: Inner | list[str] = Field(default_factory=list)


class Loose(BaseModel):
    """Fields a Sweep or a pipeline holds raw: any JSON value, numbers, a number or free text, a list or a string."""

    raw: JsonValue = None
    spec: dict[str, JsonValue] = Field(default_factory=dict)
    bound: int | float = Field(default=1, ge=0)
    value: int | float | str = 0
    setting: bool | int | float | str = 0
    items: str | list[JsonValue] = "x"


class Recursive(BaseModel):
    children: list[Recursive] = Field(default_factory=list)


class Free(BaseModel):
    anything: dict[str, Any] = Field(default_factory=dict)


def test_a_union_with_a_model_in_it_is_refused_naming_the_field() -> None:
    with pytest.raises(SchemaConversionError, match=r"^value: a union of \['array', 'object'\] with an object"):
        openapi_schema(Unstructured)


def test_numbers_are_one_type_and_other_unions_of_json_values_are_kept_as_written() -> None:
    properties = openapi_schema(Loose)["properties"]
    any_value = {"x-kubernetes-preserve-unknown-fields": True}
    assert properties["raw"] == any_value  # JsonValue: the empty schema
    assert properties["spec"] == {"type": "object", "additionalProperties": any_value}
    assert properties["bound"] == {"type": "number", "default": 1, "minimum": 0}
    # A fraction must stay a fraction: int-or-string would refuse 0.5 (quantities only: their strings have units).
    assert properties["value"] == properties["setting"] == properties["items"] == any_value
    loose = {"value": 0.5, "setting": True, "items": [1, {"a": None}], "raw": [1]}
    assert validate_value(loose, openapi_schema(Loose)) == []


def test_a_loose_schema_is_structural() -> None:
    schema = openapi_schema(Loose)
    assert check_structural(schema) == []


def test_a_recursive_model_is_refused() -> None:
    with pytest.raises(SchemaConversionError, match="refers to itself"):
        openapi_schema(Recursive)


def test_free_form_mappings_keep_their_contents() -> None:
    assert openapi_schema(Free)["properties"]["anything"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
