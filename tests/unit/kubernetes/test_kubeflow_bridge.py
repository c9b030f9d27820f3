"""The operator's Kubeflow kinds on the in-memory API: create, refuse, follow, and a restart that changes nothing.

The caches are filled by hand, as a watch would fill them; ``tests/e2e/test_kubeflow_kinds_kubernetes.py`` runs the
same with ``kubectl apply`` on a real control plane.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import CRDS, EVENTS, TRAININGJOBS
from phalanx.adapters.kubernetes.informer import Informer
from phalanx.adapters.kubernetes.kubeflow_crds import kubeflow_crd, kubeflow_custom_resource_definitions
from phalanx.core.clock import VirtualClock
from phalanx.model.kubeflow import shipped_runtimes
from phalanx.model.loading import read_documents
from phalanx.services.kubernetes.kubeflow import KubeflowBridge
from phalanx.services.kubernetes.operator import KubeOperator
from phalanx.services.kubernetes.reconcile import OperatorSettings
from support.memory_kube_api import MemoryKubeApi

DATA = Path(__file__).parents[2] / "data" / "kubeflow"
NS = "research"


def example(name: str) -> dict[str, Any]:
    (document,) = read_documents(DATA / f"{name}.yaml")
    document.setdefault("metadata", {})["namespace"] = NS
    return document


class Harness:
    def __init__(self, api: MemoryKubeApi | None = None) -> None:
        self.api = api or MemoryKubeApi()
        if api is None:
            for crd in kubeflow_custom_resource_definitions():
                self.api.put(CRDS, crd)
        self.operator = KubeOperator(self.api, OperatorSettings(resync_s=3600.0, kubeflow_kinds=True), VirtualClock())
        self.operator.seed_jobtypes()
        for obj in self.api.of(self.operator.jobtypes.resource):
            self.operator.jobtypes.observe(obj)
        for obj in self.api.of(TRAININGJOBS):
            self.operator.jobs.observe(obj)
        bridge = self.operator.kubeflow
        assert bridge is not None
        self.bridge: KubeflowBridge = bridge
        for crd in self.bridge.served():
            informer = Informer(self.api, crd.resource, signal=self.bridge.signal, on_change=self.bridge._changed)
            self.bridge.informers[crd.kind] = informer
            for obj in self.api.of(crd.resource):
                informer.observe(obj)

    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        crd = kubeflow_crd(document["kind"])
        stored = self.api.put(crd.resource, document)
        self.bridge.informers[crd.kind].observe(copy.deepcopy(stored))
        self.bridge._changed("ADDED", stored)
        return stored

    def sync(self) -> None:
        self.bridge.sync()
        for obj in self.api.of(TRAININGJOBS):
            self.operator.jobs.observe(obj)

    def upstream(self, kind: str, name: str) -> dict[str, Any]:
        return self.api.get(kubeflow_crd(kind).resource, name, NS)


def conditions(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in obj.get("status", {}).get("conditions", [])]


def test_a_pytorchjob_becomes_a_trainingjob_it_owns_and_its_status_follows() -> None:
    harness = Harness()
    stored = harness.apply(example("pytorchjob"))
    harness.sync()
    job = harness.api.get(TRAININGJOBS, "ddp-demo", NS)
    assert job["spec"]["type"] == "pytorch"
    assert job["spec"]["replicas"]["worker"]["count"] == 2
    [owner] = job["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "ddp-demo",
        "uid": stored["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    upstream = harness.upstream("PyTorchJob", "ddp-demo")
    assert conditions(upstream) == [("Created", "True", "PyTorchJobCreated")]
    assert upstream["status"]["replicaStatuses"] == {
        "Master": {"active": 0, "succeeded": 0, "failed": 0},
        "Worker": {"active": 0, "succeeded": 0, "failed": 0},
    }
    # The TrainingJob runs, then succeeds: the PyTorchJob's conditions say so, the current one last.
    for phase, counts in (("Running", {"active": 1}), ("Succeeded", {"succeeded": 1})):
        job = harness.api.get(TRAININGJOBS, "ddp-demo", NS)
        job["status"] = {"phase": phase, "replicaStatuses": {"master": counts, "worker": counts}}
        harness.operator.jobs.observe(harness.api.replace_status(TRAININGJOBS, job))
        harness.bridge.job_changed(job)
        harness.sync()
    upstream = harness.upstream("PyTorchJob", "ddp-demo")
    assert conditions(upstream) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobRunning"),
        ("Succeeded", "True", "PyTorchJobSucceeded"),
    ]
    assert upstream["status"]["replicaStatuses"]["Worker"] == {"active": 0, "succeeded": 1, "failed": 0}


def test_a_refused_document_gets_failed_with_the_path_and_an_event_and_nothing_else() -> None:
    harness = Harness()
    bad = example("pytorchjob")
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    harness.apply(bad)
    harness.sync()
    assert harness.api.of(TRAININGJOBS) == []
    upstream = harness.upstream("PyTorchJob", "ddp-demo")
    [(kind, status, reason)] = conditions(upstream)
    assert (kind, status, reason) == ("Failed", "True", "PyTorchJobRefused")
    message = upstream["status"]["conditions"][0]["message"]
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork" in message
    [event] = harness.api.of(EVENTS)
    assert event["type"] == "Warning" and event["reason"] == "Refused"
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork" in event["message"]
    # Looked at again (a resync), nothing new is written and no second Event is recorded.
    writes = len(harness.api.writes)
    harness.bridge.mark_kind("PyTorchJob")
    harness.sync()
    assert len(harness.api.writes) == writes


def test_a_restarted_operator_writes_nothing() -> None:
    harness = Harness()
    harness.apply(example("pytorchjob"))
    harness.apply(example("mpijob"))
    harness.sync()
    assert {job["metadata"]["name"] for job in harness.api.of(TRAININGJOBS)} == {"ddp-demo", "allreduce"}
    writes = len(harness.api.writes)
    again = Harness(harness.api)  # a new process: caches filled from the API
    again.bridge.mark_kind("PyTorchJob")
    again.bridge.mark_kind("MPIJob")
    again.sync()
    assert len(again.api.writes) == writes


def test_a_trainingjob_of_that_name_that_is_not_its_own_is_left_alone() -> None:
    harness = Harness()
    theirs = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "ddp-demo", "namespace": NS},
        "spec": {"type": "pytorch", "replicas": {"master": {"template": {"image": "x", "command": ["true"]}}}},
    }
    harness.operator.jobs.observe(harness.api.put(TRAININGJOBS, theirs))
    harness.apply(example("pytorchjob"))
    harness.sync()
    [job] = harness.api.of(TRAININGJOBS)
    assert "ownerReferences" not in job["metadata"]
    upstream = harness.upstream("PyTorchJob", "ddp-demo")
    assert conditions(upstream) == [("Failed", "True", "PyTorchJobRefused")]
    assert upstream["status"]["conditions"][0]["message"].startswith("metadata.name: a TrainingJob named ddp-demo")


def test_a_trainjob_uses_the_runtime_of_the_cluster_and_the_shipped_runtimes_are_created() -> None:
    harness = Harness()
    harness.bridge.seed_runtimes()
    runtimes = harness.api.of(kubeflow_crd("ClusterTrainingRuntime").resource)
    assert {r["metadata"]["name"] for r in runtimes} == {key.name for key in shipped_runtimes()}
    assert "torch-distributed" in {r["metadata"]["name"] for r in runtimes}
    harness.apply(example("trainjob"))
    harness.sync()
    [job] = harness.api.of(TRAININGJOBS)
    assert job["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


def test_kinds_whose_crds_belong_to_another_installation_are_left_alone() -> None:
    api = MemoryKubeApi()
    for crd in kubeflow_custom_resource_definitions():
        if crd["spec"]["names"]["kind"] == "PyTorchJob":
            crd = {**crd, "metadata": {"name": crd["metadata"]["name"]}}  # a real Kubeflow's: no label of ours
        api.put(CRDS, crd)
    bridge = Harness(api).bridge
    assert "PyTorchJob" not in bridge.informers
    assert "MPIJob" in bridge.informers


def suspended(harness: Harness, name: str) -> bool:
    return bool(harness.api.get(TRAININGJOBS, name, NS)["spec"].get("runPolicy", {}).get("suspend"))


def test_a_change_of_the_owners_suspend_is_copied_and_a_halt_of_the_job_itself_is_not_undone() -> None:
    harness = Harness()
    stored = harness.apply(example("pytorchjob"))
    harness.sync()
    assert not suspended(harness, "ddp-demo")
    # `phalanx halt ddp-demo`: the TrainingJob is suspended by itself; the PyTorchJob's suspend did not change.
    harness.operator.jobs.observe(
        harness.api.patch(TRAININGJOBS, "ddp-demo", {"spec": {"runPolicy": {"suspend": True}}}, NS)
    )
    harness.bridge.mark_kind("PyTorchJob")
    harness.sync()
    assert suspended(harness, "ddp-demo")
    # The PyTorchJob's own suspend changes: each change reaches the TrainingJob.
    for wanted in (True, False):
        current = harness.upstream("PyTorchJob", "ddp-demo")
        current["spec"]["runPolicy"]["suspend"] = wanted
        harness.apply(current)
        harness.sync()
        assert suspended(harness, "ddp-demo") == wanted
    assert stored["metadata"]["uid"] == harness.upstream("PyTorchJob", "ddp-demo")["metadata"]["uid"]


def test_one_objects_unexpected_failure_does_not_hold_back_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness()
    first = example("pytorchjob")
    first["metadata"]["name"] = "a-broken"
    harness.apply(first)
    harness.apply(example("pytorchjob"))
    convert = harness.bridge.convert

    def failing(obj: dict[str, Any]) -> list[Any]:
        if obj["metadata"]["name"] == "a-broken":
            raise RuntimeError("a bug")
        return convert(obj)

    monkeypatch.setattr(harness.bridge, "convert", failing)
    assert harness.bridge.sync() is False  # retried soon
    assert [job["metadata"]["name"] for job in harness.api.of(TRAININGJOBS)] == ["ddp-demo"]
