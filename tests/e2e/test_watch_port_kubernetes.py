"""The Kubernetes backend's change side (``KubeBackend.resource_version`` and ``watch``) on a real API server.

A TrainingJob is created, relabelled and deleted with plain API calls (no operator: nothing else writes it); the
backend's watch from the resourceVersion read before sees the three changes in order, each as the model's
object, the deletion carrying the object as it was last, and the resourceVersions the API server gave them.
(A resourceVersion too old for the API server, 410, is the port's ExpiredError: etcd compacts every few minutes
here, too slow for a test, so that is left to the unit tests of the mapping's callers.)
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import KubeApi
from phalanx.model.jobs import TrainingJob
from phalanx.services.kubernetes.operations import KubeBackend
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

JOBS = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs"


def job(name: str) -> dict[str, Any]:
    template = {"image": "example.org/trainer:1", "command": ["python", "train.py"], "resources": {"cpu": "1"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"step": "one"}},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def test_the_kubernetes_watch_brings_each_change_in_order_with_the_servers_versions(
    phalanx_installed: Any, namespace: str
) -> None:
    kube = phalanx_installed
    jobs = JOBS.format(ns=namespace)
    wait_until(lambda: kube.request("GET", jobs).status_code == 200, 30, f"{jobs} served")
    backend = KubeBackend(KubeApi.from_kubeconfig(kube.kubeconfig))
    start = backend.resource_version(TrainingJob)
    assert start.isdigit()

    created = kube.create(jobs, job("watched"))
    patched = kube.request(
        "PATCH",
        f"{jobs}/watched",
        {"metadata": {"labels": {"step": "two"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200, patched.text
    deleted = kube.request("DELETE", f"{jobs}/watched")
    assert deleted.status_code == 200, deleted.text

    seen = [
        event
        for event in backend.watch(TrainingJob, start, timeout=2)
        if event.type == "BOOKMARK" or event.namespace == namespace
    ]
    changes = [event for event in seen if event.type != "BOOKMARK"]
    assert [(e.type, e.name) for e in changes] == [
        ("ADDED", "watched"),
        ("MODIFIED", "watched"),
        ("DELETED", "watched"),
    ]
    assert changes[0].resource_version == created["metadata"]["resourceVersion"]
    assert changes[1].resource_version == patched.json()["metadata"]["resourceVersion"]
    assert all(isinstance(e.obj, TrainingJob) for e in changes)
    assert [e.obj.metadata.labels["step"] for e in changes if e.obj is not None] == ["one", "two", "two"]
    versions = [int(e.resource_version) for e in changes]
    assert versions == sorted(set(versions)) and versions[0] > int(start)
