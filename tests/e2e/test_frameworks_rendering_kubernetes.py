"""The framework examples on a real API server: the operator's Pods, Service and hostfile are what the renderer says.

Issue 15 (point 3): kwok runs no containers, so on Kubernetes the frameworks cannot train; what can be shown is
that each replica is *told* what the embedded runtime told the replicas that trained. That is two comparisons:

- tests/frameworks (``support.rendering_parity.assert_kubernetes_renders_the_same``): what the working replicas
  of each example got from the embedded runtime == what ``adapters.kubernetes.rendering`` renders for the same
  job file and JobType;
- here: every job file under examples/frameworks/*/ (found at collection), and the parity probe of
  tests/support (a JobType using every template variable), submitted with ``phalanx submit --backend
  kubernetes`` to a real kube-apiserver where the real operator and scheduler run under their ServiceAccounts:
  the Pods, the headless Service and the hostfile ConfigMap the operator creates equal what the renderer makes
  of that job (each Pod's env, name, hostname, subdomain and port; the hostfile; the Service's selector, ports,
  ``clusterIP: None`` and ``publishNotReadyAddresses``), and the parity view of the stored objects equals the
  renderer's.

The examples name no image (the embedded runtime needs none): the operator is started with ``--image``, as a
cluster would run it with a default image, and the renderer is given the same one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Components, wait_alive
from phalanx.adapters.kubernetes.rendering import (
    hostfile_configmap_name,
    needs_service,
    render_headless_service,
    render_hostfile_configmap,
    render_pods,
    service_name,
)
from phalanx.core.rendezvous import replica_names
from support.rendering_parity import assert_same_views, job_from_documents, kubernetes_facts, rendered_facts
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "frameworks"
PROBE = ROOT / "tests" / "support" / "rendering_parity_probe.yaml"
IMAGE = "example.org/frameworks:1"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def job_files() -> list[Path]:
    """Every YAML file of examples/frameworks/*/ that holds a TrainingJob, and the parity probe."""
    files = []
    for path in sorted(EXAMPLES.glob("*/*.yaml")):
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
        if any(doc.get("kind") == "TrainingJob" for doc in documents):
            files.append(path)
    return [*files, PROBE]


@pytest.fixture
def cluster(components: Components) -> Iterator[Components]:
    """The operator (with a default image) and the scheduler running, and two fresh nodes for the Pods."""
    kube = components.kube
    nodes = [kube.unique("frameworks"), kube.unique("frameworks")]
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes)
    wait_alive(components.operator("--image", IMAGE))
    wait_alive(components.scheduler("--lease-duration", "6"))
    yield components
    for name in nodes:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def submit(kube: Any, namespace: str, path: Path, directory: Path) -> str:
    """``phalanx submit -f PATH`` through the Kubernetes backend, as a user of a cluster runs it."""
    cluster = ["--backend", "kubernetes", "--kubeconfig", str(kube.kubeconfig)]
    result = subprocess.run(
        [sys.executable, "-m", "phalanx.entrypoints.cli", "submit", "-f", str(path), "-n", namespace, *cluster],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=directory,
        env={**os.environ, "PHALANX_HOME": str(directory / "unused-state")},
        check=False,
    )
    assert result.returncode == 0, f"phalanx submit exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def stored_children(kube: Any, namespace: str, name: str, replicas: int, *, service: bool, hostfile: bool) -> Any:
    """Wait until the operator has created the job's Pods, Service and ConfigMap; return them."""
    api = f"/api/v1/namespaces/{namespace}"
    found: dict[str, Any] = {}

    def created() -> bool:
        found["pods"] = kube.get(f"{api}/pods?labelSelector=phalanx.dev/job={name}")["items"]
        if len(found["pods"]) < replicas:
            return False
        for kind, wanted, path in (
            ("service", service, f"{api}/services/{name}"),
            ("configmap", hostfile, f"{api}/configmaps/{name}-hostfile"),
        ):
            found[kind] = kube.get(path) if wanted and kube.exists(path) else None
            if wanted and found[kind] is None:
                return False
        return True

    wait_until(created, 60, f"the operator to create the Pods, Service and hostfile of {name}", interval=0.2)
    return found["pods"], found["service"], found["configmap"]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    """A Pod's env by name; each name once. The order is not compared: the operator renders from the JobType the
    API server stored, whose env map comes back with its keys sorted, and a Pod's env is a set of names for every
    variable a JobType renders (none refers to another with ``$(NAME)``)."""
    [container] = pod["spec"]["containers"]
    items = [(item["name"], item.get("value", "")) for item in container.get("env", [])]
    env = dict(items)
    assert len(env) == len(items), f"a variable set twice in {pod['metadata']['name']}: {items}"
    return env


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", job_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_operator_creates_what_the_renderer_renders_for_the_example(
    path: Path, cluster: Components, namespace: str, tmp_path: Path
) -> None:
    kube = cluster.kube
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
    submitted = submit(kube, namespace, path, tmp_path)
    for doc in (d for d in documents if d["kind"] == "TrainingJob"):
        name = doc["metadata"]["name"]
        assert f"trainingjob/{name} created" in submitted, submitted
        stored_job = kube.get(f"{JOBS.format(ns=namespace)}/{name}")
        job, jobtype = job_from_documents(documents, name, namespace=namespace, uid=stored_job["metadata"]["uid"])
        pods, service, configmap = stored_children(
            kube,
            namespace,
            name,
            len(replica_names(job, jobtype)),
            service=needs_service(job),
            hostfile=bool(jobtype.spec.hostfile_roles),
        )

        # What the renderer makes of the job file, for the job the API server stored (its namespace and uid).
        rendered_pods = {p["metadata"]["name"]: p for p in render_pods(job, jobtype, attempt=0, image=IMAGE)}
        stored_pods = {p["metadata"]["name"]: p for p in pods}
        assert sorted(stored_pods) == sorted(rendered_pods)
        for pod_name, rendered in rendered_pods.items():
            stored = stored_pods[pod_name]
            assert env_of(stored) == env_of(rendered), pod_name
            for key in ("hostname", "subdomain"):
                assert stored["spec"].get(key) == rendered["spec"].get(key), (pod_name, key)
            [stored_container], [rendered_container] = stored["spec"]["containers"], rendered["spec"]["containers"]
            assert stored_container["ports"] == rendered_container["ports"], pod_name
            assert stored_container["image"] == IMAGE
        if needs_service(job):
            expected = render_headless_service(job, jobtype)
            assert service["metadata"]["name"] == service_name(job)
            for key in ("selector", "ports", "clusterIP", "publishNotReadyAddresses"):
                assert service["spec"].get(key) == expected["spec"][key], key
            assert service["spec"]["clusterIP"] == "None"
        else:
            assert service is None
        expected_configmap = render_hostfile_configmap(job, jobtype)
        if expected_configmap is not None:
            assert configmap["metadata"]["name"] == hostfile_configmap_name(job)
            assert configmap["data"] == expected_configmap["data"]

        # The parity view (what each replica was told, addresses read back as replica names) of the objects on
        # the API server equals the renderer's, which tests/frameworks compares with the working replicas'.
        assert_same_views(job, jobtype, rendered_facts(job, jobtype), kubernetes_facts(pods, configmap, service))
