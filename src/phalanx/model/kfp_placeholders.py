"""The placeholders of a KFP v1 component's command line: their models and their parsing, by path.

A command-line item is a string or a mapping with one key: ``inputValue``, ``inputPath``, ``outputPath`` (a
name), ``concat`` (a list of items) or ``if`` (``cond``, ``then``, optional ``else``); ``isPresent`` (a name) is
allowed only as an ``if`` condition, as in the upstream schema (kubeflow/pipelines 1.8,
``components.json_schema.json``). Of the placeholders the SDK later added for its v2-compatible mode, only
``executorInput`` is taken (``{executorInput: {}}``, or ``null`` as the SDK writes it): the whole ExecutorInput JSON
a kfp v2 lightweight Python component reads (``core.pipelines.kfp_executor`` writes it); the others (``inputUri``,
``outputUri``, ``inputMetadata``, ``outputMetadata``) are refused by path, as is any other key. Parsing is
written by hand rather than left to pydantic's union matching, so that a bad placeholder gets one sentence
about *that* placeholder, not one error per union member. Whether the names exist is the component's check
(``model.kfp_component``); what they resolve to is ``core.pipelines.placeholders``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Union

from pydantic import Field, JsonValue, ValidationError, field_validator

from phalanx.model.base import ApiModel, every_problem
from phalanx.model.errors import short

#: Placeholders of the SDK's v2-compatible mode (``dsl/v1_structures.py``) that are refused: URIs and metadata
#: belong to KFP's artifact store and metadata service, which Phalanx does not have.
V2_PLACEHOLDERS = ("inputUri", "outputUri", "inputMetadata", "outputMetadata")
_V2_MESSAGE = "v2-compatible placeholders are not supported; use inputPath or outputPath (a local file path) instead"
_ARGUMENT_PLACEHOLDERS = ("inputValue", "inputPath", "outputPath", "concat", "if", "executorInput")
#: What ``if.cond`` may be besides an ``isPresent``/``inputValue`` placeholder: strings read as
#: ``distutils.util.strtobool`` reads them, as the KFP v1 SDK does.
TRUE_WORDS = frozenset({"y", "yes", "t", "true", "on", "1"})
FALSE_WORDS = frozenset({"n", "no", "f", "false", "off", "0"})


class InputValuePlaceholder(ApiModel):
    """``{inputValue: NAME}``: the argument's value as one string."""

    input_value: str


class InputPathPlaceholder(ApiModel):
    """``{inputPath: NAME}``: a local path holding the input's data."""

    input_path: str


class OutputPathPlaceholder(ApiModel):
    """``{outputPath: NAME}``: a local path the program must write the output to."""

    output_path: str


class ExecutorInputPlaceholder(ApiModel):
    """``{executorInput: {}}``: KFP v2's ExecutorInput as one JSON string (inputs, output paths, the output file).

    Only kfp v2 lightweight Python components use it (``python3 -m kfp.dsl.executor_main --executor_input ...``);
    the value is always empty: the SDK refuses anything else.
    """

    executor_input: dict[str, JsonValue] = Field(default_factory=dict, max_length=0)


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
    str,
    InputValuePlaceholder,
    InputPathPlaceholder,
    OutputPathPlaceholder,
    ConcatPlaceholder,
    IfPlaceholder,
    ExecutorInputPlaceholder,
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


def name_in(item: ApiModel) -> tuple[str, str]:
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
    parsed = [parse_argument(item, (index,), problems) for index, item in enumerate(raw)]
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


Problems = list[tuple[tuple[str | int, ...], str]]


def parse_argument(raw: Any, loc: tuple[str | int, ...], problems: Problems) -> Any:
    """One command-line item as an ``Argument``; its problems are appended to ``problems`` (then ``raw`` returns)."""
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
            concat=[parse_argument(item, (*loc, key, index), problems) for index, item in enumerate(value)]
        )
    if key == "if":
        return _if(value, (*loc, key), problems)
    if key == "executorInput":
        if value is not None and value != {}:
            problems.append(((*loc, key), "takes no value: write {executorInput: {}}"))
            return raw
        return ExecutorInputPlaceholder.model_construct(executor_input={})
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
            branches[key] = [parse_argument(item, (*loc, key, index), problems) for index, item in enumerate(value)]
        elif value is not None:  # upstream also takes one item where a list is expected
            branches[key] = [parse_argument(value, (*loc, key), problems)]
    return IfPlaceholder.model_construct(
        if_=IfStructure.model_construct(cond=cond, then=branches["then"] or [], else_=branches["else"])
    )


def named_in(item: Any) -> list[tuple[str, str]]:
    """(placeholder key, name) of every named placeholder in ``item``, through concat and both if branches.

    ``{executorInput: {}}`` names no one input: it is listed as ``("executorInput", "")``.
    """
    if isinstance(item, InputValuePlaceholder | InputPathPlaceholder | OutputPathPlaceholder | IsPresentPlaceholder):
        return [name_in(item)]
    if isinstance(item, ExecutorInputPlaceholder):
        return [("executorInput", "")]
    found: list[tuple[str, str]] = []
    if isinstance(item, ConcatPlaceholder):
        for part in item.concat:
            found += named_in(part)
    elif isinstance(item, IfPlaceholder):
        parts: list[Any] = [item.if_.cond, *item.if_.then, *(item.if_.else_ or [])]
        for part in parts:
            found += named_in(part)
    return found


for _model in (ConcatPlaceholder, IfStructure, IfPlaceholder):
    _model.model_rebuild()
