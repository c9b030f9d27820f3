"""Pydantic JSON schema → the structural OpenAPI v3 schema a Kubernetes CustomResourceDefinition requires.

The CRD schemas are generated, never written by hand, so they cannot drift from the models. We take the
*validation*-mode JSON schema (``model_json_schema(by_alias=True, mode="validation")``): a CRD schema checks
what clients write, and validation mode describes exactly that — what the model accepts — while
serialization mode describes what Phalanx writes back (quantities as strings only, every default filled in).
Where a field accepts more than it holds, the model says so with ``json_schema_input_type`` (the quantity
types in ``model.jobs``), so the schema shows the input, not the integer held.

Kubernetes accepts only *structural* schemas (see ``structural.check_structural``), so the conversion:

- inlines every ``$ref`` (the referencing property's own description and default win over the definition's);
- turns ``Optional[X]`` (``anyOf: [X, {type: null}]``) into ``X``, not required: the API server drops null
  fields before validation, and an absent field is ``None`` to the model;
- turns a union of integer and string (and number, when the string has a pattern: a quantity's units) into
  ``x-kubernetes-int-or-string: true``, keeping the string pattern: Kubernetes' quantity convention. A
  fractional *number* such as ``cpu: 1.5`` is then refused by the API server; write ``"1.5"`` or ``"1500m"``.
  Numeric bounds and defaults on such fields are dropped, because pydantic states them in the units held
  (millicores, bytes), not the units written;
- turns a union of integer and number (``int | float``) into ``type: number``, which takes both;
- turns any value (pydantic's ``JsonValue``: a Sweep's trial spec, a pipeline step's TrainingJob spec) and any
  other union of JSON types (a parameter value that is a number or free text; a list or a reference string)
  into ``x-kubernetes-preserve-unknown-fields: true`` with no type: the API server keeps such a value as
  written, and the model checks it where Phalanx reads it (the submission door, and every read back). A union
  with a model in it (an object of fixed fields) is refused instead: kept raw, it would lose its defaults;
- turns ``const`` into a one-value ``enum``, ``exclusiveMinimum: N`` into ``minimum: N`` with
  ``exclusiveMinimum: true`` (OpenAPI v3.0 form), drops ``title`` and ``additionalProperties: false`` (the
  API server prunes unknown fields, and rejects them under kubectl's default strict field validation);
- keeps maps (``additionalProperties`` schema), arrays, enums, descriptions, formats Kubernetes knows, and
  defaults (which the API server applies), after checking each default against its own schema.

Anything else a model might produce — a union with a model in it, a tuple, an unknown keyword — raises
``SchemaConversionError`` naming the field, so a model change that cannot be served on Kubernetes fails the
unit tests instead of the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from phalanx.adapters.kubernetes.structural import validate_value

# Formats the Kubernetes API server understands (k8s.io/kube-openapi strfmt); others are dropped.
KNOWN_FORMATS = frozenset(
    {
        "bsonobjectid",
        "byte",
        "cidr",
        "date",
        "date-time",
        "datetime",
        "double",
        "duration",
        "email",
        "float",
        "hostname",
        "int32",
        "int64",
        "ipv4",
        "ipv6",
        "mac",
        "password",
        "uri",
        "uuid",
    }
)
# Keywords copied as they are (after their values are converted where they hold schemas).
_PLAIN_KEYWORDS = frozenset(
    {
        "description",
        "enum",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
    }
)
# pydantic writes these for constraints it cannot place in standard keywords (e.g. next to a validator).
_LEAKED_BOUNDS = {"gt": ("minimum", True), "ge": ("minimum", False), "lt": ("maximum", True), "le": ("maximum", False)}
# The order keys are written in, so that generated YAML reads type first and nested schemas last.
_KEY_ORDER = [
    "type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "format",
    "description",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "additionalProperties",
    "items",
]
_INT_OR_STRING = frozenset({"integer", "string"})
_NUMBERS_OR_STRING = frozenset({"integer", "number", "string"})
_NUMBERS = frozenset({"integer", "number"})


class SchemaConversionError(ValueError):
    """A JSON schema construct that a structural schema cannot express; the message names the field."""


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model (validation mode, camelCase names).

    Raises:
        SchemaConversionError: the model has a field Kubernetes cannot describe structurally.
    """
    return convert_json_schema(model.model_json_schema(by_alias=True, mode="validation"))


def convert_json_schema(json_schema: Mapping[str, Any]) -> dict[str, Any]:
    """Convert a pydantic JSON schema (with ``$defs``) into a structural OpenAPI v3 schema.

    Raises:
        SchemaConversionError: naming the field whose schema cannot be converted.
    """
    definitions = dict(json_schema.get("$defs", {}))
    body = {key: value for key, value in json_schema.items() if key != "$defs"}
    return _Converter(definitions).convert(body, "")


class _Converter:
    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def convert(self, node: Mapping[str, Any], path: str, resolving: tuple[str, ...] = ()) -> dict[str, Any]:
        node, resolving = self._inline(node, path, resolving)
        if "anyOf" in node or "oneOf" in node:
            return self._union(node, path, resolving)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$ref", "$defs", "examples"):
                continue
            if key in _PLAIN_KEYWORDS:
                out[key] = value
            elif key == "type":
                if not isinstance(value, str):
                    raise SchemaConversionError(f"{path or '(root)'}: a list of types {value} is not structural")
                out["type"] = value
            elif key == "const":
                out["enum"] = [value]
            elif key == "format":
                if value in KNOWN_FORMATS:
                    out["format"] = value
            elif key in ("exclusiveMinimum", "exclusiveMaximum"):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound], out[key] = value, True
            elif key in _LEAKED_BOUNDS:
                bound, exclusive = _LEAKED_BOUNDS[key]
                out[bound] = value
                if exclusive:
                    out[f"exclusive{bound.capitalize()}"] = True
            elif key == "properties":
                out["properties"] = {
                    name: self.convert(child, _join(path, name), resolving) for name, child in value.items()
                }
            elif key == "required":
                if value:
                    out["required"] = list(value)
            elif key == "additionalProperties":
                if value is True:
                    out["x-kubernetes-preserve-unknown-fields"] = True
                elif value is not False:
                    out["additionalProperties"] = self.convert(value, _join(path, "*"), resolving)
            elif key == "items":
                if not isinstance(value, Mapping):
                    raise SchemaConversionError(f"{path}: tuple items are not structural")
                out["items"] = self.convert(value, f"{path}[]", resolving)
            elif key == "default":
                out["default"] = value
            elif key == "uniqueItems":
                # Kubernetes refuses uniqueItems (quadratic to check); the model still checks it.
                continue
            else:
                raise SchemaConversionError(f"{path or '(root)'}: JSON schema keyword {key!r} has no structural form")
        out = {key: out[key] for key in sorted(out, key=_KEY_ORDER.index)}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
            raise SchemaConversionError(f"{path}: an object with both fixed fields and free keys is not structural")
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            # dict[str, Any]: keep whatever is written rather than pruning it all away.
            out["x-kubernetes-preserve-unknown-fields"] = True
        if "type" not in out:
            # Any JSON value (pydantic's JsonValue is the empty schema): kept as written, checked by the model.
            if set(out) - {"description", "default"}:
                raise SchemaConversionError(f"{path or '(root)'}: a schema with constraints but no type: {sorted(out)}")
            out = {"x-kubernetes-preserve-unknown-fields": True, **out}
        return self._checked_default(out, path)

    def _inline(
        self, node: Mapping[str, Any], path: str, resolving: tuple[str, ...]
    ) -> tuple[Mapping[str, Any], tuple[str, ...]]:
        """Replace ``$ref`` (and pydantic's ``allOf: [{$ref}]`` wrapper) by the definition, siblings winning."""
        if "allOf" in node:
            parts = node["allOf"]
            if len(parts) != 1:
                raise SchemaConversionError(f"{path}: allOf of {len(parts)} schemas is not supported")
            node = {**parts[0], **{k: v for k, v in node.items() if k != "allOf"}}
        while "$ref" in node:
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            if name in resolving:
                raise SchemaConversionError(f"{path}: {name} refers to itself; a structural schema cannot recurse")
            if name not in self.definitions:
                raise SchemaConversionError(f"{path}: unknown reference {node['$ref']!r}")
            resolving = (*resolving, name)
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            node = {**self.definitions[name], **siblings}
        return node, resolving

    def _union(self, node: Mapping[str, Any], path: str, resolving: tuple[str, ...]) -> dict[str, Any]:
        branches = node.get("anyOf", node.get("oneOf", []))
        siblings = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        present = [branch for branch in branches if branch.get("type") != "null"]
        if len(present) == 1:
            # Optional[X] is X, not required; its null default (absent) is dropped with the other nulls.
            return self.convert({**present[0], **siblings}, path, resolving)
        present = [self._inline(branch, path, resolving)[0] for branch in present]
        types = {branch.get("type") for branch in present}
        if None in types:  # one branch is any value (JsonValue), so the union is too
            return self._any_value(siblings)
        scalars = all(_is_scalar(b) for b in present)
        if scalars and (types == _INT_OR_STRING or (types == _NUMBERS_OR_STRING and _has_units(present))):
            return self._int_or_string(present, siblings)
        if scalars and types == _NUMBERS:
            # int | float: a JSON number. Bounds stay only where every branch states the same ones.
            merged = {k: v for k, v in present[0].items() if all(b.get(k) == v for b in present)}
            return self.convert({**merged, "type": "number", **siblings}, path, resolving)
        if any("properties" in branch for branch in present):
            # A model in a union would lose its fields' defaults and pruning: refuse rather than keep it raw.
            raise SchemaConversionError(
                f"{path or '(root)'}: a union of {sorted(str(t) for t in types)} with an object of fixed fields has "
                "no structural form; give the field one type"
            )
        # Any other union of JSON values (a number or free text, a list or a reference string) is kept as written.
        return self._any_value(siblings)

    @staticmethod
    def _any_value(siblings: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
        if "description" in siblings:
            out["description"] = siblings["description"]
        return out

    @staticmethod
    def _int_or_string(branches: list[Mapping[str, Any]], siblings: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        if "description" in siblings:
            out["description"] = siblings["description"]
        for branch in branches:
            if branch.get("type") == "string" and "pattern" in branch:
                out["pattern"] = branch["pattern"]  # checked by the API server on strings only
        return out

    @staticmethod
    def _checked_default(out: dict[str, Any], path: str) -> dict[str, Any]:
        if "default" not in out:
            return out
        if out["default"] is None:
            del out["default"]
            return out
        problems = validate_value(out["default"], {k: v for k, v in out.items() if k != "default"}, path)
        if problems:
            raise SchemaConversionError(f"{path}: default {out['default']!r} does not fit its schema: {problems[0]}")
        return out


def _has_units(branches: list[Mapping[str, Any]]) -> bool:
    """Whether a number-or-string union's string is a quantity (a pattern of digits and units), not free text."""
    return any(branch.get("type") == "string" and "pattern" in branch for branch in branches)


def _is_scalar(branch: Mapping[str, Any]) -> bool:
    return branch.get("type") in _NUMBERS_OR_STRING and "properties" not in branch and "items" not in branch


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
