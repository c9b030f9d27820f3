"""Starting the real `phalanx server` for the API benchmarks (api_load.py, api_watch.py), on a free loopback port.

The server users run, over a state directory the benchmark made, tokens on; ``start_server`` returns once it
answers (401 to a request without a token).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

JOBS = "/apis/phalanx.dev/v1alpha1/trainingjobs"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(state: Path, log: Path, workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    """`phalanx server --listen 127.0.0.1:PORT --state-dir STATE --workers N`, its output in ``log``; its URL."""
    port = free_port()
    command = [sys.executable, "-m", "phalanx.entrypoints.cli", "server", "--listen", f"127.0.0.1:{port}"]
    with log.open("wb") as sink:
        server = subprocess.Popen(
            [*command, "--state-dir", str(state), "--workers", str(workers)], stdout=sink, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    with httpx.Client(timeout=2) as probe:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"phalanx server exited {server.returncode}:\n{log.read_text()}")
            try:
                if probe.get(f"{base}{JOBS}", params={"limit": 1}).status_code == 401:
                    return server, base
            except httpx.TransportError:
                pass
            time.sleep(0.2)  # polling a process start: there is no event to wait on
    server.kill()
    raise SystemExit(f"phalanx server did not answer within 120 s:\n{log.read_text()}")
