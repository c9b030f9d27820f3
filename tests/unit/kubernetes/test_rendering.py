"""Rendering jobs into Kubernetes objects: Pods with the rendezvous environment, the headless Service, the
MPI hostfile ConfigMap; names, labels, owner references and resources."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.adapters.kubernetes.rendering import (
    RenderError,
    needs_service,
    render_headless_service,
    render_hostfile_configmap,
    render_pod,
    render_pods,
)
from phalanx.model.jobs import TrainingJob
from phalanx.model.jobtypes import JobType
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job

UID = "0b5e6f3c-1111-2222-3333-444455556666"
JOBTYPES = builtin_jobtypes()


def make_job(kind: str, replicas: dict[str, Any], *, name: str = "train", **spec: Any) -> tuple[TrainingJob, JobType]:
    raw = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"type": kind, "replicas": replicas, **spec},
    }
    job = validate_job(raw, JOBTYPES)
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": UID})})
    return job, JOBTYPES[kind]


def template(**extra: Any) -> dict[str, Any]:
    return {"image": "example.org/trainer:1", "command": ["python", "train.py"], **extra}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def host(pod_name: str, job: str = "train", namespace: str = "team-a") -> str:
    return f"{pod_name}.{job}.{namespace}.svc"


@pytest.fixture
def pytorch() -> tuple[TrainingJob, JobType]:
    return make_job(
        "pytorch",
        {
            "master": {"count": 1, "template": template()},
            "worker": {"count": 2, "template": template(args=["--lr=0.1"])},
        },
    )


def test_pytorch_pods_get_torchrun_env_with_dns_rendezvous(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    pods = render_pods(job, jobtype, attempt=0)
    assert [p["metadata"]["name"] for p in pods] == ["train-master-0", "train-worker-0", "train-worker-1"]
    for rank, pod in enumerate(pods):
        env = env_of(pod)
        assert env["MASTER_ADDR"] == host("train-master-0")
        assert env["MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == env["PHALANX_RANK"] == str(rank)
        # One node per Pod at render time: node-local values are those of a process alone on its node.
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
        assert (env["GROUP_RANK"], env["PET_NNODES"]) == (str(rank), "3")
        assert env["PHALANX_JOB_UID"] == UID
        assert env["PHALANX_NAMESPACE"] == "team-a"
        assert env["PHALANX_ATTEMPT"] == "0"
        assert env["PHALANX_OUTPUT_DIR"] == "/phalanx/outputs"
        assert pod["metadata"]["annotations"]["phalanx.dev/rank"] == str(rank)
    worker = pods[2]
    assert env_of(worker)["PHALANX_ROLE"] == "worker"
    assert env_of(worker)["PHALANX_REPLICA_INDEX"] == "1"
    [container] = worker["spec"]["containers"]
    assert container["image"] == "example.org/trainer:1"
    assert (container["command"], container["args"]) == (["python", "train.py"], ["--lr=0.1"])
    assert container["ports"] == [{"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}]


def test_pod_identity_labels_scheduling_and_stable_dns(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    pod = render_pod(job, jobtype, "worker", 1, 3)
    meta, spec = pod["metadata"], pod["spec"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert (meta["name"], meta["namespace"]) == ("train-worker-1", "team-a")
    assert {k: v for k, v in meta["labels"].items() if k.startswith("phalanx.dev/")} == {
        "phalanx.dev/job": "train",
        "phalanx.dev/role": "worker",
        "phalanx.dev/replica-index": "1",
        "phalanx.dev/attempt": "3",
    }
    assert meta["annotations"]["phalanx.dev/job-uid"] == UID
    assert env_of(pod)["PHALANX_ATTEMPT"] == "3"
    assert spec["schedulerName"] == "phalanx-scheduler"
    assert spec["restartPolicy"] == "Never"
    assert (spec["hostname"], spec["subdomain"]) == ("train-worker-1", "train")
    # A program that fails without a termination message leaves its log's end there (objects.pod_last_output).
    assert spec["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert render_pod(job, jobtype, "worker", 1, 0, scheduler_name="default-scheduler")["spec"]["schedulerName"] == (
        "default-scheduler"
    )


@pytest.mark.parametrize(
    ("kind", "replicas", "needed"),
    [
        ("generic", {"worker": {"template": template()}}, False),
        ("pytorch", {"master": {"count": 1, "template": template()}}, False),
        ("generic", {"worker": {"count": 2, "template": template()}}, True),
        ("pytorch", {"master": {"template": template()}, "worker": {"template": template()}}, True),
    ],
    ids=["one-worker", "one-master", "two-workers", "master-and-worker"],
)
def test_only_a_job_of_more_than_one_replica_needs_a_service(kind: str, replicas: dict[str, Any], needed: bool) -> None:
    job, _ = make_job(kind, replicas)
    assert needs_service(job) is needed


def test_a_one_replica_pod_names_no_service_and_reaches_itself_by_its_hostname() -> None:
    job, jobtype = make_job("pytorch", {"master": {"count": 1, "template": template()}})
    [pod] = render_pods(job, jobtype, attempt=0)
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"], "there is no Service to point at"
    env = env_of(pod)
    # The Pod's hostname is its name, which the kubelet writes into the Pod's /etc/hosts.
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("train-master-0", "29500")
    assert (env["WORLD_SIZE"], env["RANK"]) == ("1", "0")


def test_every_rendered_object_is_owned_by_the_job(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    owner = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "train",
        "uid": UID,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    mpi_job, mpi = make_job("mpi", {"launcher": {"template": template()}, "worker": {"template": template()}})
    configmap = render_hostfile_configmap(mpi_job, mpi)
    assert configmap is not None
    objects = [*render_pods(job, jobtype, 0), render_headless_service(job, jobtype), configmap]
    for obj in objects:
        assert obj["metadata"]["ownerReferences"] == [owner], obj["metadata"]["name"]
        assert obj["metadata"]["namespace"] == "team-a"


def test_a_job_without_uid_cannot_be_rendered(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    unsaved = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": None})})
    with pytest.raises(RenderError, match=r"metadata\.uid"):
        render_pod(unsaved, jobtype, "master", 0, 0)
    with pytest.raises(RenderError, match=r"metadata\.uid"):
        render_headless_service(unsaved, jobtype)


def test_headless_service_selects_the_job_and_publishes_unready_pods(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    service = render_headless_service(job, jobtype)
    assert (service["kind"], service["metadata"]["name"]) == ("Service", "train")
    spec = service["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["selector"] == {"phalanx.dev/job": "train"}
    assert spec["publishNotReadyAddresses"] is True
    assert [(p["port"], p["targetPort"]) for p in spec["ports"]] == [(29500, 29500)]


def test_tensorflow_tf_config_names_every_task_by_dns() -> None:
    job, jobtype = make_job(
        "tensorflow",
        {
            "chief": {"template": template()},
            "worker": {"count": 2, "template": template()},
            "ps": {"template": template()},
            "evaluator": {"template": template()},
        },
        name="tf",
    )
    pod = render_pod(job, jobtype, "worker", 1, 0)
    config = json.loads(env_of(pod)["TF_CONFIG"])
    assert config["cluster"] == {
        "chief": [f"{host('tf-chief-0', 'tf')}:2222"],
        "worker": [f"{host('tf-worker-0', 'tf')}:2222", f"{host('tf-worker-1', 'tf')}:2222"],
        "ps": [f"{host('tf-ps-0', 'tf')}:2222"],
    }
    assert config["task"] == {"type": "worker", "index": 1}
    assert pod["spec"]["containers"][0]["ports"][0]["containerPort"] == 2222
    evaluator = render_pod(job, jobtype, "evaluator", 0, 0)
    assert json.loads(env_of(evaluator)["TF_CONFIG"])["task"] == {"type": "evaluator", "index": 0}
    assert env_of(evaluator)["PHALANX_RANK"] == ""
    assert "phalanx.dev/rank" not in evaluator["metadata"]["annotations"]
    assert render_hostfile_configmap(job, jobtype) is None
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["outputs"]


def test_mpi_hostfile_configmap_lists_workers_and_is_mounted() -> None:
    job, jobtype = make_job(
        "mpi", {"launcher": {"template": template()}, "worker": {"count": 3, "template": template()}}, name="hvd"
    )
    configmap = render_hostfile_configmap(job, jobtype)
    assert configmap is not None
    assert (configmap["kind"], configmap["metadata"]["name"]) == ("ConfigMap", "hvd-hostfile")
    assert configmap["metadata"]["labels"]["phalanx.dev/job"] == "hvd"
    assert configmap["data"] == {
        "hostfile": "".join(f"{host(f'hvd-worker-{i}', 'hvd')} slots=1\n" for i in range(3)),
    }
    for role in ("launcher", "worker"):
        pod = render_pod(job, jobtype, role, 0, 0)
        env = env_of(pod)
        assert env["OMPI_MCA_orte_default_hostfile"] == env["PHALANX_HOSTFILE"] == "/etc/phalanx/hostfile"
        assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/phalanx/hostfile"  # Open MPI 5 (PRRTE)
        [container] = pod["spec"]["containers"]
        assert {"name": "hostfile", "mountPath": "/etc/phalanx", "readOnly": True} in container["volumeMounts"]
        assert {"name": "hostfile", "configMap": {"name": "hvd-hostfile"}} in pod["spec"]["volumes"]
    # The launcher is not ranked in the mpi JobType; the workers are ranks 0..2.
    assert env_of(render_pod(job, jobtype, "launcher", 0, 0))["PHALANX_RANK"] == ""
    assert env_of(render_pod(job, jobtype, "worker", 2, 0))["PHALANX_RANK"] == "2"


def test_whole_gpus_are_an_extended_resource_and_requests_equal_limits() -> None:
    resources = {"cpu": "1500m", "memory": "8Gi", "gpu": 2}
    job, jobtype = make_job("pytorch", {"master": {"template": template(resources=resources)}})
    [container] = render_pod(job, jobtype, "master", 0, 0)["spec"]["containers"]
    expected = {"cpu": "1500m", "memory": str(8 * 1024**3), "nvidia.com/gpu": "2"}
    assert container["resources"] == {"requests": expected, "limits": expected}


def test_a_gpu_share_is_annotated_not_requested() -> None:
    resources = {"cpu": 2, "memory": "4Gi", "gpuMilli": 500, "gpuModel": "NVIDIA-H100-80GB-HBM3"}
    job, jobtype = make_job("pytorch", {"master": {"template": template(resources=resources)}})
    pod = render_pod(job, jobtype, "master", 0, 0)
    [container] = pod["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["resources"]["limits"]["cpu"] == "2"
    assert pod["metadata"]["annotations"]["phalanx.dev/gpu-milli"] == "500"
    assert pod["metadata"]["annotations"]["phalanx.dev/gpu-model"] == "NVIDIA-H100-80GB-HBM3"
    assert env_of(pod)["PHALANX_GPU_MILLI"] == "500"


def test_template_labels_and_annotations_reach_the_pod_but_phalanx_keys_win() -> None:
    metadata = {
        "labels": {"team": "vision", "phalanx.dev/job": "spoofed"},
        "annotations": {"phalanx.dev/sim-duration-ms": "2000", "phalanx.dev/job-uid": "spoofed"},
    }
    job, jobtype = make_job("pytorch", {"master": {"template": template(metadata=metadata)}})
    meta = render_pod(job, jobtype, "master", 0, 0)["metadata"]
    assert meta["labels"]["team"] == "vision" and meta["labels"]["phalanx.dev/job"] == "train"
    assert meta["annotations"]["phalanx.dev/sim-duration-ms"] == "2000"
    assert meta["annotations"]["phalanx.dev/job-uid"] == UID


def test_missing_image_names_the_field_and_the_fallback_is_used() -> None:
    job, jobtype = make_job("pytorch", {"worker": {"count": 2, "template": {"command": ["python", "t.py"]}}})
    with pytest.raises(RenderError, match=r"^spec\.replicas\.worker\.template\.image: "):
        render_pod(job, jobtype, "worker", 0, 0)
    pod = render_pod(job, jobtype, "worker", 0, 0, image="example.org/default:2")
    assert pod["spec"]["containers"][0]["image"] == "example.org/default:2"


def test_outputs_are_an_empty_dir_at_the_declared_path() -> None:
    job, jobtype = make_job("pytorch", {"master": {"template": template()}}, outputs={"path": "results/run1"})
    pod = render_pod(job, jobtype, "master", 0, 0)
    assert env_of(pod)["PHALANX_OUTPUT_DIR"] == "/phalanx/results/run1"
    assert pod["spec"]["volumes"] == [{"name": "outputs", "emptyDir": {}}]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "outputs", "mountPath": "/phalanx/results/run1"}]


def test_user_env_wins_over_jobtype_env_but_not_over_phalanx_variables() -> None:
    env = {"MASTER_PORT": "1234", "LR": "0.1"}
    job, jobtype = make_job("pytorch", {"master": {"template": template(env=env)}})
    rendered = env_of(render_pod(job, jobtype, "master", 0, 0))
    assert (rendered["MASTER_PORT"], rendered["LR"]) == ("1234", "0.1")
    assert rendered["PHALANX_RANK"] == "0"


def test_bad_replicas_and_overlong_names_are_refused(pytorch: tuple[TrainingJob, JobType]) -> None:
    job, jobtype = pytorch
    with pytest.raises(RenderError, match=r"no replica worker\[2\]"):
        render_pod(job, jobtype, "worker", 2, 0)
    with pytest.raises(RenderError, match="no replica chief"):
        render_pod(job, jobtype, "chief", 0, 0)
    long_job, _ = make_job("pytorch", {"worker": {"template": template()}}, name="j" * 60)
    with pytest.raises(RenderError, match=r"shorten metadata\.name"):
        render_pod(long_job, jobtype, "worker", 0, 0)


def test_requests_are_the_reservation_and_limits_the_ceiling() -> None:
    resources = {"cpu": 2, "memory": "4Gi", "gpu": 1, "limits": {"cpu": "4", "memory": "8Gi"}}
    job, jobtype = make_job("pytorch", {"master": {"template": template(resources=resources)}})
    [container] = render_pod(job, jobtype, "master", 0, 0)["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": str(4 * 1024**3), "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4", "memory": str(8 * 1024**3), "nvidia.com/gpu": "1"},
    }


def test_a_ceiling_of_memory_only_keeps_the_cpu_limit_at_its_request() -> None:
    resources = {"cpu": "500m", "memory": "1Gi", "limits": {"memory": "2Gi"}}
    job, jobtype = make_job("pytorch", {"master": {"template": template(resources=resources)}})
    [container] = render_pod(job, jobtype, "master", 0, 0)["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": str(1024**3)}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": str(2 * 1024**3)}
