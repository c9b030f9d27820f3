"""Every pod field of a replica template reaches the replica's Pod on a real kube-apiserver (issue 16).

The real `phalanx submit` creates tests/data/pod-fields/every-field.yaml (a template setting every field Phalanx
carries, env valueFrom included) on the cluster; the real operator and scheduler run it. The TrainingJob read back
from the API server still holds every field (the CRD schema pruned nothing), and the Pod the operator created holds
each one as written. The job's nodes are kwok's fake GPU nodes with a GPU model of their own, one of them with the
labels the example selects and the taint it tolerates: the Phalanx scheduler must place it there. The
ServiceAccount and PriorityClass the template names exist (the API server's admission refuses a Pod naming missing
ones); the Secrets, ConfigMaps and claim need not (a Pod is created before they are read).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Components, wait_alive
from phalanx.model.jobs import ReplicaTemplate
from phalanx.model.loading import read_documents
from phalanx.model.pods import PodFields
from phalanx.model.resources import parse_cpu, parse_memory
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

EVERY_FIELD = Path(__file__).resolve().parents[1] / "data" / "pod-fields" / "every-field.yaml"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@dataclass(frozen=True)
class Nodes:
    model: str
    matching: str
    plain: str


@pytest.fixture
def nodes(components: Components) -> Iterator[Nodes]:
    """Two fresh GPU nodes with a model of their own: one with the labels the example selects and the taint it
    tolerates, one without; the operator and the scheduler running."""
    kube = components.kube
    # The plain node sorts first: among equal nodes the scheduler would take it, unless it reads the constraint.
    plain, matching, model = kube.unique("podfields-a"), kube.unique("podfields-b"), kube.unique("PODFIELDS-GPU")
    labels = {"node.kubernetes.io/instance-type": "gpu-large", "topology.kubernetes.io/zone": "zone-a"}
    manifest = k8s_testenv.fake_gpu_node(matching, product=model, labels=labels)
    manifest["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    kube.create("/api/v1/nodes", manifest)
    k8s_testenv.create_fake_gpu_nodes(kube.env, [plain], product=model)
    wait_alive(components.operator())
    wait_alive(components.scheduler("--lease-duration", "3"))
    yield Nodes(model, matching, plain)
    for node in (matching, plain):
        kube.request("DELETE", f"/api/v1/nodes/{node}")


def assert_within(actual: Any, written: Any, where: str) -> None:
    """Everything written is in ``actual`` as written (``actual`` may hold more: the API server's defaults)."""
    if isinstance(written, dict):
        assert isinstance(actual, dict), where
        for key, value in written.items():
            assert key in actual, f"{where}.{key}"
            assert_within(actual[key], value, f"{where}.{key}")
    else:
        assert actual == written, where


def submit(kube: Any, namespace: str, path: Path, home: Path, *options: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("PHALANX_BACKEND", "KUBECONFIG")}
    environment["PHALANX_HOME"] = str(home)
    command = [sys.executable, "-m", "phalanx.entrypoints.cli", "submit", str(path), "-n", namespace, *options]
    command += ["--backend", "kubernetes", "--kubeconfig", str(kube.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)


def test_every_pod_field_reaches_the_pod_as_written(
    components: Components, nodes: Nodes, namespace: str, tmp_path: Path
) -> None:
    kube = components.kube
    document = read_documents(EVERY_FIELD)[0]
    template = document["spec"]["replicas"]["worker"]["template"]
    # Land on this test's node, and finish later than the Pod is read.
    template["resources"] = {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": nodes.model}
    template["metadata"] = {"labels": {"team": "vision"}, "annotations": {"phalanx.dev/sim-duration-ms": "60000"}}
    priority_class = kube.unique("training-high")
    template["priorityClassName"] = priority_class
    written = copy.deepcopy(template)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))

    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": template["serviceAccountName"]}},
    )
    kube.create(
        PRIORITY_CLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class},
            "value": 1000,
        },
    )
    try:
        jobs = JOBS.format(ns=namespace)
        wait_until(lambda: kube.request("GET", jobs).status_code == 200, 30, f"{jobs} served")
        result = submit(kube, namespace, path, tmp_path / "embedded-state")
        assert result.returncode == 0, result.stdout + result.stderr

        # The stored job holds every field: the CRD's schema pruned nothing.
        stored = ReplicaTemplate.model_validate(
            kube.get(f"{jobs}/every-pod-field")["spec"]["replicas"]["worker"]["template"]
        )
        given = ReplicaTemplate.model_validate(written)
        for field in PodFields.model_fields:
            assert getattr(stored, field) == getattr(given, field), field

        pod_path = f"/api/v1/namespaces/{namespace}/pods/every-pod-field-worker-0"
        pod = kube.wait_for(pod_path, lambda p: True, 60, "the replica's Pod created")
    finally:
        kube.request("DELETE", f"{PRIORITY_CLASSES}/{priority_class}")

    spec, container = pod["spec"], pod["spec"]["containers"][0]
    # The Phalanx scheduler read nodeSelector, the required node affinity and the toleration: the node with the
    # labels and the tolerated taint, not the plain one.
    assert pod["metadata"]["annotations"]["phalanx.dev/node"] == nodes.matching
    for field in ("nodeSelector", "affinity", "securityContext", "serviceAccountName"):
        assert spec[field] == written[field], field
    # The API server adds its default not-ready/unreachable tolerations after the ones written.
    assert spec["tolerations"][: len(written["tolerations"])] == written["tolerations"]
    assert spec["imagePullSecrets"] == written["imagePullSecrets"]
    assert spec["priorityClassName"] == priority_class
    assert spec["priority"] == 1000  # the API server resolved the class
    volumes = {v["name"]: v for v in spec["volumes"]}
    for volume in written["volumes"]:
        given = volume.copy()
        # The API server fills in a ConfigMap's and a Secret's defaultMode; it must be the one written.
        assert volumes[volume["name"]] == given, volume["name"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for mount in written["volumeMounts"]:
        assert mounts[mount["name"]] == mount, mount["name"]
    env = container["env"]
    for entry in written["env"]:
        if "fieldRef" in entry.get("valueFrom", {}):  # the API server's default, as for any Pod
            entry = {**entry, "valueFrom": {"fieldRef": {"apiVersion": "v1", **entry["valueFrom"]["fieldRef"]}}}
        assert entry in env, entry
    assert container["envFrom"] == written["envFrom"]
    assert container["securityContext"] == written["containerSecurityContext"]
    assert container["imagePullPolicy"] == written["imagePullPolicy"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        # The API server fills in the probe's defaults (timeoutSeconds, successThreshold, an httpGet's scheme).
        assert_within(container[probe], written[probe], probe)

    init = {c["name"]: c for c in spec["initContainers"]}
    fetch = written["initContainers"][0]
    for key, value in fetch.items():
        assert init[fetch["name"]][key] == value, key
    sidecar = written["sidecars"][0]
    assert init[sidecar["name"]]["restartPolicy"] == "Always"
    assert init[sidecar["name"]]["image"] == written["image"]
    for key, value in sidecar.items():
        assert init[sidecar["name"]][key] == value, key
    assert [c["name"] for c in spec["initContainers"]] == [fetch["name"], sidecar["name"]]


def test_a_replica_without_a_command_runs_its_images_entrypoint_and_a_stand_in_is_refused(
    components: Components, nodes: Nodes, namespace: str, tmp_path: Path
) -> None:
    kube = components.kube
    image = "phalanx.invalid/mnist:1"
    template = {
        "image": image,
        "args": ["--backend", "gloo"],
        "imagePullPolicy": "Always",
        "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": nodes.model},
        "metadata": {"annotations": {"phalanx.dev/sim-duration-ms": "60000"}},
        # The node the scheduler may use: the plain one has neither the labels nor the taint.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    document = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "entrypoint"},
        "spec": {"replicas": {"worker": {"count": 1, "template": template}}},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    jobs = JOBS.format(ns=namespace)
    wait_until(lambda: kube.request("GET", jobs).status_code == 200, 30, f"{jobs} served")

    # Images run on a cluster: a stand-in is refused, and nothing is created.
    refused = submit(kube, namespace, path, tmp_path / "embedded-state", "--stand-in", f"{image}=/bin/true")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "on Kubernetes every replica runs its image" in " ".join(refused.stderr.split())
    assert kube.request("GET", f"{jobs}/entrypoint").status_code == 404

    result = submit(kube, namespace, path, tmp_path / "embedded-state")
    assert result.returncode == 0, result.stdout + result.stderr
    pod_path = f"/api/v1/namespaces/{namespace}/pods/entrypoint-worker-0"
    container = kube.wait_for(pod_path, lambda p: True, 60, "the replica's Pod created")["spec"]["containers"][0]
    assert "command" not in container  # the image's entrypoint runs...
    assert container["args"] == ["--backend", "gloo"]  # ...with the args
    assert (container["image"], container["imagePullPolicy"]) == (image, "Always")


def test_requests_below_limits_reach_the_pod_as_written(
    components: Components, nodes: Nodes, namespace: str, tmp_path: Path
) -> None:
    """Issue 16: a Kubeflow container's requests are what Phalanx reserves, its limits the Pod's ceiling.

    The Pod is Burstable (the API server computes its QoS class), so the Phalanx scheduler gave it no exclusive
    CPUs, as the kubelet's static CPU manager would give none to it.
    """
    kube = components.kube
    requests = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    limits = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    container = {
        "name": "pytorch",
        "image": "example.org/trainer:1",
        "command": ["python", "train.py"],
        "resources": {"requests": requests, "limits": limits},
    }
    template = {"metadata": {"annotations": {"phalanx.dev/sim-hang": "true"}}, "spec": {"containers": [container]}}
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bursting"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    jobs = JOBS.format(ns=namespace)
    wait_until(lambda: kube.request("GET", jobs).status_code == 200, 30, f"{jobs} served")
    result = submit(kube, namespace, path, tmp_path / "embedded-state")
    assert result.returncode == 0, result.stdout + result.stderr

    # The stored TrainingJob keeps the ceiling: the CRD's schema has it.
    stored = kube.get(f"{jobs}/bursting")["spec"]["replicas"]["master"]["template"]["resources"]
    assert (stored["cpu"], stored["memory"], stored["limits"]) == ("2", "4Gi", {"cpu": "4", "memory": "8Gi"})

    pod_path = f"/api/v1/namespaces/{namespace}/pods/bursting-master-0"
    pod = kube.wait_for(pod_path, lambda p: True, 60, "the replica's Pod created")
    resources = pod["spec"]["containers"][0]["resources"]
    for written, rendered in ((requests, resources["requests"]), (limits, resources["limits"])):
        assert set(rendered) == set(written)
        assert parse_cpu(rendered["cpu"]) == parse_cpu(written["cpu"])
        assert parse_memory(rendered["memory"]) == parse_memory(written["memory"])
        assert rendered["nvidia.com/gpu"] == written["nvidia.com/gpu"]
    assert pod["status"]["qosClass"] == "Burstable"
    assert pod["metadata"]["annotations"]["phalanx.dev/cpus"] == ""  # placed, with no exclusive CPUs
    kube.request("DELETE", f"{jobs}/bursting")
