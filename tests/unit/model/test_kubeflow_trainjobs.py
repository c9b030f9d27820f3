"""Kubeflow Trainer v2 TrainJobs with their runtimes (``model.kubeflow.trainjobs``): mapped, or refused at a path.

tests/data/kubeflow/trainjob.yaml names the torch-distributed runtime Phalanx ships; trainjob-runtime.yaml holds a
TrainingRuntime and the TrainJob naming it. Both are our own documents in the upstream format.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.kubeflow import CONVERTED_FROM, RuntimeKey, runtimes_in, shipped_runtimes, validate_trainjob
from phalanx.model.loading import builtin_jobtypes, read_documents

DATA = Path(__file__).parents[2] / "data" / "kubeflow"
JOBTYPES = builtin_jobtypes()
RUNTIME = "TrainingRuntime/cpu-torch "
NODE = "spec.template.spec.replicatedJobs[0].template.spec.template"


def documents(name: str) -> list[dict[str, Any]]:
    return read_documents(DATA / f"{name}.yaml")


def converted(docs: list[dict[str, Any]]) -> TrainingJob:
    *_, trainjob = docs
    return validate_trainjob(trainjob, runtimes_in(docs), JOBTYPES)[1]


def refusals(docs: list[dict[str, Any]]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        converted(docs)
    return {error.path: error.message for error in caught.value.errors}


def changed(name: str, change: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    docs = copy.deepcopy(documents(name))
    change(docs)
    return docs


def node_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"][0]
    return found


def test_phalanx_ships_torch_distributed() -> None:
    runtime = shipped_runtimes()[RuntimeKey("ClusterTrainingRuntime", None, "torch-distributed")]
    assert runtime["spec"]["mlPolicy"]["torch"]["numProcPerNode"] == "auto"


def test_a_trainjob_on_torch_distributed_is_a_pytorch_job_of_its_trainer() -> None:
    job = converted(documents("trainjob"))
    assert (job.spec.type, job.metadata.namespace) == ("pytorch", "nlp")
    assert job.metadata.labels == {"project": "summaries"}
    assert job.metadata.annotations[CONVERTED_FROM] == "TrainJob.trainer.kubeflow.org/v1alpha1"
    (role,) = job.spec.replicas
    worker = job.spec.replicas[role]
    assert (role, worker.count) == ("worker", 3)
    template = worker.template
    assert template.image == "example.org/nlp/finetune:2.0"
    assert (template.command, template.args) == (["torchrun", "finetune.py"], ["--epochs", "2"])
    assert template.env["HF_HOME"] == "/cache/hf"
    assert template.env["PET_NPROC_PER_NODE"] == "2"
    assert (template.resources.cpu, template.resources.memory, template.resources.gpu) == (8000, 32 * 2**30, 2)


def test_a_trainer_of_only_a_command_runs_with_the_shipped_runtimes_image_and_defaults() -> None:
    job = converted(changed("trainjob", lambda d: d[0]["spec"].update(trainer={"command": ["torchrun", "t.py"]})))
    worker = job.spec.replicas["worker"]
    assert worker.count == 1
    assert worker.template.image == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    assert worker.template.env["PET_NPROC_PER_NODE"] == "auto"


def test_a_trainingruntime_of_the_file_is_merged_with_the_trainer() -> None:
    job = converted(documents("trainjob-runtime"))
    worker = job.spec.replicas["worker"]
    assert worker.count == 2  # the runtime's numNodes
    template = worker.template
    assert (template.image, template.command, template.args) == (
        "example.org/torch-cpu:2.5",
        ["python3", "train.py"],
        ["--steps", "100"],
    )
    assert template.env["OMP_NUM_THREADS"] == "2"  # the trainer's value wins
    assert template.env["SEED"] == "7"
    assert template.metadata.labels == {"tier": "cpu"}
    assert (template.resources.cpu, template.resources.memory) == (1000, 2**30)
    assert job.spec.run_policy.restart_policy == "OnFailure"
    assert job.spec.run_policy.suspend is True


def _runtime_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = docs[0]["spec"]
    return spec


@pytest.mark.parametrize(
    ("name", "change", "path", "words"),
    [
        ("trainjob", lambda d: d[0]["spec"]["runtimeRef"].update(name="torch-elastic"), "spec.runtimeRef.name",
         "no ClusterTrainingRuntime 'torch-elastic'; put it in the same file as the TrainJob, or use one of "
         "torch-distributed"),
        ("trainjob-runtime", lambda d: d[0]["metadata"].update(namespace="other"), "spec.runtimeRef.name",
         "no TrainingRuntime 'cpu-torch' in namespace default"),
        ("trainjob", lambda d: d[0]["spec"].update(initializer={"dataset": {"storageUri": "hf://x"}}),
         "spec.initializer", "Phalanx Dataset"),
        ("trainjob", lambda d: d[0]["spec"].update(podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}]),
         "spec.podTemplateOverrides", "not supported yet"),
        ("trainjob", lambda d: d[0]["spec"].update(managedBy="kueue.x-k8s.io/multikueue"), "spec.managedBy",
         "another controller"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"].update(env=[{"name": "K", "valueFrom": {}}]),
         "spec.trainer.env[0].valueFrom", "K comes from a secret"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"]["resourcesPerNode"]["limits"].update({"hugepages-2Mi": "1Gi"}),
         "spec.trainer.resourcesPerNode.limits.hugepages-2Mi", "remove hugepages-2Mi"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"].update(numProcPerNode="all"), "spec.trainer.numProcPerNode",
         "auto, cpu, gpu"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"].update(mpi={"numProcPerNode": 1}),
         f"{RUNTIME}spec.mlPolicy.mpi", "MPIJob"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"]["torch"].update(elasticPolicy={"maxNodes": 4}),
         f"{RUNTIME}spec.mlPolicy.torch.elasticPolicy", "fixed size"),
        ("trainjob-runtime", lambda d: _runtime_spec(d).update(podGroupPolicy={"volcano": {}}),
         f"{RUNTIME}spec.podGroupPolicy.volcano", "use coscheduling"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["podGroupPolicy"]["coscheduling"].update(
            scheduleTimeoutSeconds=60), f"{RUNTIME}spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds",
         "no timeout"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["template"]["spec"]["replicatedJobs"].append(
            {"name": "dataset-initializer"}), f"{RUNTIME}spec.template.spec.replicatedJobs[1]", "initializers"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["template"]["spec"].update(failurePolicy={"maxRestarts": 3}),
         f"{RUNTIME}spec.template.spec.failurePolicy", "runs no JobSet"),
        ("trainjob-runtime", lambda d: node_container(d).update(imagePullPolicy="Always"),
         f"{RUNTIME}{NODE}.spec.containers[0].imagePullPolicy", "not supported yet"),
        ("trainjob-runtime", lambda d: d[1]["spec"]["trainer"].update(numNodes=0), "spec.trainer.numNodes", ">= 1"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"].update(numNodes=-2),
         f"{RUNTIME}spec.mlPolicy.numNodes", ">= 1"),
        ("trainjob-runtime", lambda d: node_container(d).update(command=[""]),
         f"{RUNTIME}{NODE}.spec.containers[0].command[0]", "the program name is empty"),
        ("trainjob-runtime", lambda d: d[1]["spec"]["trainer"]["env"].append({"name": "9X", "value": "1"}),
         "spec.trainer.env[2]", "not a valid variable name"),
    ],
    ids=[
        "unknown-runtime", "runtime-elsewhere", "initializer", "pod-overrides", "managed-by", "valueFrom",
        "hugepages", "nproc", "mpi-runtime", "elastic", "volcano", "schedule-timeout", "initializer-job",
        "jobset-field", "runtime-pull-policy", "zero-nodes", "runtime-nodes", "no-command", "env-name",
    ],
)  # fmt: skip
def test_a_trainjob_problem_is_named_where_it_was_written(
    name: str, change: Callable[[list[dict[str, Any]]], None], path: str, words: str
) -> None:
    found = refusals(changed(name, change))
    assert path in found, found
    assert words in found[path]


def test_a_trainjob_without_a_command_is_refused_at_the_trainers() -> None:
    found = refusals(changed("trainjob", lambda d: d[0]["spec"].pop("trainer")))
    assert list(found) == ["spec.trainer.command"]
    assert "ClusterTrainingRuntime/torch-distributed gives none" in found["spec.trainer.command"]


def test_resources_per_node_reserve_the_requests_and_enforce_the_limits() -> None:
    # As Kubeflow Trainer's examples write it.
    def per_node(docs: list[dict[str, Any]]) -> None:
        docs[0]["spec"]["trainer"]["resourcesPerNode"] = {
            "requests": {"cpu": "2", "memory": "4Gi"},
            "limits": {"cpu": "4", "memory": "8Gi"},
        }

    resources = converted(changed("trainjob", per_node)).spec.replicas["worker"].template.resources
    assert (resources.cpu, resources.memory) == (2000, 4 * 2**30)
    assert resources.limits is not None
    assert (resources.limits.cpu, resources.limits.memory) == (4000, 8 * 2**30)


def test_a_limit_below_its_request_per_node_is_named_where_it_was_written() -> None:
    def per_node(docs: list[dict[str, Any]]) -> None:
        docs[0]["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}

    found = refusals(changed("trainjob", per_node))
    assert "below the 4 CPU reserved" in found["spec.trainer.resourcesPerNode.limits.cpu"], found
