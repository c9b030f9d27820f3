"""Suite-wide guards: a run that collected no test is a failure, never a green build; and the processes the tests
start take an interrupt as a terminal's Ctrl-C, however the suite itself was started.

A shell that starts a command in the background without job control (``cmd &`` in a script) starts it with
SIGINT ignored, and every process it starts inherits that: a `phalanx server` sent SIGINT by a test would then
shut down (uvicorn handles the signal) but exit 0, not the 130 of an interrupt the tests check. Python resets a
signal it handles to the default in a process it starts, so handling SIGINT here gives them the default.
"""

from __future__ import annotations

import signal

import pytest

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.testscollected == 0 and not session.config.option.collectonly:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
