"""`phalanx server` as a real process over a real state directory: a job created through the API runs to the end.

The control plane is a real process too (``conftest.Runtime``); tokens are made and revoked with the real
``phalanx token`` command; the test talks HTTP only (httpx), and reads the store directly just to prove that a
refused spec or a refused caller left nothing behind.
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


def start_server(runtime: Runtime, output: Path, *extra: str) -> str:
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
                *extra,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=runtime.work_dir,
        )
    runtime.background.append(process)  # type: ignore[arg-type]  # killed with the runtime's other processes
    base = f"http://127.0.0.1:{port}"

    def answers(probe: httpx.Client) -> bool:
        if process.poll() is not None:
            pytest.fail(f"phalanx server exited {process.returncode}:\n{output.read_text()}")
        try:
            # Any answer of the app will do (401 without a token); /openapi.json is built on first use (seconds).
            return probe.get(f"{base}{JOBS}").status_code in (200, 401)
        except httpx.TransportError:
            return False

    # Importing FastAPI and the models takes seconds on a loaded 2-core machine. One client for every try.
    with httpx.Client(timeout=2) as probe:
        wait_until(lambda: answers(probe), timeout=90, message="phalanx server to answer")
    return base


def make_token(runtime: Runtime, name: str, role: str, namespace: str) -> str:
    """A token made by `phalanx token create` (printed alone on stdout)."""
    made = runtime.cli("token", "create", name, "--role", role, "--namespace", namespace, check=True)
    return made.stdout.strip()


def test_a_job_created_through_the_api_runs_and_a_bad_one_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log")
    token = make_token(runtime, "ci", "editor", "default")
    http = httpx.Client(base_url=base, timeout=10, headers={"Authorization": f"Bearer {token}"})

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


def test_each_request_needs_a_token_that_reaches_its_namespace_and_allows_its_verb(
    runtime: Runtime, tmp_path: Path
) -> None:
    base = start_server(runtime, tmp_path / "server.log")
    editor = make_token(runtime, "team-default", "editor", "default")
    viewer = make_token(runtime, "watcher", "viewer", "default")
    stranger = make_token(runtime, "team-other", "editor", "other")

    def call(method: str, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.request(method, f"{base}{path}", headers=headers, timeout=10, **kwargs)

    nobody = call("POST", JOBS, None, json=generic_job("sneaky"))
    assert nobody.status_code == 401, nobody.text
    assert "send 'Authorization: Bearer <token>'" in nobody.json()["message"]
    assert call("GET", JOBS, "phx_not-a-real-token").status_code == 401

    watching = call("POST", JOBS, viewer, json=generic_job("by-viewer"))
    assert watching.status_code == 403, watching.text
    assert watching.json()["message"] == (
        "the viewer token watcher for namespaces default cannot create trainingjobs in default: needs editor"
    )
    assert call("POST", JOBS, editor, json=generic_job("mine")).status_code == 201
    assert call("GET", f"{JOBS}/mine", viewer).status_code == 200

    foreign = call("GET", f"{JOBS}/mine", stranger)
    assert foreign.status_code == 403, foreign.text
    assert "reaches namespaces other only" in foreign.json()["message"]
    everywhere = call("GET", f"{API}/trainingjobs", editor)
    assert everywhere.status_code == 200, everywhere.text  # every namespace: those the token reaches
    assert [item["metadata"]["name"] for item in everywhere.json()["items"]] == ["mine"]
    nothing = call("GET", f"{API}/trainingjobs", stranger)
    assert nothing.status_code == 200 and nothing.json()["items"] == [], nothing.text

    runtime.cli("token", "revoke", "team-default", check=True)
    revoked = call("GET", f"{JOBS}/mine", editor)
    assert revoked.status_code == 401, revoked.text
    with runtime.client() as client:
        assert [job.metadata.name for job in client.store.list(TrainingJob)] == ["mine"]


def test_no_auth_serves_without_a_token_on_loopback(runtime: Runtime, tmp_path: Path) -> None:
    base = start_server(runtime, tmp_path / "server.log", "--no-auth")
    listed = httpx.get(f"{base}{JOBS}", timeout=10)
    assert listed.status_code == 200, listed.text
    assert listed.json()["items"] == []


def test_a_line_per_request_is_logged_only_with_access_log(runtime: Runtime, tmp_path: Path) -> None:
    quiet, chatty = tmp_path / "quiet.log", tmp_path / "chatty.log"
    for output, extra in ((quiet, ()), (chatty, ("--access-log",))):
        base = start_server(runtime, output, *extra)
        assert httpx.get(f"{base}{JOBS}/missing-job", timeout=10).status_code == 401
    # uvicorn's access log names the method, the path and the status of each request.
    line = f'"GET {JOBS}/missing-job HTTP/1.1" 401'
    wait_until(lambda: line in chatty.read_text(), timeout=10, message="the request's line in the access log")
    assert "missing-job" not in quiet.read_text()
    assert "Uvicorn running on" in quiet.read_text(), "the server's own lines are still logged"
