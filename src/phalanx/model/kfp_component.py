"""Kubeflow Pipelines v1 ``component.yaml`` files: their structure, validated by path, and their digest.

A component file is taken as KFP 1.8 writes and reads it (``components.json_schema.json`` and ``_structures.py``
of the SDK): ``name``, ``description``, ``metadata{annotations, labels}``, ``inputs[]``, ``outputs[]`` and an
``implementation`` that is a ``container``. No other key is accepted anywhere, so a misspelt ``optinal`` is refused
by path rather than silently ignored. A ``graph`` implementation is refused: a Phalanx Pipeline is the graph.

The command line is a list of strings and *placeholders*, each a mapping with one key:
``inputValue``, ``inputPath``, ``outputPath`` (a name), ``concat`` (a list), ``if`` (``cond``, ``then``, optional
``else``), and ``isPresent`` (a name; only as an ``if`` condition, as the upstream schema has it). The
placeholders the SDK later added for its v2-compatible mode (``inputUri``, ``outputUri``, ``inputMetadata``,
``outputMetadata``, ``executorInput``) are refused by path. Every placeholder must name an input or output the
component declares. ``core.pipelines.placeholders`` turns them into an argv and an environment.

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
from typing import Any, Union

from pydantic import Field, ValidationError, field_validator, model_validator

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.errors import FieldError, SpecError, from_validation_error, join_path, short
from phalanx.model.validation import allowed_fields

#: Placeholders of the SDK's v2-compatible mode (``dsl/v1_structures.py``): their meaning needs KFP's executor.
V2_PLACEHOLDERS = ("inputUri", "outputUri", "inputMetadata", "outputMetadata", "executorInput")
_V2_MESSAGE = "v2-compatible placeholders are not supported; use inputPath or outputPath (a local file path) instead"
_ARGUMENT_PLACEHOLDERS = ("inputValue", "inputPath", "outputPath", "concat", "if")
#: What ``if.cond`` may be besides an ``isPresent``/``inputValue`` placeholder: strings read as
#: ``distutils.util.strtobool`` reads them, as the KFP v1 SDK does.
TRUE_WORDS = frozenset({"y", "yes", "t", "true", "on", "1"})
FALSE_WORDS = frozenset({"n", "no", "f", "false", "off", "0"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FILE_NAME_ODD = re.compile(r"[^-_.0-9a-zA-Z]+")


def file_name_of(name: str) -> str:
    """An input or output name as one path component, as KFP v1 writes it (``eval data`` → ``eval_data``)."""
    return _FILE_NAME_ODD.sub("_", name)


class InputValuePlaceholder(ApiModel):
    """``{inputValue: NAME}``: the argument's value as one string."""

    input_value: str


class InputPathPlaceholder(ApiModel):
    """``{inputPath: NAME}``: a local path holding the input's data."""

    input_path: str


class OutputPathPlaceholder(ApiModel):
    """``{outputPath: NAME}``: a local path the program must write the output to."""

    output_path: str


class IsPresentPlaceholder(ApiModel):
    """``{isPresent: NAME}``: whether the optional input was given (only as an ``if`` condition)."""

    is_present: str


class ConcatPlaceholder(ApiModel):
    """``{concat: [...]}``: its items, each resolved, joined into one string."""

    concat: list[Argument]

    @field_validator("concat", mode="before")
    @classmethod
    def _placeholders(cls, value: Any) -> Any:
        return parse_arguments(value)


class IfStructure(ApiModel):
    """The body of ``{if: {cond, then, else}}``."""

    cond: Condition
    then: list[Argument]
    else_: list[Argument] | None = Field(default=None, alias="else")

    @field_validator("cond", mode="before")
    @classmethod
    def _condition(cls, value: Any) -> Any:
        return parse_condition(value)

    @field_validator("then", "else_", mode="before")
    @classmethod
    def _branches(cls, value: Any) -> Any:
        # Upstream takes one argument or a list of them; a single one is kept as a list of one.
        return None if value is None else parse_arguments(value if isinstance(value, list) else [value])


class IfPlaceholder(ApiModel):
    """``{if: {cond, then, else}}``: the ``then`` arguments when ``cond`` holds, else the ``else`` ones (or none)."""

    if_: IfStructure = Field(alias="if")


#: One command-line item: a string or a placeholder that resolves to zero, one or several strings.
Argument = Union[  # noqa: UP007 (forward references: the | operator needs the classes, not their names)
    str, InputValuePlaceholder, InputPathPlaceholder, OutputPathPlaceholder, ConcatPlaceholder, IfPlaceholder
]
#: An ``if`` condition: a literal (bool or a boolean word), whether an input is present, or an input's value.
Condition = bool | str | IsPresentPlaceholder | InputValuePlaceholder

_NAMED = ("inputValue", "inputPath", "outputPath", "isPresent")


def _named_placeholder(key: str, name: str) -> ApiModel:
    # Built without validation: the caller has checked the one value a named placeholder holds.
    if key == "inputValue":
        return InputValuePlaceholder.model_construct(input_value=name)
    if key == "inputPath":
        return InputPathPlaceholder.model_construct(input_path=name)
    if key == "outputPath":
        return OutputPathPlaceholder.model_construct(output_path=name)
    return IsPresentPlaceholder.model_construct(is_present=name)


def _name_in(item: ApiModel) -> tuple[str, str]:
    """(placeholder key, the name it holds) of a named placeholder."""
    if isinstance(item, InputValuePlaceholder):
        return "inputValue", item.input_value
    if isinstance(item, InputPathPlaceholder):
        return "inputPath", item.input_path
    if isinstance(item, OutputPathPlaceholder):
        return "outputPath", item.output_path
    if isinstance(item, IsPresentPlaceholder):
        return "isPresent", item.is_present
    raise TypeError(f"not a named placeholder: {type(item).__name__}")


def parse_arguments(raw: Any) -> Any:
    """A raw list of command-line items as ``Argument`` objects, or every problem in it by path.

    Written by hand rather than left to pydantic's union matching so that a bad placeholder gets one sentence
    about *that* placeholder, not one error per union member.

    Raises:
        ValidationError: with one entry per problem, located relative to the list.
    """
    if not isinstance(raw, list):
        return raw  # pydantic's own "must be a list" message
    problems: list[tuple[tuple[str | int, ...], str]] = []
    parsed = [_argument(item, (index,), problems) for index, item in enumerate(raw)]
    if problems:
        raise every_problem("Argument", problems)
    return parsed


def parse_condition(raw: Any) -> Any:
    """A raw ``if.cond`` as a ``Condition``, or its problem by path (see ``parse_arguments``)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        if raw.strip().lower() not in TRUE_WORDS | FALSE_WORDS:
            problems.append(((), f"must be true or false (or a placeholder), got {short(raw)}"))
    elif isinstance(raw, Mapping) and len(raw) == 1 and next(iter(raw)) in ("isPresent", "inputValue"):
        return _named(raw, (), problems)
    else:
        problems.append(((), "must be {isPresent: NAME}, {inputValue: NAME}, true or false"))
    if problems:
        raise every_problem("Condition", problems)
    return raw


def _argument(raw: Any, loc: tuple[str | int, ...], problems: list[tuple[tuple[str | int, ...], str]]) -> Any:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool | int | float):
        # Unquoted YAML scalars (``- 10``): KFP's resolver writes them with str().
        return str(raw)
    if isinstance(raw, ApiModel):
        return raw  # already parsed (a model built in code)
    if not isinstance(raw, Mapping) or len(raw) != 1:
        problems.append((loc, "must be a string or a placeholder with one key, e.g. {inputValue: NAME}"))
        return raw
    key, value = next(iter(raw.items()))
    if key in _NAMED and key != "isPresent":
        return _named(raw, loc, problems)
    if key == "concat":
        if not isinstance(value, list):
            problems.append(((*loc, key), "must be a list of strings and placeholders"))
            return raw
        return ConcatPlaceholder.model_construct(
            concat=[_argument(item, (*loc, key, index), problems) for index, item in enumerate(value)]
        )
    if key == "if":
        return _if(value, (*loc, key), problems)
    if key == "isPresent":
        problems.append((loc, "isPresent is only allowed as an if condition: {if: {cond: {isPresent: NAME}, ...}}"))
    elif key in V2_PLACEHOLDERS:
        problems.append(((*loc, key), _V2_MESSAGE))
    else:
        close = difflib.get_close_matches(str(key), _ARGUMENT_PLACEHOLDERS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(_ARGUMENT_PLACEHOLDERS)}"
        problems.append(((*loc, str(key)), f"unknown placeholder; {hint}"))
    return raw


def _named(raw: Mapping[str, Any], loc: tuple[str | int, ...], problems: list[Any]) -> Any:
    key, name = next(iter(raw.items()))
    if not isinstance(name, str) or not name:
        problems.append(((*loc, key), f"must be the name of an {'output' if key == 'outputPath' else 'input'}"))
        return raw
    if "\x00" in name:
        problems.append(((*loc, key), "must not contain a NUL byte (\\x00); remove it"))
        return raw
    return _named_placeholder(key, name)


def _if(raw: Any, loc: tuple[str | int, ...], problems: list[Any]) -> Any:
    if not isinstance(raw, Mapping):
        problems.append((loc, "must be a mapping with cond, then and optionally else"))
        return raw
    for key in raw:
        if key not in ("cond", "then", "else"):
            problems.append(((*loc, str(key)), "unknown field; allowed: cond, else, then"))
    for key in ("cond", "then"):
        if key not in raw:
            problems.append(((*loc, key), "required field is missing"))
    if problems and any(p[0][: len(loc)] == loc for p in problems):
        return raw
    try:
        cond = parse_condition(raw["cond"])
    except ValidationError as err:
        problems.extend(((*loc, "cond", *e["loc"]), e["msg"].removeprefix("Value error, ")) for e in err.errors())
        return raw
    branches: dict[str, list[Any] | None] = {"then": None, "else": None}
    for key in branches:
        value = raw.get(key)
        if isinstance(value, list):
            branches[key] = [_argument(item, (*loc, key, index), problems) for index, item in enumerate(value)]
        elif value is not None:  # upstream also takes one item where a list is expected
            branches[key] = [_argument(value, (*loc, key), problems)]
    return IfPlaceholder.model_construct(
        if_=IfStructure.model_construct(cond=cond, then=branches["then"] or [], else_=branches["else"])
    )


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
            parsed[str(key)] = _argument(item, (str(key),), problems)
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
        field: [_argument(item, (), ignored) for item in container[field]]
        for field in ("command", "args")
        if isinstance(container.get(field), list)
    }
    env = container.get("env")
    parsed_env = (
        {str(key): _argument(item, (), ignored) for key, item in env.items()} if isinstance(env, Mapping) else {}
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
        key, name = _name_in(item)
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


for _model in (ConcatPlaceholder, IfStructure, IfPlaceholder, ContainerSpec):
    _model.model_rebuild()


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
