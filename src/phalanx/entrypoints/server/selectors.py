"""The list query's ``labelSelector``: equality (``key=value``, ``key==value``) and existence (``key``), comma-joined.

That is what the port selects on (``services.port.LabelSelector``). The set-based forms of Kubernetes (``!=``,
``in (...)``, ``notin (...)``, ``!key``) are refused by name rather than read wrongly: a selector that selected
more than asked would show a caller objects they did not mean.
"""

from __future__ import annotations

import re

from phalanx.services.port import LabelSelector

#: A label key (an optional DNS prefix and ``/``, then a name) and a label value, as Kubernetes allows them.
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SET_FORM = re.compile(r"\s(in|notin)\s*\(")
_SUPPORTED = "use key=value or key (the label is set), comma-separated, e.g. team=ml,tier"
#: The longest selector read: far past any real one, short of a message that quotes a megabyte.
MAX_SELECTOR_CHARS = 4096


class SelectorError(ValueError):
    """A selector that cannot be read; the message is one sentence naming the part and the fix."""


def parse_label_selector(text: str) -> LabelSelector:
    """The selector ``text`` asks for, as the port takes it (an empty text selects everything).

    Raises:
        SelectorError: a form not supported, a bad key or value, or a key asked twice.
    """
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"labelSelector is {len(text)} characters long, past {MAX_SELECTOR_CHARS}; {_SUPPORTED}")
    selector: dict[str, str | None] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            if text.strip():
                raise SelectorError(f"labelSelector {text!r} has an empty requirement; {_SUPPORTED}")
            continue
        key, value = _requirement(part)
        if key in selector:
            raise SelectorError(f"labelSelector names the label {key!r} twice; name each label once")
        selector[key] = value
    return selector


def _requirement(part: str) -> tuple[str, str | None]:
    """One ``key=value``, ``key==value`` or ``key``."""
    if "!=" in part:
        raise SelectorError(f"labelSelector {part!r} uses '!=', which this server does not support; {_SUPPORTED}")
    if (set_form := _SET_FORM.search(part)) or "(" in part:
        form = set_form.group(1) if set_form else "a set of values"
        raise SelectorError(f"labelSelector {part!r} uses {form!r}, which this server does not support; {_SUPPORTED}")
    if part.startswith("!"):
        raise SelectorError(
            f"labelSelector {part!r} asks for a label to be absent ('!'), which this server does not support; "
            + _SUPPORTED
        )
    key, equals, value = part.partition("==") if "==" in part else part.partition("=")
    key, value = key.strip(), value.strip()
    if not _KEY.match(key):
        raise SelectorError(
            f"labelSelector {part!r}: {key!r} is not a label key (letters, digits, '-', '_', '.', at most 63, "
            "with an optional DNS prefix and '/'); " + _SUPPORTED
        )
    if not equals:
        return key, None
    if not _VALUE.match(value):
        raise SelectorError(
            f"labelSelector {part!r}: {value!r} is not a label value (letters, digits, '-', '_', '.', at most 63, "
            "starting and ending with a letter or digit); " + _SUPPORTED
        )
    return key, value
