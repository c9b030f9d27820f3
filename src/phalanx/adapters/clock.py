"""The wall clock, for services. ``core`` never reads it; services pass its readings in."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SystemClock:
    """Real time, timezone-aware UTC."""

    def now(self) -> datetime:
        """The current time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for timeouts."""
        return time.monotonic()
