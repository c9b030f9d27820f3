"""Each cluster component, started as a process, refuses a taken health port with one ``error:`` sentence.

Run as processes on one host (for development, or on a cluster without the image), the three once all defaulted
to port 8081, and the second died with a raw ``OSError`` traceback. Each is started here the way docs/kubernetes.md
says, against a kubeconfig (the API server is not reached before the health port is taken), on a port this test
holds.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

INVENTORY = Path(__file__).resolve().parents[3] / "examples" / "inventories" / "two-nodes-4gpu.yaml"
COMPONENTS: dict[str, list[str]] = {
    "operator": [],
    "scheduler": [],
    "node_agent": ["--node-name", "node-a", "--inventory", str(INVENTORY)],
}


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_a_taken_health_port_is_one_error_line_and_exit_1(component: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        extra = COMPONENTS[component]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                f"phalanx.entrypoints.kubernetes.{component}",
                "--kubeconfig",
                str(kubeconfig),
                "--health-port",
                str(port),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"error: cannot serve /healthz on port {port}: another process listens there (another Phalanx "
        "component?); pass --health-port with a free port, or --health-port 0 for none"
    )
