"""Fixtures for the dataset-source tests: a local HTTP server (PostgreSQL: tests/integration/conftest.py)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


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
