"""The Helm chart charts/phalanx with the real helm (built from its Go module, pinned in tools/helm-bin).

``helm lint`` passes; ``helm template`` with the default values renders exactly ``phalanx install --print``
(compared as parsed objects), and its values land where they should; the render applies with ``kubectl apply``;
and ``helm install``, ``helm upgrade`` to the chart's next version and ``helm uninstall`` work on a real control
plane while a job runs, the job and its Pods untouched by the upgrade.

The install needs a control plane of its own: the chart's ClusterRoles have fixed names (one install per
cluster), which the session's control plane already holds for the other e2e tests (deploy/, applied directly).
The chart's Deployments and DaemonSet have no image to run here, so, as in the rest of the tier, the operator and
the scheduler run as local processes, authenticated as the ServiceAccounts the chart installed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_testenv
from components import Components, Kube, own_control_plane, wait_alive
from phalanx.adapters.kubernetes.manifests import (
    SCHEDULER_CONFIG_HASH,
    InstallParameters,
    install_manifests,
    render_yaml,
)
from phalanx.services.kubernetes.install import InstallRequest, default_image, phalanx_version, render_install
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "phalanx"
RELEASE = "phalanx"
SYSTEM = "phalanx-system"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


@dataclass
class Helm:
    """The pinned helm, with its own config, cache and data directories, against one control plane."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None

    def __call__(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {
            **k8s_testenv.binary_env(),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        env.pop("KUBECONFIG", None)
        command = [str(self.binary), *args]
        if self.kubeconfig is not None:
            command.append(f"--kubeconfig={self.kubeconfig}")
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def template(self, *args: str) -> list[dict[str, Any]]:
        """``helm template`` of the committed chart, CRDs included, as parsed objects."""
        text = self("template", RELEASE, str(CHART), "--include-crds", *args).stdout
        return parse(text)


def parse(text: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(text) if document]


def keyed(documents: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Objects by (apiVersion, kind, namespace, name): helm orders them by kind, the install by dependency."""
    found = {}
    for document in documents:
        meta = document["metadata"]
        key = (document["apiVersion"], document["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in found, f"{key} twice"
        found[key] = document
    return found


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(k8s_testenv.helm_path(), tmp_path_factory.mktemp("helm"))


def test_helm_lint_passes_strictly(helm: Helm) -> None:
    done = helm("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


def test_the_default_render_is_phalanx_install_print(helm: Helm) -> None:
    rendered = keyed(helm.template("--namespace", SYSTEM))
    cli = Path(sys.executable).parent / "phalanx"  # the CLI of this environment, as a user runs it
    printed = subprocess.run([str(cli), "install", "--print"], capture_output=True, text=True, check=True).stdout
    install = keyed(parse(printed))
    assert sorted(rendered) == sorted(install)
    for key, document in install.items():
        assert rendered[key] == document, key


def test_the_values_a_user_sets_render_as_the_install_with_the_same_options(helm: Helm) -> None:
    image = "registry.example/ml/phalanx:1.2.3"
    with_tag = helm.template(
        "--namespace", "team-a", "--set", "image.repository=registry.example/ml/phalanx", "--set", "image.tag=1.2.3"
    )
    assert keyed(with_tag) == keyed(parse(render_install(InstallRequest(namespace="team-a", image=image))))
    # The dataset store changes the objects' shape (volumes, the namespace's Pod Security level): still the same.
    store = helm.template("--namespace", SYSTEM, "--set", "datasets.storeClaim=phalanx-datasets")
    parameters = InstallParameters(image=default_image(), dataset_store_claim="phalanx-datasets")
    assert keyed(store) == keyed(parse(render_yaml(install_manifests(parameters))))
    # So do the artifact store's claim and the kubelet's configuration file, in every combination with the dataset
    # store (eight renders merged in one template each).
    for datasets in (None, "phalanx-datasets"):
        for artifacts in (None, "phalanx-artifacts"):
            for kubelet in (None, "/var/lib/kubelet/config.yaml"):
                chosen = ["--set", f"datasets.storeClaim={datasets}"] if datasets is not None else []
                if artifacts is not None:
                    chosen += ["--set", f"artifacts.persistentVolumeClaim={artifacts}"]
                if kubelet is not None:
                    chosen += ["--set", f"nodeAgent.kubeletConfig={kubelet}"]
                rendered = helm.template("--namespace", SYSTEM, *chosen)
                parameters = InstallParameters(
                    image=default_image(),
                    dataset_store_claim=datasets,
                    artifact_claim=artifacts,
                    kubelet_config=kubelet,
                )
                assert keyed(rendered) == keyed(parse(render_yaml(install_manifests(parameters)))), chosen


def test_the_chart_creates_the_artifact_stores_claim_when_asked(helm: Helm) -> None:
    settings = ["artifacts.persistentVolumeClaim=runs", "artifacts.create=true", "artifacts.size=5Gi"]
    rendered = helm.template("--namespace", SYSTEM, *(arg for value in settings for arg in ("--set", value)))
    claims = [document for document in rendered if document["kind"] == "PersistentVolumeClaim"]
    assert [(c["metadata"]["name"], c["metadata"]["namespace"]) for c in claims] == [("runs", SYSTEM)]
    assert claims[0]["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}}
    assert claims[0]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    named_only = helm.template("--namespace", SYSTEM, "--set", "artifacts.persistentVolumeClaim=runs")
    assert not [document for document in named_only if document["kind"] == "PersistentVolumeClaim"]


def test_node_selection_resources_health_port_and_scheduler_config_land_in_the_objects(
    helm: Helm, tmp_path: Path
) -> None:
    config = "apiVersion: phalanx.dev/v1alpha1\nkind: SchedulerConfiguration\nqueueOrder: shortest-first\n"
    (tmp_path / "scheduler.yaml").write_text(config)
    values = {
        "nodeAgent": {"nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": []},
        "operator": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        "scheduler": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        "imagePullSecrets": [{"name": "my-registry"}],
        "healthPort": 9100,
        "namespace": {"create": False},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    objects = keyed(
        helm.template(
            "--namespace", SYSTEM, "-f", str(tmp_path / "values.yaml"),
            "--set-file", f"scheduler.config={tmp_path / 'scheduler.yaml'}",
        )
    )  # fmt: skip
    assert not [key for key in objects if key[1] == "Namespace"], "namespace.create=false renders no Namespace"
    agent = objects[("apps/v1", "DaemonSet", SYSTEM, "phalanx-node-agent")]["spec"]["template"]["spec"]
    assert agent["nodeSelector"] == {"nvidia.com/gpu.present": "true"} and "tolerations" not in agent
    operator = objects[("apps/v1", "Deployment", SYSTEM, "phalanx-operator")]["spec"]["template"]["spec"]
    # Values merge into the defaults: the limit stays.
    assert operator["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }
    scheduler = objects[("apps/v1", "Deployment", SYSTEM, "phalanx-scheduler")]["spec"]["template"]["spec"]
    assert scheduler["affinity"] == values["scheduler"]["affinity"]
    for name, kind in (
        ("phalanx-node-agent", "DaemonSet"),
        ("phalanx-operator", "Deployment"),
        ("phalanx-scheduler", "Deployment"),
    ):
        template = objects[("apps/v1", kind, SYSTEM, name)]["spec"]["template"]
        spec = template["spec"]
        [container] = spec["containers"]
        assert spec["imagePullSecrets"] == [{"name": "my-registry"}]
        assert container["ports"][0]["containerPort"] == 9100
        assert {"name": "PHALANX_HEALTH_PORT", "value": "9100"} in container["env"]
        # Prometheus finds /metrics on the same port
        assert template["metadata"]["annotations"]["prometheus.io/port"] == "9100"
        assert template["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    config_map = objects[("v1", "ConfigMap", SYSTEM, "phalanx-scheduler-config")]
    assert config_map["data"]["scheduler-config.yaml"] == config
    # A new configuration is a new Pod template, so an upgrade that changes it restarts the scheduler.
    annotations = objects[("apps/v1", "Deployment", SYSTEM, "phalanx-scheduler")]["spec"]["template"]["metadata"]
    assert annotations["annotations"][SCHEDULER_CONFIG_HASH] == hashlib.sha256(config.encode()).hexdigest()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("healthPort=http", "healthPort"),
        ("nodeAgent.nodeselector.gpu=yes", "nodeselector"),  # a misspelt key is not silently ignored
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("datasets.cacheDir=relative/dir", "cacheDir"),
    ],
)
def test_a_wrong_value_is_refused_by_name(helm: Helm, setting: str, named: str) -> None:
    done = helm("template", RELEASE, str(CHART), "--set", setting, check=False)
    assert done.returncode != 0 and "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr


def test_kubeflow_kinds_render_as_the_install_with_the_option(helm: Helm) -> None:
    rendered = keyed(helm.template("--namespace", SYSTEM, "--set", "kubeflowKinds.enabled=true"))
    install = keyed(parse(render_install(InstallRequest(kubeflow_kinds=True))))
    assert sorted(rendered) == sorted(install)
    for key, document in install.items():
        if key[2:] == ("", document["metadata"]["name"]) and document["metadata"]["name"].endswith("kubeflow.org"):
            # helm keeps them on uninstall, as it keeps the chart's own CRDs: deleting one deletes every job.
            assert rendered[key]["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
        assert rendered[key] == document, key
    operator = rendered[("apps/v1", "Deployment", SYSTEM, "phalanx-operator")]
    env = operator["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "PHALANX_KUBEFLOW_KINDS", "value": "true"} in env


# --------------------------------------------------------------------------------------------------------------
# On a real control plane of its own.
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with own_control_plane(tmp_path_factory.mktemp("helm-k8s"), "the chart's control plane", scheduler=False) as kube:
        yield kube


ADMISSION = "/apis/admissionregistration.k8s.io/v1"
#: Where each kind of the chart is read back, to check it is there (or gone).
PATHS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts/{name}",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps/{name}",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/{name}",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/{name}",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies/{{name}}",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings/{{name}}",
}


def path_of(key: tuple[str, str, str, str]) -> str:
    _, kind, namespace, name = key
    return PATHS[kind].format(ns=namespace, name=name)


def gone_or_terminating(cluster: Kube, key: tuple[str, str, str, str]) -> bool:
    response = cluster.http.get(path_of(key))
    return response.status_code == 404 or bool(response.json()["metadata"].get("deletionTimestamp"))


def test_the_render_applies_with_kubectl_and_deletes_again(helm: Helm, cluster: Kube) -> None:
    namespace = "phalanx-plain"
    text = helm("template", RELEASE, str(CHART), "--include-crds", "--namespace", namespace).stdout
    applied = cluster.env.kubectl("apply", "-f", "-", stdin=text)
    objects = keyed(parse(text))
    assert applied.stdout.count("created") == len(objects), applied.stdout
    for key in objects:
        assert cluster.status(path_of(key)) == 200, key
    # Everything but the CRDs away again, so that helm installs into a cluster without Phalanx's identities.
    without_crds = helm("template", RELEASE, str(CHART), "--namespace", namespace).stdout
    cluster.env.kubectl("delete", "--wait=false", "-f", "-", stdin=without_crds)
    for key in objects:
        if key[1] != "CustomResourceDefinition":
            wait_until(lambda key=key: gone_or_terminating(cluster, key), 30, f"{key} deleted")


def next_chart_version(directory: Path) -> str:
    """A copy of the chart as its next patch release would be (chart and app version bumped) in ``directory``."""
    major, minor, patch = (int(part) for part in phalanx_version().split(".")[:3])
    version = f"{major}.{minor}.{patch + 1}"
    shutil.copytree(CHART, directory)
    text = (directory / "Chart.yaml").read_text()
    text = re.sub(r"^version: .*$", f"version: {version}", text, flags=re.MULTILINE)
    text = re.sub(r"^appVersion: .*$", f'appVersion: "{version}"', text, flags=re.MULTILINE)
    (directory / "Chart.yaml").write_text(text)
    return version


def release(helm: Helm) -> dict[str, Any]:
    [found] = json.loads(helm("list", "--namespace", SYSTEM, "--output", "json").stdout)
    return found


def test_helm_installs_upgrades_with_a_job_running_and_uninstalls(helm: Helm, cluster: Kube, tmp_path: Path) -> None:
    helm = Helm(helm.binary, helm.home, cluster.env.kubeconfig)
    installed = helm("install", RELEASE, str(CHART), "--namespace", SYSTEM, "--create-namespace")
    assert "STATUS: deployed" in installed.stdout, installed.stdout
    assert release(helm)["chart"] == f"phalanx-{phalanx_version()}"
    objects = keyed(helm.template("--namespace", SYSTEM))
    for key in objects:
        assert cluster.status(path_of(key)) == 200, key
    labels = cluster.get(f"/api/v1/namespaces/{SYSTEM}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", "the chart's Namespace, not helm's bare one"
    accounts = {
        name: cluster.get(f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{name}")["metadata"]["uid"]
        for name in ("phalanx-operator", "phalanx-scheduler")
    }

    # A job running under the identities the chart installed.
    model = cluster.unique("HELM-GPU")
    k8s_testenv.create_fake_gpu_nodes(cluster.env, [cluster.unique("helm-gpu")], product=model)
    components = Components(cluster, tmp_path)
    try:
        wait_alive(components.operator())
        wait_alive(components.scheduler("--lease-duration", "3"))
        jobs = "helm-jobs"
        cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": jobs}})
        template = {
            "image": "example.org/trainer:1",
            "command": ["python", "train.py"],
            "metadata": {"annotations": {"phalanx.dev/sim-hang": "true"}},  # runs until deleted
            "resources": {"cpu": "1", "memory": "1Gi", "gpu": 1, "gpuModel": model},
        }
        job = {
            "apiVersion": "phalanx.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "long"},
            "spec": {"type": "generic", "replicas": {"worker": {"count": 2, "template": template}}},
        }
        uid = cluster.create(JOBS.format(ns=jobs), job)["metadata"]["uid"]
        job_path = f"{JOBS.format(ns=jobs)}/long"
        pods_path = f"/api/v1/namespaces/{jobs}/pods?labelSelector=phalanx.dev/job%3Dlong"

        def running_pods() -> dict[str, str] | None:
            pods = cluster.get(pods_path)["items"]
            phase = cluster.get(job_path).get("status", {}).get("phase")
            if phase == "Running" and len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
                return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}
            return None

        before = wait_until(running_pods, 90, "the job Running with both Pods running")

        # The next chart version: a new image tag on every component; the job and its Pods stay as they are.
        version = next_chart_version(tmp_path / "next")
        upgraded = helm("upgrade", RELEASE, str(tmp_path / "next"), "--namespace", SYSTEM)
        assert "STATUS: deployed" in upgraded.stdout and "REVISION: 2" in upgraded.stdout, upgraded.stdout
        assert release(helm)["chart"] == f"phalanx-{version}"
        operator = cluster.get(f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/phalanx-operator")
        assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == f"phalanx:{version}"
        for name, account_uid in accounts.items():  # the components' identities (and their tokens) survive
            assert cluster.get(f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{name}")["metadata"]["uid"] == account_uid
        assert cluster.get(job_path)["metadata"]["uid"] == uid
        assert running_pods() == before
        assert components.started[0].alive and components.started[1].alive
    finally:
        components.stop_all()

    uninstalled = helm("uninstall", RELEASE, "--namespace", SYSTEM)
    assert "uninstalled" in uninstalled.stdout, uninstalled.stdout
    for key in objects:
        if key[1] == "CustomResourceDefinition":
            assert cluster.status(path_of(key)) == 200, "helm keeps a chart's CRDs, and with them every job"
        else:
            wait_until(lambda key=key: gone_or_terminating(cluster, key), 30, f"{key} removed by helm uninstall")
    assert json.loads(helm("list", "--all-namespaces", "--output", "json").stdout) == []
    assert cluster.get(job_path)["metadata"]["uid"] == uid


def test_kubeflow_kinds_are_refused_where_another_installation_serves_them(helm: Helm, cluster: Kube) -> None:
    """A CRD of those names without Phalanx's label (a real Kubeflow's) stops the install, naming it."""
    helm = Helm(helm.binary, helm.home, cluster.env.kubeconfig)
    theirs = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "mpijobs.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org",
            "names": {"kind": "MPIJob", "plural": "mpijobs", "singular": "mpijob", "listKind": "MPIJobList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v2beta1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
    cluster.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", theirs)
    try:
        done = helm(
            "install", "kubeflow-check", str(CHART), "--namespace", "kubeflow-check", "--create-namespace",
            "--dry-run=server", "--set", "kubeflowKinds.enabled=true", check=False,
        )  # fmt: skip
        assert done.returncode != 0, done.stdout
        assert "the CRD mpijobs.kubeflow.org belongs to another installation" in done.stderr, done.stderr
        # Without the option the same cluster takes the chart (its own kinds do not collide).
        plain = helm(
            "install", "kubeflow-check", str(CHART), "--namespace", "kubeflow-check", "--create-namespace",
            "--dry-run=server", check=False,
        )  # fmt: skip
        assert plain.returncode == 0, plain.stderr
    finally:
        cluster.request("DELETE", path)
