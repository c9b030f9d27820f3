"""Kubeflow jobs submitted to the Kubernetes backend (in-memory API): the same door as the embedded runtime's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.adapters.kubernetes.crds import crd_kind, custom_resource_definition
from phalanx.adapters.kubernetes.structural import validate_value
from phalanx.model.errors import SpecError
from phalanx.model.loading import read_documents
from phalanx.services.kubernetes.operations import KubeOperations
from support.memory_kube_api import MemoryKubeApi

DATA = Path(__file__).parents[2] / "data" / "kubeflow"


def example(name: str) -> dict[str, Any]:
    (document,) = read_documents(DATA / f"{name}.yaml")
    return document


def acceptable_to_the_crd(kind: str, body: dict[str, Any]) -> list[Any]:
    schema = custom_resource_definition(crd_kind(kind))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return validate_value({k: v for k, v in body.items() if k != "metadata"}, schema)


def test_kubeflow_jobs_become_trainingjobs_and_jobtypes_in_the_cluster() -> None:
    api = MemoryKubeApi()
    submitted = KubeOperations(api).submit([example("pytorchjob"), example("mpijob")], namespace="team-a")
    assert [(s.kind, s.namespace, s.name) for s in submitted] == [
        ("JobType", "", "mpi-slots-2"),
        ("TrainingJob", "team-a", "ddp-demo"),
        ("TrainingJob", "team-a", "allreduce"),
    ]  # JobTypes are cluster-scoped on Kubernetes
    job = api.objects[("trainingjobs", "team-a", "ddp-demo")]
    assert job["spec"]["type"] == "pytorch"
    assert job["spec"]["replicas"]["worker"]["count"] == 2
    assert acceptable_to_the_crd("TrainingJob", job) == []
    mpi = api.objects[("trainingjobs", "team-a", "allreduce")]
    assert mpi["spec"]["type"] == "mpi-slots-2"
    jobtype = api.objects[("jobtypes", None, "mpi-slots-2")]
    assert jobtype["spec"]["slotsPerHost"] == 2
    assert acceptable_to_the_crd("JobType", jobtype) == []


def test_a_refused_field_creates_nothing_in_the_cluster() -> None:
    api = MemoryKubeApi()
    bad = example("tfjob")
    bad["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["hostNetwork"] = True
    with pytest.raises(SpecError) as caught:
        KubeOperations(api).submit([example("jaxjob"), bad], source="jobs.yaml")
    assert [e.path for e in caught.value.errors] == ["spec.tfReplicaSpecs.PS.template.spec.hostNetwork"]
    assert [call for call in api.calls if call.verb == "create"] == []
