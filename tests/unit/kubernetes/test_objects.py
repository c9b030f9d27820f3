"""Kubernetes objects <-> Phalanx models: metadata reduction, pods as replicas, nodes as inventories."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.adapters.kubernetes.objects import (
    job_from_object,
    node_from_object,
    observe_pod,
    replica_from_pod,
    status_body,
)
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJobStatus
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.replicas import LAST_OUTPUT_CHARS, ReplicaPhase


def _job(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {
            "name": "mnist",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-11-22T04:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "finalizers": ["x"],
        },
        "spec": spec
        or {"type": "pytorch", "replicas": {"worker": {"count": 2, "template": {"command": ["python", "t.py"]}}}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_a_job_read_from_the_api_keeps_identity_and_drops_metadata_the_model_does_not_have() -> None:
    job = job_from_object(_job(status={"phase": "Queued", "attempt": 2}), builtin_jobtypes())
    assert (job.metadata.namespace, job.metadata.name, job.metadata.uid) == ("team-a", "mnist", "u-1")
    assert job.metadata.resource_version == "42" and job.metadata.generation == 3
    assert job.status.phase == Phase.QUEUED and job.status.attempt == 2
    assert job.spec.replicas["worker"].template.resources.cpu is not None  # defaults applied (T-shirt size)


def test_an_invalid_spec_fails_with_the_field_path() -> None:
    bad = _job(spec={"type": "pytorch", "replicas": {"worker": {"count": 0, "template": {"command": ["x"]}}}})
    with pytest.raises(SpecError) as error:
        job_from_object(bad, builtin_jobtypes())
    assert "spec.replicas.worker.count" in str(error.value)


def test_status_body_carries_the_resource_version_and_the_new_status_and_nothing_the_server_ignores() -> None:
    body = status_body(_job(status={"phase": "Pending"}), TrainingJobStatus(phase=Phase.QUEUED))
    assert body["metadata"] == {"name": "mnist", "namespace": "team-a", "resourceVersion": "42"}
    assert body["status"]["phase"] == "Queued"
    assert (body["apiVersion"], body["kind"]) == ("phalanx.dev/v1alpha1", "TrainingJob")
    assert "spec" not in body, "a status update keeps the stored spec; sending it is work for nothing"


def _pod(phase: str, **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "mnist-worker-1",
            "labels": {
                "phalanx.dev/job": "mnist",
                "phalanx.dev/role": "worker",
                "phalanx.dev/replica-index": "1",
                "phalanx.dev/attempt": "2",
            },
        },
        "status": {"phase": phase, **extra},
    }
    return pod


def test_a_failed_pod_is_a_failed_replica_with_its_container_exit_code() -> None:
    terminated = {"exitCode": 3, "reason": "Error", "finishedAt": "2026-11-22T04:01:00Z"}
    replica = observe_pod(_pod("Failed", containerStatuses=[{"name": "replica", "state": {"terminated": terminated}}]))
    assert replica is not None
    assert (replica.role, replica.index, replica.attempt) == ("worker", 1, 2)
    assert replica.phase == ReplicaPhase.FAILED and replica.exit_code == 3
    assert replica.finish_time is not None and replica.finish_time.year == 2026


def test_a_failed_containers_termination_message_gives_the_replicas_last_output() -> None:
    """As the embedded runtime reads a failed replica's log end: the last non-blank line, made printable."""
    message = "Traceback (most recent call last):\n  ...\nValueError: bad\tlearning rate\n\n"
    terminated = {"exitCode": 1, "reason": "Error", "message": message}
    pod = _pod("Failed", containerStatuses=[{"name": "replica", "state": {"terminated": terminated}}])
    replica = observe_pod(pod)
    assert replica is not None and replica.last_output == "ValueError: bad learning rate"
    assert replica_from_pod(pod, job_from_object(_job(), builtin_jobtypes())).status.last_output == replica.last_output
    succeeded = {"exitCode": 0, "reason": "Completed", "message": "done"}
    ok = observe_pod(_pod("Succeeded", containerStatuses=[{"name": "replica", "state": {"terminated": succeeded}}]))
    assert ok is not None and ok.last_output == ""  # only a failure's output is kept
    long = {"exitCode": 2, "message": "x" * 1000}
    cut = observe_pod(_pod("Failed", containerStatuses=[{"name": "replica", "state": {"terminated": long}}]))
    assert cut is not None and len(cut.last_output) == LAST_OUTPUT_CHARS and cut.last_output.endswith("…")


def test_a_pod_without_the_operator_labels_is_not_a_replica() -> None:
    assert observe_pod({"metadata": {"name": "x", "labels": {}}, "status": {"phase": "Running"}}) is None


def _node(**annotations: str) -> dict[str, Any]:
    topology = {"numaNodes": [{"id": 0, "gpus": [0, 1]}, {"id": 1, "gpus": [2, 3]}], "nvlink": {"pairs": [[0, 1]]}}
    return {
        "metadata": {
            "name": "gpu-1",
            "labels": {"nvidia.com/gpu.product": "H100"},
            "annotations": {"phalanx.dev/gpu-topology": json.dumps(topology), **annotations},
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"},
            "allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_node_becomes_an_inventory_with_numa_and_nvlink() -> None:
    node = node_from_object(_node())
    assert [cpu.numa for cpu in node.status.cpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node.status.memory == 64 * 2**30
    assert [(gpu.index, gpu.numa, gpu.model) for gpu in node.status.gpus] == [
        (0, 0, "H100"),
        (1, 0, "H100"),
        (2, 1, "H100"),
        (3, 1, "H100"),
    ]
    assert node.gpu_link(0, 1) == "NV" and node.gpu_link(2, 3) == "NODE" and node.gpu_link(0, 3) == "SYS"
    assert all(gpu.healthy for gpu in node.status.gpus)
    assert not node.spec.unschedulable


def test_gpus_the_node_agent_marks_unhealthy_are_not_healthy() -> None:
    node = node_from_object(_node(**{"phalanx.dev/unhealthy-gpus": "2"}))
    assert [gpu.healthy for gpu in node.status.gpus] == [True, True, False, True]


def test_a_not_ready_or_cordoned_node_is_unschedulable() -> None:
    not_ready = _node()
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    cordoned = _node()
    cordoned["spec"]["unschedulable"] = True
    assert node_from_object(not_ready).spec.unschedulable
    assert node_from_object(cordoned).spec.unschedulable
