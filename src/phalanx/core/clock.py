"""The Clock protocol and a virtual clock: time is injected, never read from the wall inside ``core``.

A Clock answers three questions: what time it is (``now``, for what is recorded: conditions, events, leases),
how many seconds have passed (``monotonic``, for timers, retry times and durations, which must not jump when the
wall clock is set), and "let this much time pass" (``sleep``, for plain polling). Services take one Clock and use
it for all three, so a unit test moves time by hand instead of waiting or patching. Waits on an event (a
``threading.Event``, a condition, the store's change feed) stay event waits with a real timeout: the event, not
the clock, ends them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of time: the wall time, a monotonic reading and a plain sleep."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything): for timers and timeouts."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        ...


class VirtualClock:
    """A clock that only moves when told to (``advance``, or ``sleep``, which returns at once): for unit tests."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._seconds = 0.0

    def now(self) -> datetime:
        """The virtual time."""
        return self._now

    def monotonic(self) -> float:
        """Virtual seconds since the clock was made."""
        return self._seconds

    def sleep(self, seconds: float) -> None:
        """Move the time forward instead of waiting: a polling loop under test runs at once."""
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> datetime:
        """Move the virtual time forward and return it."""
        self._now += timedelta(seconds=seconds)
        self._seconds += seconds
        return self._now
