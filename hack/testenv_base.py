"""What every part of the Kubernetes test environment shares: the repository's paths and the user-facing error.

Standard library only, like every ``hack/testenv_*`` module: they run before any Python dependency is installed.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
DEFAULT_STAGES = REPO / "tests" / "e2e" / "stages"


class TestEnvError(RuntimeError):
    """Something the user can act on: the message says what went wrong and what to do."""

    __test__ = False  # not a pytest test class despite the name
