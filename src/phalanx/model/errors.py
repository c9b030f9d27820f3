"""Spec errors that name the field path and the fix, e.g. ``spec.replicas.worker.count: must be >= 1, got 0``.

Pydantic's error records are translated here, so every entry point (CLI, SDK, REST, operator webhook) prints
the same messages.
"""

from __future__ import annotations

import difflib
import math
import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

#: The longest message and path a FieldError keeps. A message may quote the value it refuses, and a value can be
#: 128 KiB (or a whole file, when it is the file that is refused): past these, the middle is cut, keeping the start
#: (what was refused) and the end (the fix), so every error stays a readable sentence.
MAX_MESSAGE_CHARS = 1000
MAX_PATH_CHARS = 600


def _clipped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[: limit - tail - 5]} ... {text[-tail:]}"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with a spec: where it is and what to do about it (each kept to a readable length)."""

    path: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", _clipped(self.path, MAX_PATH_CHARS))
        object.__setattr__(self, "message", _clipped(self.message, MAX_MESSAGE_CHARS))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """A spec that cannot be accepted; carries every problem found, not just the first."""

    def __init__(self, errors: Sequence[FieldError], *, source: str | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  {error}" for error in self.errors)
        super().__init__(f"{where}invalid spec ({len(self.errors)} problem(s)):\n{lines}")


def join_path(parts: Iterable[Any]) -> str:
    """``("spec", "replicas", "worker", "count")`` → ``spec.replicas.worker.count``; list items as ``[i]``."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def short(value: Any, limit: int = 60) -> str:
    """At most ``limit`` characters of ``value``'s repr, computed from no more of the value than they show.

    A value can be an alias bomb's billions of shared items, nested past any recursion limit, or an integer too
    long for ``str()``: a plain ``repr()`` then runs for minutes or raises.
    """
    text = _bounded_repr(value, limit + 1, levels=3)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BRACKETS: dict[type, tuple[str, str]] = {dict: ("{", "}"), list: ("[", "]"), tuple: ("(", ")")}


def _bounded_repr(value: Any, budget: int, *, levels: int) -> str:
    # ``budget`` characters suffice: the caller cuts the rest. ``levels`` bounds the recursion.
    if isinstance(value, str):
        return repr(value[:budget])
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * budget:
        return f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    if isinstance(value, dict | list | tuple):
        opening, closing = _BRACKETS[dict if isinstance(value, dict) else tuple if isinstance(value, tuple) else list]
        if not levels:
            return f"{opening}...{closing}" if value else f"{opening}{closing}"
        parts: list[str] = []
        used = 1
        items = value.items() if isinstance(value, dict) else value
        for item in items:
            if used >= budget:
                parts.append("...")
                break
            if isinstance(value, dict):
                key, inner = item
                part = f"{_bounded_repr(key, budget - used, levels=levels - 1)}: "
                part += _bounded_repr(inner, budget - used - len(part), levels=levels - 1)
            else:
                part = _bounded_repr(item, budget - used, levels=levels - 1)
            parts.append(part)
            used += len(part) + 2
        if isinstance(value, tuple) and len(parts) == 1:
            return f"({parts[0]},)"
        return opening + ", ".join(parts) + closing
    return reprlib.repr(value)[:budget]


def _message(error: Any, allowed_fields: Sequence[str]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        field = str(error["loc"][-1])
        close = difflib.get_close_matches(field, allowed_fields, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(sorted(allowed_fields))}"
        return f"unknown field{hint}"
    bounds = {
        "greater_than_equal": ">=",
        "greater_than": ">",
        "less_than_equal": "<=",
        "less_than": "<",
    }
    if kind in bounds:
        limit = next(iter(ctx.values())) if ctx else "?"
        return f"must be {bounds[kind]} {limit}, got {short(value)}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected', '?')}, got {short(value)}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, got {short(value)}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, got {short(value)}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, got {short(value)}"
    if kind in ("string_type",):
        return f"must be a string, got {short(value)}"
    if kind in ("list_type",):
        return f"must be a list, e.g. [a, b], got {short(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {short(value)}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg']}, got {short(value)}"


def _index_or_key(part: str) -> str | int:
    return int(part[1:-1]) if part.startswith("[") and part.endswith("]") and part[1:-1].isdigit() else part


def from_validation_error(
    err: ValidationError, *, prefix: Sequence[Any] = (), fields_at: Any = None
) -> list[FieldError]:
    """Translate a pydantic error into FieldErrors.

    Args:
        err: the pydantic error.
        prefix: path parts to put before each location.
        fields_at: a callable ``loc -> allowed field names`` used to suggest a field for misspelt keys.
    """
    errors: list[FieldError] = []
    for item in err.errors(include_url=False):
        loc = [part for part in item["loc"] if not (isinstance(part, str) and "[" in part)]
        allowed = fields_at(loc[:-1]) if fields_at else []
        message = _message(item, allowed)
        # Validators raise "field: problem" when the problem belongs to a sub-field; keep that path.
        if item["type"] == "value_error" and ": " in message and " " not in message.split(": ", 1)[0]:
            sub, message = message.split(": ", 1)
            # "[2].valueFrom" names a list item, as join_path writes it: keep the index an index.
            loc = [*loc, *(_index_or_key(part) for part in sub.replace("[", ".[").split(".") if part)]
        errors.append(FieldError(join_path([*prefix, *loc]), message))
    return errors
