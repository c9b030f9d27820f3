"""Smoke tests of the Kubernetes test environment, through the real control plane.

They prove what later e2e tests rely on: the pinned binaries serve a real API, kube-controller-manager and
kube-scheduler run, fake GPU nodes become Ready with their GPUs (and NotReady while they carry kwok's node-not-ready
label), and our kwok stages play pods the way a kubelet would (Running, then Succeeded or Failed with the annotated
exit code, or hung; deleted when deleted); the pinned kubectl drives the cluster, from Python and through
``hack/k8s-testenv env`` and ``kubectl``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

import k8s_testenv
from conftest import Kube
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NODES = ("gpu-node-0", "gpu-node-1")
LAUNCHER = k8s_testenv.REPO / "hack" / "k8s-testenv"


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for item in obj.get("status", {}).get("conditions") or []:
        if item["type"] == kind:
            return str(item["status"])
    return None


def phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def terminated(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [s["state"]["terminated"] for s in pod["status"].get("containerStatuses", []) if "terminated" in s["state"]]


def job_pod(name: str, node: str | None = NODES[0], **annotations: str) -> dict[str, Any]:
    """A pod that looks like a Phalanx replica: the phalanx.dev/job label makes kwok finish it."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "trainer",
                "image": "phalanx.invalid/simulated:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
    }
    if node:
        spec["nodeName"] = node  # bypass scheduling
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"phalanx.dev/job": name}, "annotations": annotations},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def gpu_nodes(kube: Kube) -> list[dict[str, Any]]:
    """Two fake 8-GPU nodes, Ready."""
    k8s_testenv.create_fake_gpu_nodes(kube.env, NODES)
    return [
        kube.wait_for(f"/api/v1/nodes/{name}", lambda n: condition(n, "Ready") == "True", 60, f"node {name} Ready")
        for name in NODES
    ]


def wait_phase(kube: Kube, namespace: str, name: str, wanted: str, timeout: float = 30) -> dict[str, Any]:
    return kube.wait_for(
        f"/api/v1/namespaces/{namespace}/pods/{name}", lambda p: phase(p) == wanted, timeout, f"pod {name} {wanted}"
    )


def test_apiserver_is_ready_and_runs_the_pinned_version(kube: Kube) -> None:
    assert kube.http.get("/readyz").text == "ok"
    versions = k8s_testenv.pinned_versions()
    assert kube.get("/version")["gitVersion"] == versions.kubernetes
    bin_dir = k8s_testenv.bin_dir(versions)
    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert k8s_testenv.binary_version(bin_dir / binary).strip() == f"Kubernetes {versions.kubernetes}"
    assert f"etcd Version: {versions.etcd.removeprefix('v')}" in k8s_testenv.binary_version(bin_dir / "etcd")
    assert f"kwok version {versions.kwok} " in k8s_testenv.binary_version(bin_dir / "kwok")
    assert f"Client Version: {versions.kubernetes}\n" in k8s_testenv.binary_version(bin_dir / "kubectl")
    assert kube.startup_s < 180


def test_status_command_reports_every_component_healthy(kube: Kube) -> None:
    result = subprocess.run(
        [str(LAUNCHER), "status", "--dir", str(kube.env.directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kube-scheduler"):
        assert any(line.split()[:2] == [name, "ok"] for line in result.stdout.splitlines()), result.stdout
    env = json.loads((kube.env.directory / "env.json").read_text())
    assert env["kubeconfig"] == str(kube.kubeconfig)


def test_kubectl_is_the_control_planes_release_and_applies_client_side(
    kube: Kube, kubectl: Callable[..., subprocess.CompletedProcess[str]], namespace: str
) -> None:
    versions = json.loads(kubectl("version", "-o", "json").stdout)
    pinned = k8s_testenv.pinned_versions().kubernetes
    assert versions["clientVersion"]["gitVersion"] == versions["serverVersion"]["gitVersion"] == pinned
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"answer": "42"}}
    applied = kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))
    assert applied.stdout.strip() == "configmap/applied created"
    stored = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/applied")
    assert stored["data"] == {"answer": "42"}
    # A real client-side apply: kubectl's field manager, and the applied manifest kept for the next three-way merge.
    assert "kubectl-client-side-apply" in {entry["manager"] for entry in stored["metadata"]["managedFields"]}
    last_applied = json.loads(stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last_applied["data"] == manifest["data"]
    failed = kubectl("get", "configmap", "missing", "-n", namespace, check=False)
    assert failed.returncode == 1 and 'configmaps "missing" not found' in failed.stderr
    with pytest.raises(k8s_testenv.TestEnvError, match="not found"):
        kubectl("get", "configmap", "missing", "-n", namespace)


def test_launcher_gives_a_shell_the_pinned_kubectl_and_the_kubeconfig(kube: Kube, namespace: str) -> None:
    directory = str(kube.env.directory)
    exports = subprocess.run(
        [str(LAUNCHER), "env", "--dir", directory], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    script = f'{exports}\ncommand -v kubectl; printf "%s\\n" "$KUBECONFIG"; kubectl get namespace {namespace} -o name'
    # A clean environment: PATH without the cache, no KUBECONFIG; the exports alone must make kubectl work.
    shell = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": directory},
    )
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert shell.stdout.splitlines() == [str(kube.env.kubectl_path), str(kube.kubeconfig), f"namespace/{namespace}"]
    passthrough = subprocess.run(
        [str(LAUNCHER), "kubectl", "--dir", directory, "--", "get", "namespace", namespace, "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (passthrough.returncode, passthrough.stdout) == (0, f"namespace/{namespace}\n"), passthrough.stderr
    missing = subprocess.run(
        [str(LAUNCHER), "kubectl", "--dir", directory, "get", "namespace", "no-such-namespace"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_namespace_gets_controller_manager_defaults(kube: Kube, namespace: str) -> None:
    assert kube.get(f"/api/v1/namespaces/{namespace}")["status"]["phase"] == "Active"
    # Both appear only if kube-controller-manager runs: the serviceaccount and root-ca-cert-publisher controllers.
    kube.wait_for(f"/api/v1/namespaces/{namespace}/serviceaccounts/default", bool, 60, "default ServiceAccount")
    kube.wait_for(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt", bool, 60, "kube-root-ca.crt")


def test_fake_gpu_nodes_become_ready_with_their_gpus(kube: Kube, gpu_nodes: list[dict[str, Any]]) -> None:
    for node in gpu_nodes:
        name = node["metadata"]["name"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        topology = json.loads(node["metadata"]["annotations"]["phalanx.dev/gpu-topology"])
        assert [len(n["gpus"]) for n in topology["numaNodes"]] == [4, 4]
        assert len(topology["nvlink"]["pairs"]) == 28
        assert {a["type"] for a in node["status"]["addresses"]} == {"InternalIP", "Hostname"}
        # kwok renews the node's Lease: that is what keeps the node lifecycle controller from tainting it.
        kube.wait_for(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}", bool, 30, "lease")


def test_a_node_labelled_not_ready_is_not_ready_until_the_label_goes(kube: Kube) -> None:
    name = kube.unique("not-ready")
    path = f"/api/v1/nodes/{name}"
    k8s_testenv.create_fake_gpu_nodes(kube.env, [name])

    def label(value: str | None) -> None:
        body = json.dumps({"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": value}}})
        response = kube.http.patch(path, content=body, headers={"Content-Type": "application/merge-patch+json"})
        response.raise_for_status()

    try:
        kube.wait_for(path, lambda n: condition(n, "Ready") == "True", 60, f"{name} Ready")
        label("true")
        node = kube.wait_for(path, lambda n: condition(n, "Ready") == "False", 30, f"{name} NotReady")
        assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["reason"] == "KubeletNotReady"
        assert condition(node, "MemoryPressure") == "False"  # only Ready changed
        label(None)
        kube.wait_for(path, lambda n: condition(n, "Ready") == "True", 30, f"{name} Ready again")
    finally:
        kube.request("DELETE", path)


def test_job_pod_runs_then_succeeds_after_its_duration(kube: Kube, gpu_nodes: Any, namespace: str) -> None:
    created = time.monotonic()
    kube.create(f"/api/v1/namespaces/{namespace}/pods", job_pod("ok", **{"phalanx.dev/sim-duration-ms": "2000"}))
    running = wait_phase(kube, namespace, "ok", "Running")
    assert condition(running, "Ready") == "True"
    assert running["status"]["podIP"].startswith("10.244.")
    assert running["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    done = wait_phase(kube, namespace, "ok", "Succeeded")
    assert time.monotonic() - created >= 2.0  # it ran 2 s after kwok saw it Running, which was after the create
    [state] = terminated(done)
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert condition(done, "Ready") == "False"


def test_exit_code_annotation_fails_the_pod_with_that_code(kube: Kube, gpu_nodes: Any, namespace: str) -> None:
    pod = job_pod("crash", NODES[1], **{"phalanx.dev/sim-exit-code": "3", "phalanx.dev/sim-duration-ms": "100"})
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    failed = wait_phase(kube, namespace, "crash", "Failed")
    [state] = terminated(failed)
    assert (state["exitCode"], state["reason"]) == (3, "Error")


def test_hung_pod_and_non_job_pod_stay_running(kube: Kube, gpu_nodes: Any, namespace: str) -> None:
    hung = job_pod("hung", **{"phalanx.dev/sim-hang": "true", "phalanx.dev/sim-duration-ms": "100"})
    service = job_pod("service")
    del service["metadata"]["labels"]["phalanx.dev/job"]  # not a Phalanx replica: runs until deleted
    witness = job_pod("witness", **{"phalanx.dev/sim-duration-ms": "1500"})
    for pod in (hung, service, witness):
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    wait_phase(kube, namespace, "hung", "Running")
    wait_phase(kube, namespace, "service", "Running")
    # The witness started with them and ran 1.5 s: fifteen times what the hung pod would have run.
    wait_phase(kube, namespace, "witness", "Succeeded")
    for name in ("hung", "service"):
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        assert phase(pod) == "Running", pod["status"]
        assert not terminated(pod)


def test_deleting_a_pod_removes_it_despite_finalizers(kube: Kube, gpu_nodes: Any, namespace: str) -> None:
    pod = job_pod("doomed", **{"phalanx.dev/sim-hang": "true"})
    pod["metadata"]["finalizers"] = ["phalanx.dev/e2e-test"]
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    wait_phase(kube, namespace, "doomed", "Running")
    path = f"/api/v1/namespaces/{namespace}/pods/doomed"
    assert kube.request("DELETE", path).status_code == 200
    wait_until(lambda: not kube.exists(path), 30, "pod doomed deleted", interval=0.1)


def test_kube_scheduler_binds_a_gpu_pod_to_a_fake_node(kube: Kube, gpu_nodes: Any, namespace: str) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/pods", job_pod("scheduled", node=None))
    running = wait_phase(kube, namespace, "scheduled", "Running")
    assert running["spec"]["nodeName"] in NODES
    wait_phase(kube, namespace, "scheduled", "Succeeded")
