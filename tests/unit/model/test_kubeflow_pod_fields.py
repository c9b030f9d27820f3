"""A Kubeflow replica's PodTemplateSpec carries the pod fields a replica template does (issue 16, deliver 2).

The Worker of tests/data/kubeflow/pytorchjob.yaml is given the pod and container fields of
tests/data/pod-fields/every-field.yaml, written as Kubernetes writes them: each lands in the replica template,
init containers with ``restartPolicy: Always`` as sidecars. What a backend cannot honour is refused there, at
the path in the Kubeflow document.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.kubeflow import validate_kubeflow
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.model.pods import EMBEDDED_REFUSALS
from phalanx.services.operations import validate_documents

DATA = Path(__file__).parents[2] / "data"
JOBTYPES = builtin_jobtypes()
POD = ("volumes", "nodeSelector", "tolerations", "affinity", "securityContext", "serviceAccountName")
POD += ("imagePullSecrets", "priorityClassName")
CONTAINER_POD_FIELDS = ("imagePullPolicy", "livenessProbe", "readinessProbe", "startupProbe")
WORKER = "spec.pytorchReplicaSpecs.Worker.template.spec"


def pytorchjob_with_every_field() -> tuple[dict[str, Any], dict[str, Any]]:
    """The PyTorchJob whose Worker sets every pod field, and the Phalanx template those fields were taken from."""
    (document,) = read_documents(DATA / "kubeflow" / "pytorchjob.yaml")
    (job,) = read_documents(DATA / "pod-fields" / "every-field.yaml")
    ours = job["spec"]["replicas"]["worker"]["template"]
    pod = document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod.update({key: copy.deepcopy(ours[key]) for key in POD})
    sidecar = {**copy.deepcopy(ours["sidecars"][0]), "restartPolicy": "Always", "image": "example.org/metrics:1"}
    pod["initContainers"] = [copy.deepcopy(ours["initContainers"][0]), sidecar]
    container = pod["containers"][0]
    container.update(
        env=[*container.get("env", []), *copy.deepcopy(ours["env"])],
        envFrom=copy.deepcopy(ours["envFrom"]),
        volumeMounts=copy.deepcopy(ours["volumeMounts"]),
        securityContext=copy.deepcopy(ours["containerSecurityContext"]),
        **{key: copy.deepcopy(ours[key]) for key in CONTAINER_POD_FIELDS},
    )
    return document, ours


def without_empty_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_empty_lists(item) for key, item in value.items() if item != []}
    if isinstance(value, list):
        return [without_empty_lists(item) for item in value]
    return value


def test_every_pod_field_of_a_kubeflow_replica_is_mapped() -> None:
    document, ours = pytorchjob_with_every_field()
    _, job, _ = validate_kubeflow(document, JOBTYPES)
    template = without_empty_lists(job.spec.replicas["worker"].template.to_dict())
    for key in POD:
        assert template[key] == ours[key], key
    assert template["volumeMounts"] == ours["volumeMounts"]
    assert template["envFrom"] == ours["envFrom"]
    assert template["containerSecurityContext"] == ours["containerSecurityContext"]
    for key in CONTAINER_POD_FIELDS:
        assert template[key] == ours[key], key
    sourced = {e["name"]: e["valueFrom"] for e in ours["env"] if "valueFrom" in e}
    assert template["envValueFrom"] == sourced
    assert template["initContainers"] == ours["initContainers"]
    assert template["sidecars"] == [{**ours["sidecars"][0], "image": "example.org/metrics:1"}]
    assert "restartPolicy" not in template["sidecars"][0]


def test_the_embedded_runtime_refuses_them_at_the_path_in_the_kubeflow_document() -> None:
    document, _ = pytorchjob_with_every_field()
    with pytest.raises(SpecError) as caught:
        validate_documents([document], JOBTYPES, pod_field_refusals=EMBEDDED_REFUSALS)
    paths = {error.path for error in caught.value.errors}
    assert f"{WORKER}.securityContext" in paths
    assert f"{WORKER}.containers[0].securityContext" in paths
    assert f"{WORKER}.initContainers[0]" not in paths  # refused as a whole field: initContainers
    assert f"{WORKER}.initContainers" in paths
    assert f"{WORKER}.containers[0].securityContext" in paths
    assert f"{WORKER}.containers[0].volumeMounts[0]" in paths
    # Probes need a kubelet; imagePullPolicy goes with the image, which the embedded runtime does not use.
    assert {f"{WORKER}.containers[0].{probe}" for probe in CONTAINER_POD_FIELDS[1:]} <= paths
    assert f"{WORKER}.containers[0].imagePullPolicy" not in paths
    # nodeSelector, tolerations, env valueFrom and envFrom have a meaning there.
    assert not any(".env[" in path or "envFrom" in path for path in paths)
    assert f"{WORKER}.nodeSelector" not in paths
    assert not any(path.startswith(f"{WORKER}.tolerations") for path in paths)


def test_an_init_container_restart_policy_other_than_always_is_refused() -> None:
    document, _ = pytorchjob_with_every_field()
    document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"][0]["restartPolicy"] = (
        "Never"
    )
    with pytest.raises(SpecError) as caught:
        validate_kubeflow(document, JOBTYPES)
    assert [e.path for e in caught.value.errors] == [f"{WORKER}.initContainers[0].restartPolicy"]
