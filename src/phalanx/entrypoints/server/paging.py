"""Pages of a list: ``limit`` objects at a time in a stable order, ``continue`` tokens that say where to go on.

The order is by namespace, then name: a name is unique there, so a page ends at one object and the next starts
right after it, whatever was created or deleted between the two requests (an object created behind the token is
not shown; one deleted ahead of it is not either). The token is opaque to callers (base64url of a small JSON
document) and checked when read back: a token this server did not write is refused with a sentence, never read
as a place in the list.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.services.port import Stored

_TOKEN_VERSION = 1
#: The longest token read back: one holds a namespace and a name (63 characters each) and a few more bytes.
MAX_TOKEN_CHARS = 1024


class PagingError(ValueError):
    """A ``continue`` token this server did not write; the message says what to do."""


@dataclass(frozen=True)
class Page:
    """One page: its objects, the token of the next (None: this is the last) and how many objects follow it."""

    items: list[Stored]
    next_token: str | None
    remaining: int


def _key(obj: Stored) -> tuple[str, str]:
    return (obj.metadata.namespace, obj.metadata.name)


def page_of(objects: Sequence[Stored], *, limit: int, token: str | None) -> Page:
    """The page of ``objects`` after ``token`` (None: from the start), at most ``limit`` of them (0: all).

    Raises:
        PagingError: ``token`` is not one of this server's.
    """
    ordered = sorted(objects, key=_key)
    if token:
        after = read_token(token)
        ordered = [obj for obj in ordered if _key(obj) > after]
    if limit <= 0 or len(ordered) <= limit:
        return Page(ordered, None, 0)
    items = ordered[:limit]
    return Page(items, write_token(_key(items[-1])), len(ordered) - limit)


def write_token(after: tuple[str, str]) -> str:
    """The token of a page that goes on after the object at ``after`` (namespace, name)."""
    document = json.dumps({"v": _TOKEN_VERSION, "after": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


def read_token(token: str) -> tuple[str, str]:
    """Where the page of ``token`` starts after (namespace, name).

    Raises:
        PagingError: not a token this server wrote.
    """
    refusal = PagingError(
        "continue is not a token this server gave out; pass the metadata.continue of the previous page as it "
        "was, or list again from the start without continue"
    )
    if len(token) > MAX_TOKEN_CHARS:
        raise refusal
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document: Any = json.loads(raw)
    except (binascii.Error, ValueError):
        raise refusal from None
    if not isinstance(document, dict) or document.get("v") != _TOKEN_VERSION:
        raise refusal
    after = document.get("after")
    if not (isinstance(after, list) and len(after) == 2 and all(isinstance(part, str) for part in after)):
        raise refusal
    return (after[0], after[1])
