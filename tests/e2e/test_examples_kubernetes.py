"""The examples in examples/kubernetes/, applied to a real control plane as ``kubectl apply --server-side`` does.

Each example is sent unchanged as a server-side apply (``PATCH`` with ``application/apply-patch+yaml``, field
manager ``kubectl``), except for kwok's simulation annotations on roles that never exit on their own (parameter
servers, MPI workers): on a real cluster those processes keep running until the job stops them; on kwok a
Pod without ``phalanx.dev/sim-hang`` finishes after half a second.

Checked for every example: the environment the JobType promises, every Pod of the gang created before any is
bound (from the order of watch events), and the job reaching Succeeded through the kwok stages.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import k8s_testenv
from components import Components

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubernetes"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
# Roles whose processes only stop when the job stops them.
SERVICE_ROLES = {"tensorflow": {"ps"}, "mpi": {"worker"}}


class PodEvents:
    """Every watch event on the namespace's Pods, in order."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        version = kube.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, args=(kube, namespace, version), daemon=True)
        self._thread.start()

    def _run(self, kube: Any, namespace: str, version: str) -> None:
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "300"}
        try:
            with kube.http.stream("GET", f"/api/v1/namespaces/{namespace}/pods", params=params, timeout=None) as s:
                for line in s.iter_lines():
                    event = json.loads(line)
                    self.events.append((event["type"], event["object"]))
        except httpx.HTTPError:
            return  # the control plane stopped at the end of the session

    def first_binding_after_every_creation(self) -> bool:
        """True when no Pod was bound before the last Pod of the job was created."""
        last_added = max(i for i, (kind, _) in enumerate(self.events) if kind == "ADDED")
        bound = [i for i, (_, pod) in enumerate(self.events) if pod["spec"].get("nodeName")]
        return bool(bound) and min(bound) > last_added


def server_side_apply(kube: Any, namespace: str, document: dict[str, Any]) -> None:
    name = document["metadata"]["name"]
    response = kube.http.patch(
        f"{JOBS.format(ns=namespace)}/{name}",
        params={"fieldManager": "kubectl", "force": "true"},
        content=yaml.safe_dump(document).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert response.status_code in (200, 201), response.text


def with_service_roles_kept_running(document: dict[str, Any]) -> dict[str, Any]:
    for role in SERVICE_ROLES.get(document["spec"]["type"], set()):
        template = document["spec"]["replicas"][role]["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {})["phalanx.dev/sim-hang"] = "true"
    return document


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


@pytest.fixture
def gpu_nodes(components: Components) -> Iterator[list[str]]:
    kube = components.kube
    names = [kube.unique("example-gpu") for _ in range(3)]
    k8s_testenv.create_fake_gpu_nodes(kube.env, names)
    yield names
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_runs_with_its_environment_and_its_gang_bound_together(
    example: str, components: Components, namespace: str, gpu_nodes: list[str]
) -> None:
    kube = components.kube
    components.operator()
    components.scheduler("--lease-duration", "6")
    [document] = [doc for doc in yaml.safe_load_all((EXAMPLES / example).read_text()) if doc]
    name, kind = document["metadata"]["name"], document["spec"]["type"]
    expected = sum(role.get("count", 1) for role in document["spec"]["replicas"].values())
    events = PodEvents(kube, namespace)
    server_side_apply(kube, namespace, with_service_roles_kept_running(document))

    kube.wait_for(
        f"{JOBS.format(ns=namespace)}/{name}",
        lambda job: job.get("status", {}).get("phase") == "Succeeded",
        timeout=90,
        message=f"{example} succeeds",
    )
    created = {pod["metadata"]["name"]: pod for kind_, pod in events.events if kind_ == "ADDED"}
    assert len(created) == expected, sorted(created)
    assert events.first_binding_after_every_creation(), "a Pod was bound before its whole gang existed"

    envs = {pod_name: env_of(pod) for pod_name, pod in created.items()}
    service = f"{name}.{namespace}.svc"
    if kind == "pytorch":
        assert {env["MASTER_ADDR"] for env in envs.values()} == {f"{name}-master-0.{service}"}
        assert {env["WORLD_SIZE"] for env in envs.values()} == {str(expected)}
        assert sorted(int(env["RANK"]) for env in envs.values()) == list(range(expected))
    elif kind == "tensorflow":
        configs = {pod_name: json.loads(env["TF_CONFIG"]) for pod_name, env in envs.items()}
        cluster = next(iter(configs.values()))["cluster"]
        assert cluster["ps"] == [f"{name}-ps-{i}.{service}:2222" for i in range(2)]
        assert len(cluster["worker"]) == 4 and len(cluster["chief"]) == 1
        for pod_name, config in configs.items():
            role, index = pod_name.removeprefix(f"{name}-").rsplit("-", 1)
            assert config["task"] == {"type": role, "index": int(index)}
    elif kind == "mpi":
        hostfile = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}-hostfile")["data"]["hostfile"]
        assert [line.split()[0] for line in hostfile.splitlines() if line.strip()] == [
            f"{name}-worker-{i}.{service}" for i in range(4)
        ]
        launcher = created[f"{name}-launcher-0"]
        assert any(v["name"] == "hostfile" for v in launcher["spec"]["volumes"])
    else:
        pytest.fail(f"no environment check for job type {kind}")
