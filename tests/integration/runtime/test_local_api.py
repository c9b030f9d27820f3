"""The control plane's local API over its Unix socket, through the real control plane process."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from conftest import Runtime, generic_job
from phalanx.entrypoints.cli.local_api import ApiError, LocalApi
from phalanx.services.embedded.layout import StateLayout
from support.waiting import wait_until


@pytest.fixture
def api(runtime: Runtime) -> LocalApi:
    runtime.start_control_plane()
    client = LocalApi(StateLayout(runtime.state_dir).api_socket, timeout=10)
    # The control plane takes its lease before it opens the socket: wait for the socket, not just the lease.
    wait_until(client.available, message="the control plane's local API socket")
    return client


def test_the_socket_is_private_to_its_owner(runtime: Runtime, api: LocalApi) -> None:
    mode = os.stat(StateLayout(runtime.state_dir).api_socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_invalid_documents_come_back_as_field_errors_and_create_nothing(runtime: Runtime, api: LocalApi) -> None:
    bad = generic_job("bad")
    bad["spec"]["replicas"]["worker"]["count"] = 0
    with pytest.raises(ApiError) as caught:
        api.submit([bad], submit_dir=runtime.work_dir, namespace=None, replace_finished=False, source="bad.yaml")
    assert caught.value.status == 422
    assert caught.value.body["errors"] == [{"path": "spec.replicas.worker.count", "message": "must be >= 1, got 0"}]
    with runtime.client() as client:
        assert client.list() == []


def test_submit_then_follow_by_long_poll_until_succeeded(runtime: Runtime, api: LocalApi, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    created = api.submit(
        [generic_job("polled", args=["--hold", str(hold)])],
        submit_dir=runtime.work_dir,
        namespace=None,
        replace_finished=False,
        source=None,
    )
    assert created == [
        {"kind": "TrainingJob", "namespace": "default", "name": "polled", "replaced": False, "configured": False}
        | {"unchanged": False}
    ]
    job = api.job("default", "polled")
    phases = [job["status"]["phase"]]
    hold.write_text("go")
    deadline = time.monotonic() + 30
    while job["status"]["phase"] != "Succeeded" and time.monotonic() < deadline:
        before = job["metadata"]["resourceVersion"]
        job = api.job("default", "polled", after=before, wait=5)
        if job["metadata"]["resourceVersion"] != before:
            phases.append(job["status"]["phase"])
    assert job["status"]["phase"] == "Succeeded"
    assert phases == sorted(set(phases), key=phases.index)  # each answer is a new version
    logs = api.log_files("default", "polled")
    assert [replica for replica, _ in logs] == ["worker-0"]
    assert "worker-0 done" in logs[0][1].read_text()


def test_an_active_job_of_the_same_name_is_a_conflict(runtime: Runtime, api: LocalApi, tmp_path: Path) -> None:
    document = generic_job("twice", args=["--hold", str(tmp_path / "never")])
    api.submit([document], submit_dir=runtime.work_dir, namespace=None, replace_finished=True, source=None)
    with pytest.raises(ApiError) as caught:
        api.submit([document], submit_dir=runtime.work_dir, namespace=None, replace_finished=True, source=None)
    assert caught.value.status == 409
    assert "already exists" in str(caught.value)


def test_unknown_jobs_and_routes_are_404_and_bad_requests_400(api: LocalApi) -> None:
    with pytest.raises(ApiError) as caught:
        api.job("default", "nope")
    assert caught.value.status == 404
    assert "not found" in str(caught.value)
    with pytest.raises(ApiError) as caught:
        api.job("default", "nope", wait=float("nan"))
    assert caught.value.status in (400, 404)
    with pytest.raises(ApiError) as caught:
        api._request("POST", "/v1/submit", {"no": "documents"})
    assert caught.value.status == 400
