"""Kubeflow job kinds converted to TrainingJobs (``model.kubeflow``): what maps, what is refused, and where.

The documents under tests/data/kubeflow are our own, written in the upstream formats (training-operator 1.9's
``kubeflow.org/v1`` kinds, mpi-operator's ``v2beta1`` MPIJob). Each test changes one of them and checks the
TrainingJob that comes out, or the path and sentence of the refusal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from phalanx.core.rendezvous import Endpoint, render_hostfile, render_replica_env, replica_names
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.kubeflow import CONVERTED_FROM, validate_kubeflow
from phalanx.model.loading import builtin_jobtypes, read_documents

DATA = Path(__file__).parents[2] / "data" / "kubeflow"
JOBTYPES = builtin_jobtypes()


def example(name: str) -> dict[str, Any]:
    (document,) = read_documents(DATA / f"{name}.yaml")
    return document


def converted(document: dict[str, Any]) -> tuple[list[JobType], TrainingJob]:
    made, job, _ = validate_kubeflow(document, JOBTYPES)
    return made, job


def refusals(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_kubeflow(document, JOBTYPES)
    return {error.path: error.message for error in caught.value.errors}


def changed(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = copy.deepcopy(example(name))
    change(document)
    return document


def container(document: dict[str, Any], field: str, replica: str) -> dict[str, Any]:
    found: dict[str, Any] = document["spec"][field][replica]["template"]["spec"]["containers"][0]
    return found


# -- every example converts to its JobType ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "jobtype", "counts", "restart"),
    [
        ("pytorchjob", "pytorch", {"master": 1, "worker": 2}, "OnFailure"),
        ("tfjob", "tensorflow", {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}, "Never"),
        ("xgboostjob", "xgboost", {"master": 1, "worker": 2}, "Never"),
        ("jaxjob", "jax", {"worker": 2}, "OnFailure"),
        ("paddlejob", "paddle", {"worker": 2}, "OnFailure"),
        ("mpijob", "mpi-slots-2", {"launcher": 1, "worker": 2}, "OnFailure"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_kind_becomes_a_job_of_its_type(name: str, jobtype: str, counts: dict[str, int], restart: str) -> None:
    document = example(name)
    _, job = converted(document)
    assert job.spec.type == jobtype
    assert {role: spec.count for role, spec in job.spec.replicas.items()} == counts
    assert job.spec.run_policy.restart_policy == restart
    assert job.metadata.name == document["metadata"]["name"]
    assert job.metadata.annotations[CONVERTED_FROM] == f"{document['kind']}.{document['apiVersion']}"


def test_a_pytorchjob_keeps_every_field_it_has() -> None:
    _, job = converted(example("pytorchjob"))
    assert job.metadata.namespace == "research"
    assert job.metadata.labels == {"team": "vision"}
    master = job.spec.replicas["master"].template
    assert master.image == "example.org/vision/ddp:1.0"
    assert master.command == ["python3", "/workspace/train.py"]
    assert master.args == ["--epochs", "3"]
    assert master.working_dir == "/workspace"
    assert master.metadata.annotations == {"owner": "alice"}
    assert master.env["LEARNING_RATE"] == "0.01"
    assert (master.resources.cpu, master.resources.memory, master.resources.gpu) == (2000, 4 * 2**30, 1)
    worker = job.spec.replicas["worker"].template
    assert (worker.resources.cpu, worker.resources.memory, worker.resources.gpu) == (1500, 2 * 2**30, 1)
    # nprocPerNode reaches torchrun as upstream gives it; PYTHONUNBUFFERED as the operator sets it.
    assert worker.env["PET_NPROC_PER_NODE"] == "1"
    assert worker.env["PYTHONUNBUFFERED"] == "1"
    policy = job.spec.run_policy
    assert (policy.backoff_limit, policy.active_deadline_seconds, policy.ttl_seconds_after_finished) == (2, 7200, 600)
    assert policy.suspend is False
    scheduling = job.spec.scheduling
    assert (scheduling.min_available, scheduling.queue, scheduling.priority_class) == (3, "team-vision", "high")


def test_a_container_pythonunbuffered_wins_over_the_operators() -> None:
    def set_own(document: dict[str, Any]) -> None:
        container(document, "pytorchReplicaSpecs", "Worker")["env"] = [{"name": "PYTHONUNBUFFERED", "value": "0"}]

    _, job = converted(changed("pytorchjob", set_own))
    assert job.spec.replicas["worker"].template.env["PYTHONUNBUFFERED"] == "0"


def test_suspend_reaches_the_job() -> None:
    _, job = converted(changed("jaxjob", lambda d: d["spec"].setdefault("runPolicy", {}).update(suspend=True)))
    assert job.spec.run_policy.suspend is True


def test_exitcode_retries_what_upstream_retries() -> None:
    def exit_code(document: dict[str, Any]) -> None:
        for replica in document["spec"]["xgbReplicaSpecs"].values():
            replica["restartPolicy"] = "ExitCode"

    _, job = converted(changed("xgboostjob", exit_code))
    assert job.spec.run_policy.restart_policy == "ExitCode"
    assert job.spec.run_policy.retryable_exit_codes == list(range(128, 256))


def test_replica_types_that_differ_keep_their_own_restart_policies() -> None:
    def master_never_worker_exit_code(document: dict[str, Any]) -> None:
        document["spec"]["xgbReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"

    _, job = converted(changed("xgboostjob", master_never_worker_exit_code))
    master, worker = job.spec.replicas["master"], job.spec.replicas["worker"]
    assert (master.restart_policy, worker.restart_policy) == ("Never", "ExitCode")
    assert worker.retryable_exit_codes == list(range(128, 256))
    assert master.retryable_exit_codes is None
    assert job.spec.restart_policy_of("worker") == "ExitCode"


def test_replica_types_that_agree_keep_one_job_wide_restart_policy() -> None:
    _, job = converted(example("xgboostjob"))
    assert job.spec.run_policy.restart_policy == "Never"
    assert all(replica.restart_policy is None for replica in job.spec.replicas.values())


def test_a_replica_type_left_to_upstreams_default_gets_that_default_as_its_own() -> None:
    def worker_never(document: dict[str, Any]) -> None:
        document["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
        del document["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"]

    _, job = converted(changed("pytorchjob", worker_never))
    assert job.spec.restart_policy_of("master") == "OnFailure"  # a PyTorchJob's default
    assert job.spec.restart_policy_of("worker") == "Never"


def test_an_mpijob_worker_may_have_its_own_restart_policy() -> None:
    def worker_never(document: dict[str, Any]) -> None:
        document["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"

    _, job = converted(changed("mpijob", worker_never))
    assert (job.spec.restart_policy_of("launcher"), job.spec.restart_policy_of("worker")) == ("OnFailure", "Never")


@pytest.mark.parametrize(("upstream", "ours"), [("None", "None"), ("Running", "Running"), ("All", "Running")])
def test_clean_pod_policy_maps_to_phalanxs(upstream: str, ours: str) -> None:
    _, job = converted(changed("pytorchjob", lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy=upstream)))
    assert job.spec.run_policy.clean_pod_policy == ours


def test_replicas_default_to_one_and_zero_leaves_the_type_out() -> None:
    def counts(document: dict[str, Any]) -> None:
        del document["spec"]["tfReplicaSpecs"]["Chief"]["replicas"]
        document["spec"]["tfReplicaSpecs"]["Evaluator"]["replicas"] = 0

    _, job = converted(changed("tfjob", counts))
    assert job.spec.replicas["chief"].count == 1
    assert "evaluator" not in job.spec.replicas


def test_a_tfjob_master_is_its_chief() -> None:
    def rename(document: dict[str, Any]) -> None:
        specs = document["spec"]["tfReplicaSpecs"]
        specs["Master"] = specs.pop("Chief")

    _, job = converted(changed("tfjob", rename))
    assert job.spec.replicas["chief"].template.command[-1] == "--role=chief"


# -- the JobTypes' environment: what upstream's operators set ------------------------------------------------


def rendered(job: TrainingJob, jobtype: JobType, role: str, index: int) -> dict[str, str]:
    names = [name for _, _, name in replica_names(job, jobtype)]
    addresses = {name: Endpoint(f"{name}.svc", jobtype.spec.port) for name in names}
    return render_replica_env(
        job, jobtype, role, index, addresses, node_of={n: n for n in names}, output_dir="out", hostfile_path="hosts"
    )


def test_a_collective_paddlejob_rendezvous_at_worker_0() -> None:
    _, job = converted(example("paddlejob"))
    env = rendered(job, JOBTYPES["paddle"], "worker", 1)
    assert env["PADDLE_MASTER"] == "paddle-collective-worker-0.svc:36543"
    assert (env["PADDLE_NNODES"], env["PADDLE_JOB_ID"]) == ("2", "paddle-collective")
    # Collective mode: neither a server nor a trainer count, or paddle.distributed.launch runs parameter servers.
    assert "PADDLE_TRAINER_NUM" not in env
    assert "PADDLE_SERVER_NUM" not in env


def test_a_paddlejob_with_a_master_runs_parameter_servers() -> None:
    def with_master(document: dict[str, Any]) -> None:
        specs = document["spec"]["paddleReplicaSpecs"]
        specs["Master"] = copy.deepcopy(specs["Worker"]) | {"replicas": 1}

    _, job = converted(changed("paddlejob", with_master))
    master = rendered(job, JOBTYPES["paddle"], "master", 0)
    worker = rendered(job, JOBTYPES["paddle"], "worker", 0)
    assert master["PADDLE_MASTER"] == worker["PADDLE_MASTER"] == "paddle-collective-master-0.svc:36543"
    assert master["PADDLE_SERVER_NUM"] == "1"
    assert "PADDLE_TRAINER_NUM" not in master
    assert worker["PADDLE_TRAINER_NUM"] == "1"
    assert worker["PADDLE_NNODES"] == "3"


def test_an_mpijob_hostfile_has_its_slots_per_worker() -> None:
    made, job = converted(example("mpijob"))
    (jobtype,) = made
    assert (jobtype.metadata.name, jobtype.spec.slots_per_host) == ("mpi-slots-2", 2)
    assert jobtype.spec.hostfile_roles == ["worker"]
    names = [name for _, _, name in replica_names(job, jobtype)]
    hostfile = render_hostfile(job, jobtype, {n: Endpoint(f"{n}.svc", 2222) for n in names})
    assert hostfile == "allreduce-worker-0.svc slots=2\nallreduce-worker-1.svc slots=2\n"


def test_an_mpijob_launcher_as_worker_is_first_in_the_hostfile() -> None:
    def launcher_works(document: dict[str, Any]) -> None:
        document["spec"]["runLauncherAsWorker"] = True
        document["spec"]["slotsPerWorker"] = 1

    made, job = converted(changed("mpijob", launcher_works))
    (jobtype,) = made
    assert jobtype.metadata.name == "mpi-launcher-as-worker"
    names = [name for _, _, name in replica_names(job, jobtype)]
    hostfile = render_hostfile(job, jobtype, {n: Endpoint(f"{n}.svc", 2222) for n in names})
    assert hostfile.splitlines() == [
        "allreduce-launcher-0.svc slots=1",
        "allreduce-worker-0.svc slots=1",
        "allreduce-worker-1.svc slots=1",
    ]


def test_an_mpijob_of_one_slot_uses_the_builtin_type() -> None:
    made, job = converted(changed("mpijob", lambda d: d["spec"].pop("slotsPerWorker")))
    assert made == []
    assert job.spec.type == "mpi"


# -- refusals: the upstream path and why ---------------------------------------------------------------------

WORKER = "spec.pytorchReplicaSpecs.Worker"
CONTAINER = f"{WORKER}.template.spec.containers[0]"


def _worker(document: dict[str, Any]) -> dict[str, Any]:
    return container(document, "pytorchReplicaSpecs", "Worker")


def worker_sets(**fields: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``fields`` in the PyTorchJob's worker container."""
    return lambda document: _worker(document).update(fields)


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        # Pod fields are mapped (test_kubeflow_pod_fields.py); a malformed one is named where it was written.
        (worker_sets(volumeMounts=[{"name": "data", "mountPath": "/data"}]), f"{CONTAINER}.volumeMounts[0].name",
         "no volume 'data'"),
        (worker_sets(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
         f"{CONTAINER}.env[0].valueFrom.secretKeyRef.key", "required"),
        (worker_sets(envFrom=[{}]), f"{CONTAINER}.envFrom[0]", "exactly one"),
        (lambda d: _worker(d).update(imagePullPolicy="Sometimes"), f"{CONTAINER}.imagePullPolicy", "'Always'"),
        (lambda d: _worker(d).update(livenessProbe={"periodSeconds": 5}), f"{CONTAINER}.livenessProbe",
         "exactly one of exec, httpGet, tcpSocket or grpc"),
        (lambda d: _worker(d).update(stdinOnce=True), f"{CONTAINER}.stdinOnce", "no meaning"),
        (lambda d: _worker(d)["resources"]["limits"].update({"ephemeral-storage": "1Gi"}),
         f"{CONTAINER}.resources.limits.ephemeral-storage", "remove ephemeral-storage"),
        (lambda d: _worker(d)["resources"].update(requests={"cpu": "2"}), f"{CONTAINER}.resources.limits.cpu",
         "1500m is below the 2 CPU reserved"),
        (lambda d: _worker(d)["resources"].update(requests={"memory": "3Gi"}), f"{CONTAINER}.resources.limits.memory",
         "is below the 3Gi reserved"),
        (lambda d: _worker(d)["resources"].update(requests={"nvidia.com/gpu": 2}),
         f"{CONTAINER}.resources.limits.nvidia.com/gpu", "GPUs are not overcommitted"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(hostNetwork=True),
         f"{WORKER}.template.spec.hostNetwork", "not supported yet"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
            tolerations=[{"operator": "Equal", "value": "v"}]), f"{WORKER}.template.spec.tolerations[0].operator",
         "must be Exists"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(volumes=[{"name": "d"}]),
         f"{WORKER}.template.spec.volumes[0]", "exactly one"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
            {"name": "sidecar", "image": "busybox"}), f"{WORKER}.template.spec.containers[1]", "2 containers"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(restartPolicy="Never"),
         f"{WORKER}.template.spec.restartPolicy", "replica spec's restartPolicy decides"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"].update(name="w")
         if "metadata" in d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
         else d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"].update(metadata={"name": "w"}),
         f"{WORKER}.template.metadata.name", "only labels and annotations"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"].update(Launcher=d["spec"]["pytorchReplicaSpecs"]["Worker"]),
         "spec.pytorchReplicaSpecs.Launcher", "replica types Master, Worker"),
        (lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(restartPolicy="Always"),
         "spec.pytorchReplicaSpecs.Worker.restartPolicy", "use OnFailure"),
        (lambda d: d["spec"].update(elasticPolicy={"minReplicas": 1, "maxReplicas": 4}), "spec.elasticPolicy",
         "fixed size"),
        (lambda d: d["spec"].update(nprocPerNode="many"), "spec.nprocPerNode", "auto, cpu, gpu"),
        (lambda d: d["spec"].update(unknownField=1), "spec.unknownField", "unknown field of a PyTorchJob spec"),
        (lambda d: d["spec"]["runPolicy"].update(cleanPodPolicy="Never"), "spec.runPolicy.cleanPodPolicy",
         "Running, All or None"),
        (lambda d: d["spec"]["runPolicy"].update(managedBy="kueue.x-k8s.io/multikueue"), "spec.runPolicy.managedBy",
         "another controller"),
        (lambda d: d["spec"]["runPolicy"]["schedulingPolicy"].update(minResources={"cpu": "4"}),
         "spec.runPolicy.schedulingPolicy.minResources", "adds up the gang's resources"),
        (lambda d: d["spec"]["runPolicy"]["schedulingPolicy"].update(scheduleTimeoutSeconds=60),
         "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", "activeDeadlineSeconds"),
        (lambda d: d.update(apiVersion="kubeflow.org/v2"), "apiVersion", "kubeflow.org/v1"),
    ],
    ids=[
        "volumeMounts", "env-valueFrom", "envFrom", "imagePullPolicy", "probe", "unknown-container-field",
        "ephemeral-storage", "cpu-limit-below-request", "memory-limit-below-request",
        "gpu-requests-differ", "hostNetwork", "tolerations", "volumes", "sidecar",
        "pod-restartPolicy", "template-name", "unknown-replica-type", "restart-always",
        "elasticPolicy", "nprocPerNode", "unknown-spec-field", "cleanPodPolicy-unknown", "managedBy", "minResources",
        "scheduleTimeout", "apiVersion",
    ],
)  # fmt: skip
def test_a_field_that_cannot_be_honoured_is_refused_at_its_path(
    change: Callable[[dict[str, Any]], None], path: str, words: str
) -> None:
    found = refusals(changed("pytorchjob", change))
    assert path in found, found
    assert words in found[path]


@pytest.mark.parametrize(
    ("name", "change", "path", "words"),
    [
        ("tfjob", lambda d: d["spec"]["tfReplicaSpecs"].update(Master=d["spec"]["tfReplicaSpecs"]["Chief"]),
         "spec.tfReplicaSpecs.Master", "same replica type"),
        ("tfjob", lambda d: d["spec"].update(enableDynamicWorker=True), "spec.enableDynamicWorker", "fixed size"),
        ("tfjob", lambda d: d["spec"].update(successPolicy="ChiefOnly"), "spec.successPolicy", "AllWorkers"),
        ("paddlejob", lambda d: d["spec"].update(elasticPolicy={"minReplicas": 1}), "spec.elasticPolicy", "fixed"),
        ("mpijob", lambda d: d["spec"].update(mpiImplementation="MPICH"), "spec.mpiImplementation", "use OpenMPI"),
        ("mpijob", lambda d: d["spec"].update(launcherCreationPolicy="WaitForWorkersReady"),
         "spec.launcherCreationPolicy", "as a gang"),
        ("mpijob", lambda d: d["spec"].update(sshAuthMountPath="/home/mpiuser/.ssh"), "spec.sshAuthMountPath",
         "no SSH keys"),
        ("mpijob", lambda d: d["spec"].update(slotsPerWorker=0), "spec.slotsPerWorker", ">= 1"),
        ("mpijob", lambda d: d.update(apiVersion="kubeflow.org/v1"), "apiVersion", "kubeflow.org/v2beta1"),
    ],
    ids=[
        "tf-master-and-chief", "tf-dynamic-worker", "tf-success-policy", "paddle-elastic", "mpi-mpich",
        "mpi-wait-for-workers", "mpi-ssh-path", "mpi-zero-slots", "mpi-v1",
    ],
)  # fmt: skip
def test_other_kinds_refuse_at_their_paths(
    name: str, change: Callable[[dict[str, Any]], None], path: str, words: str
) -> None:
    found = refusals(changed(name, change))
    assert path in found, found
    assert words in found[path]


def test_an_mpijob_worker_follows_the_launchers_restart_policy() -> None:
    def launcher_never(document: dict[str, Any]) -> None:
        document["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"

    _, job = converted(changed("mpijob", launcher_never))
    assert job.spec.run_policy.restart_policy == "Never"


@pytest.mark.parametrize(
    ("name", "change", "path", "words"),
    [
        ("pytorchjob", lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=-1),
         "spec.pytorchReplicaSpecs.Worker.replicas", ">= 1"),
        ("pytorchjob", lambda d: d["spec"]["runPolicy"]["schedulingPolicy"].update(priorityClass="urgent"),
         "spec.runPolicy.schedulingPolicy.priorityClass", "unknown priority class"),
        ("pytorchjob", lambda d: d["spec"]["runPolicy"]["schedulingPolicy"].update(minAvailable=9),
         "spec.runPolicy.schedulingPolicy.minAvailable", "must be <= the job's 3"),
        ("pytorchjob", lambda d: d["spec"]["runPolicy"].update(backoffLimit="x"), "spec.runPolicy.backoffLimit",
         "whole number"),
        ("pytorchjob", lambda d: container(d, "pytorchReplicaSpecs", "Master")["env"].append(
            {"name": "1BAD", "value": "x"}), "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[1]",
         "not a valid variable name"),
        ("pytorchjob", lambda d: container(d, "pytorchReplicaSpecs", "Worker")["resources"]["limits"].update(
            memory="lots"), f"{CONTAINER}.resources.limits.memory", "lots"),
        ("pytorchjob", lambda d: container(d, "pytorchReplicaSpecs", "Master").update(
            resources={"requests": {"cpu": "-1"}, "limits": {"cpu": "-1"}}),
         "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu", "-1"),
        ("pytorchjob", lambda d: [container(d, "pytorchReplicaSpecs", "Worker").pop(k) for k in ("command", "image")],
         "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].command", "or an image whose entrypoint"),
        ("pytorchjob", lambda d: d["metadata"].update(name="Bad_Name"), "metadata.name", "DNS-1123"),
        ("tfjob", lambda d: d["spec"]["tfReplicaSpecs"]["Evaluator"].update(replicas=2),
         "spec.tfReplicaSpecs.Evaluator.replicas", "at most 1"),
        ("mpijob", lambda d: d["spec"]["mpiReplicaSpecs"].pop("Worker"), "spec.mpiReplicaSpecs.worker",
         "at least 1"),
    ],
    ids=[
        "negative-replicas", "priority-class", "min-available", "backoff-limit", "env-name", "memory", "cpu",
        "no-command",
        "name", "two-evaluators", "mpi-no-worker",
    ],
)  # fmt: skip
def test_what_the_trainingjob_refuses_is_named_at_the_upstream_path(
    name: str, change: Callable[[dict[str, Any]], None], path: str, words: str
) -> None:
    found = refusals(changed(name, change))
    assert path in found, found
    assert words in found[path]


def test_every_refusal_is_reported_at_once() -> None:
    def many(document: dict[str, Any]) -> None:
        _worker(document).update(lifecycle={}, tty=True)
        document["spec"]["elasticPolicy"] = {}

    assert len(refusals(changed("pytorchjob", many))) == 3


# -- requests and limits: reserved and enforced ------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "reserved", "ceiling"),
    [
        # Kubernetes' meaning: the request is reserved, the limit above it is the enforced ceiling.
        (
            {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
            (2000, 4 * 2**30),
            {"cpu": 4000, "memory": 8 * 2**30},
        ),
        # A limit alone is also the request (Kubernetes defaults it so); one amount written twice is one amount.
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, (1000, 2**30), None),
        (
            {"requests": {"cpu": "1", "memory": "1024Mi"}, "limits": {"cpu": "1000m", "memory": "1Gi"}},
            (1000, 2**30),
            None,
        ),
        (
            {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            (500, 2**30),
            {"cpu": None, "memory": 2 * 2**30},
        ),
    ],
    ids=["both-above", "limits-only", "equal-in-other-units", "memory-only"],
)
def test_requests_are_reserved_and_limits_above_them_are_the_ceiling(
    resources: dict[str, Any], reserved: tuple[int, int], ceiling: dict[str, int | None] | None
) -> None:
    _, job = converted(changed("pytorchjob", worker_sets(resources=resources)))
    got = job.spec.replicas["worker"].template.resources
    assert (got.cpu, got.memory) == reserved
    assert (dict(got.limits) if got.limits else None) == ceiling
