"""Reading a stored row back into an object, and saying in one sentence why a row cannot be.

A row may stop parsing as its kind: written by an older Phalanx, edited by hand, or by a bug that slipped past
validation. The store must then go on serving every other object, so parsing never raises here: it returns the
object, or the reason it cannot be read.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from phalanx.model.base import nul_free_context
from phalanx.model.errors import from_validation_error
from phalanx.model.meta import ObjectMeta

T = TypeVar("T", bound=BaseModel)

# How many field problems the sentence names; the rest are counted.
_SHOWN_PROBLEMS = 3
_MAX_PROBLEM_CHARS = 300


def parse_row(cls: type[T], namespace: str, name: str, version: int, text: str) -> tuple[T | None, str]:
    """Parse a row's JSON body as ``cls``.

    The row's ``resource_version`` column is the truth: a body that says otherwise (edited by hand) gets it, or
    every write back would conflict, forever.

    Returns:
        (the object, "") or (None, why it cannot be read, naming the field paths). A body whose metadata names
        another object than the row's key cannot be read either: writes by it would reach another row.
    """
    try:
        obj = cls.model_validate_json(text, context=nul_free_context(text))
    except Exception as err:  # a validator's own bug (e.g. OverflowError) must not stop a listing either
        return None, describe_error(err)
    meta = getattr(obj, "metadata", None)
    if isinstance(meta, ObjectMeta):
        if (meta.namespace, meta.name) != (namespace, name):
            return None, f"its metadata names {meta.namespace}/{meta.name} but it is stored as {namespace}/{name}"
        if meta.resource_version != str(version):
            meta.resource_version = str(version)
    return obj, ""


def describe_error(err: BaseException) -> str:
    """An error as one short clause on one line.

    A pydantic error gives its first field problems (``a.b: must be ...; c: ...``); anything else its type and
    text (``OverflowError: Python int too large to convert to C long``).
    """
    if not isinstance(err, ValidationError):
        return _clip(f"{type(err).__name__}: {err}")
    problems = [str(problem) for problem in from_validation_error(err)]
    text = "; ".join(problems[:_SHOWN_PROBLEMS])
    if len(problems) > _SHOWN_PROBLEMS:
        text += f" (and {len(problems) - _SHOWN_PROBLEMS} more)"
    return _clip(text)


def _clip(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the error printed
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 3] + "..."
