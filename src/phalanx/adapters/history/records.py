"""What the job history keeps about one job, and what a query of it asks: plain data, no database types.

A ``JobRecord`` is one job (one ``uid``: a name reused by a later submission is another record) as it ended:
its final phase, its timestamps and the durations derived from them, and its spec, final status, placements,
events and metrics as JSON-ready values. ``ended_at`` orders the history: when the job finished, or when it was
deleted if it never finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class JobRecord:
    """One finished, deleted or TTL-removed job."""

    uid: str
    namespace: str
    name: str
    queue: str
    job_type: str
    phase: str
    ended_at: datetime
    kind: str = "TrainingJob"
    reason: str = ""
    message: str = ""
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    queueing_seconds: float | None = None
    run_seconds: float | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    placements: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    deleted_at: datetime | None = None


@dataclass(frozen=True)
class HistoryQuery:
    """Which records a listing returns: every filter given must hold; newest first, ``limit`` at a time."""

    namespace: str | None = None
    namespaces: frozenset[str] | None = None
    """Only records of these namespaces (a caller who may read a few; None: no such filter)."""
    queue: str | None = None
    phase: str | None = None
    since: datetime | None = None
    limit: int = 100
    after: str | None = None
    """The ``next`` cursor of the previous page (None: the first page)."""


@dataclass(frozen=True)
class HistoryPage:
    """A page of records, and the cursor of the next page (None when this is the last)."""

    records: list[JobRecord]
    next: str | None


@dataclass(frozen=True)
class QueueSummary:
    """Queueing and run times of one queue's recorded jobs (seconds; None when no job has that duration)."""

    queue: str
    count: int
    queueing_p50: float | None
    queueing_p95: float | None
    run_p50: float | None
    run_p95: float | None


def wire_form(value: JobRecord | QueueSummary) -> dict[str, Any]:
    """A record or summary as JSON, with the API's camelCase names and ISO 8601 times (``phalanx history -o json``)."""
    out: dict[str, Any] = {}
    for f in fields(value):
        head, *rest = f.name.split("_")
        item = getattr(value, f.name)
        out[head + "".join(part.title() for part in rest)] = item.isoformat() if isinstance(item, datetime) else item
    return out
