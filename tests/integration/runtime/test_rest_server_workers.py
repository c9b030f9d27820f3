"""`phalanx server --workers N`: N real server processes on one port, over one state directory and token store."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest

from conftest import Runtime, generic_job, wait_until
from support.postgres import free_port

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/default/trainingjobs"


def test_two_workers_serve_one_store_and_one_token_store(runtime: Runtime, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    process = runtime.cli_background("server", "--listen", f"127.0.0.1:{port}", "--workers", "2", output=log)
    base = f"http://127.0.0.1:{port}"

    def both_started() -> bool:
        if process.poll() is not None:
            pytest.fail(f"phalanx server exited {process.returncode}:\n{log.read_text()}")
        return len(set(re.findall(r"Started server process \[(\d+)\]", log.read_text()))) == 2

    wait_until(both_started, timeout=120, message="two server processes to start")
    wait_until(lambda: _answers(base), timeout=60, message="the server to answer")

    token = runtime.cli("token", "create", "ci", "--role", "editor", "--namespace", "default", check=True).stdout
    headers = {"Authorization": f"Bearer {token.strip()}"}
    with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
        # New connections each: the kernel hands them to either process; every one must see every write.
        for index in range(6):
            created = httpx.post(f"{base}{JOBS}", json=generic_job(f"w-{index}"), headers=headers, timeout=10)
            assert created.status_code == 201, created.text
        names = [item["metadata"]["name"] for item in http.get(JOBS).json()["items"]]
        assert names == [f"w-{index}" for index in range(6)]
    runtime.cli("token", "revoke", "ci", check=True)
    for _ in range(4):  # a revoked token is refused by every process at once (nothing cached)
        assert httpx.get(f"{base}{JOBS}", headers=headers, timeout=10).status_code == 401


def test_the_worker_processes_end_when_their_supervisor_is_killed(runtime: Runtime, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    process = runtime.cli_background("server", "--listen", f"127.0.0.1:{port}", "--workers", "2", output=log)

    def workers() -> set[int]:
        if process.poll() is not None:
            pytest.fail(f"phalanx server exited {process.returncode}:\n{log.read_text()}")
        return {int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text())}

    wait_until(lambda: len(workers()) == 2, timeout=120, message="two server processes to start")
    started = workers()
    os.kill(process.pid, signal.SIGKILL)  # no chance for the supervisor to stop its workers itself
    process.wait(timeout=10)

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A worker that ended but nobody reaped yet (orphans go to init, or to a subreaper that may be slow).
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    wait_until(lambda: not any(alive(pid) for pid in started), timeout=30, message="the orphaned workers to end")
    assert not _answers(f"http://127.0.0.1:{port}"), "nothing serves the port any more"


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}{JOBS}", timeout=2).status_code == 401
    except httpx.TransportError:
        return False


def test_a_worker_count_out_of_range_is_refused(runtime: Runtime) -> None:
    result = runtime.cli("server", "--workers", "0")
    assert result.returncode == 2
    assert "--workers 0: give 1 to 64 server processes" in result.stdout + result.stderr
