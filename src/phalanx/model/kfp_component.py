"""Kubeflow Pipelines v1 ``component.yaml`` files: their structure, validated by path, and their digest.

A component file is taken as KFP 1.8 writes and reads it (``components.json_schema.json`` and ``_structures.py``
of the SDK): ``name``, ``description``, ``metadata{annotations, labels}``, ``inputs[]``, ``outputs[]`` and an
``implementation`` that is a ``container``. No other key is accepted anywhere, so a misspelt ``optinal`` is refused
by path rather than silently ignored. A ``graph`` implementation is refused: a Phalanx Pipeline is the graph.

The command line (``command``, ``args`` and ``env`` values) is strings and *placeholders*, parsed by
``model.kfp_placeholders``; here every placeholder is checked to name an input or output the component declares.
``core.pipelines.placeholders`` turns them into an argv and an environment. ``parse_component`` is the door: it
measures a parsed document against the file limits and lists every problem, dangling names included, in one pass.

``component_digest`` is the sha256 of the canonical JSON of what decides the component's behaviour, for step
cache keys.

Invariants once parsed: input names unique, output names unique, and no two inputs (or outputs) share a file name
(upstream's default paths ``.../<name with odd characters as _>/data`` must not collide); input defaults are
strings (a YAML number or boolean default becomes its string, as KFP's ``str()`` would write it).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.errors import FieldError, SpecError, from_validation_error, join_path
from phalanx.model.kfp_placeholders import (
    Argument,
    ConcatPlaceholder,
    IfPlaceholder,
    InputPathPlaceholder,
    InputValuePlaceholder,
    IsPresentPlaceholder,
    OutputPathPlaceholder,
    name_in,
    named_in,
    parse_argument,
    parse_arguments,
)
from phalanx.model.validation import allowed_fields
from phalanx.model.yaml_limits import LimitExceededError, measure_documents

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE_NAME_ODD = re.compile(r"[^-_.0-9a-zA-Z]+")


def file_name_of(name: str) -> str:
    """An input or output name as one path component, as KFP v1 writes it (``eval data`` → ``eval_data``)."""
    return _FILE_NAME_ODD.sub("_", name)


#: An input or output type: a free string (``Dataset``, ``Integer``) or ``{NAME: {param: value}}``.
TypeSpec = str | dict[str, Any]


def type_name(value: TypeSpec | None) -> str | None:
    """The name of a type (``{GCSPath: {data_type: CSV}}`` → ``GCSPath``), or None when the type is unset."""
    if isinstance(value, dict):
        return next(iter(value))
    return value


def _check_type(value: Any) -> Any:
    # TypeSpecType upstream: a string, or an object whose values are again strings or objects.
    if isinstance(value, dict):
        if len(value) != 1:
            raise ValueError("a type is a string or a mapping with one key, {NAME: {param: value}}")
        name, params = next(iter(value.items()))
        if not isinstance(params, dict) or not _is_type_params(params):
            raise ValueError(f"the parameters of type {name!r} must be a mapping of strings (or nested mappings)")
    return value


def _is_type_params(params: dict[Any, Any]) -> bool:
    return all(
        isinstance(key, str) and (isinstance(item, str) or (isinstance(item, dict) and _is_type_params(item)))
        for key, item in params.items()
    )


class InputSpec(ApiModel):
    """One input: ``name`` (required), ``type``, ``description``, ``default`` (a string), ``optional``."""

    name: str = Field(min_length=1)
    type: TypeSpec | None = None
    description: str | None = None
    default: str | None = None
    optional: bool = False

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        return _check_type(value)

    @field_validator("default", mode="before")
    @classmethod
    def _default(cls, value: Any) -> Any:
        # The schema says a string; KFP 1.8 loads numbers and booleans too and writes them with str().
        return str(value) if isinstance(value, bool | int | float) else value


class OutputSpec(ApiModel):
    """One output: ``name`` (required), ``type``, ``description``."""

    name: str = Field(min_length=1)
    type: TypeSpec | None = None
    description: str | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        return _check_type(value)


class ComponentMetadata(ApiModel):
    """``metadata``: annotations and labels, kept as written (KFP tools store authorship and source there)."""

    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None


class ContainerSpec(ApiModel):
    """``implementation.container``: the image and the command line, with placeholders."""

    image: str = Field(min_length=1)
    command: list[Argument] | None = None
    args: list[Argument] | None = None
    env: dict[str, Argument] | None = None
    #: Legacy upstream: output name → the fixed path the program writes it to (for programs that take no path).
    file_outputs: dict[str, str] | None = None

    @field_validator("command", "args", mode="before")
    @classmethod
    def _placeholders(cls, value: Any) -> Any:
        return parse_arguments(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        problems: list[tuple[tuple[str | int, ...], str]] = []
        parsed: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                problems.append(((str(key),), "an environment variable name is letters, digits and _"))
            elif key.startswith("PHALANX_"):
                problems.append(((key,), "names starting PHALANX_ are reserved for Phalanx; rename it"))
            parsed[str(key)] = parse_argument(item, (str(key),), problems)
        if problems:
            raise every_problem("env", problems)
        return parsed


class Implementation(ApiModel):
    """``implementation``: a ``container`` (``graph`` is refused by ``parse_component``)."""

    container: ContainerSpec


class ComponentSpec(ApiModel):
    """A KFP v1 component: its interface (inputs, outputs) and its container implementation."""

    name: str | None = None
    description: str | None = None
    metadata: ComponentMetadata | None = None
    inputs: list[InputSpec] = Field(default_factory=list)
    outputs: list[OutputSpec] = Field(default_factory=list)
    implementation: Implementation

    @model_validator(mode="before")
    @classmethod
    def _no_graph(cls, value: Any) -> Any:
        implementation = value.get("implementation") if isinstance(value, Mapping) else None
        if isinstance(implementation, Mapping) and "graph" in implementation:
            raise every_problem(
                "ComponentSpec",
                [
                    (
                        ("implementation", "graph"),
                        "graph components are not supported; write the graph as a Phalanx Pipeline whose steps "
                        "are its tasks' components",
                    )
                ],
            )
        return value

    @model_validator(mode="after")
    def _references(self) -> ComponentSpec:
        container = self.implementation.container
        problems = _reference_problems(
            [item.name for item in self.inputs],
            [item.name for item in self.outputs],
            {"command": container.command or [], "args": container.args or []},
            container.env or {},
            list(container.file_outputs or {}),
        )
        if problems:
            raise every_problem("ComponentSpec", problems)
        return self

    def input(self, name: str) -> InputSpec | None:
        """The input called ``name``, if the component has one."""
        return next((item for item in self.inputs if item.name == name), None)

    def output(self, name: str) -> OutputSpec | None:
        """The output called ``name``, if the component has one."""
        return next((item for item in self.outputs if item.name == name), None)

    def input_uses(self) -> dict[str, frozenset[str]]:
        """How the command line may use each input, in any ``if`` branch: ``inputValue``, ``inputPath``, ``isPresent``.

        ``executorInput`` is listed for every input when the component reads KFP's executor input (all travel in it).

        For checks made before a run, e.g. whether an artifact is passed to an input read only by value; an
        input the command line never names maps to an empty set.
        """
        uses: dict[str, set[str]] = {item.name: set() for item in self.inputs}
        container = self.implementation.container
        for item in [*(container.command or []), *(container.args or []), *(container.env or {}).values()]:
            for key, name in named_in(item):
                if key != "outputPath" and name in uses:
                    uses[name].add(key)
                elif key == "executorInput":  # the whole ExecutorInput: every input travels in it
                    for found in uses.values():
                        found.add(key)
        return {name: frozenset(found) for name, found in uses.items()}


def _reference_problems(
    inputs: Sequence[str],
    outputs: Sequence[str],
    lists: Mapping[str, Sequence[Any]],
    env: Mapping[str, Any],
    file_outputs: Sequence[str],
) -> list[tuple[tuple[str | int, ...], str]]:
    """Names repeated or colliding, and placeholders naming an input or output the component lacks."""
    problems = _name_problems("inputs", inputs) + _name_problems("outputs", outputs)
    known_inputs, known_outputs = set(inputs), set(outputs)
    base = ("implementation", "container")
    for field, items in lists.items():
        for index, item in enumerate(items):
            problems += _unknown_names(item, (*base, field, index), known_inputs, known_outputs)
    for key, item in env.items():
        problems += _unknown_names(item, (*base, "env", key), known_inputs, known_outputs)
    for key in file_outputs:
        if key not in known_outputs:
            problems.append(((*base, "fileOutputs", key), _unknown("output", key, known_outputs)))
    return problems


def _references_in_raw(raw: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """``_reference_problems`` of a document that failed validation elsewhere, as far as its shape allows.

    Pydantic skips a model's own checks once a field is wrong; this reports the dangling names too, so that one
    pass over a file lists all of its problems.
    """

    def names(field: str) -> list[str]:
        items = raw.get(field)
        found = items if isinstance(items, list) else []
        return [item["name"] for item in found if isinstance(item, Mapping) and isinstance(item.get("name"), str)]

    implementation = raw.get("implementation")
    container = implementation.get("container") if isinstance(implementation, Mapping) else None
    if not isinstance(container, Mapping):
        return _name_problems("inputs", names("inputs")) + _name_problems("outputs", names("outputs"))
    ignored: list[tuple[tuple[str | int, ...], str]] = []  # shape problems: pydantic reported them already
    lists = {
        field: [parse_argument(item, (), ignored) for item in container[field]]
        for field in ("command", "args")
        if isinstance(container.get(field), list)
    }
    env = container.get("env")
    parsed_env = (
        {str(key): parse_argument(item, (), ignored) for key, item in env.items()} if isinstance(env, Mapping) else {}
    )
    file_outputs = container.get("fileOutputs")
    keys = [str(key) for key in file_outputs] if isinstance(file_outputs, Mapping) else []
    return _reference_problems(names("inputs"), names("outputs"), lists, parsed_env, keys)


def _name_problems(field: str, names: Sequence[str]) -> list[tuple[tuple[str | int, ...], str]]:
    problems: list[tuple[tuple[str | int, ...], str]] = []
    seen: dict[str, int] = {}
    files: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            problems.append(((field, index, "name"), f"{name!r} is also {field}[{seen[name]}]; names must be unique"))
            continue
        seen[name] = index
        file = file_name_of(name)
        if file in files:
            other = names[files[file]]
            problems.append(
                (
                    (field, index, "name"),
                    f"{name!r} and {field}[{files[file]}] {other!r} would share the file name {file!r}; rename one",
                )
            )
        files.setdefault(file, index)
    return problems


def _unknown(kind: str, name: str, known: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"declare it under {kind}s"
    return f"the component has no {kind} {name!r}; {hint}"


def _unknown_names(
    item: Any, loc: tuple[str | int, ...], inputs: set[str], outputs: set[str]
) -> list[tuple[tuple[str | int, ...], str]]:
    """A problem per placeholder in ``item`` that names an input or output the component lacks."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(item, InputValuePlaceholder | InputPathPlaceholder | IsPresentPlaceholder):
        key, name = name_in(item)
        if name not in inputs:
            found.append(((*loc, key), _unknown("input", name, inputs)))
    elif isinstance(item, OutputPathPlaceholder) and item.output_path not in outputs:
        found.append(((*loc, "outputPath"), _unknown("output", item.output_path, outputs)))
    elif isinstance(item, ConcatPlaceholder):
        for index, part in enumerate(item.concat):
            found += _unknown_names(part, (*loc, "concat", index), inputs, outputs)
    elif isinstance(item, IfPlaceholder):
        found += _unknown_names(item.if_.cond, (*loc, "if", "cond"), inputs, outputs)
        for branch, parts in (("then", item.if_.then), ("else", item.if_.else_)):
            for index, part in enumerate(parts or []):
                found += _unknown_names(part, (*loc, "if", branch, index), inputs, outputs)
    return found


ContainerSpec.model_rebuild()


def parse_component(raw: Any, *, prefix: Sequence[str | int] = (), source: str | None = None) -> ComponentSpec:
    """A component.yaml document (already loaded) as a ``ComponentSpec``, or every problem in it by path.

    Args:
        raw: the loaded YAML document.
        prefix: path parts put before every error's path (``spec.steps[2].component.inline`` for an inline one).
        source: the file the document came from, named in the error.

    Raises:
        SpecError: listing each problem with its field path.
    """
    if not isinstance(raw, Mapping):
        problem = FieldError(join_path(prefix), "a component must be a mapping with inputs, outputs and implementation")
        raise SpecError([problem], source=source)
    try:
        # Validation walks placeholders recursively: a parsed document (not read through the YAML loader's limits)
        # is measured first, so that 10,000 nested concats are one sentence, not a RecursionError.
        measure_documents([raw], source=None)
    except LimitExceededError as err:
        raise SpecError([FieldError(join_path(prefix), str(err))], source=source) from None
    try:
        return ComponentSpec.model_validate(raw)
    except ValidationError as err:
        errors = from_validation_error(err, prefix=prefix, fields_at=_fields_at)
    seen = {error.path for error in errors}
    for loc, message in _references_in_raw(raw):
        path = join_path([*prefix, *loc])
        if path not in seen:
            errors.append(FieldError(path, message))
    raise SpecError(errors, source=source)


def _fields_at(loc: Sequence[Any]) -> list[str]:
    return allowed_fields(ComponentSpec, loc)


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces: the same data always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def component_digest(component: ComponentSpec) -> str:
    """The sha256 (hex) of what decides a component's behaviour, for step cache keys.

    Covers the inputs (name, type, default, optional), the outputs (name, type) and the implementation; leaves
    out ``name``, ``description``, ``metadata`` and the inputs' and outputs' descriptions, so that editing the
    documentation of a component does not throw away every cached result of it.
    """
    data = component.to_dict()
    for key in ("name", "description", "metadata"):
        data.pop(key, None)
    for item in [*data.get("inputs", []), *data.get("outputs", [])]:
        item.pop("description", None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()
