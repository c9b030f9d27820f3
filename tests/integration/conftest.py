"""Fixtures shared by the integration tiers: a real PostgreSQL server, started once per session when used."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.postgres import PostgresServer, PostgresUnavailableError, running_postgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (started once per session); fails, never skips, when it cannot run."""
    try:
        with running_postgres() as server:
            yield server
    except PostgresUnavailableError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def postgres_url(postgres: PostgresServer) -> str:
    """The SQLAlchemy URL of the test database."""
    return postgres.url
