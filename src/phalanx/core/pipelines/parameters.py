"""Binding a run's arguments to a pipeline's parameters, and checking a value against a KFP v1 parameter type.

Every parameter value is a string on the wire (KFP v1 passes them so); the type says how it must read: an
Integer as a whole number, a Float as a finite number, a Boolean as ``true``/``false`` (KFP's spelling, any case),
JSON types as JSON of that shape. A value that does not read as its type is refused before the run starts, naming
``spec.arguments.NAME`` (or the parameter's default), so no step fails on it later.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from phalanx.model.errors import FieldError, SpecError, short
from phalanx.model.pipelines import ParameterType, PipelineSpec


def type_problem(value: str, kind: ParameterType | str) -> str | None:
    """Why ``value`` does not read as ``kind``, or None when it does."""
    kind = ParameterType(kind)
    if kind is ParameterType.STRING:
        return None
    if kind is ParameterType.INTEGER:
        try:
            int(value.strip())
        except ValueError:
            return f"must be a whole number (type Integer), got {short(value)}"
        return None
    if kind is ParameterType.FLOAT:
        try:
            number = float(value)
        except ValueError:
            return f"must be a number (type Float), got {short(value)}"
        return None if math.isfinite(number) else f"must be a finite number (type Float), got {short(value)}"
    if kind is ParameterType.BOOLEAN:
        return None if value.strip().lower() in ("true", "false") else f"must be true or false, got {short(value)}"
    want = dict if kind is ParameterType.JSON_OBJECT else list
    example = '{"a": 1}' if want is dict else "[1, 2]"
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, want):
        return f"must be JSON {'an object' if want is dict else 'an array'} (type {kind}), e.g. '{example}'"
    return None


def bind_parameters(spec: PipelineSpec, arguments: Mapping[str, str]) -> dict[str, str]:
    """Every parameter's value for a run: its argument, else its default.

    Raises:
        SpecError: an argument for no parameter, a parameter with neither, or a value not of its type; each
            named at ``spec.arguments.NAME``.
    """
    errors: list[FieldError] = []
    declared = {parameter.name: parameter for parameter in spec.parameters}
    for name in arguments:
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            errors.append(
                FieldError(f"spec.arguments.{name}", f"the pipeline has no parameter {name!r}; it has: {known}")
            )
    bound: dict[str, str] = {}
    for parameter in spec.parameters:
        value = arguments.get(parameter.name, parameter.default)
        if value is None:
            errors.append(
                FieldError(
                    f"spec.arguments.{parameter.name}",
                    f"parameter {parameter.name!r} has no default: give it a value, e.g. "
                    f"arguments: {{{parameter.name}: ...}}",
                )
            )
            continue
        problem = type_problem(value, parameter.type)
        if problem is not None:
            errors.append(FieldError(f"spec.arguments.{parameter.name}", problem))
        bound[parameter.name] = value
    if errors:
        raise SpecError(errors)
    return bound
