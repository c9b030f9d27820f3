"""Errors raised by the state stores.

Every store failure is a ``StoreError`` so callers can catch one type at the edge (CLI, REST) and still tell
the cases that need different handling apart: a missing object (``NotFoundError``, HTTP 404), a name already
taken (``AlreadyExistsError``, 409), a lost optimistic-concurrency race (``ConflictError``, 409: re-read and
retry), a change feed read from a point that was compacted away (``ChangesExpiredError``, 410: list again) and
a store that cannot be used for now (``StoreUnavailableError``, 503: locked by another process for longer than
the busy timeout, or on a full disk; nothing was changed, and the same call may succeed later).
a row that no longer parses as its kind (``UnreadableError``: quarantined, it can only be deleted).
Messages name the object as ``Kind namespace/name`` so they can be shown to a user as they are.
"""

from __future__ import annotations


class StoreError(Exception):
    """The state store failed or refused an operation."""


class NotFoundError(StoreError):
    """The object does not exist."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{kind} {namespace}/{name} not found")
        self.kind = kind
        self.namespace = namespace
        self.name = name


class AlreadyExistsError(StoreError):
    """An object of that kind, namespace and name exists already."""

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        super().__init__(f"{kind} {namespace}/{name} already exists; delete it first or choose another name")
        self.kind = kind
        self.namespace = namespace
        self.name = name


class ConflictError(StoreError):
    """The object changed since the caller read it (its resourceVersion moved on)."""

    def __init__(self, kind: str, namespace: str, name: str, *, current: str, expected: str | None) -> None:
        had = expected if expected is not None else "none"
        super().__init__(
            f"{kind} {namespace}/{name} was modified (resourceVersion {current}, you had {had}); re-read and retry"
        )
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.current = current
        self.expected = expected


class ChangesExpiredError(StoreError):
    """The change feed no longer holds the changes after the requested sequence number."""

    def __init__(self, after_seq: int, compacted_through: int) -> None:
        super().__init__(
            f"changes after {after_seq} were compacted (the feed starts after {compacted_through}); "
            "list the objects again and follow the feed from latest_seq()"
        )
        self.after_seq = after_seq
        self.compacted_through = compacted_through


class StoreUnavailableError(StoreError):
    """The store cannot be used for now; the operation changed nothing and may succeed if tried again.

    Attributes:
        path: the database file.
        cause: ``"locked"`` (another process held the write lock past the busy timeout), ``"full"`` (the disk
            holding the store has no space left) or ``"io"`` (the disk failed to read or write).
        waited_seconds: how long the call waited for the lock (``"locked"`` only).

    """

    def __init__(self, path: str, cause: str, *, waited_seconds: float = 0.0, detail: str = "") -> None:
        if cause == "locked":
            message = f"the state store {path} is locked by another process (waited {waited_seconds:g} s); try again"
        elif cause == "full":
            message = f"the state store {path} cannot be written because its disk is full; free space and try again"
        else:
            message = f"the state store {path} cannot be read or written ({detail}); check its disk and try again"
        super().__init__(message)
        self.path = path
        self.cause = cause
        self.waited_seconds = waited_seconds


class UnreadableError(StoreError):
    """The stored row does not parse as an object of its kind (written by hand, by an older version, by a bug).

    The store has quarantined it (``SqliteStore.quarantined``); it can only be deleted (``delete_row``).
    """

    def __init__(self, kind: str, namespace: str, name: str, problem: str) -> None:
        super().__init__(
            f"{kind} {namespace}/{name} is stored but cannot be read ({problem}); it is quarantined: delete it"
        )
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.problem = problem
