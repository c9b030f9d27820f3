"""The ``fieldSelector`` of lists and watches: a few fields compared with ``=``, ``==`` or ``!=``, comma-joined (AND).

The fields are the ones a caller filters jobs by: ``metadata.name``, ``metadata.namespace``, ``status.phase`` and
``spec.scheduling.queue``; any other is refused naming these, rather than ignored (a selector that selected more
than asked would show objects the caller did not mean). A field an object does not have (a Queue has no
``status.phase``) has the empty value, as on Kubernetes: ``status.phase!=Running`` selects it, ``status.phase=x``
does not. Matching reads the object's wire form (what the API answers), so a list and a watch select alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.entrypoints.server.selectors import MAX_SELECTOR_CHARS, SelectorError

SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace", "status.phase", "spec.scheduling.queue")
_SUPPORTED = (
    f"fieldSelector takes {', '.join(SUPPORTED_FIELDS)} with '=', '==' or '!=', comma-separated, "
    "e.g. status.phase=Running,metadata.namespace=ml"
)


@dataclass(frozen=True)
class FieldRequirement:
    """One ``field=value`` (``equal``) or ``field!=value``."""

    field: str
    value: str
    equal: bool = True


FieldSelector = tuple[FieldRequirement, ...]


def parse_field_selector(text: str) -> FieldSelector:
    """The requirements ``text`` asks for (an empty text: none, every object).

    Raises:
        SelectorError: a field not supported, no operator, or an operator other than ``=``, ``==``, ``!=``.
    """
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"fieldSelector is {len(text)} characters long, past {MAX_SELECTOR_CHARS}; {_SUPPORTED}")
    if not text.strip():
        return ()
    requirements: list[FieldRequirement] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise SelectorError(f"fieldSelector {text!r} has an empty requirement; {_SUPPORTED}")
        requirements.append(_requirement(part))
    return tuple(requirements)


def _requirement(part: str) -> FieldRequirement:
    if "!=" in part:
        field, _, value = part.partition("!=")
        equal = False
    elif "==" in part:
        field, _, value = part.partition("==")
        equal = True
    elif "=" in part:
        field, _, value = part.partition("=")
        equal = True
    else:
        raise SelectorError(f"fieldSelector {part!r} has no '=', '==' or '!='; {_SUPPORTED}")
    field, value = field.strip(), value.strip()
    if field not in SUPPORTED_FIELDS:
        raise SelectorError(f"fieldSelector {part!r}: {field!r} is not a field this server selects on; {_SUPPORTED}")
    if any(c in value for c in "=!()"):
        raise SelectorError(
            f"fieldSelector {part!r}: the value {value!r} holds '=', '!' or a parenthesis; {_SUPPORTED}"
        )
    return FieldRequirement(field, value, equal)


def field_value(document: Mapping[str, Any], field: str) -> str:
    """The field's value in the object's wire form; "" when it has none."""
    node: Any = document
    for step in field.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(step)
    return "" if node is None else str(node)


def fields_match(selector: FieldSelector, document: Mapping[str, Any]) -> bool:
    """Whether the object (wire form) meets every requirement."""
    return all((field_value(document, r.field) == r.value) is r.equal for r in selector)
