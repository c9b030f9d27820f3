"""The rules a CRD's OpenAPI v3 schema must keep, and a small validator that reads a schema as the API server does.

Kubernetes serves a CustomResourceDefinition only if its schema is *structural*: every field says its type,
nothing is left to ``$ref`` or to a union of types, and the root's ``metadata`` is Kubernetes' own. Only then
can the API server prune unknown fields and apply defaults. ``check_structural`` lists every rule a schema
breaks, by path, so generated CRDs are checked in unit tests, long before a real API server sees them. It
checks the rules of ``k8s.io/apiextensions-apiserver`` (pkg/apiserver/schema validation and the CRD API
validation) that our generator could break, plus our own: no titles, no ``$ref``.

``validate_value`` reads a document against such a schema the way the API server does, for the checks we
rely on: types (``integer`` is not a boolean; int-or-string is an integer or a string), enums, bounds with
OpenAPI v3.0's boolean ``exclusiveMinimum``, lengths, patterns, required fields, and unknown fields (which the
API server prunes, and refuses under kubectl's default strict field validation). Null fields are skipped: the
API server drops them before validating, and the root's ``metadata`` is left alone, as Kubernetes checks it
itself. It checks sample documents and defaults; it is not a full OpenAPI validator. A JSON Schema library
(``jsonschema``) would read the same schemas differently: it knows neither OpenAPI v3.0's boolean
``exclusiveMinimum`` nor ``nullable``, int-or-string or pruning, and it would be one more dependency.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

# JSONSchemaProps fields (apiextensions.k8s.io/v1) that the generator may emit; anything else is a mistake.
ALLOWED_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "nullable",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "anyOf",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    }
)
TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]


def check_structural(schema: Mapping[str, Any]) -> list[str]:
    """Every structural-schema rule that ``schema`` (a CRD version's ``openAPIV3Schema``) breaks.

    Returns:
        Problems as ``path: what is wrong``; empty when the schema is structural.
    """
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("(root): type must be object")
    if "additionalProperties" in schema:
        problems.append("(root): additionalProperties must not be used at the root")
    properties = schema.get("properties", {})
    for name in ("apiVersion", "kind"):
        if name in properties and properties[name].get("type") != "string":
            problems.append(f"{name}: type must be string")
    if "metadata" in properties and dict(properties["metadata"]) != {"type": "object"}:
        problems.append("metadata: must be exactly {type: object}; Kubernetes owns the metadata schema")
    _check_node(schema, "", problems, root=True)
    return problems


def _check_node(node: Mapping[str, Any], path: str, problems: list[str], *, root: bool = False) -> None:
    where = path or "(root)"
    for key in node:
        if key not in ALLOWED_KEYWORDS:
            problems.append(f"{where}: keyword {key!r} is not allowed in a structural schema")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    kind = node.get("type")
    if kind is None and not (int_or_string or preserve):
        problems.append(f"{where}: type must be set (or x-kubernetes-int-or-string / preserve-unknown-fields)")
    if kind is not None and kind not in TYPES:
        problems.append(f"{where}: unknown type {kind!r}")
    if int_or_string:
        if kind is not None:
            problems.append(f"{where}: x-kubernetes-int-or-string needs type to be empty")
        if preserve:
            problems.append(f"{where}: x-kubernetes-int-or-string and preserve-unknown-fields exclude each other")
    if "anyOf" in node and not (int_or_string and node["anyOf"] == _INT_OR_STRING_ANY_OF):
        problems.append(f"{where}: anyOf is allowed only as the int-or-string pattern [integer, string]")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: properties and additionalProperties exclude each other")
    if node.get("additionalProperties") is False or node.get("additionalProperties") is True:
        problems.append(f"{where}: additionalProperties must be a schema, not a boolean")
    if kind == "array" and "items" not in node:
        problems.append(f"{where}: an array needs items")
    if kind not in (None, "object") and ("properties" in node or "additionalProperties" in node):
        problems.append(f"{where}: only objects have properties")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{where}: {key} must be a boolean (OpenAPI v3.0), got {node[key]!r}")
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except re.error as err:
            problems.append(f"{where}: pattern does not compile: {err}")
    required = node.get("required", [])
    missing = [name for name in required if name not in node.get("properties", {})]
    if missing:
        problems.append(f"{where}: required names fields that are not properties: {missing}")
    if "enum" in node:
        for value in node["enum"]:
            problems.extend(
                validate_value(value, {k: v for k, v in node.items() if k not in ("enum", "default")}, where)
            )
    if "default" in node:
        if root or path == "metadata" or path.startswith("metadata."):
            problems.append(f"{where}: defaults are not allowed here")
        problems.extend(f"default: {p}" for p in validate_value(node["default"], node, where))
    for name, child in node.get("properties", {}).items():
        _check_node(child, f"{path}.{name}" if path else name, problems)
    if isinstance(node.get("additionalProperties"), Mapping):
        _check_node(node["additionalProperties"], f"{path}.*", problems)
    if isinstance(node.get("items"), Mapping):
        _check_node(node["items"], f"{path}[]", problems)


def schema_at(schema: Mapping[str, Any], json_path: str) -> Mapping[str, Any] | None:
    """The schema node a simple JSONPath such as ``.status.phase`` or ``.spec.replicas.worker`` points to.

    Returns:
        The node, or None when the path leaves the schema. Map keys match ``additionalProperties``.
    """
    node: Mapping[str, Any] = schema
    for part in [p for p in json_path.split(".") if p]:
        properties = node.get("properties", {})
        if part in properties:
            node = properties[part]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return None
    return node


def validate_value(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """What the API server would refuse in ``value`` under ``schema``.

    Returns:
        Problems as ``path: what is wrong``; empty when the value is accepted.
    """
    problems: list[str] = []
    _validate(value, schema, path, problems)
    return problems


def _validate(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    where = path or "(root)"
    if value is None:
        if not schema.get("nullable"):
            problems.append(f"{where}: must not be null")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            problems.append(f"{where}: must be an integer or a string, got {value!r}")
            return
    elif schema.get("type") is None:
        return  # x-kubernetes-preserve-unknown-fields without a type: anything goes
    elif not _has_type(value, schema["type"]):
        problems.append(f"{where}: must be of type {schema['type']}, got {type(value).__name__} {value!r}")
        return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: must be one of {schema['enum']}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, where, problems)
    if isinstance(value, str):
        _validate_string(value, schema, where, problems)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            problems.append(f"{where}: has {len(value)} items, outside the allowed range")
        for index, item in enumerate(value):
            _validate(item, schema.get("items", {}), f"{path}[{index}]", problems)
    if isinstance(value, dict):
        _validate_object(value, schema, path, problems)


def _has_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _validate_number(value: float, schema: Mapping[str, Any], where: str, problems: list[str]) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if value < low or (schema.get("exclusiveMinimum") and value == low):
            sign = ">" if schema.get("exclusiveMinimum") else ">="
            problems.append(f"{where}: must be {sign} {low}, got {value}")
    if "maximum" in schema:
        high = schema["maximum"]
        if value > high or (schema.get("exclusiveMaximum") and value == high):
            sign = "<" if schema.get("exclusiveMaximum") else "<="
            problems.append(f"{where}: must be {sign} {high}, got {value}")


def _validate_string(value: str, schema: Mapping[str, Any], where: str, problems: list[str]) -> None:
    if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
        problems.append(f"{where}: length {len(value)} is outside the allowed range")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{where}: {value!r} is not a date-time (RFC 3339)")


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    where = path or "(root)"
    present = {key for key, item in value.items() if item is not None}
    for name in schema.get("required", []):
        if name not in present:
            problems.append(f"{_join(path, name)}: required field is missing")
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if item is None:
            continue  # dropped by the API server before validation
        if not path and key == "metadata":
            continue  # the root's metadata is Kubernetes' own ObjectMeta, checked by the API server itself
        if properties is not None and key in properties:
            _validate(item, properties[key], _join(path, key), problems)
        elif isinstance(extra, Mapping):
            _validate(item, extra, _join(path, key), problems)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{_join(path, key)}: unknown field (the API server prunes it or, strict, refuses it)")
    if len(present) < schema.get("minProperties", 0):
        problems.append(f"{where}: needs at least {schema['minProperties']} entries")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
