"""Pages of a list: ``limit`` objects at a time in a stable order, ``continue`` tokens that say where to go on.

The order is by namespace, then name: a name is unique there, so a page ends at one object and the next starts
right after it, whatever was created or deleted between the two requests (an object created behind the token is
not shown; one deleted ahead of it is not either). The paging itself is the backend's (``list_page`` of the
port: SQL ``LIMIT`` on the embedded store, the API server's own ``limit``/``continue`` on a cluster), so a page
of a long list costs about its own size. The token is opaque to callers (base64url of a small JSON document that
wraps the backend's cursor) and checked when read back: a token this server did not write is refused with a
sentence, never read as a place in the list.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.services.port import CursorError, LabelSelector, ObjectReader, Stored, page_in_memory

#: Version 2 wraps the backend's cursor (version 1 held a (namespace, name) of its own: list again).
_TOKEN_VERSION = 2
#: The longest token read back: one holds a backend's cursor (a namespace and a name, or the API server's
#: continue token, a few hundred characters) and a few more bytes.
MAX_TOKEN_CHARS = 4096

#: The largest page a backend is asked for: more than any list holds, and within what SQLite's LIMIT and the API
#: server's int64 ``limit`` take (a ``limit`` past them is a page of everything, not an overflow).
MAX_LIMIT = 2**31 - 1

REFUSAL = (
    "continue is not a token this server gave out; pass the metadata.continue of the previous page as it "
    "was, or list again from the start without continue"
)


class PagingError(ValueError):
    """A ``continue`` token this server did not write; the message says what to do."""


@dataclass(frozen=True)
class Page:
    """One page: its objects, the next page's token (None: this is the last), and how many objects follow it.

    ``remaining`` is None when the backend cannot tell (the API server with a label selector).
    """

    items: list[Stored]
    next_token: str | None
    remaining: int | None


def page_of(
    backend: ObjectReader,
    kind: type[Stored],
    namespaces: Collection[str] | None,
    *,
    labels: LabelSelector | None,
    limit: int,
    token: str | None,
) -> Page:
    """The page of ``kind`` after ``token`` (None: from the start), at most ``limit`` objects (0: all).

    Raises:
        PagingError: ``token`` is not one of this server's (or not of this list).
    """
    cursor = read_token(token) if token else None
    try:
        page = backend.list_page(kind, namespaces, labels=labels, limit=min(limit, MAX_LIMIT), cursor=cursor)  # type: ignore[type-var]  # Stored kinds are Readable
    except CursorError as err:
        raise PagingError(str(err)) from None
    next_token = write_token(page.cursor) if page.cursor is not None else None
    return Page(list(page.items), next_token, page.remaining)


def page_of_listed(objects: Sequence[Stored], *, limit: int, token: str | None) -> Page:
    """The page after ``token`` of objects already read and filtered whole.

    For a ``fieldSelector``, which no backend selects by: pages are then full, as they would not be if the filter
    ran on each page the backend gave.

    Raises:
        PagingError: ``token`` is not one of this server's (or not of this list).
    """
    cursor = read_token(token) if token else None
    try:
        page = page_in_memory(objects, limit=min(limit, MAX_LIMIT), cursor=cursor)  # type: ignore[type-var]  # Stored kinds are Readable
    except CursorError as err:
        raise PagingError(str(err)) from None
    next_token = write_token(page.cursor) if page.cursor is not None else None
    return Page(list(page.items), next_token, page.remaining)


def write_token(cursor: str) -> str:
    """The token of a page that goes on where the backend's ``cursor`` says."""
    document = json.dumps({"v": _TOKEN_VERSION, "c": cursor}, separators=(",", ":"))
    return base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")


def read_token(token: str) -> str:
    """The backend's cursor a token wraps.

    Raises:
        PagingError: not a token this server wrote.
    """
    refusal = PagingError(REFUSAL)
    if len(token) > MAX_TOKEN_CHARS:
        raise refusal
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document: Any = json.loads(raw)
    except (binascii.Error, ValueError):
        raise refusal from None
    if not isinstance(document, dict) or document.get("v") != _TOKEN_VERSION or not isinstance(document.get("c"), str):
        raise refusal
    return str(document["c"])
