"""Kubeflow kinds applied with the real ``kubectl apply -f`` on a cluster installed with ``--kubeflow-kinds``.

The module applies what the option adds to an install (the Kubeflow kinds' CRDs and the ClusterRole
``phalanx-operator-kubeflow``, from ``phalanx install --kubeflow-kinds --print``) with kubectl, after checking
that the session's install without the option created none of those CRDs, and deletes them afterwards. The
operator runs as its own ServiceAccount with ``--kubeflow-kinds``, so a missing permission fails here.

Checked: a PyTorchJob, an MPIJob and a TrainJob on the shipped deepspeed-distributed runtime (our own files, in
upstream's format) are stored as written and each becomes a TrainingJob it owns, with its Pods; the TrainingJob's
progress reaches the Kubeflow object's conditions and replicaStatuses (``kubectl get pytorchjob`` prints the
state); deleting the Kubeflow object deletes the TrainingJob and its Pods (the garbage collector, through the
ownerReferences); a file with a field Phalanx cannot honour is stored, and gets a Failed condition and a Warning
Event naming the field's path, and nothing else; an operator restarted after all that writes nothing; the operator
creates the shipped ClusterTrainingRuntimes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Components, install_documents
from phalanx.adapters.kubernetes.kubeflow_crds import KUBEFLOW_CRDS
from phalanx.adapters.kubernetes.manifests import KUBEFLOW_ROLE
from phalanx.model.kubeflow import shipped_runtimes
from phalanx.services.kubernetes.install import InstallRequest, render_install
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
PRODUCT = "KUBEFLOW-KINDS-GPU"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"

PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: {name}
spec:
  runPolicy:
    backoffLimit: 1
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          nodeSelector: {{nvidia.com/gpu.product: {product}}}
          containers:
            - name: pytorch
              image: example.org/vision/ddp:1.0
              command: [python3, /workspace/train.py]
              resources:
                limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          nodeSelector: {{nvidia.com/gpu.product: {product}}}
          {extra}containers:
            - name: pytorch
              image: example.org/vision/ddp:1.0
              command: [python3, /workspace/train.py]
              resources:
                limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}
"""

# The launcher hangs (kwok's phalanx.dev/sim-hang): the job stays Running until it is deleted.
MPIJOB = """\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: {name}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        metadata:
          annotations: {{phalanx.dev/sim-hang: "true"}}
        spec:
          containers:
            - name: launcher
              image: example.org/mpi/allreduce:5.0
              command: [mpirun, -n, "2", /opt/allreduce]
              resources:
                limits: {{cpu: "1", memory: 1Gi}}
    Worker:
      replicas: 2
      template:
        metadata:
          annotations: {{phalanx.dev/sim-hang: "true"}}
        spec:
          containers:
            - name: worker
              image: example.org/mpi/allreduce:5.0
              command: [sleep, infinity]
              resources:
                limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}
"""


def kubeflow_documents() -> list[dict[str, Any]]:
    """What ``--kubeflow-kinds`` adds to ``phalanx install --print``."""
    with_option = yaml.safe_load_all(render_install(InstallRequest(kubeflow_kinds=True)))
    names = {crd.name for crd in KUBEFLOW_CRDS} | {KUBEFLOW_ROLE}
    return [doc for doc in with_option if doc and doc["metadata"]["name"] in names]


@pytest.fixture(scope="module")
def kubeflow_installed(
    phalanx_installed: Any, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    kube = phalanx_installed
    # The install without the option: none of the CRDs, in the file and on the cluster.
    assert not [doc for doc in install_documents() if ".kubeflow.org" in doc["metadata"]["name"]]
    assert [crd.name for crd in KUBEFLOW_CRDS if kube.exists(f"{CRDS}/{crd.name}")] == []
    path = tmp_path_factory.mktemp("kubeflow") / "kubeflow-kinds.yaml"
    path.write_text(yaml.safe_dump_all(kubeflow_documents()))
    kubectl("apply", "-f", str(path))
    for crd in KUBEFLOW_CRDS:
        kube.wait_for(
            f"{CRDS}/{crd.name}",
            lambda obj: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in obj.get("status", {}).get("conditions", [])
            ),
            message=f"CRD {crd.name} established",
        )
    yield kube
    kubectl("delete", "--wait=false", "-f", str(path), check=False)


@pytest.fixture
def gpu_nodes(components: Components) -> Iterator[list[str]]:
    kube = components.kube
    names = [kube.unique("kubeflow-gpu") for _ in range(2)]
    # A GPU product of their own: the PyTorchJob selects them, so it never lands on another test's nodes.
    k8s_testenv.create_fake_gpu_nodes(kube.env, names, product=PRODUCT)
    yield names
    for name in names:
        kube.request("DELETE", f"/api/v1/nodes/{name}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for item in obj.get("status", {}).get("conditions", []):
        if item["type"] == kind and item["status"] == "True":
            return dict(item)
    return None


def job_pods(kube: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    listed = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=phalanx.dev/job%3D{name}")
    return list(listed["items"])


def start(components: Components) -> None:
    components.operator("--kubeflow-kinds")
    components.scheduler("--lease-duration", "6")


def test_pytorchjob_applied_with_kubectl_runs_and_reports_and_a_restart_changes_nothing(
    kubeflow_installed: Any,
    components: Components,
    namespace: str,
    gpu_nodes: list[str],
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    kube = kubeflow_installed
    operator = components.operator("--kubeflow-kinds")
    components.scheduler("--lease-duration", "6")
    name = "ddp"
    manifest = tmp_path / "pytorchjob.yaml"
    manifest.write_text(PYTORCHJOB.format(name=name, extra="", product=PRODUCT))
    applied = kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert applied.stdout.strip() == f"pytorchjob.kubeflow.org/{name} created"

    upstream = kube.wait_for(
        f"{PYTORCHJOBS.format(ns=namespace)}/{name}",
        lambda obj: condition(obj, "Succeeded") or condition(obj, "Failed"),
        timeout=90,
        message="the PyTorchJob finished",
    )
    assert condition(upstream, "Succeeded"), upstream.get("status")
    assert condition(upstream, "Created")["reason"] == "PyTorchJobCreated"  # type: ignore[index]
    assert upstream["status"]["conditions"][-1]["type"] == "Succeeded"
    assert upstream["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    assert upstream["status"]["startTime"] and upstream["status"]["completionTime"]
    # Stored as written: the API server kept every field of the file.
    assert upstream["spec"] == yaml.safe_load(manifest.read_text())["spec"]

    job = kube.get(f"{JOBS.format(ns=namespace)}/{name}")
    [owner] = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("PyTorchJob", upstream["metadata"]["uid"], True)
    assert job["status"]["phase"] == "Succeeded"
    # The gang was placed whole on this test's GPU nodes. The pods cannot show it: the master's success ends
    # the job, and the default cleanPodPolicy (Running) deletes a worker that had not finished yet.
    [scheduled] = [
        e["message"]
        for e in kube.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}")["items"]
        if e["reason"] == "Scheduled" and e["involvedObject"]["kind"] == "TrainingJob"
    ]
    assert scheduled.startswith("placed 2 replica(s) on "), scheduled
    assert set(scheduled.removeprefix("placed 2 replica(s) on ").split(":")[0].split(", ")) <= set(gpu_nodes)
    assert f"{name}-master-0" in scheduled and f"{name}-worker-0" in scheduled, scheduled
    pods = job_pods(kube, namespace, name)
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names in ([f"{name}-master-0"], [f"{name}-master-0", f"{name}-worker-0"]), names
    assert all(p["spec"].get("nodeName") in gpu_nodes for p in pods)
    assert all(p["status"]["phase"] == "Succeeded" for p in pods), [p["status"]["phase"] for p in pods]

    printed = kubectl("get", "pytorchjob", "-n", namespace, name).stdout.splitlines()
    assert printed[0].split() == ["NAME", "STATE", "AGE"]
    assert printed[1].split()[:2] == [name, "Succeeded"]

    # A restarted operator writes nothing: the objects keep their versions. A later object, sorted after this
    # one in the operator's first pass, tells when that pass is over.
    versions = (upstream["metadata"]["resourceVersion"], job["metadata"]["resourceVersion"])
    operator.restart()
    marker = tmp_path / "marker.yaml"
    marker.write_text(PYTORCHJOB.format(name="zz-marker", extra="hostNetwork: true\n          ", product=PRODUCT))
    kubectl("apply", "-n", namespace, "-f", str(marker))
    kube.wait_for(
        f"{PYTORCHJOBS.format(ns=namespace)}/zz-marker",
        lambda obj: condition(obj, "Failed"),
        timeout=60,
        message="the restarted operator's first pass",
    )
    again = kube.get(f"{PYTORCHJOBS.format(ns=namespace)}/{name}")
    job = kube.get(f"{JOBS.format(ns=namespace)}/{name}")
    assert (again["metadata"]["resourceVersion"], job["metadata"]["resourceVersion"]) == versions

    # Deleting the PyTorchJob deletes its TrainingJob and the TrainingJob's Pods.
    kubectl("delete", "pytorchjob", "-n", namespace, name)
    wait_until(lambda: not kube.exists(f"{JOBS.format(ns=namespace)}/{name}"), 60, "the TrainingJob deleted")
    wait_until(lambda: not job_pods(kube, namespace, name), 60, "its Pods deleted")


def test_mpijob_applied_with_kubectl_runs_its_gang_and_deleting_it_deletes_the_running_job(
    kubeflow_installed: Any,
    components: Components,
    namespace: str,
    gpu_nodes: list[str],
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    kube = kubeflow_installed
    start(components)
    name = "allreduce"
    manifest = tmp_path / "mpijob.yaml"
    manifest.write_text(MPIJOB.format(name=name))
    assert (
        kubectl("apply", "-n", namespace, "-f", str(manifest)).stdout.strip() == f"mpijob.kubeflow.org/{name} created"
    )
    upstream = kube.wait_for(
        f"{MPIJOBS.format(ns=namespace)}/{name}",
        lambda obj: (
            condition(obj, "Running") and obj["status"].get("replicaStatuses", {}).get("Worker", {}).get("active") == 2
        ),
        timeout=90,
        message="the MPIJob running with both workers",
    )
    assert upstream["status"]["replicaStatuses"]["Launcher"]["active"] == 1
    assert upstream["status"]["conditions"][-1]["type"] == "Running"
    job = kube.get(f"{JOBS.format(ns=namespace)}/{name}")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    pods = job_pods(kube, namespace, name)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-launcher-0", f"{name}-worker-0", f"{name}-worker-1"]
    assert {p["status"].get("phase") for p in pods} == {"Running"}
    # Every MPIJob gets an SSH key pair (sshAuthMountPath, /root/.ssh by default): a Secret the TrainingJob owns.
    secrets = f"/api/v1/namespaces/{namespace}/secrets?labelSelector=phalanx.dev/job%3D{name}"
    [secret] = kube.get(secrets)["items"]
    assert [ref["uid"] for ref in secret["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    for pod in pods:
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh", "readOnly": True} in mounts

    kubectl("delete", "mpijob", "-n", namespace, name)
    wait_until(lambda: not kube.exists(f"{JOBS.format(ns=namespace)}/{name}"), 60, "the TrainingJob deleted")
    wait_until(lambda: not job_pods(kube, namespace, name), 60, "its Pods deleted")
    wait_until(lambda: not kube.get(secrets)["items"], 60, "its SSH key Secret deleted")


# A TrainJob on the shipped deepspeed-distributed runtime; a runtime patch makes its Pods hang under kwok
# (phalanx.dev/sim-hang), so the job stays Running until it is deleted.
DEEPSPEED_TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: {name}
spec:
  runtimeRef:
    name: deepspeed-distributed
  trainer:
    numNodes: 3
    command: [mpirun, python3, /workspace/train.py]
    resourcesPerNode:
      limits: {{cpu: "1", memory: 1Gi, nvidia.com/gpu: 1}}
  runtimePatches:
    - manager: example.io/e2e
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      metadata:
                        annotations: {{phalanx.dev/sim-hang: "true"}}
              - name: launcher
                template:
                  spec:
                    template:
                      metadata:
                        annotations: {{phalanx.dev/sim-hang: "true"}}
"""


def test_a_trainjob_on_the_shipped_deepspeed_runtime_runs_a_launcher_that_is_a_node_and_ssh_servers(
    kubeflow_installed: Any,
    components: Components,
    namespace: str,
    gpu_nodes: list[str],
    kubectl: Kubectl,
    tmp_path: Path,
) -> None:
    kube = kubeflow_installed
    start(components)
    name = "deepspeed"
    manifest = tmp_path / "trainjob.yaml"
    manifest.write_text(DEEPSPEED_TRAINJOB.format(name=name))
    applied = kubectl("apply", "-n", namespace, "-f", str(manifest)).stdout.strip()
    assert applied == f"trainjob.trainer.kubeflow.org/{name} created"
    wait_until(
        lambda: (
            {p["status"].get("phase") for p in job_pods(kube, namespace, name)} == {"Running"}
            and len(job_pods(kube, namespace, name)) == 3
        ),
        90,
        "the launcher and both nodes running",
    )
    job = kube.get(f"{JOBS.format(ns=namespace)}/{name}")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    # numNodes 3 with the launcher as a node: the launcher and 2 workers, listed in the hostfile in that order.
    assert job["spec"]["type"] == "mpi-launcher-as-worker"
    jobtype = kube.get(f"/apis/phalanx.dev/v1alpha1/jobtypes/{job['spec']['type']}")
    assert jobtype["spec"]["hostfileRoles"] == ["launcher", "worker"]
    pods = {p["metadata"]["name"]: p for p in job_pods(kube, namespace, name)}
    assert sorted(pods) == [f"{name}-launcher-0", f"{name}-worker-0", f"{name}-worker-1"]
    launcher, worker = pods[f"{name}-launcher-0"]["spec"], pods[f"{name}-worker-0"]["spec"]
    assert launcher["containers"][0]["command"] == ["mpirun", "python3", "/workspace/train.py"]
    assert worker["containers"][0]["command"] == ["/usr/sbin/sshd"]
    for spec in (launcher, worker):
        container = spec["containers"][0]
        assert container["image"] == "ghcr.io/kubeflow/trainer/deepspeed-runtime"
        assert container["securityContext"]["runAsUser"] == 1000 and spec["securityContext"]["fsGroup"] == 1000
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # the launcher is a node: both get it
        assert {"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh", "readOnly": True} in container["volumeMounts"]

    kubectl("delete", "trainjob", "-n", namespace, name)
    wait_until(lambda: not kube.exists(f"{JOBS.format(ns=namespace)}/{name}"), 60, "the TrainingJob deleted")
    wait_until(lambda: not job_pods(kube, namespace, name), 60, "its Pods deleted")


def test_a_refused_file_shows_the_field_path_in_status_and_events_and_creates_nothing(
    kubeflow_installed: Any, components: Components, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    kube = kubeflow_installed
    components.operator("--kubeflow-kinds")
    name = "no-host-network"
    manifest = tmp_path / "refused.yaml"
    manifest.write_text(PYTORCHJOB.format(name=name, extra="hostNetwork: true\n          ", product=PRODUCT))
    assert kubectl("apply", "-n", namespace, "-f", str(manifest)).returncode == 0  # the API server stores it
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork"
    upstream = kube.wait_for(
        f"{PYTORCHJOBS.format(ns=namespace)}/{name}",
        lambda obj: condition(obj, "Failed"),
        timeout=60,
        message="the PyTorchJob refused",
    )
    failed = condition(upstream, "Failed")
    assert failed is not None
    assert failed["reason"] == "PyTorchJobRefused"
    assert path in failed["message"], failed["message"]
    events = kube.get(f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3D{name}")["items"]
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in events] == [
        ("Warning", "Refused", "PyTorchJob")
    ]
    assert path in events[0]["message"]
    assert kube.get(JOBS.format(ns=namespace))["items"] == []
    assert job_pods(kube, namespace, name) == []
    described = kubectl("describe", "pytorchjob", "-n", namespace, name).stdout
    assert path in described


def test_the_operator_creates_the_shipped_cluster_training_runtimes(
    kubeflow_installed: Any, components: Components, kubectl: Kubectl
) -> None:
    kube = kubeflow_installed
    components.operator("--kubeflow-kinds")
    runtimes = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
    wanted = {key.name for key in shipped_runtimes()}
    wait_until(
        lambda: wanted <= {r["metadata"]["name"] for r in kube.get(runtimes)["items"]},
        60,
        "the shipped ClusterTrainingRuntimes created",
    )
    listed = kubectl("get", "clustertrainingruntimes", "-o", "name").stdout.split()
    assert "clustertrainingruntime.trainer.kubeflow.org/torch-distributed" in listed
