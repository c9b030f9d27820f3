"""The wall clock, for services (``core.clock.Clock``). ``core`` never reads it; services pass its readings in."""

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

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""
        time.sleep(max(0.0, seconds))
