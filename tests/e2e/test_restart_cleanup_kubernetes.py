"""Per-role restartPolicy and cleanPodPolicy None on a real control plane: the fields survive the CRD's schema, the
operator restarts only the roles that may restart, and keeps a parameter server's Pod running after its job
succeeded until the job is deleted.

Same setting as test_operator.py (real operator and scheduler, kwok nodes, replicas steered by annotations).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_operator import (  # the fixtures too: this module's tests run in the same setting
    JOBS,
    PodWatch,
    events_of,
    gpu_model,  # noqa: F401
    job,
    pods_of,
    role,
    running,  # noqa: F401
    wait_phase,
)

from components import Components
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


def test_a_master_that_never_restarts_beside_workers_that_do(running: tuple[Components, str], namespace: str) -> None:  # noqa: F811
    components, model = running
    kube = components.kube
    pods = PodWatch(kube, namespace)
    master = {**role(1, model, hang=True), "restartPolicy": "Never"}
    body = job(
        "roles",
        "pytorch",
        {"master": master, "worker": role(1, model, duration_ms=200, exit_code=1)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 1, "backoffSeconds": 0.2},
    )
    created = kube.create(JOBS.format(ns=namespace), body)
    assert created["spec"]["replicas"]["master"]["restartPolicy"] == "Never"  # kept by the CRD's schema

    failed = wait_phase(kube, namespace, "roles", "Failed")["status"]
    pods.stop()
    # The worker (the job's OnFailure) ran twice and used up backoffLimit; the master (Never) never restarted.
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert pods.attempts("roles-worker-0") == ["0", "1"]
    assert pods.attempts("roles-master-0") == ["0"]


def test_a_failed_master_fails_the_job_without_a_restart(running: tuple[Components, str], namespace: str) -> None:  # noqa: F811
    components, model = running
    kube = components.kube
    master = {**role(1, model, duration_ms=200, exit_code=1), "restartPolicy": "Never"}
    body = job(
        "master-fails",
        "pytorch",
        {"master": master, "worker": role(1, model, hang=True)},
        runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 3},
    )
    kube.create(JOBS.format(ns=namespace), body)

    failed = wait_phase(kube, namespace, "master-fails", "Failed")["status"]

    assert (failed["reason"], failed.get("restarts", 0)) == ("ReplicaFailed", 0)
    said = "replica master-fails-master-0 failed with exit code 1; the master role's restartPolicy is Never"
    assert said in failed["message"]


def test_a_parameter_server_pod_outlives_its_succeeded_job_until_the_job_is_deleted(
    running: tuple[Components, str],  # noqa: F811
    namespace: str,
) -> None:
    components, model = running
    kube = components.kube
    body = job(
        "serving",
        "tensorflow",
        {"chief": role(1, model, duration_ms=300), "ps": role(1, model, hang=True)},
        runPolicy={"cleanPodPolicy": "None"},
    )
    kube.create(JOBS.format(ns=namespace), body)

    wait_phase(kube, namespace, "serving", "Succeeded")

    def ps_pod() -> dict[str, Any] | None:
        found = [pod for pod in pods_of(kube, namespace, "serving") if pod["metadata"]["name"] == "serving-ps-0"]
        return found[0] if found else None

    # Under Running the operator deletes it before the job leaves Storing; here it stays, running.
    kept = ps_pod()
    assert kept is not None and kept["status"].get("phase") == "Running", kept
    assert "deletionTimestamp" not in kept["metadata"]
    reasons = {event["reason"] for event in events_of(kube, namespace, "serving")}
    assert "ReplicasKept" in reasons, reasons

    kube.request("DELETE", f"{JOBS.format(ns=namespace)}/serving")
    wait_until(lambda: ps_pod() is None, 60, "the parameter server's Pod removed with the job")
