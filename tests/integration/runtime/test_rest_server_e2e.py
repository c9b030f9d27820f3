"""`phalanx server` as a real process over a real state directory: a job created through the API runs to the end.

The control plane is a real process too (``conftest.Runtime``); the test talks HTTP only (httpx), and reads the
store directly just to prove that a refused spec left nothing behind.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import Runtime, generic_job, wait_until
from phalanx.model.jobs import TrainingJob
from support.postgres import free_port

API = "/apis/phalanx.dev/v1alpha1"
JOBS = f"{API}/namespaces/default/trainingjobs"


def start_server(runtime: Runtime, output: Path) -> str:
    """Start `phalanx server` on a free loopback port; its base URL once it answers."""
    port = free_port()
    with open(output, "w") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "phalanx.entrypoints.cli",
                "server",
                "--listen",
                f"127.0.0.1:{port}",
                "--state-dir",
                str(runtime.state_dir),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=runtime.work_dir,
        )
    runtime.background.append(process)  # type: ignore[arg-type]  # killed with the runtime's other processes
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"phalanx server exited {process.returncode}:\n{output.read_text()}")
        try:
            return httpx.get(f"{base}/openapi.json", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(answers, timeout=30, message=f"phalanx server to answer; its output:\n{output.read_text()}")
    return base


def test_a_job_created_through_the_api_runs_and_a_bad_one_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    http = httpx.Client(base_url=base, timeout=10)

    document = generic_job("via-api")
    document["metadata"]["labels"] = {"submitted": "rest"}
    created = http.post(JOBS, json=document)
    assert created.status_code == 201, created.text
    assert created.json()["metadata"]["uid"]

    def finished() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"{JOBS}/via-api").json()
        return job if job.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    final = wait_until(finished, timeout=90, message="the job created through the API to finish")
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert "Running" in {condition["type"] for condition in final["status"]["conditions"]}
    listed = http.get(JOBS, params={"labelSelector": "submitted=rest"}).json()
    assert [item["metadata"]["name"] for item in listed["items"]] == ["via-api"]

    broken = generic_job("broken")
    broken["spec"]["replicas"]["worker"]["count"] = 0
    refused = http.post(JOBS, json=broken)
    assert refused.status_code == 422, refused.text
    status = refused.json()
    assert (status["kind"], status["reason"]) == ("Status", "Invalid")
    assert [cause["field"] for cause in status["details"]["causes"]] == ["spec.replicas.worker.count"]
    assert "spec.replicas.worker.count" in status["message"]
    assert http.get(f"{JOBS}/broken").status_code == 404
    with runtime.client() as client:
        assert [job.metadata.name for job in client.store.list(TrainingJob)] == ["via-api"]

    deleted = http.delete(f"{JOBS}/via-api")
    assert deleted.status_code in (200, 202), deleted.text  # 202: its replicas are still being collected
    assert deleted.json()["metadata"]["name"] == "via-api"
    wait_until(lambda: http.get(f"{JOBS}/via-api").status_code == 404, timeout=60, message="the job to be removed")
