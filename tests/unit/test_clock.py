"""The Clock protocol's two implementations: the virtual one moves only when told, the system one really waits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from phalanx.adapters.clock import SystemClock
from phalanx.core.clock import Clock, VirtualClock


def test_a_virtual_sleep_moves_now_and_monotonic_together_and_returns_at_once() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    clock: Clock = VirtualClock(start)
    before = clock.monotonic()
    clock.sleep(90.5)
    assert clock.now() == start + timedelta(seconds=90.5)
    assert clock.monotonic() - before == 90.5
    clock.sleep(-3)  # a deadline already past: no time travel backwards
    assert clock.now() == start + timedelta(seconds=90.5)


def test_the_system_clock_sleeps_for_real_and_its_monotonic_reading_shows_it() -> None:
    clock: Clock = SystemClock()
    before = clock.monotonic()
    clock.sleep(0.02)
    assert clock.monotonic() - before >= 0.02
    assert clock.now().tzinfo is UTC
