"""The state directory is its owner's alone: after a real job ran through a real control plane, no other
local user can read the store (env tokens, datasource passwords), the logs or the launch files."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Runtime, generic_job
from support.waiting import wait_until

SECRET = "tok-3141592653"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most accounts have (022): what an older version relied on, and what made files 0644."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("usual_umask")
def test_store_logs_launch_files_and_run_dirs_are_private_after_a_job(runtime: Runtime) -> None:
    # What an older version left: a state directory 0755 and a store file 0644 (SQLite's default).
    runtime.state_dir.mkdir(mode=0o755)
    os.chmod(runtime.state_dir, 0o755)
    database = runtime.state_dir / "phalanx.db"
    database.touch(mode=0o644)
    os.chmod(database, 0o644)
    # Not through the fixture's client, which would open (and tighten) the directory first.
    plane = runtime.start_control_plane(wait_leader=False)
    wait_until(lambda: "leading as" in plane.log(), timeout=60, message=f"the control plane to lead:\n{plane.log()}")
    assert "was readable by other users (mode 0755); made it 0700" in plane.log()

    job = generic_job("private", args=["--sleep", "0"])
    job["spec"]["replicas"]["worker"]["template"]["env"] = {"API_TOKEN": SECRET}
    result = runtime.cli("run", str(runtime.write_job("private", job)), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

    assert mode_of(runtime.state_dir) == 0o700
    for name in ("phalanx.db", "phalanx.db-wal", "phalanx.db-shm"):
        assert mode_of(runtime.state_dir / name) == 0o600, name
    assert SECRET.encode() in b"".join(
        (runtime.state_dir / name).read_bytes() for name in ("phalanx.db", "phalanx.db-wal")
    ), "the token is in the store: that is why the store must be private"

    runs = runtime.state_dir / "runs"
    (job_dir,) = (runs / "default" / "private").iterdir()
    (run_dir,) = (job_dir / "replicas").iterdir()
    for directory in (runs, runs / "default", runs / "default" / "private", job_dir, job_dir / "replicas", run_dir):
        assert mode_of(directory) == 0o700, directory
    files = {path.name: mode_of(path) for path in run_dir.iterdir()}
    for name in ("launch.json", "replica.log", "exit_code", "started", "shim.pid"):
        assert files.get(name) == 0o600, f"{name}: {files}"
    assert mode_of(runs / "shim.py") == 0o600


@pytest.mark.usefixtures("usual_umask")
def test_a_new_state_directory_and_the_control_plane_log_are_private(runtime: Runtime) -> None:
    # `phalanx up` on a machine that never ran Phalanx: every level it creates is 0700.
    runtime.state_dir = runtime.state_dir / "nested" / "phalanx"
    try:
        result = runtime.cli("up", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        runtime.cli("down", timeout=60)
    assert mode_of(runtime.state_dir.parent) == 0o700
    assert mode_of(runtime.state_dir) == 0o700
    assert mode_of(runtime.state_dir / "controlplane.log") == 0o600
    assert mode_of(runtime.state_dir / "phalanx.db") == 0o600
