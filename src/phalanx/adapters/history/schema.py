"""The job history's table, as SQLAlchemy 2 declares it; the migrations (``migrations/versions``) create it.

One row per job incarnation: ``uid`` is unique, so recording a job again updates its row. The indexes serve the
listings (``ended_at`` newest first, optionally within a namespace, a queue or a phase) and retention (by
``ended_at``). JSON columns are SQLAlchemy's ``JSON``: JSON text on SQLite, ``json`` on PostgreSQL. Times are stored as
UTC without a zone (both databases compare them the same way) and read back as UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The history's declarative base (its own metadata: nothing else shares this database)."""


class JobRow(Base):
    """A recorded job."""

    __tablename__ = "job_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    kind: Mapped[str] = mapped_column(String(64))
    queue: Mapped[str] = mapped_column(String(253))
    job_type: Mapped[str] = mapped_column(String(253))
    phase: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    message: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime())
    started_at: Mapped[datetime | None] = mapped_column(DateTime())
    finished_at: Mapped[datetime | None] = mapped_column(DateTime())
    ended_at: Mapped[datetime] = mapped_column(DateTime())
    queueing_seconds: Mapped[float | None] = mapped_column(Float)
    run_seconds: Mapped[float | None] = mapped_column(Float)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[dict[str, Any]] = mapped_column(JSON)
    placements: Mapped[dict[str, Any]] = mapped_column(JSON)
    events: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    metrics: Mapped[dict[str, float]] = mapped_column(JSON)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime())

    __table_args__ = (
        Index("ix_job_history_ended", "ended_at", "id"),
        Index("ix_job_history_namespace_ended", "namespace", "ended_at"),
        Index("ix_job_history_queue_ended", "queue", "ended_at"),
        Index("ix_job_history_phase_ended", "phase", "ended_at"),
    )
