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
from phalanx.model.jobtypes import JobType
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
         "deepspeed-distributed, jax-distributed, mlx-distributed, torch-distributed, xgboost-distributed"),
        ("trainjob-runtime", lambda d: d[0]["metadata"].update(namespace="other"), "spec.runtimeRef.name",
         "no TrainingRuntime 'cpu-torch' in namespace default"),
        ("trainjob", lambda d: d[0]["spec"].update(initializer={"dataset": {"storageUri": "hf://x"}}),
         "spec.initializer", "Phalanx Dataset"),
        ("trainjob", lambda d: d[0]["spec"].update(podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}]),
         "spec.podTemplateOverrides", "write the same change as runtimePatches"),
        ("trainjob", lambda d: d[0]["spec"].update(managedBy="kueue.x-k8s.io/multikueue"), "spec.managedBy",
         "another controller"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"].update(env=[{"name": "K", "valueFrom": {}}]),
         "spec.trainer.env[0].valueFrom", "give exactly one of secretKeyRef, configMapKeyRef or fieldRef"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"]["resourcesPerNode"]["limits"].update({"hugepages-2Mi": "1Gi"}),
         "spec.trainer.resourcesPerNode.limits.hugepages-2Mi", "remove hugepages-2Mi"),
        ("trainjob", lambda d: d[0]["spec"]["trainer"].update(numProcPerNode="all"), "spec.trainer.numProcPerNode",
         "auto, cpu, gpu"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"].update(mpi={"numProcPerNode": 1}),
         f"{RUNTIME}spec.mlPolicy.mpi", "torch and mpi are both given: keep one"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"]["torch"].update(elasticPolicy={"maxNodes": 4}),
         f"{RUNTIME}spec.mlPolicy.torch.elasticPolicy", "fixed size"),
        ("trainjob-runtime", lambda d: _runtime_spec(d).update(podGroupPolicy={"kueue": {}}),
         f"{RUNTIME}spec.podGroupPolicy.kueue", "use coscheduling or volcano"),
        ("trainjob-runtime", lambda d: _runtime_spec(d).update(podGroupPolicy={"volcano": {"networkTopology": {}}}),
         f"{RUNTIME}spec.podGroupPolicy.volcano.networkTopology", "no volcano option"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["mlPolicy"].update(xgboost={"x": 1}),
         f"{RUNTIME}spec.mlPolicy.xgboost", "takes no options"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["podGroupPolicy"]["coscheduling"].update(
            scheduleTimeoutSeconds=60), f"{RUNTIME}spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds",
         "no timeout"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["template"]["spec"]["replicatedJobs"].append(
            {"name": "dataset-initializer"}), f"{RUNTIME}spec.template.spec.replicatedJobs[1]", "initializers"),
        ("trainjob-runtime", lambda d: _runtime_spec(d)["template"]["spec"].update(failurePolicy={"maxRestarts": 3}),
         f"{RUNTIME}spec.template.spec.failurePolicy", "runs no JobSet"),
        ("trainjob-runtime", lambda d: node_container(d).update(imagePullPolicy="Sometimes"),
         f"{RUNTIME}{NODE}.spec.containers[0].imagePullPolicy", "'Always'"),
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
        "hugepages", "nproc", "two-frameworks", "elastic", "kueue", "volcano-option", "xgboost-option",
        "schedule-timeout", "initializer-job",
        "jobset-field", "runtime-pull-policy", "zero-nodes", "runtime-nodes", "no-command", "env-name",
    ],
)  # fmt: skip
def test_a_trainjob_problem_is_named_where_it_was_written(
    name: str, change: Callable[[list[dict[str, Any]]], None], path: str, words: str
) -> None:
    found = refusals(changed(name, change))
    assert path in found, found
    assert words in found[path]


def test_a_trainjob_without_a_command_runs_the_runtime_images_entrypoint() -> None:
    job = converted(changed("trainjob", lambda d: d[0]["spec"].pop("trainer")))
    template = job.spec.replicas["worker"].template
    assert template.command == []
    assert template.image  # the shipped runtime's: on Kubernetes its entrypoint runs


def test_a_trainjob_without_a_command_or_an_image_is_refused_at_the_trainers() -> None:
    def no_image(docs: list[dict[str, Any]]) -> None:
        node_container(docs).pop("image")
        node_container(docs).pop("command")

    found = refusals(changed("trainjob-runtime", no_image))
    assert list(found) == ["spec.trainer.command"]
    assert "gives none" in found["spec.trainer.command"]


def node_patch(pod_spec: dict[str, Any], *, manager: str = "example.io/platform") -> dict[str, Any]:
    """A runtime patch of the node's pod spec, in the shape upstream's runtimePatches take."""
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"cost-center": "research"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"annotations": {"team/owner": "nlp"}},
                                "spec": {"template": {"metadata": {"labels": {"pod": "yes"}}, "spec": pod_spec}},
                            },
                        }
                    ]
                },
            }
        },
    }


def test_runtime_patches_reach_the_node_template_and_the_objects_above_it() -> None:
    patches = [
        node_patch(
            {
                "serviceAccountName": "training-sa",
                "nodeSelector": {"node-type": "training", "zone": "a"},
                "tolerations": [{"key": "training", "operator": "Exists", "effect": "NoSchedule"}],
            }
        ),
        node_patch({"nodeSelector": {"zone": "b"}}, manager="example.io/kueue"),  # a later patch merges over it
    ]
    job = converted(changed("trainjob-runtime", lambda d: d[1]["spec"].update(runtimePatches=patches)))
    template = job.spec.replicas["worker"].template
    assert template.service_account_name == "training-sa"
    assert template.node_selector == {"node-type": "training", "zone": "b"}
    assert [t.key for t in template.tolerations] == ["training"]
    assert template.metadata.labels == {"tier": "cpu", "pod": "yes"}
    # Phalanx makes no JobSet or Job: their labels and annotations go to the TrainingJob.
    assert job.metadata.labels["cost-center"] == "research"
    assert job.metadata.annotations["team/owner"] == "nlp"


def test_a_refused_patched_field_is_named_at_the_patch() -> None:
    patches = [node_patch({"hostNetwork": True, "terminationGracePeriodSeconds": 5})]
    found = refusals(changed("trainjob-runtime", lambda d: d[1]["spec"].update(runtimePatches=patches)))
    base = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    assert "may not set this pod spec field" in found[f"{base}.hostNetwork"]
    assert "not supported yet" in found[f"{base}.terminationGracePeriodSeconds"]
    assert not [path for path in found if path.startswith(RUNTIME)], found


@pytest.mark.parametrize(
    ("patch", "path", "words"),
    [
        ({"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}}},
         "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name",
         "no replicated job 'launcher' (it has node)"),
        ({"trainingRuntimeSpec": {}}, "spec.runtimePatches[0].manager", "required"),
        ({"manager": "m", "trainingRuntimeSpec": {"mlPolicy": {"numNodes": 4}}},
         "spec.runtimePatches[0].trainingRuntimeSpec.mlPolicy", "only the runtime's template"),
        (node_patch({"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]}),
         "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
         ".containers[0].env", "set it under spec.trainer.env"),
        (node_patch({"containers": [{"name": "sidecar", "volumeMounts": []}]}),
         "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
         ".containers[0].name", "no container 'sidecar'"),
    ],
    ids=["unknown-job", "no-manager", "not-template", "node-env", "unknown-container"],
)  # fmt: skip
def test_a_bad_runtime_patch_is_refused_at_its_path(patch: dict[str, Any], path: str, words: str) -> None:
    found = refusals(changed("trainjob-runtime", lambda d: d[1]["spec"].update(runtimePatches=[patch])))
    assert path in found, found
    assert words in found[path]


def test_two_patches_of_one_manager_are_refused() -> None:
    patches = [node_patch({"nodeSelector": {"a": "1"}}), node_patch({"nodeSelector": {"a": "2"}})]
    found = refusals(changed("trainjob-runtime", lambda d: d[1]["spec"].update(runtimePatches=patches)))
    assert "one per manager" in found["spec.runtimePatches[1].manager"]


def test_a_patched_container_mount_reaches_the_template() -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        pod = docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        mount = {"name": "scratch", "mountPath": "/scratch"}
        docs[1]["spec"]["runtimePatches"] = [
            node_patch({"containers": [{"name": node_container(docs)["name"], "volumeMounts": [mount]}]})
        ]

    template = converted(changed("trainjob-runtime", change)).spec.replicas["worker"].template
    assert [(m.name, m.mount_path) for m in template.volume_mounts] == [("scratch", "/scratch")]


def test_the_jobset_and_job_template_labels_of_a_runtime_go_to_the_trainingjob() -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        docs[0]["spec"]["template"]["metadata"] = {"labels": {"jobset": "1"}}
        docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"] = {"labels": {"job": "1"}}

    job = converted(changed("trainjob-runtime", change))
    assert (job.metadata.labels["jobset"], job.metadata.labels["job"]) == ("1", "1")


def test_active_deadline_and_a_secret_env_of_the_trainer_are_kept() -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        docs[1]["spec"]["activeDeadlineSeconds"] = 3600
        secret = {"secretKeyRef": {"name": "hf", "key": "token"}}
        docs[1]["spec"]["trainer"]["env"].append({"name": "HF_TOKEN", "valueFrom": secret})

    job = converted(changed("trainjob-runtime", change))
    assert job.spec.run_policy.active_deadline_seconds == 3600
    source = job.spec.replicas["worker"].template.env_value_from["HF_TOKEN"]
    assert (source.secret_key_ref.name, source.secret_key_ref.key) == ("hf", "token")  # type: ignore[union-attr]


@pytest.mark.parametrize(("runtime", "jobtype"), [("jax-distributed", "jax"), ("xgboost-distributed", "xgboost")])
def test_the_shipped_jax_and_xgboost_runtimes_make_their_job_types(runtime: str, jobtype: str) -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        docs[0]["spec"]["runtimeRef"]["name"] = runtime
        docs[0]["spec"]["trainer"].pop("numProcPerNode", None)

    job = converted(changed("trainjob", change))
    assert job.spec.type == jobtype
    assert list(job.spec.replicas) == ["worker"]
    assert job.spec.replicas["worker"].count == 3


def test_a_volcano_pod_group_policy_is_the_gang_phalanx_makes_anyway() -> None:
    job = converted(changed("trainjob-runtime", lambda d: _runtime_spec(d).update(podGroupPolicy={"volcano": {}})))
    assert job.spec.type == "pytorch"


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


# -- MPI runtimes (mlPolicy.mpi): a launcher and its workers ------------------------------------------------------

MPI_RUNTIME = "TrainingRuntime/cpu-mpi "


def mpi_validated(docs: list[dict[str, Any]]) -> tuple[list[JobType], TrainingJob]:
    *_, trainjob = docs
    made, job, _ = validate_trainjob(trainjob, runtimes_in(docs), JOBTYPES)
    return made, job


def on_shipped(runtime: str, **trainer: Any) -> list[dict[str, Any]]:
    document = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "run"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"command": ["mpirun", "python3", "train.py"], **trainer}},
    }
    return [document]


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mlx-distributed"])
def test_the_shipped_mpi_runtimes_make_a_launcher_that_is_a_node_and_workers_serving_ssh(runtime: str) -> None:
    framework = runtime.split("-")[0]
    docs = on_shipped(
        runtime, numNodes=3, env=[{"name": "EPOCHS", "value": "2"}], resourcesPerNode={"limits": {"cpu": "4"}}
    )
    made, job = mpi_validated(docs)
    (jobtype,) = made
    assert job.spec.type == jobtype.metadata.name == "mpi-launcher-as-worker"
    # The launcher is listed first in the hostfile, one slot a host (the runtime's numProcPerNode: 1, no GPUs).
    assert (jobtype.spec.hostfile_roles, jobtype.spec.rank_roles) == (["launcher", "worker"], ["launcher", "worker"])
    assert jobtype.spec.slots_per_host == 1
    launcher, worker = job.spec.replicas["launcher"], job.spec.replicas["worker"]
    assert (launcher.count, worker.count) == (1, 2)  # numNodes 3: the launcher and two nodes
    image = f"ghcr.io/kubeflow/trainer/{framework}-runtime"
    assert (launcher.template.image, worker.template.image) == (image, image)
    assert launcher.template.command == ["mpirun", "python3", "train.py"]
    assert (worker.template.command, worker.template.args) == (
        ["/usr/sbin/sshd"],
        ["-De", "-f", "/home/mpiuser/.sshd_config"],
    )
    # The launcher is a node: the trainer's env and resources reach the nodes too.
    assert launcher.template.env["EPOCHS"] == worker.template.env["EPOCHS"] == "2"
    assert launcher.template.resources.cpu == worker.template.resources.cpu == 4000
    assert job.spec.ssh_keys is not None and job.spec.ssh_keys.mount_path == "/home/mpiuser/.ssh"
    assert job.metadata.labels == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def test_one_node_on_a_launcher_as_node_runtime_still_has_a_worker_as_upstream() -> None:
    _, job = mpi_validated(on_shipped("deepspeed-distributed", numNodes=1))
    assert (job.spec.replicas["launcher"].count, job.spec.replicas["worker"].count) == (1, 1)


def test_no_nodes_on_a_launcher_as_node_runtime_is_refused_at_num_nodes() -> None:
    found = refusals(on_shipped("mlx-distributed", numNodes=0))
    assert found == {"spec.trainer.numNodes": "must be >= 1, got 0"}


def test_a_runtimes_one_process_per_node_becomes_the_gpus_of_a_node() -> None:
    gpus = {"limits": {"nvidia.com/gpu": 4}}
    made, job = mpi_validated(on_shipped("deepspeed-distributed", numNodes=2, resourcesPerNode=gpus))
    assert (job.spec.type, made[0].spec.slots_per_host) == ("mpi-slots-4-launcher-as-worker", 4)
    # The trainer's numProcPerNode wins.
    made, job = mpi_validated(on_shipped("deepspeed-distributed", resourcesPerNode=gpus, numProcPerNode=2))
    assert (job.spec.type, made[0].spec.slots_per_host) == ("mpi-slots-2-launcher-as-worker", 2)


def test_an_mpi_trainingruntime_of_the_file_is_a_launcher_with_the_trainer_and_workers_as_written() -> None:
    made, job = mpi_validated(documents("trainjob-mpi-runtime"))
    (jobtype,) = made
    assert (job.spec.type, jobtype.spec.slots_per_host, jobtype.spec.hostfile_roles) == ("mpi-slots-2", 2, ["worker"])
    assert jobtype.metadata.namespace == "default"
    launcher, worker = job.spec.replicas["launcher"], job.spec.replicas["worker"]
    assert (launcher.count, worker.count) == (1, 3)  # the launcher is no node: numNodes workers
    assert launcher.template.command == ["mpirun", "python3", "pi.py"]
    assert launcher.template.env == {"OMPI_ALLOW_RUN_AS_ROOT": "1", "STEPS": "1000"}
    assert launcher.template.resources.cpu == 1000
    # As upstream, the trainer's env and resources go to the trainer's replicated job (the launcher) only.
    assert worker.template.env == {} and worker.template.resources.cpu == 2000
    assert worker.template.command == ["/usr/sbin/sshd", "-De"]
    assert (launcher.restart_policy, worker.restart_policy) == ("OnFailure", "Never")
    assert job.spec.ssh_keys is not None and job.spec.ssh_keys.mount_path == "/home/mpiuser/.ssh"


def test_an_mpi_runtime_of_the_default_shape_uses_the_mpi_jobtype() -> None:
    def plain(docs: list[dict[str, Any]]) -> None:
        _mpi_spec(docs)["mlPolicy"]["mpi"] = {}

    made, job = mpi_validated(changed("trainjob-mpi-runtime", plain))
    assert (made, job.spec.type) == ([], "mpi")
    assert job.spec.ssh_keys is not None and job.spec.ssh_keys.mount_path == "/root/.ssh"


def _mpi_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = docs[0]["spec"]
    return spec


def _mpi_job(docs: list[dict[str, Any]], position: int) -> dict[str, Any]:
    job: dict[str, Any] = _mpi_spec(docs)["template"]["spec"]["replicatedJobs"][position]
    return job


JOBS = "spec.template.spec.replicatedJobs"


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (lambda d: _mpi_job(d, 0).update(dependsOn=[{"name": "node", "status": "Complete"}]),
         f"{MPI_RUNTIME}{JOBS}[0].dependsOn", "starts the launcher with the nodes"),
        (lambda d: _mpi_job(d, 1).update(dependsOn=[{"name": "launcher", "status": "Ready"}]),
         f"{MPI_RUNTIME}{JOBS}[1].dependsOn", "unknown field of a replicated job"),
        (lambda d: _mpi_spec(d)["template"]["spec"]["successPolicy"].update(targetReplicatedJobs=["node"]),
         f"{MPI_RUNTIME}spec.template.spec.successPolicy.targetReplicatedJobs", "succeeds when its launcher does"),
        (lambda d: _mpi_spec(d)["template"]["spec"]["network"].update(publishNotReadyAddresses=False),
         f"{MPI_RUNTIME}spec.template.spec.network.publishNotReadyAddresses", "published before they are ready"),
        (lambda d: _mpi_spec(d)["template"]["spec"]["network"].update(subdomain="mpi"),
         f"{MPI_RUNTIME}spec.template.spec.network.subdomain", "names the replicas' hosts itself"),
        (lambda d: _mpi_spec(d)["mlPolicy"]["mpi"].update(mpiImplementation="MVAPICH"),
         f"{MPI_RUNTIME}spec.mlPolicy.mpi.mpiImplementation", "OpenMPI, Intel, MPICH"),
        (lambda d: _mpi_spec(d)["mlPolicy"]["mpi"].update(numProcPerNode=0),
         f"{MPI_RUNTIME}spec.mlPolicy.mpi.numProcPerNode", ">= 1"),
        (lambda d: _mpi_spec(d)["mlPolicy"]["mpi"].update(runLauncherAsWorker=True),
         f"{MPI_RUNTIME}spec.mlPolicy.mpi.runLauncherAsWorker", "unknown field of an mpi policy"),
        (lambda d: d[1]["spec"]["trainer"].update(numProcPerNode="auto"), "spec.trainer.numProcPerNode",
         "whole number"),
        (lambda d: d[1]["spec"]["trainer"]["env"].append({"name": "OMPI_MCA_plm_rsh_args", "value": "-p 22"}),
         "spec.trainer.env[1].name", "set by the MPI runtime"),
        (lambda d: _mpi_spec(d)["template"]["spec"]["replicatedJobs"].pop(0),
         f"{MPI_RUNTIME}{JOBS}", "required: the replicated job 'launcher'"),
        (lambda d: _mpi_job(d, 0).update(replicas=2), f"{MPI_RUNTIME}{JOBS}[0].replicas", "one launcher"),
        (lambda d: d[1]["spec"]["trainer"].update(numNodes=0), "spec.trainer.numNodes", ">= 1"),
    ],
    ids=[
        "depends-on-complete", "node-depends", "success-of-nodes", "not-ready-hidden", "subdomain",
        "implementation", "zero-slots", "mpijob-field", "auto-slots", "reserved-env", "no-launcher",
        "two-launchers", "zero-nodes",
    ],
)  # fmt: skip
def test_an_mpi_runtime_problem_is_named_where_it_was_written(
    change: Callable[[list[dict[str, Any]]], None], path: str, words: str
) -> None:
    found = refusals(changed("trainjob-mpi-runtime", change))
    assert path in found, found
    assert words in found[path]


def test_a_launcher_or_an_mpi_jobset_field_is_refused_on_a_runtime_without_mlpolicy_mpi() -> None:
    def launcher(docs: list[dict[str, Any]]) -> None:
        spec = _runtime_spec(docs)["template"]["spec"]
        spec["replicatedJobs"].append({"name": "launcher", "template": {"spec": {}}})
        spec["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["launcher"]}
        spec["network"] = {"publishNotReadyAddresses": True}

    found = refusals(changed("trainjob-runtime", launcher))
    assert "a launcher only with mlPolicy.mpi" in found[f"{RUNTIME}spec.template.spec.replicatedJobs[1]"]
    assert "runs no JobSet" in found[f"{RUNTIME}spec.template.spec.successPolicy"]
    assert f"{RUNTIME}spec.template.spec.network" not in found  # what Phalanx does for every job
