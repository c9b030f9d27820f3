"""Fixtures for the local executor tests: real processes, real /proc, real cgroups where writable.

Tests wait on files and process states with a deadline (``wait_until``), never on fixed sleeps. Every replica
a test starts is killed and its cgroups removed at teardown, even when the test fails.
"""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.executor import LaunchSpec, LocalExecutor, ProcessHandle
from support.waiting import wait_until as _wait_until

WaitUntil = Callable[..., Any]


@pytest.fixture
def wait_until() -> WaitUntil:
    return _wait_until


class Replicas:
    """Launches replicas for one test and guarantees they are gone afterwards."""

    def __init__(self, executor: LocalExecutor, tmp_path: Path) -> None:
        self.executor = executor
        self.tmp_path = tmp_path
        self.handles: list[ProcessHandle] = []
        self.names: list[str] = []

    def spec(self, code: str, *, env: dict[str, str] | None = None, **overrides: Any) -> LaunchSpec:
        # cgroup names are global on the machine: make them unique per test run.
        name = overrides.pop("name", f"t-{uuid.uuid4().hex[:10]}")
        run_dir = self.tmp_path / "runs" / name
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RELEASE": str(run_dir / "release")}
        fields: dict[str, Any] = {"working_dir": self.tmp_path, "run_dir": run_dir, **overrides}
        return LaunchSpec(name=name, command=[sys.executable, "-c", code], env={**base_env, **(env or {})}, **fields)

    def launch(self, spec: LaunchSpec) -> ProcessHandle:
        handle = self.executor.launch(spec)
        self.adopt(handle)
        return handle

    def run(self, code: str, **kwargs: Any) -> ProcessHandle:
        return self.launch(self.spec(code, **kwargs))

    def adopt(self, handle: ProcessHandle) -> None:
        """Make teardown responsible for a replica started elsewhere."""
        self.handles.append(handle)

    @staticmethod
    def release(handle: ProcessHandle) -> None:
        (handle.run_dir / "release").touch()

    def finish(self, handle: ProcessHandle, timeout: float = 20.0) -> int:
        """Wait until the replica has exited; return its exit code."""
        state = _wait_until(
            lambda: (s := self.executor.poll(handle)) and not s.running and s,
            timeout,
            f"replica {handle.pid} to exit",
        )
        assert state.exit_code is not None
        return int(state.exit_code)

    def close(self) -> None:
        for handle in self.handles:
            # kill() refuses to signal a group whose leader pid now belongs to another process.
            self.executor.kill(handle)
            _wait_until(functools.partial(self.executor.is_gone, handle), 10.0, "teardown of a replica group")
            self.executor.poll(handle)
            self.executor.cleanup(handle)


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "executor")


@pytest.fixture
def replicas(executor: LocalExecutor, tmp_path: Path) -> Iterator[Replicas]:
    tracker = Replicas(executor, tmp_path)
    try:
        yield tracker
    finally:
        tracker.close()
