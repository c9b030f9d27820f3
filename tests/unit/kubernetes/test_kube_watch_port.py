"""``KubeBackend``'s change side over the API in memory: events as the model's objects, bookmarks for what the model
cannot read, 410 Gone as the port's ``ExpiredError``, another failure as an ``OperationError``. The real API server:
tests/e2e/test_watch_port_kubernetes.py."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import DATASETS, TRAININGJOBS, GoneError, KubeApiError
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.services.kubernetes.operations import KubeBackend
from phalanx.services.operations import OperationError
from phalanx.services.port import ExpiredError
from support.memory_kube_api import MemoryKubeApi


def job(name: str) -> dict[str, Any]:
    template = {"image": "example.org/trainer:1", "command": ["python", "train.py"]}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def test_changes_come_as_the_models_objects_and_an_unreadable_one_as_a_bookmark() -> None:
    api = MemoryKubeApi()
    backend = KubeBackend(api)
    start = backend.resource_version(TrainingJob)
    api.put(TRAININGJOBS, job("a"))
    broken = job("b")
    broken["spec"]["replicas"]["worker"]["count"] = "many"
    api.put(TRAININGJOBS, broken)
    api.put(DATASETS, {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Dataset", "metadata": {"name": "d"}})
    events = list(backend.watch(TrainingJob, start, timeout=1))
    assert [(e.type, e.namespace, e.name) for e in events] == [("ADDED", "ml", "a"), ("BOOKMARK", "", "")]
    assert isinstance(events[0].obj, TrainingJob) and events[0].obj.metadata.name == "a"
    assert int(events[1].resource_version) > int(events[0].resource_version) > int(start)


def test_a_410_is_the_ports_expired_error_and_another_failure_an_operation_error() -> None:
    api = MemoryKubeApi()
    backend = KubeBackend(api)
    api.fail["watch"] = [GoneError(410, "Expired", "too old resource version: 1 (200)")]
    with pytest.raises(ExpiredError) as expired:
        list(backend.watch(Dataset, "1", timeout=1))
    assert "resourceVersion 1 is older than the changes the API server keeps for datasets" in str(expired.value)
    api.fail["watch"] = [KubeApiError(403, "Forbidden", "datasets is forbidden")]
    with pytest.raises(OperationError):
        list(backend.watch(Dataset, "1", timeout=1))
