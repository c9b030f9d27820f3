"""The pydantic base shared by every API structure: camelCase wire names, no unknown keys, no NUL bytes.

Python uses snake_case, the wire camelCase.

Unknown keys are errors, not silently dropped: a misspelt ``backofLimit`` must not quietly run a job with the
default policy.

No string of a declared object may hold a NUL byte: names become paths, commands become ``execve`` arguments and
environment entries, and a NUL there either truncates the value silently or makes the launch fail in a way the
user cannot read (a job once reported "killed by signal 9"). Each model checks only the strings it holds directly
(its own fields, and the items, keys and values of its lists and mappings); nested models check theirs, so every
string is looked at once. Observed free text (status messages, events) is exempt: it may quote a program's
output, and refusing it would stop the controller rather than a user's typo.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any, ClassVar, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

API_GROUP = "phalanx.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"

ModelT = TypeVar("ModelT", bound=BaseModel)


def in_phases(objects: Iterable[ModelT], phases: Collection[str] | None) -> list[ModelT]:
    """The objects whose ``status.phase`` is one of ``phases`` (None: all of them); one without a status: none."""
    if phases is None:
        return list(objects)
    wanted = frozenset(phases)
    return [obj for obj in objects if getattr(getattr(obj, "status", None), "phase", None) in wanted]


NUL_MESSAGE = "must not contain a NUL byte (\\x00); remove it"

#: Validation context key: the JSON text being validated holds no ``\u0000`` escape, so no string decoded from it
#: holds a NUL byte (JSON has no other way to write one), and the per-field NUL checks are skipped.
NUL_FREE = "phalanx_nul_free"


def nul_free_context(text: str | bytes) -> dict[str, bool] | None:
    """The validation context for ``model_validate_json(text)``: NUL-free when the text has no ``\u0000``."""
    escape = "\\u0000" if isinstance(text, str) else b"\\u0000"
    return None if escape in text else {NUL_FREE: True}  # type: ignore[operator]  # str in str, bytes in bytes


class ApiModel(BaseModel):
    """Base for every API structure: camelCase aliases, strict keys, assignment validated, no NUL bytes."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        use_enum_values=True,
    )

    #: Observed free text (status, events) may quote program output; declared fields may not hold NUL bytes.
    nul_bytes_allowed: ClassVar[bool] = False

    @model_validator(mode="after")
    def _no_nul_bytes(self, info: ValidationInfo) -> ApiModel:
        if info.context is not None and info.context.get(NUL_FREE):
            return self
        fields = _STRING_FIELDS.get(type(self))
        if fields is None:
            fields = _string_fields(type(self))
        values = self.__dict__
        for name, wire in fields:
            value = values[name]
            if value is None or (type(value) is str and "\x00" not in value):
                continue  # the common cases, without a call
            where = nul_byte_in(value, wire)
            if where is not None:
                # "path: problem" — errors.from_validation_error turns the prefix into the field path.
                raise ValueError(f"{where}: {NUL_MESSAGE}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, JSON-compatible values, unset optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


_STRING_FIELDS: dict[type[BaseModel], tuple[tuple[str, str], ...]] = {}


def _string_fields(model: type[ApiModel]) -> tuple[tuple[str, str], ...]:
    """(Python name, wire name) of the fields whose type can hold a string, computed once per class.

    Models are validated on every store read: looking only where a string can be keeps the check cheap.
    """
    found = _STRING_FIELDS.get(model)
    if found is None:
        found = ()
        if not model.nul_bytes_allowed:
            found = tuple(
                (name, field.alias or name)
                for name, field in model.model_fields.items()
                if _can_hold_string(field.annotation)
            )
        _STRING_FIELDS[model] = found
    return found


def _can_hold_string(annotation: Any) -> bool:
    if annotation is str:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False  # checks its own fields
    return any(_can_hold_string(arg) for arg in get_args(annotation))


def nul_byte_in(value: Any, path: str) -> str | None:
    """The path of the first string holding a NUL byte in ``value`` (a string, or a list or mapping of them).

    Nested API models are not entered: each checks its own fields when it is validated.
    """
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        with contextlib.suppress(TypeError):  # all keys and values strings: one scan each, in C
            if "\x00" not in "".join(value) and "\x00" not in "".join(value.values()):
                return None
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return path
            if not isinstance(item, BaseModel) and (found := nul_byte_in(item, f"{path}.{key}")) is not None:
                return found
    elif isinstance(value, list | tuple):
        with contextlib.suppress(TypeError):
            if "\x00" not in "".join(value):
                return None
        for position, item in enumerate(value):
            if not isinstance(item, BaseModel) and (found := nul_byte_in(item, f"{path}[{position}]")) is not None:
                return found
    return None


def every_problem(title: str, problems: Sequence[tuple[tuple[str | int, ...], str]]) -> ValidationError:
    """One error per ``(location, message)``, for a validator that finds several problems at once.

    Raised from a validator, pydantic prefixes each location with the validator's own, so every problem keeps its
    field path (a plain ``ValueError`` would carry only the first).
    """
    return ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=None)
            for loc, message in problems
        ],
    )


def validated_copy(obj: ModelT, **changes: Any) -> ModelT:
    """A copy of ``obj`` with top-level fields replaced, validated as a whole object.

    ``model_copy(update=...)`` validates nothing: one unvalidated namespace once reached the store that way and
    stopped the control plane. Every change on a write path goes through here (or through ``model_validate``).
    """
    data = obj.model_dump(round_trip=True)
    for name, value in changes.items():
        data[name] = value.model_dump(round_trip=True) if isinstance(value, BaseModel) else value
    return type(obj).model_validate(data)
