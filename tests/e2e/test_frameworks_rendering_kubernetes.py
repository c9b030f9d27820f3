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
  of that job (each Pod's env, name, hostname, subdomain, port, command and args; the hostfile; the Service's
  selector, ports, ``clusterIP: None`` and ``publishNotReadyAddresses``), and the parity view of the stored
  objects equals the renderer's. A job that reads Datasets (XGBoost) gets its Pods once node agents have
  staged its data; the dataset variables those add are checked to be there, not compared (the renderer alone
  does not decide them).

The examples name no image (the embedded runtime needs none), and a cluster needs one: the test submits a copy of
the job file whose replica templates name one, as a user would write for a cluster (and, for a job that reads
Datasets, a GPU of this module's nodes: see ``cluster``), and renders that copy. (An
operator started with ``--image`` would do too, but the phalanx-scheduler does not know that image, so it leaves
such a job to the operator, which accepts it after its 10 s accept hold: 10 s per file.)
"""

from __future__ import annotations

import json
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
from components import Components, report_logs_of, wait_alive
from phalanx.adapters.kubernetes.rendering import (
    hostfile_configmap_name,
    needs_service,
    render_headless_service,
    render_hostfile_configmap,
    render_pods,
    service_name,
)
from phalanx.core.data.sharding import env_name
from phalanx.core.rendezvous import replica_names
from support.rendering_parity import assert_same_views, job_from_documents, kubernetes_facts, rendered_facts
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "frameworks"
PROBE = ROOT / "tests" / "support" / "rendering_parity_probe.yaml"
IMAGE = "example.org/frameworks:1"
JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"
GPUS_PER_NODE = 4  # room for the XGBoost example's three replicas of one GPU each (see for_cluster)
DATA_VARIABLES = ("PHALANX_DATASET_", "PHALANX_SAMPLE_CACHE_DIR")


@dataclass(frozen=True)
class FrameworksCluster:
    """The module's running components, and the GPU model only its nodes have."""

    components: Components
    model: str


def job_files() -> list[Path]:
    """Every YAML file of examples/frameworks/*/ that holds a TrainingJob, and the parity probe."""
    return [path for path in sorted(EXAMPLES.glob("*/*.yaml")) if "TrainingJob" in kinds(path)] + [PROBE]


def kinds(path: Path) -> set[str]:
    return {doc.get("kind") for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)}


def companions(path: Path) -> list[Path]:
    """The files a job file needs submitted first: its directory's YAML files without a TrainingJob (the dask
    example's JobType is in jobtype.yaml, as a user keeps a JobType they submit once)."""
    if path.parent.parent != EXAMPLES:
        return []
    return [other for other in sorted(path.parent.glob("*.yaml")) if "TrainingJob" not in kinds(other)]


def inventory(path: Path, model: str) -> Path:
    """A simulated node with GPUs of ``model``, for the node agents' GPU discovery (kwok nodes have no NVML)."""
    node = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "Node",
        "metadata": {"name": "sim"},
        "status": {
            "source": "simulated",
            "memory": 1 << 30,
            "cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 0}],
            "gpus": [
                {"index": i, "uuid": f"GPU-sim-{i}", "model": model, "memory": 1 << 30, "numa": 0}
                for i in range(GPUS_PER_NODE)
            ],
        },
    }
    path.write_text(json.dumps(node))
    return path


@pytest.fixture(scope="module")
def cluster(phalanx_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrameworksCluster]:
    """The operator and the scheduler running, and two fresh nodes with a node agent each: started once for every
    file (each test has its namespace), a few seconds saved per file.

    The XGBoost example reads a Dataset made by a script: the operator materialises it into a dataset store
    (``--allow-script-sources``, run from the repository root like ``phalanx run`` from a checkout, with this
    interpreter's ``python`` first on PATH), and the node agents stage each replica's part before the operator
    creates the Pods. Other modules' nodes may still be there (a session shares its API server) and have no
    agent: a job that reads Datasets is steered onto this module's nodes by a GPU of their model (``for_cluster``).
    """
    kube = phalanx_installed
    directory = tmp_path_factory.mktemp("frameworks-components")
    started = Components(kube, directory)
    nodes = [kube.unique("frameworks"), kube.unique("frameworks")]
    model = kube.unique("FRAMEWORKS-GPU")
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, gpus=GPUS_PER_NODE, product=model, numa_nodes=1)
    store, simulated = directory / "store", inventory(directory / "inventory.json", model)
    try:
        with pytest.MonkeyPatch.context() as patch:  # what the processes inherit as they start, and no more
            patch.chdir(ROOT)
            patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            wait_alive(started.operator("--dataset-store", str(store), "--allow-script-sources"))
            wait_alive(started.scheduler("--lease-duration", "6"))
            for node in nodes:
                agent = started.node_agent(
                    node,
                    *("--inventory", str(simulated), "--interval", "0.5", "--dataset-store", str(store)),
                    *("--cache-dir", str(directory / f"cache-{node}"), "--cache-size", "100Mi"),
                    *("--sample-dir", str(directory / f"samples-{node}")),
                )
                wait_alive(agent)
        yield FrameworksCluster(started, model)
    finally:
        started.stop_all()
        for name in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def running(cluster: FrameworksCluster, request: pytest.FixtureRequest) -> FrameworksCluster:
    """The module's components, their logs attached to this test's report if it fails."""
    report_logs_of(request.node, cluster.components)
    return cluster


def for_cluster(document: dict[str, Any], model: str) -> dict[str, Any]:
    """The document as written for this cluster: a TrainingJob's replica templates name an image where they name
    none, and those of a job that reads Datasets ask for a GPU of ``model`` (only this module's nodes, which
    have node agents to stage the data, have one)."""
    if document.get("kind") == "TrainingJob":
        for replica in document["spec"]["replicas"].values():
            template = replica.setdefault("template", {})
            template.setdefault("image", IMAGE)
            if document["spec"].get("datasets"):
                template.setdefault("resources", {}).update(gpu=1, gpuModel=model)
    return document


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
    """Wait until the operator has created the job's Pods, and its Service and ConfigMap where wanted; return
    them (the Service and the ConfigMap as found: None for none)."""
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
            found[kind] = kube.get(path) if kube.exists(path) else None
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
    assert not [value for value in env.values() if "$(" in value], "the kubelet would expand $(NAME) in the env"
    return env


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", job_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_operator_creates_what_the_renderer_renders_for_the_example(
    path: Path, running: FrameworksCluster, namespace: str, tmp_path: Path
) -> None:
    kube = running.components.kube
    documents = []
    for source in [*companions(path), path]:
        loaded = [for_cluster(d, running.model) for d in yaml.safe_load_all(source.read_text()) if isinstance(d, dict)]
        documents += loaded
        copy = tmp_path / source.name
        copy.write_text(yaml.safe_dump_all(loaded, sort_keys=False))
        submitted = submit(kube, namespace, copy, tmp_path)
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
            env = env_of(stored)
            # What a replica reads of its datasets is decided per node by the staging (checked in
            # test_datasets_kubernetes.py), not by the renderer alone: each dataset's path is there, the rest equal.
            data = {key: env.pop(key) for key in list(env) if key.startswith(DATA_VARIABLES)}
            assert env == env_of(rendered), pod_name
            assert {f"{env_name(d.name)}_PATH" for d in job.spec.datasets} <= set(data), (pod_name, data)
            for key in ("hostname", "subdomain"):
                assert stored["spec"].get(key) == rendered["spec"].get(key), (pod_name, key)
            [stored_container], [rendered_container] = stored["spec"]["containers"], rendered["spec"]["containers"]
            for key in ("ports", "command", "args"):
                assert stored_container.get(key) == rendered_container.get(key), (pod_name, key)
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
        else:
            assert configmap is None

        # The parity view (what each replica was told, addresses read back as replica names) of the objects on
        # the API server equals the renderer's, which tests/frameworks compares with the working replicas'.
        assert_same_views(job, jobtype, rendered_facts(job, jobtype), kubernetes_facts(pods, configmap, service))
