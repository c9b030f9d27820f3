"""Plain records the store hands out besides API objects: feed changes, leases, event and quarantine records.

They are frozen dataclasses, not pydantic models: they never travel on the wire as API objects and callers
(the controller's watch loop, leader election) read them on hot paths. This module also owns how times are
kept in SQLite columns — integer microseconds since the Unix epoch, UTC — so comparisons (lease expiry,
event order) are exact integer comparisons and no timezone or float rounding can reorder them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from phalanx.model.events import Event

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]
"""What a change did to its object, as in a Kubernetes watch event."""

EVENT_KIND = "Event"
"""The kind under which recorded events appear in the change feed."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change feed.

    ``seq`` is the global revision the write produced; for objects it is also their new resourceVersion.
    For events (``kind == "Event"``) ``name`` is ``"<ObjectKind>/<objectName>"`` of the object the event is
    about, so a watcher can call ``list_events`` for it.
    """

    seq: int
    kind: str
    namespace: str
    name: str
    type: ChangeType


@dataclass(frozen=True, slots=True)
class Lease:
    """A named lease (leader election): who holds it, since when, and until when it is valid."""

    name: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    ttl_seconds: float
    holder_info: Mapping[str, object] = field(default_factory=dict, hash=False)

    @property
    def expires_at(self) -> datetime:
        """When the lease lapses unless renewed."""
        return self.renewed_at + timedelta(seconds=self.ttl_seconds)

    def is_expired(self, now: datetime) -> bool:
        """Whether the holder failed to renew in time (``renewed_at + ttl < now``)."""
        return self.expires_at < now


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A stored event with its repetition count: identical consecutive events are kept once, counted."""

    event: Event
    count: int
    first_time: datetime
    last_time: datetime


UNREADABLE = "Unreadable"
"""Quarantine reason of a row that does not parse as an object of its kind."""

UNKNOWN_KIND = "UnknownKind"
"""Quarantine reason of a row whose kind this Phalanx does not know."""


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """An object set aside so that it cannot stop the control plane: which row, why, and when to look again.

    A record is about one version of its row (``resource_version``): once the row changes (someone fixed or
    halted it) or is deleted, the record no longer applies and the store stops returning it.

    Attributes:
        reason: ``UNREADABLE`` or ``UNKNOWN_KIND`` for rows that cannot be read at all; otherwise the step that
            failed on the object (e.g. ``ReconcileFailed``, ``SchedulingFailed``).
        message: the error as one sentence.
        since: when the object was first set aside at this version.
        retry_at: when the failed step may try the object again; None: only once the row changes.
    """

    kind: str
    namespace: str
    name: str
    resource_version: int
    reason: str
    message: str
    since: datetime
    retry_at: datetime | None = None

    @property
    def readable(self) -> bool:
        """Whether the row parses (a step failed on it), as opposed to a row no step can even read."""
        return self.reason not in (UNREADABLE, UNKNOWN_KIND)

    @property
    def key(self) -> str:
        """``Kind namespace/name``, as store errors name objects."""
        return f"{self.kind} {self.namespace}/{self.name}"


def to_micros(moment: datetime) -> int:
    """Convert a datetime to integer microseconds since the epoch; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """Convert integer microseconds since the epoch to a timezone-aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)


def to_utc(moment: datetime) -> datetime:
    """Express the same instant in UTC; a naive datetime is taken as UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix, the form pydantic writes for aware UTC datetimes."""
    return to_utc(moment).isoformat().replace("+00:00", "Z")
