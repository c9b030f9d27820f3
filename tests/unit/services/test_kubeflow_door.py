"""Kubeflow jobs at the one validation door (``validate_documents``) and through ``convert_documents``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes, read_documents
from phalanx.model.queues import Queue
from phalanx.services.operations import convert_documents, validate_documents

DATA = Path(__file__).parents[2] / "data" / "kubeflow"
JOBTYPES = builtin_jobtypes()


def example(name: str) -> dict[str, Any]:
    (document,) = read_documents(DATA / f"{name}.yaml")
    return document


def renamed(document: dict[str, Any], name: str) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    copied["metadata"]["name"] = name
    return copied


QUEUE = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-vision"}, "spec": {}}


def test_a_file_mixing_kinds_validates_each_and_makes_a_shared_jobtype_once() -> None:
    mpi = example("mpijob")
    documents = [QUEUE, example("pytorchjob"), mpi, renamed(mpi, "allreduce-2")]
    parsed = validate_documents(documents, JOBTYPES)
    assert [type(obj).__name__ for obj in parsed] == ["Queue", "TrainingJob", "JobType", "TrainingJob", "TrainingJob"]
    jobtype = parsed[2]
    assert isinstance(jobtype, JobType)
    assert jobtype.metadata.name == "mpi-slots-2"
    types = [job.spec.type for job in parsed if isinstance(job, TrainingJob)]
    assert types == ["pytorch", "mpi-slots-2", "mpi-slots-2"]


def test_a_namespace_override_moves_the_kubeflow_job_and_its_jobtype() -> None:
    parsed = validate_documents([example("pytorchjob"), example("mpijob")], JOBTYPES, namespace="team-b")
    assert {obj.metadata.namespace for obj in parsed} == {"team-b"}


def test_problems_in_several_documents_name_each_document() -> None:
    bad = example("jaxjob")
    bad["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    with pytest.raises(SpecError) as caught:
        validate_documents([QUEUE, bad], JOBTYPES)
    (error,) = caught.value.errors
    assert error.path == "spec.jaxReplicaSpecs.Worker.template.spec.hostNetwork"
    assert error.message.startswith("document 2: ")


def test_an_unknown_kind_lists_the_kubeflow_kinds() -> None:
    with pytest.raises(SpecError) as caught:
        validate_documents([{"kind": "RayJob", "metadata": {"name": "r"}}], JOBTYPES)
    (error,) = caught.value.errors
    assert "PyTorchJob" in error.message
    assert "MPIJob" in error.message


@pytest.mark.parametrize("name", ["pytorchjob", "tfjob", "xgboostjob", "jaxjob", "paddlejob", "mpijob"])
def test_what_convert_prints_is_accepted_as_the_same_jobs(name: str) -> None:
    documents = [QUEUE, example(name)]
    converted = convert_documents(documents, JOBTYPES)
    assert all(doc.get("kind") in ("Queue", "JobType", "TrainingJob") for doc in converted)
    again = validate_documents(converted, JOBTYPES)
    first = validate_documents(documents, JOBTYPES)
    assert [obj.to_dict() for obj in again] == [obj.to_dict() for obj in first]


def test_convert_refuses_as_submit_does() -> None:
    bad = example("mpijob")
    bad["spec"]["mpiImplementation"] = "Spectrum"
    with pytest.raises(SpecError) as caught:
        convert_documents([bad], JOBTYPES)
    assert [error.path for error in caught.value.errors] == ["spec.mpiImplementation"]


def test_queue_documents_pass_through_convert_unchanged() -> None:
    converted = convert_documents([QUEUE, example("jaxjob")], JOBTYPES)
    assert converted[0] == QUEUE
    assert isinstance(Queue.model_validate(converted[0]), Queue)


def test_a_trainjob_and_its_trainingruntime_move_together_and_the_runtime_is_not_stored() -> None:
    documents = read_documents(DATA / "trainjob-runtime.yaml")
    parsed = validate_documents(documents, JOBTYPES, namespace="team-b")
    (job,) = parsed
    assert isinstance(job, TrainingJob)
    assert (job.metadata.namespace, job.spec.type) == ("team-b", "pytorch")


def test_convert_leaves_the_runtime_out_and_prints_the_trainjobs_trainingjob() -> None:
    documents = read_documents(DATA / "trainjob-runtime.yaml")
    converted = convert_documents(documents, JOBTYPES)
    assert [doc["kind"] for doc in converted] == ["TrainingJob"]
    assert [o.to_dict() for o in validate_documents(converted, JOBTYPES)] == [
        o.to_dict() for o in validate_documents(documents, JOBTYPES)
    ]


def test_a_runtime_of_another_apiversion_is_refused_with_its_document() -> None:
    documents = read_documents(DATA / "trainjob-runtime.yaml")
    documents[0]["apiVersion"] = "kubeflow.org/v2alpha1"
    with pytest.raises(SpecError) as caught:
        validate_documents(documents, JOBTYPES)
    (error,) = caught.value.errors
    assert error.path == "apiVersion"
    assert error.message.startswith("document 1: a TrainingRuntime is trainer.kubeflow.org/v1alpha1")


def with_scheduler(document: dict[str, Any], names: dict[str, str | None]) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    for replica_type, name in names.items():
        pod = copied["spec"]["pytorchReplicaSpecs"][replica_type]["template"]["spec"]
        if name is not None:
            pod["schedulerName"] = name
    return copied


def test_a_pod_templates_scheduler_name_becomes_the_jobs() -> None:
    # Before, schedulerName in a replica's pod template was refused as "not supported yet".
    document = with_scheduler(example("pytorchjob"), {"Master": "volcano", "Worker": "volcano"})
    (job,) = validate_documents([document], JOBTYPES)
    assert isinstance(job, TrainingJob)
    assert job.spec.scheduling.scheduler_name == "volcano"
    assert all("schedulerName" not in r.template.model_dump(by_alias=True) for r in job.spec.replicas.values())


def test_replica_types_naming_different_schedulers_are_refused_at_the_odd_one() -> None:
    document = with_scheduler(example("pytorchjob"), {"Master": "volcano", "Worker": None})
    with pytest.raises(SpecError) as caught:
        validate_documents([document], JOBTYPES)
    paths = {error.path: error.message for error in caught.value.errors}
    where = "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName"
    assert "no scheduler differs from 'volcano'" in paths[where]


def test_the_backend_refuses_a_scheduler_name_where_the_author_wrote_it() -> None:
    document = with_scheduler(example("pytorchjob"), {"Master": "volcano", "Worker": "volcano"})
    with pytest.raises(SpecError) as caught:  # the embedded runtime has no cluster scheduler
        validate_documents([document], JOBTYPES, cluster_scheduling=False)
    [error] = caught.value.errors
    assert error.path == "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName"
    assert "this runtime has none" in error.message
    # On a cluster, what the named scheduler cannot honour is named at the upstream path too.
    document["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "team-a"}}
    with pytest.raises(SpecError) as caught:
        validate_documents([document], JOBTYPES, cluster_scheduling=True, own_scheduler="phalanx-scheduler")
    assert [e.path for e in caught.value.errors] == ["spec.runPolicy.schedulingPolicy.queue"]


def mpijob_with_bare_workers() -> dict[str, Any]:
    document = copy.deepcopy(example("mpijob"))
    worker = document["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker.pop("command", None)
    worker.pop("args", None)
    return document


def test_an_mpijob_worker_without_command_or_args_runs_sshd_as_upstream_starts_it() -> None:
    parsed = validate_documents([mpijob_with_bare_workers()], JOBTYPES, pod_field_refusals={})
    (job,) = [obj for obj in parsed if isinstance(obj, TrainingJob)]
    assert job.spec.replicas["worker"].template.command == ["/usr/sbin/sshd", "-De"]
    # args alone are the author's: nothing is added to them
    document = mpijob_with_bare_workers()
    document["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = ["serve"]
    parsed = validate_documents([document], JOBTYPES, pod_field_refusals={})
    (job,) = [obj for obj in parsed if isinstance(obj, TrainingJob)]
    assert job.spec.replicas["worker"].template.command == []


def test_the_embedded_runtime_does_not_start_upstreams_sshd_on_its_machine() -> None:
    from phalanx.model.pods import EMBEDDED_REFUSALS

    with pytest.raises(SpecError) as caught:
        validate_documents([mpijob_with_bare_workers()], JOBTYPES, pod_field_refusals=EMBEDDED_REFUSALS)
    found = {error.path: error.message for error in caught.value.errors}
    where = "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].command"
    assert "/usr/sbin/sshd -De would run" in found[where]
    assert "--stand-in" in found[where]


def test_a_trainjob_on_an_mpi_runtime_stores_and_prints_the_jobtype_it_makes_once() -> None:
    def trainjob(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "deepspeed-distributed"}, "trainer": {"command": ["mpirun", "t.py"]}},
        }

    documents = [trainjob("ds-1"), trainjob("ds-2")]
    parsed = validate_documents(documents, JOBTYPES)
    assert [type(obj).__name__ for obj in parsed] == ["JobType", "TrainingJob", "TrainingJob"]
    assert parsed[0].metadata.name == "mpi-launcher-as-worker"
    converted = convert_documents(documents, JOBTYPES)
    assert [(doc["kind"], doc["metadata"]["name"]) for doc in converted] == [
        ("JobType", "mpi-launcher-as-worker"),
        ("TrainingJob", "ds-1"),
        ("TrainingJob", "ds-2"),
    ]
