"""KFP v2's executor contract: the ExecutorInput JSON a lightweight Python component reads, and what it writes back.

A kfp v2 ``@dsl.component`` function runs as ``python3 -m kfp.dsl.executor_main --executor_input {{$}}
--function_to_execute f``; the IR importer (``model.kfp_ir``) turns ``{{$}}`` into ``{executorInput: {}}``. This
module builds the JSON that placeholder resolves to and reads the executor's output file, as the kfp SDK's
``dsl/executor.py`` reads and writes them (the ``ExecutorInput``/``ExecutorOutput`` messages of
``pipeline_spec.proto``, in their JSON form):

- ``inputs.parameterValues``: each value input as the JSON value of its declared type (``Integer`` 3,
  ``Float`` 0.5, ``Boolean`` true, ``JsonArray``/``JsonObject`` parsed, anything else the string), defaults filled in
  as the KFP driver does; absent optional inputs are left out, so the function's own default applies;
- ``inputs.artifacts`` and ``outputs.artifacts``: one artifact each, its ``uri`` the *local path* of the data. The
  executor maps a URI to a path by its scheme (``gs://`` to ``/gcs/``...) and uses a URI with no scheme as the path
  itself, so a plain local path is what a step process can read and write; ``type.schemaTitle`` is the KFP
  artifact type (``system.Dataset``...);
- ``outputs.parameters``: each parameter output's ``outputFile`` (an ``OutputPath(str)`` argument writes there);
- ``outputs.outputFile``: where the executor writes its ``ExecutorOutput`` JSON, whose ``parameterValues`` hold the
  function's return values (``executor_outputs`` reads them back as strings, rendered as pipeline values are).

Artifact metadata is not carried between steps (each input artifact's ``metadata`` is empty), and an output
artifact whose URI the function changes is still collected at the path it was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from phalanx.core.pipelines.dag import normal_type
from phalanx.core.pipelines.references import render
from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.kfp_component import ComponentSpec, TypeSpec, type_name
from phalanx.model.kfp_placeholders import named_in

#: KFP's own artifact types; a type of another name without a namespace is passed as a generic ``system.Artifact``
#: (the executor then builds the class the function's annotation names).
SYSTEM_ARTIFACTS = frozenset(
    {"Artifact", "Dataset", "Model", "Metrics", "ClassificationMetrics", "SlicedClassificationMetrics", "HTML"}
    | {"Markdown"}
)
_PARAMETER_TYPES = frozenset({"Integer", "Float", "Boolean", "JsonObject", "JsonArray"})


def uses_executor_input(component: ComponentSpec) -> bool:
    """Whether the component's command line holds ``{executorInput: {}}`` (a kfp v2 lightweight Python component)."""
    container = component.implementation.container
    items = [*(container.command or []), *(container.args or []), *(container.env or {}).values()]
    return any(key == "executorInput" for item in items for key, _ in named_in(item))


def is_parameter_type(kind: TypeSpec | None) -> bool:
    """Whether an input or output of this type is a parameter (a value) rather than an artifact (a file).

    ``String``, ``Integer``, ``Float``, ``Boolean``, ``JsonArray``, ``JsonObject`` and their Python spellings are
    parameters; an untyped one or any other type name is an artifact.
    """
    name = type_name(kind)
    if name is None:
        return False
    normal = normal_type(name)
    return normal is None or normal in _PARAMETER_TYPES


def schema_title(kind: TypeSpec | None) -> str:
    """The KFP artifact type of a component type: ``Dataset`` -> ``system.Dataset``; ``google.VertexModel`` as is."""
    name = type_name(kind)
    if name is None:
        return "system.Artifact"
    if "." in name:
        return name
    return f"system.{name}" if name in SYSTEM_ARTIFACTS else "system.Artifact"


def executor_input(
    component: ComponentSpec,
    *,
    values: Mapping[str, str],
    artifacts: Mapping[str, str],
    output_paths: Mapping[str, str],
    output_file: str,
) -> str:
    """The ExecutorInput JSON of one run of ``component``.

    Args:
        component: the parsed component (its declared types decide each value's JSON type).
        values: input name -> value (a string, as every pipeline value is).
        artifacts: input name -> the local path of an artifact input's data.
        output_paths: output name -> the local path the output is to be written to.
        output_file: where the executor writes its ExecutorOutput JSON.

    Raises:
        SpecError: a value that does not read as its input's type, named at ``arguments.NAME``.
    """
    errors: list[FieldError] = []
    parameters: dict[str, Any] = {}
    for item in component.inputs:
        value = values.get(item.name, None if item.name in artifacts else item.default)
        if value is None:
            continue
        try:
            parameters[item.name] = _typed(value, item.type)
        except ValueError as err:
            errors.append(FieldError(f"arguments.{item.name}", str(err)))
    if errors:
        raise SpecError(errors)
    types = {item.name: item.type for item in component.inputs}
    document = {
        "inputs": {
            "parameterValues": parameters,
            "artifacts": {
                name: _artifact_list(name, types.get(name), path) for name, path in sorted(artifacts.items())
            },
        },
        "outputs": {
            "parameters": {
                item.name: {"outputFile": output_paths[item.name]}
                for item in component.outputs
                if item.name in output_paths and is_parameter_type(item.type)
            },
            "artifacts": {
                item.name: _artifact_list(item.name, item.type, output_paths[item.name])
                for item in component.outputs
                if item.name in output_paths and not is_parameter_type(item.type)
            },
            "outputFile": output_file,
        },
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _artifact_list(name: str, kind: TypeSpec | None, path: str) -> dict[str, Any]:
    return {"artifacts": [{"name": name, "type": {"schemaTitle": schema_title(kind)}, "uri": path, "metadata": {}}]}


def _typed(value: str, kind: TypeSpec | None) -> Any:
    """A pipeline value (a string) as the JSON value KFP passes for an input of this type."""
    normal = normal_type(type_name(kind))
    if normal == "Integer":
        try:
            return int(value.strip())
        except ValueError:
            # KFP writes whole numbers of a JSON list as 1.0; take them, refuse 1.5.
            number = _float(value)
            if number is None or not number.is_integer():
                raise ValueError(f"must be a whole number (type Integer), got {short(value)}") from None
            return int(number)
    if normal == "Float":
        number = _float(value)
        if number is None:
            raise ValueError(f"must be a finite number (type Float), got {short(value)}")
        return number
    if normal == "Boolean":
        word = value.strip().lower()
        if word not in ("true", "false"):
            raise ValueError(f"must be true or false (type Boolean), got {short(value)}")
        return word == "true"
    if normal in ("JsonArray", "JsonObject"):
        want = list if normal == "JsonArray" else dict
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, want):
            raise ValueError(f"must be JSON {'an array' if want is list else 'an object'} (type {normal})")
        return parsed
    return value


def _float(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def executor_outputs(text: str, component: ComponentSpec) -> dict[str, str]:
    """The parameter outputs in an ExecutorOutput JSON (the function's return values), as pipeline value strings.

    Strings stay as they are; numbers, booleans, lists and objects become compact JSON (``3``, ``0.5``, ``true``,
    ``[1,2]``), as ``references.render`` writes values. Names the component does not declare are left out; the
    deprecated ``parameters`` map (``{"intValue": ...}``) is read when ``parameterValues`` lacks a name.

    Raises:
        ValueError: the text is not an ExecutorOutput JSON object (the message says what was found).
    """
    try:
        document = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise ValueError(f"the executor output file is not JSON ({err})") from None
    if not isinstance(document, dict):
        raise ValueError(f"the executor output file must hold a JSON object, got {short(text)}")
    declared = {item.name for item in component.outputs}
    found: dict[str, str] = {}
    legacy = document.get("parameters")
    if isinstance(legacy, dict):
        for name, value in legacy.items():
            if name in declared and isinstance(value, dict) and len(value) == 1:
                found[name] = render(next(iter(value.values())))
    current = document.get("parameterValues")
    if isinstance(current, dict):
        for name, value in current.items():
            if name in declared and value is not None:
                found[name] = render(value)
    return found
