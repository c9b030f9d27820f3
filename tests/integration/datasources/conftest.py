"""Fixtures for the dataset-source tests: a real PostgreSQL server for the session, a local HTTP server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        if self.path.endswith(".csv"):
            self.send_header("ETag", '"v1-test"')
        super().end_headers()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local ``http.server`` on a thread serving a fresh directory: ``(base URL, directory)``."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
