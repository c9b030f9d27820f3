"""The rendered objects of a job, through a real kube-apiserver: accepted, run by kwok, garbage-collected.

An MPI job (launcher + 2 workers, with a hostfile) is created as a TrainingJob, so it has a uid; its headless
Service, hostfile ConfigMap and Pods are rendered (phalanx.adapters.kubernetes.rendering) and created as they
are, except that each Pod is pinned to a fake node with ``spec.nodeName`` (no Phalanx scheduler runs yet;
nodeName bypasses scheduling whatever ``schedulerName`` says). Deleting the TrainingJob must take everything
with it: kube-controller-manager's garbage collector follows the ownerReferences.

The garbage collector learns about a new custom resource at its discovery resync, every 30 s in
kube-controller-manager: when the CRDs were installed moments earlier (as here, in a fresh control plane), the
collection waits for that resync (measured: about 40 s), hence the generous deadline below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import k8s_testenv
from conftest import Kube
from phalanx.adapters.kubernetes.crds import custom_resource_definitions
from phalanx.adapters.kubernetes.rendering import (
    render_headless_service,
    render_hostfile_configmap,
    render_pods,
)
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NODE = "render-node-0"


def established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def crds(kube: Kube) -> None:
    """Phalanx's CRDs installed and established (a no-op for those another test installed)."""
    for crd in custom_resource_definitions():
        response = kube.request("POST", CRDS, crd)
        assert response.status_code in (201, 409), response.text
        name = crd["metadata"]["name"]
        kube.wait_for(f"{CRDS}/{name}", established, 30, f"CRD {name} Established")


@pytest.fixture(scope="module")
def node(kube: Kube) -> Iterator[str]:
    """One fake GPU node, Ready; removed afterwards so later tests' schedulers never see it."""
    if not kube.exists(f"/api/v1/nodes/{NODE}"):
        k8s_testenv.create_fake_gpu_nodes(kube.env, [NODE])

    def ready(obj: dict[str, Any]) -> bool:
        conditions = obj.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    kube.wait_for(f"/api/v1/nodes/{NODE}", ready, 60, f"node {NODE} Ready")
    yield NODE
    kube.request("DELETE", f"/api/v1/nodes/{NODE}")
    wait_until(lambda: not kube.exists(f"/api/v1/nodes/{NODE}"), 30, f"node {NODE} deleted")


def create_retrying(kube: Kube, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST, retrying while a just-established CRD's endpoint still answers 404."""
    seen: dict[str, httpx.Response] = {}

    def attempt() -> bool:
        seen["response"] = kube.request("POST", path, body)
        return seen["response"].status_code != 404

    wait_until(attempt, 30, f"POST {path} served", interval=0.1)
    response = seen["response"]
    assert response.status_code == 201, f"POST {path} -> {response.status_code}: {response.text}"
    result: dict[str, Any] = response.json()
    return result


def test_rendered_mpi_job_runs_on_kwok_and_is_garbage_collected_with_its_job(
    kube: Kube, crds: None, node: str, namespace: str
) -> None:
    jobtypes = builtin_jobtypes()
    raw = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "hvd", "namespace": namespace},
        "spec": {
            "type": "mpi",
            "replicas": {
                "launcher": {"template": {"command": ["mpirun", "python", "train.py"]}},
                "worker": {"count": 2, "template": {"command": ["sleep", "infinity"], "resources": {"gpu": 1}}},
            },
        },
    }
    job = validate_job(raw, jobtypes)
    jobtype = jobtypes["mpi"]
    body = job.to_dict()
    body.pop("status")
    jobs_path = f"/apis/phalanx.dev/v1alpha1/namespaces/{namespace}/trainingjobs"
    created = create_retrying(kube, jobs_path, body)
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": created["metadata"]["uid"]})})

    service = render_headless_service(job, jobtype)
    configmap = render_hostfile_configmap(job, jobtype)
    assert configmap is not None
    pods = render_pods(job, jobtype, attempt=0, image="phalanx.invalid/simulated:1")
    for pod in pods:
        pod["spec"]["nodeName"] = node  # bypass scheduling: no Phalanx scheduler runs here
        pod["metadata"]["annotations"]["phalanx.dev/sim-duration-ms"] = "1000"  # long enough to see Running

    api = f"/api/v1/namespaces/{namespace}"
    stored_service = kube.create(f"{api}/services", service)
    assert stored_service["spec"]["clusterIP"] == "None"
    assert stored_service["spec"]["publishNotReadyAddresses"] is True
    stored_configmap = kube.create(f"{api}/configmaps", configmap)
    assert stored_configmap["data"]["hostfile"] == (
        f"hvd-worker-0.hvd.{namespace}.svc slots=1\nhvd-worker-1.hvd.{namespace}.svc slots=1\n"
    )
    names = []
    for pod in pods:
        stored = kube.create(f"{api}/pods", pod)
        names.append(stored["metadata"]["name"])
        assert stored["spec"]["hostname"] == stored["metadata"]["name"]
        assert stored["spec"]["subdomain"] == "hvd"
        assert stored["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    assert names == ["hvd-worker-0", "hvd-worker-1", "hvd-launcher-0"]

    for name in names:
        running = kube.wait_for(
            f"{api}/pods/{name}",
            lambda p: p.get("status", {}).get("phase") in ("Running", "Succeeded"),
            30,
            f"pod {name} Running",
        )
        assert running["spec"]["nodeName"] == node
    for name in names:
        kube.wait_for(
            f"{api}/pods/{name}", lambda p: p.get("status", {}).get("phase") == "Succeeded", 30, f"{name} Succeeded"
        )

    response = kube.request("DELETE", f"{jobs_path}/hvd")
    assert response.status_code == 200, response.text
    owned = [f"{api}/pods/{name}" for name in names] + [f"{api}/services/hvd", f"{api}/configmaps/hvd-hostfile"]
    for path in owned:
        # 90 s: up to one 30 s discovery resync before the collector watches TrainingJobs (module docstring).
        wait_until(lambda path=path: not kube.exists(path), 90, f"{path} garbage-collected", interval=0.2)
    assert not kube.exists(f"{jobs_path}/hvd")
