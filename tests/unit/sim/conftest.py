"""Fixtures of the simulator's unit tests: where the shipped traces are."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_builders import TRACES


@pytest.fixture
def traces() -> Path:
    """The shared trace directory (``../shared/data/traces`` from the project root)."""
    if not TRACES.is_dir():
        pytest.fail(f"the shipped traces are missing: expected them in {TRACES}")
    return TRACES
