"""Kubeflow Pipelines v2 IR (the ``PipelineSpec`` YAML ``kfp.compiler`` writes): what is read of it, by path.

The IR is the JSON form of ``pipeline_spec.proto`` (kubeflow/pipelines ``api/v2alpha1``): ``pipelineInfo``,
``root`` (a DAG component), ``components`` (each a DAG or an ``executorLabel``), ``deploymentSpec.executors``
(containers), ``schemaVersion`` and ``sdkVersion``. This module owns the vocabulary: which fields are taken, the
parameter types, how a value is written as a Phalanx string, and how an executor's container becomes the inline
KFP v1 component a Phalanx step runs, its placeholders turned into v1 ones:

- ``{{$.inputs.parameters['x']}}`` -> ``{inputValue: x}``; ``{{$.inputs.artifacts['x'].path}}`` -> ``{inputPath: x}``;
- ``{{$.outputs.artifacts['y'].path}}`` and ``{{$.outputs.parameters['y'].output_file}}`` -> ``{outputPath: y}``;
- ``{{$}}`` (the executor input of lightweight Python components) -> ``{executorInput: {}}``;
- a string holding placeholders among other text -> ``{concat: [...]}``; the SDK's JSON strings
  ``{"Concat": [...]}`` and ``{"IfPresent": {"InputName", "Then", "Else"}}`` -> ``concat`` and
  ``{if: {cond: {isPresent: x}, then, else}}``.

URIs, metadata, ``{{$.pipeline_job_name}}`` and the other run-level placeholders have no Phalanx meaning yet and
are refused by path. The DAG itself (tasks, loops, conditions) is ``core.pipelines.kfp_ir``'s.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from phalanx.model.errors import FieldError, short

#: IR parameter types -> KFP v1 / Phalanx parameter types.
PARAMETER_TYPES: Mapping[str, str] = {
    "STRING": "String",
    "NUMBER_INTEGER": "Integer",
    "NUMBER_DOUBLE": "Float",
    "BOOLEAN": "Boolean",
    "LIST": "JsonArray",
    "STRUCT": "JsonObject",
}
#: The deprecated ``type`` of a parameter (PrimitiveType), still read by old IR files.
PRIMITIVE_TYPES: Mapping[str, str] = {"INT": "Integer", "DOUBLE": "Float", "STRING": "String"}

_PLACEHOLDER = re.compile(r"\{\{\$(.*?)\}\}", re.DOTALL)
_INPUT_PARAMETER = re.compile(r"\.inputs\.parameters\['([^']+)'\]")
_INPUT_ARTIFACT_PATH = re.compile(r"\.inputs\.artifacts\['([^']+)'\]\.path")
_OUTPUT_ARTIFACT_PATH = re.compile(r"\.outputs\.artifacts\['([^']+)'\]\.path")
_OUTPUT_PARAMETER_FILE = re.compile(r"\.outputs\.parameters\['([^']+)'\]\.output_file")

Problems = list[FieldError]


def is_kfp_ir(document: Any) -> bool:
    """Whether a loaded document is a compiled KFP v2 pipeline (``pipelineInfo`` and ``root``, no ``kind``)."""
    return isinstance(document, Mapping) and "pipelineInfo" in document and "root" in document


def unknown_fields(
    value: Mapping[str, Any], allowed: tuple[str, ...], path: str, problems: Problems, *, what: str
) -> None:
    """A problem per key of ``value`` outside ``allowed``: an IR feature Phalanx does not run is refused, not lost."""
    for key in value:
        if key not in allowed:
            problems.append(
                FieldError(f"{path}.{key}" if path else str(key), f"{what} field {key!r} is not supported; remove it")
            )


def whole_number(value: float) -> Any:
    """A JSON number as KFP meant it: the IR keeps every number as a double, so ``3.0`` is written ``3``."""
    return int(value) if isinstance(value, float) and value.is_integer() and math.isfinite(value) else value


def plain_json(value: Any) -> Any:
    """``value`` with whole doubles as integers, through lists and objects (``[1.0, 2.5]`` -> ``[1, 2.5]``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return whole_number(value)
    if isinstance(value, list):
        return [plain_json(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_json(item) for key, item in value.items()}
    return value


def render_value(value: Any, kind: str | None) -> str:
    """An IR constant or default as the Phalanx value string for a parameter of type ``kind``.

    Strings stay as they are; a Float keeps its decimal point (``1.0``); an Integer and the numbers inside
    lists and objects lose a ``.0`` the IR added; booleans are ``true``/``false``; lists and objects compact JSON.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and kind == "Float":
        return json.dumps(float(value))
    return json.dumps(plain_json(value), separators=(",", ":"), ensure_ascii=False)


def parameter_type(spec: Mapping[str, Any], path: str, problems: Problems) -> str | None:
    """The Phalanx type of an IR ParameterSpec (``parameterType``, or the deprecated ``type``)."""
    if "parameterType" in spec:
        raw = spec["parameterType"]
        if isinstance(raw, str) and raw in PARAMETER_TYPES:
            return PARAMETER_TYPES[raw]
        problems.append(
            FieldError(
                f"{path}.parameterType",
                f"parameter type {short(raw)} is not supported; use one of {', '.join(PARAMETER_TYPES)}",
            )
        )
        return None
    raw = spec.get("type")
    if isinstance(raw, str) and raw in PRIMITIVE_TYPES:
        return PRIMITIVE_TYPES[raw]
    problems.append(FieldError(f"{path}.parameterType", "a parameter needs a parameterType, e.g. STRING"))
    return None


def artifact_type(spec: Mapping[str, Any]) -> str:
    """The component type of an IR artifact: ``system.Dataset`` -> ``Dataset``; another namespace kept whole."""
    schema = spec.get("artifactType")
    title = schema.get("schemaTitle") if isinstance(schema, Mapping) else None
    if not isinstance(title, str) or not title:
        return "Artifact"
    return title.removeprefix("system.")


def convert_item(item: Any, path: str, problems: Problems) -> Any:
    """One IR command-line item as a KFP v1 one (a string, or a placeholder mapping)."""
    if not isinstance(item, str):
        problems.append(FieldError(path, f"a command-line item is a string, got {short(item)}"))
        return ""
    stripped = item.strip()
    if stripped.startswith(('{"Concat"', '{"IfPresent"')):
        try:
            structure = json.loads(stripped)
        except ValueError:
            structure = None
        if isinstance(structure, dict):
            return _structure(structure, path, problems)
    return convert_string(item, path, problems)


def _structure(value: Any, path: str, problems: Problems) -> Any:
    """The SDK's ``{"Concat": [...]}`` and ``{"IfPresent": {...}}`` as v1 ``concat`` and ``if``."""
    if isinstance(value, str):
        return convert_string(value, path, problems)
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("Concat"), list):
        return {"concat": [_structure(part, f"{path}.Concat[{i}]", problems) for i, part in enumerate(value["Concat"])]}
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("IfPresent"), dict):
        body = value["IfPresent"]
        unknown_fields(body, ("InputName", "Then", "Else"), f"{path}.IfPresent", problems, what="IfPresent")
        name = body.get("InputName")
        if not isinstance(name, str):
            problems.append(FieldError(f"{path}.IfPresent.InputName", "must name an input"))
            return ""
        branches: dict[str, Any] = {}
        for key in ("Then", "Else"):
            if key in body:
                parts = body[key] if isinstance(body[key], list) else [body[key]]
                branches[key.lower()] = [
                    _structure(part, f"{path}.IfPresent.{key}[{i}]", problems) for i, part in enumerate(parts)
                ]
        return {"if": {"cond": {"isPresent": name}, "then": branches.get("then", []), **_else(branches)}}
    problems.append(FieldError(path, f"not a placeholder Phalanx knows: {short(value)}"))
    return ""


def _else(branches: Mapping[str, Any]) -> dict[str, Any]:
    return {"else": branches["else"]} if "else" in branches else {}


def convert_string(text: str, path: str, problems: Problems) -> Any:
    """A string with ``{{$...}}`` placeholders as a v1 item: the string, one placeholder, or a ``concat``."""
    parts: list[Any] = []
    end = 0
    for match in _PLACEHOLDER.finditer(text):
        if match.start() > end:
            parts.append(text[end : match.start()])
        parts.append(_placeholder(match.group(1), match.group(0), path, problems))
        end = match.end()
    if end < len(text):
        parts.append(text[end:])
    if not parts:
        return text
    if len(parts) == 1:
        return parts[0]
    return {"concat": parts}


def _placeholder(body: str, whole: str, path: str, problems: Problems) -> Any:
    if body == "":
        return {"executorInput": {}}
    for pattern, key in (
        (_INPUT_PARAMETER, "inputValue"),
        (_INPUT_ARTIFACT_PATH, "inputPath"),
        (_OUTPUT_ARTIFACT_PATH, "outputPath"),
        (_OUTPUT_PARAMETER_FILE, "outputPath"),
    ):
        if match := pattern.fullmatch(body):
            return {key: match.group(1)}
    if ".uri" in body or ".metadata" in body:
        hint = "artifact URIs and metadata belong to KFP's artifact store; read the artifact's .path instead"
    else:
        hint = "run-level values (job name, task name, pipeline root...) have no Phalanx counterpart yet"
    problems.append(FieldError(path, f"placeholder {short(whole)} is not supported: {hint}"))
    return whole
