"""Suite-wide guards: a run that collected no test is a failure, never a green build."""

from __future__ import annotations

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.testscollected == 0 and not session.config.option.collectonly:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
