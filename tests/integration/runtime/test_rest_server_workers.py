"""`phalanx server --workers N`: N real server processes on one port, over one state directory and token store."""

from __future__ import annotations

import re
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


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}{JOBS}", timeout=2).status_code == 401
    except httpx.TransportError:
        return False


def test_a_worker_count_out_of_range_is_refused(runtime: Runtime) -> None:
    result = runtime.cli("server", "--workers", "0")
    assert result.returncode == 2
    assert "--workers 0: give 1 to 64 server processes" in result.stdout + result.stderr
