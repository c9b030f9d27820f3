"""Waiting on an observable condition with a deadline: the only way tests wait, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(
    predicate: Callable[[], Any], timeout: float = 30.0, message: str = "condition", *, interval: float = 0.01
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {message}")
        time.sleep(interval)
