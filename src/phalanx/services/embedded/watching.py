"""The embedded backend's change side: a kind's watch events read from the SQLite store's change feed.

Every write appends a row to the store's ``changes`` table in its own transaction, and that row's ``seq`` is the
object's new resourceVersion; a deletion appends a DELETED row (the key alone: the object is gone). The control
plane compacts the feed to its newest ``keep_changes`` rows, so a watch from before the horizon is an
``ExpiredError`` (410: list again).

A row names an object, not the version it wrote, so an ADDED or MODIFIED row is read as the object is now: when
it has moved on since (a later row of the same object follows), the row is passed over and the later one carries
it, so a reader never sees a version twice nor an older one after a newer. A row passed over that was the
object's creation hands its ADDED on to the row that carries the object. While nothing of the kind changes, a
BOOKMARK at the feed's head (read before the wait: nothing of the kind up to it was missed) moves the reader on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from phalanx.adapters.store import ChangesExpiredError, SqliteStore, UnreadableError
from phalanx.adapters.store.records import Change
from phalanx.services.port import ExpiredError, Stored, WatchEvent, WatchType

log = logging.getLogger(__name__)

#: How long a watch waits on a quiet feed before it yields a BOOKMARK at the feed's head.
BOOKMARK_SECONDS = 1.0


def version_number(resource_version: str) -> int:
    """The store's revision a resourceVersion names.

    Raises:
        ValueError: not a revision of this store (a whole number).
    """
    if not resource_version.isascii() or not resource_version.isdigit():
        raise ValueError(f"resourceVersion {resource_version!r} is not a whole number")
    return int(resource_version)


def watch_store(store: SqliteStore, kind: type[Stored], resource_version: str, timeout: float) -> Iterator[WatchEvent]:
    """The changes of ``kind`` after ``resource_version`` until ``timeout`` seconds pass (``ChangeReader.watch``).

    Raises:
        ExpiredError: the feed was compacted past ``resource_version``.
        ValueError: ``resource_version`` is not a whole number.
    """
    after = version_number(resource_version)
    deadline = time.monotonic() + timeout
    created: set[tuple[str, str]] = set()  # objects whose ADDED row was passed over for a later row
    while (remaining := deadline - time.monotonic()) > 0:
        head = store.latest_seq()
        try:
            changes = store.wait_for_change(after, min(remaining, BOOKMARK_SECONDS), [kind.__name__])
        except ChangesExpiredError as err:
            raise ExpiredError(
                f"resourceVersion {resource_version} is older than the changes this server keeps (from "
                f"{err.compacted_through + 1} on); list again and watch from the list's metadata.resourceVersion"
            ) from None
        if not changes:
            if head > after:
                after = head
                yield WatchEvent("BOOKMARK", str(head))
            continue
        for change in changes:
            event = _event(store, kind, change, created)
            after = change.seq
            if event is not None:
                yield event


def _event(store: SqliteStore, kind: type[Stored], change: Change, created: set[tuple[str, str]]) -> WatchEvent | None:
    """The watch event of one feed row, or None when a later row carries the object (see the module)."""
    key = (change.namespace, change.name)
    if change.type == "DELETED":
        created.discard(key)
        return WatchEvent("DELETED", str(change.seq), change.namespace, change.name)
    try:
        obj = store.try_get(kind, change.namespace, change.name)
    except UnreadableError as err:  # quarantined: the list leaves it out too
        log.warning("watch: %s %s/%s cannot be read: %s", kind.__name__, change.namespace, change.name, err)
        return None
    if obj is None or obj.metadata.resource_version != str(change.seq):
        if change.type == "ADDED":
            created.add(key)
        return None
    kind_of_change: WatchType = "ADDED" if key in created or change.type == "ADDED" else "MODIFIED"
    created.discard(key)
    return WatchEvent(kind_of_change, str(change.seq), change.namespace, change.name, obj)
