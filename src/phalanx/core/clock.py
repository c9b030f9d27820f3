"""The Clock protocol and a virtual clock: time is injected, never read from the wall inside ``core``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of the current time."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...


class VirtualClock:
    """A clock that only moves when told to: for unit tests and the simulator."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The virtual time."""
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move the virtual time forward and return it."""
        self._now += timedelta(seconds=seconds)
        return self._now
