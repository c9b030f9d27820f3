"""The Clock protocol: the virtual clock moves only when told, the system one really waits; a service on a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from phalanx.adapters.clock import SystemClock
from phalanx.core.clock import Clock, VirtualClock
from phalanx.services.dataset_store import progress_reporter


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


def test_materialisation_progress_is_said_at_once_then_at_most_every_interval_on_the_injected_clock() -> None:
    said: list[str] = []
    clock = VirtualClock()  # monotonic() starts at 0: the first report must not wait for the interval
    report = progress_reporter(said.append, 5.0, clock=clock)
    report(1024, 4096)
    clock.advance(4.9)
    report(2048, 4096)
    clock.advance(0.1)
    report(3072, None)
    assert said == ["materialising: 1.0 KiB of 4.0 KiB written", "materialising: 3.0 KiB written"]
