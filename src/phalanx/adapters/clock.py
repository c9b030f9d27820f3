"""The wall clock, for services: ``SystemClock`` is ``core.clock.Clock`` on real time.

``core`` never reads it; services pass its readings in. ``Clock`` is exported here too, so a service that takes
a clock and defaults to the real one imports both from one place.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from phalanx.core.clock import Clock

__all__ = ["Clock", "SystemClock"]


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
