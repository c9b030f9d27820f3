"""The ``{{...}}`` reference language of pipeline arguments, ``parallelFor.items`` and ``when`` conditions.

Three references exist, nothing else (the design fixes them):

- ``{{params.NAME}}``: a pipeline parameter's value;
- ``{{steps.STEP.outputs.NAME}}``: an output of an earlier step; of a fanned-out step, the JSON list of its
  per-item values, in item order (fan-in);
- ``{{item}}``: the current item, inside a step with ``parallelFor``.

Whitespace inside the braces is allowed (``{{ item }}``), as in KFP/Argo templates. An output name may hold spaces
(KFP v1 names such as ``shard list``), so it runs to the closing braces. A ``when`` condition is one comparison
``LEFT OP RIGHT`` with ``OP`` one of ``== != < <= > >=``; each side a reference, a number, or a string (quoted, or a
bare word). Pure parsing and rendering; which references exist is checked by ``core.pipelines.dag``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from pydantic import JsonValue

_BRACES = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PARAM = re.compile(r"params\.([A-Za-z_][A-Za-z0-9_-]*)")
_OUTPUT = re.compile(r"steps\.([a-z][-a-z0-9]*)\.outputs\.(\S(?:.*\S)?)", re.DOTALL)
_HINT = "use {{params.NAME}}, {{steps.STEP.outputs.NAME}} or {{item}}"


@dataclass(frozen=True, slots=True)
class ParamRef:
    """``{{params.NAME}}``."""

    name: str


@dataclass(frozen=True, slots=True)
class OutputRef:
    """``{{steps.STEP.outputs.NAME}}``."""

    step: str
    output: str


@dataclass(frozen=True, slots=True)
class ItemRef:
    """``{{item}}``."""


Reference = ParamRef | OutputRef | ItemRef


class ReferenceSyntaxError(ValueError):
    """A ``{{...}}`` that is not one of the three references, or a malformed condition (message: the fix)."""


def parse_reference(body: str) -> Reference:
    """The reference written between ``{{`` and ``}}``.

    Raises:
        ReferenceSyntaxError: naming what was written and what is accepted.
    """
    text = body.strip()
    if text == "item":
        return ItemRef()
    if match := _PARAM.fullmatch(text):
        return ParamRef(match.group(1))
    if match := _OUTPUT.fullmatch(text):
        return OutputRef(match.group(1), match.group(2))
    raise ReferenceSyntaxError(f"{{{{{text[:80]}}}}} is not a reference; {_HINT}")


def references_in(text: str) -> Iterator[Reference]:
    """Every reference in ``text``, in order.

    Raises:
        ReferenceSyntaxError: at the first ``{{...}}`` that is not a reference, or an unclosed ``{{``.
    """
    end = 0
    for match in _BRACES.finditer(text):
        end = match.end()
        yield parse_reference(match.group(1))
    if "{{" in text[end:]:
        raise ReferenceSyntaxError(f"a '{{{{' is not closed by '}}}}'; {_HINT}")


def scan(text: str) -> tuple[list[Reference], list[str]]:
    """Every good reference in ``text`` and a message for each bad one (so one typo hides no other edge)."""
    found: list[Reference] = []
    problems: list[str] = []
    end = 0
    for match in _BRACES.finditer(text):
        end = match.end()
        try:
            found.append(parse_reference(match.group(1)))
        except ReferenceSyntaxError as err:
            problems.append(str(err))
    if "{{" in text[end:]:
        problems.append(f"a '{{{{' is not closed by '}}}}'; {_HINT}")
    return found, problems


def whole_reference(text: str) -> Reference | None:
    """The reference if ``text`` is exactly one reference (an artifact is passed only whole), else None."""
    match = _BRACES.fullmatch(text.strip())
    if match is None or "{{" in match.group(1):
        return None
    try:
        return parse_reference(match.group(1))
    except ReferenceSyntaxError:
        return None


def substitute(text: str, resolve: Callable[[Reference], str]) -> str:
    """``text`` with each reference replaced by ``resolve(reference)``; the rest kept byte for byte.

    Replacement text is never scanned again, so a value holding ``{{...}}`` stays as it is.
    """
    return _BRACES.sub(lambda match: resolve(parse_reference(match.group(1))), text)


def render(value: JsonValue) -> str:
    """A value as an argument string: strings as they are, everything else as compact JSON (KFP's rendering)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


# ---- conditions ---------------------------------------------------------------------------------------------

OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
# What a mistyped operator most likely meant (written as in other languages or with its characters swapped).
_MEANT = {"=>": ">=", "=<": "<=", "=": "==", "<>": "!=", "=!": "!=", "===": "==", "!==": "!="}
_OPERATOR_CHARACTERS = re.compile(r"[=!<>]+")
_CONDITION = re.compile(r"\s*(.+?)\s*(==|!=|<=|>=|<|>)\s*(.+?)\s*", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Constant:
    """A literal side of a condition: a number or a string."""

    text: str


Operand = Reference | Constant


@dataclass(frozen=True, slots=True)
class Condition:
    """``left op right``."""

    left: Operand
    op: str
    right: Operand


def parse_condition(text: str) -> Condition:
    """One comparison, e.g. ``{{steps.train.outputs.accuracy}} > 0.8``.

    Raises:
        ReferenceSyntaxError: with the accepted form.
    """
    # Split outside references: an output name may contain characters of an operator only inside braces.
    masked = _BRACES.sub(lambda match: "\x01" * len(match.group(0)), text)
    runs = _OPERATOR_CHARACTERS.findall(masked)
    if len(runs) == 1 and runs[0] not in OPERATORS:
        # Else `a => 1` reads as `a =` > `1`, and the message would blame the left side rather than the typo.
        meant = f"; use {_MEANT[runs[0]]!r}" if runs[0] in _MEANT else ""
        raise ReferenceSyntaxError(
            f"{runs[0]!r} is not a comparison operator{meant} (OP is one of == != < <= > >=, as in "
            '"{{steps.train.outputs.accuracy}} >= 0.8")'
        )
    match = _CONDITION.fullmatch(masked)
    if match is None or any(op in masked[match.end(2) :] for op in ("==", "!=", "<", ">")):
        raise ReferenceSyntaxError(
            "a condition is one comparison LEFT OP RIGHT with OP one of == != < <= > >=, each side a reference, a "
            'number or a string, e.g. "{{steps.train.outputs.accuracy}} > 0.8"'
        )
    left = text[match.start(1) : match.end(1)]
    right = text[match.start(3) : match.end(3)]
    return Condition(_operand(left), match.group(2), _operand(right))


def _operand(text: str) -> Operand:
    if text.startswith("{{"):
        reference = whole_reference(text)
        if reference is None:
            # Let references_in name the bad reference; a side glued to more text is not one reference.
            list(references_in(text))
            raise ReferenceSyntaxError(
                f"{text[:80]!r}: a side of a condition is one whole reference, a number or a string"
            )
        return reference
    if "{{" in text:
        list(references_in(text))
        raise ReferenceSyntaxError(f"{text[:80]!r}: a side of a condition is one whole reference, a number or a string")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return Constant(text[1:-1])
    return Constant(text)


def condition_references(condition: Condition) -> list[Reference]:
    """The references a condition reads."""
    return [side for side in (condition.left, condition.right) if not isinstance(side, Constant)]


def evaluate(condition: Condition, resolve: Callable[[Reference], str]) -> bool:
    """Whether the condition holds once its references are resolved.

    Two numbers compare as numbers (``"10" > "9"``); otherwise ``==``/``!=`` compare the strings and an ordering
    of a non-number is an error, since ``"10" < "9"`` as strings would silently mislead.

    Raises:
        ReferenceSyntaxError: an ordering between values that are not both numbers.
    """
    left = _side(condition.left, resolve)
    right = _side(condition.right, resolve)
    numbers = _number(left), _number(right)
    if numbers[0] is not None and numbers[1] is not None:
        a, b = numbers[0], numbers[1]
        return _compare(a, b, condition.op)
    if condition.op in ("==", "!="):
        return (left == right) == (condition.op == "==")
    raise ReferenceSyntaxError(
        f"{condition.op} compares numbers only, got {left[:40]!r} and {right[:40]!r}; use == or != for strings"
    )


def _side(operand: Operand, resolve: Callable[[Reference], str]) -> str:
    return operand.text if isinstance(operand, Constant) else resolve(operand)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _compare(a: float, b: float, op: str) -> bool:
    table: Mapping[str, bool] = {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
    return table[op]
