"""A pipeline whose steps pass a parameter and an artifact file, run by the operator with its artifact store on a
PersistentVolumeClaim (``--artifact-volume-claim``) on a real control plane.

What is real: the API server (and its controller manager), the CRDs and RBAC of deploy/, phalanx-operator
(sweeps and pipelines threads included) and phalanx-scheduler as local processes under their own
ServiceAccounts, the PipelineRun, the step TrainingJobs the operator creates and reconciles into Pods, the Pods
phalanx-scheduler binds to kwok's fake nodes, the PersistentVolumeClaim object, and the operator's collecting of
step a's outputs from its store directory and the resolving of step b's command line from them.

What the test plays: kwok runs no container, so the test plays step a's process. It writes step a's two outputs
(a parameter file and an artifact file) where the job's ``phalanx.dev/step-outputs`` annotation says, as soon as
its watch sees the job created, in the watch's own callback, before the job has any Pod (asserted: no Pod of the
job existed when the files were written), so kwok cannot finish the Pod first. The operator runs locally, so its
store directory is in the test's tmp dir and the files land there; on a cluster the same paths are on the claim,
which the Pods mount at that path (asserted on step a's and step b's Pods). No volume provisioner runs, so the
claim stays Pending; kwok's Pods do not need it bound.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import k8s_testenv
from components import Components, create_claim, wait_alive
from phalanx.adapters.kubernetes.api import PODS, TRAININGJOBS, KubeApi
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.core.pipelines.step_files import STORE_VOLUME_NAME
from phalanx.core.pipelines.steps import OUTPUTS_ANNOTATION, STEP_LABEL
from phalanx.model.pipelines import parse_pipeline_run
from phalanx.services.kubernetes.operations import KubeBackend
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

GROUP = "/apis/phalanx.dev/v1alpha1"
CLAIM = "pipeline-store"
GREETING = "hello from a"
PRODUCE = {
    "name": "produce",
    "outputs": [{"name": "greeting", "type": "String"}, {"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {
            "image": "example.org/produce:1",
            "command": ["produce", {"outputPath": "greeting"}, {"outputPath": "data"}],
        }
    },
}
CONSUME = {
    "name": "consume",
    "inputs": [{"name": "greeting", "type": "String"}, {"name": "data", "type": "Dataset"}],
    "implementation": {
        "container": {
            "image": "example.org/consume:1",
            "command": ["consume", {"inputValue": "greeting"}, {"inputPath": "data"}],
        }
    },
}


@dataclass
class StepA:
    """Plays step a's process: writes its outputs the moment its job is created, and says what it saw then."""

    api: KubeApi
    namespace: str
    written: dict[str, str] = field(default_factory=dict)  # output name -> path written
    pods_then: list[str] | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if self.done.is_set() or meta.get("labels", {}).get(STEP_LABEL) != "a":
            return
        try:
            paths = json.loads(meta["annotations"][OUTPUTS_ANNOTATION])
            Path(paths["greeting"]).write_text(GREETING)  # the operator made each output's folder
            Path(paths["data"]).write_text("id,value\n1,0.5\n")
            self.written = dict(paths)
            pods, _ = self.api.list(PODS, self.namespace, label_selector=f"phalanx.dev/job={meta['name']}")
            self.pods_then = [pod["metadata"]["name"] for pod in pods]
        except Exception as err:  # a callback of the watch: say it in the test, not in a log
            self.error = repr(err)
        self.done.set()


@dataclass
class Cluster:
    namespace: str
    kube: Any
    backend: KubeBackend
    store: Path
    step_a: StepA
    pods: dict[str, dict[str, Any]]  # by name, as last seen

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.kube.get(f"{GROUP}/namespaces/{self.namespace}/{plural}/{name}")  # type: ignore[no-any-return]

    def pods_of(self, job: str) -> list[dict[str, Any]]:
        return [pod for pod in list(self.pods.values()) if pod["metadata"]["labels"].get("phalanx.dev/job") == job]


@pytest.fixture
def cluster(components: Components, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    kube = components.kube
    nodes = [kube.unique("files")]
    k8s_testenv.create_fake_gpu_nodes(kube.env, nodes, product=kube.unique("FILES-GPU"))
    create_claim(kube, namespace, CLAIM)
    state = tmp_path / "operator-state"
    operator = components.operator("--state-dir", str(state), "--artifact-volume-claim", CLAIM)
    scheduler = components.scheduler("--lease-duration", "3")
    wait_alive(operator)
    wait_alive(scheduler)
    api = KubeApi.from_kubeconfig(kube.kubeconfig)
    step_a = StepA(api, namespace)
    pods: dict[str, dict[str, Any]] = {}

    def pod_changed(kind: str, obj: dict[str, Any]) -> None:
        pods[obj["metadata"]["name"]] = obj

    # Short watch requests: a stopped informer ends with the request in flight.
    jobs = Informer(api, TRAININGJOBS, namespace=namespace, on_change=step_a.changed, watch_timeout_s=3).start()
    pod_watch = Informer(api, PODS, namespace=namespace, on_change=pod_changed, watch_timeout_s=3).start()
    try:
        assert jobs.wait_synced(30) and pod_watch.wait_synced(30)
        yield Cluster(namespace, kube, KubeBackend(api), (state / "artifacts").absolute(), step_a, pods)
    finally:
        jobs.stop()
        pod_watch.stop()
        assert jobs.join(30) and pod_watch.join(30), "the test's informer threads outlived their fixture"
        api.close()
        for name in nodes:
            kube.request("DELETE", f"/api/v1/nodes/{name}")


def run_document(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "PipelineRun",
        "metadata": {"name": "files", "namespace": namespace},
        "spec": {
            "pipelineSpec": {
                "steps": [
                    {"name": "a", "component": {"inline": PRODUCE}},
                    {
                        "name": "b",
                        "component": {"inline": CONSUME},
                        "arguments": {"greeting": "{{steps.a.outputs.greeting}}", "data": "{{steps.a.outputs.data}}"},
                    },
                ]
            }
        },
    }


def mounts_the_claim(pod: dict[str, Any], store: Path) -> bool:
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
    claim = volumes.get(STORE_VOLUME_NAME, {}).get("persistentVolumeClaim", {}).get("claimName")
    container = pod["spec"]["containers"][0]
    mounted = {mount["name"]: mount["mountPath"] for mount in container.get("volumeMounts", [])}
    return claim == CLAIM and mounted.get(STORE_VOLUME_NAME) == str(store)


def test_step_b_reads_the_parameter_and_the_file_step_a_wrote_on_the_claim(cluster: Cluster) -> None:
    cluster.backend.create(parse_pipeline_run(run_document(cluster.namespace)))

    def finished() -> bool:
        return (cluster.get("pipelineruns", "files").get("status") or {}).get("phase") in ("Succeeded", "Failed")

    wait_until(finished, 120, "the run finished", interval=0.2)
    run = cluster.get("pipelineruns", "files")
    assert cluster.step_a.error is None, cluster.step_a.error
    assert cluster.step_a.pods_then == [], "step a's outputs were written before the job had a Pod"
    assert run["status"]["phase"] == "Succeeded", run["status"]

    # Every path the operator computed is under the store: what the Pods mount at that very path.
    store = str(cluster.store)
    assert set(cluster.step_a.written) == {"greeting", "data"}
    assert all(path.startswith(store + "/") for path in cluster.step_a.written.values())
    a_pods = cluster.pods_of("files-a-1")
    assert a_pods and all(mounts_the_claim(pod, cluster.store) for pod in a_pods), [
        p["spec"]["volumes"] for p in a_pods
    ]

    instances = {entry["step"]: entry for entry in run["status"]["instances"]}
    assert instances["a"]["outputs"]["greeting"] == GREETING
    assert instances["a"]["outputs"]["data"] == cluster.step_a.written["data"]
    b_pods = cluster.pods_of("files-b-1")
    assert b_pods and all(mounts_the_claim(pod, cluster.store) for pod in b_pods), [
        p["spec"]["volumes"] for p in b_pods
    ]
    command = b_pods[0]["spec"]["containers"][0]["command"]
    assert command == ["consume", GREETING, cluster.step_a.written["data"]]
    assert instances["b"]["phase"] == "Succeeded"
