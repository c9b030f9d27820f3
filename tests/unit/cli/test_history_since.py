"""``phalanx history --since``: durations and times it takes, and the sentence for what it does not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from phalanx.entrypoints.cli.history import parse_since

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", NOW - timedelta(seconds=90)),
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("7d", NOW - timedelta(days=7)),
        ("2026-11-27T10:00:00Z", datetime(2026, 11, 27, 10, 0, tzinfo=UTC)),
        ("2026-11-27T10:00:00", datetime(2026, 11, 27, 10, 0, tzinfo=UTC)),
        ("2026-11-27T11:00:00+01:00", datetime(2026, 11, 27, 10, 0, tzinfo=UTC)),
    ],
    ids=["seconds", "minutes", "hours", "days", "zulu", "naive-is-utc", "offset"],
)
def test_since_takes_durations_and_times(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "2w", "-2h", "h2", ""])
def test_anything_else_is_refused_naming_the_option_and_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"--since .* is neither a duration \(90s, 30m, 2h, 7d\) nor a time"):
        parse_since(text, NOW)
