"""docs/kubernetes.md's recipe for running the components as processes, run as written on the real control plane.

The block the docs mark is run by bash as it is (the pinned kubectl and this checkout's ``phalanx`` on the PATH,
the control plane's admin kubeconfig as kubectl's, ``NODE`` a kwok node of this test); then the three start
commands the docs give are run as they are, side by side on this host, on their default health ports. They
must all become ready, the node agent must write its Node with its Node-bound token, and a job must run to the
end through them.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.waiting import wait_until

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
MARK = "<!-- tests/e2e/test_components_as_processes.py runs this block as it is -->"
HEALTH_PORTS = (8081, 8082, 8083)


def recipe() -> tuple[str, list[str]]:
    """The marked setup block, and the lines of the start block after it."""
    text = DOCS.read_text()
    assert MARK in text, "docs/kubernetes.md lost the recipe this test runs"
    blocks = re.findall(r"```sh\n(.*?)```", text[text.index(MARK) :], re.DOTALL)
    setup, start = blocks[0], blocks[1]
    return setup, [line for line in start.splitlines() if line.strip()]


def test_the_documented_recipe_runs_the_three_components_side_by_side(
    kube: Any, node_name: str, namespace: str, tmp_path: Path
) -> None:
    setup, start = recipe()
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, str(kube.env.kubectl_path.parent), os.environ.get("PATH", "")]),
        "KUBECONFIG": str(kube.env.kubeconfig),
        "HOME": str(tmp_path),  # kubectl's discovery cache, not the user's
        "NODE": node_name,
        "PHALANX_LOG_LEVEL": "DEBUG",
    }
    env.pop("PHALANX_HEALTH_PORT", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("operator.kubeconfig", "scheduler.kubeconfig", f"agent-{node_name}.kubeconfig"):
        assert "client-certificate" not in (tmp_path / name).read_text(), f"{name} carries more than its token"

    processes: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for index, line in enumerate(start):
            log = (tmp_path / f"component-{index}.log").open("wb")
            command = shlex.split(line.replace("$NODE", node_name))  # as the shell would expand it
            processes.append(
                (line, subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
            )
            log.close()

        def all_ready() -> bool:
            for port in HEALTH_PORTS:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code != 200:
                        return False
                except httpx.HTTPError:
                    return False
            return True

        def logs() -> str:
            return "\n".join((tmp_path / f"component-{i}.log").read_text(errors="replace")[-3000:] for i in range(3))

        wait_until(all_ready, 90, "the three components ready on ports 8081, 8082 and 8083")
        assert all(process.poll() is None for _, process in processes), logs()
        node = kube.wait_for(
            f"/api/v1/nodes/{node_name}",
            lambda obj: "phalanx.dev/node-agent-heartbeat" in (obj["metadata"].get("annotations") or {}),
            60,
            "the node agent to write its Node",
        )
        assert node["metadata"]["name"] == node_name

        job = {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "through-processes"},
            "spec": {
                "type": "generic",
                "replicas": {
                    "worker": {
                        "count": 1,
                        "template": {
                            "image": "example.org/trainer:1",
                            "command": ["python", "train.py"],
                            "metadata": {"annotations": {"phalanx.dev/sim-duration-ms": "300"}},
                            "resources": {"cpu": "100m", "memory": "64Mi"},
                        },
                    }
                },
            },
        }
        path = f"/apis/phalanx.dev/v1alpha1/namespaces/{namespace}/trainingjobs"
        kube.create(path, job)
        finished = kube.wait_for(
            f"{path}/through-processes",
            lambda obj: (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            90,
            "the job to end",
        )
        assert finished["status"]["phase"] == "Succeeded", (finished["status"], logs())
    finally:
        for _, process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
