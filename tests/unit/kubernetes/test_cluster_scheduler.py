"""Jobs placed by the cluster's own scheduler (``spec.scheduling.schedulerName``; ``core.delegation``).

Who places a job, the planner admitting it at once with placements on no node, its Pods naming the scheduler and
the job's PodGroup, the PodGroup's ``minCount``, the fields only phalanx-scheduler honours refused with their
paths, and the embedded runtime refusing the field.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from phalanx.adapters.kubernetes.rendering import (
    ANNOTATION_NODE,
    POD_GROUP_API_VERSION,
    RenderError,
    render_pod,
    render_pod_group,
)
from phalanx.core.delegation import CLUSTER_PLACED, conflicts, gang_min_count, placing_scheduler
from phalanx.core.reconcile import CreateReplica, ReconcileInput, plan
from phalanx.model.errors import SpecError
from phalanx.model.jobs import Phase, TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.validation import validate_job
from phalanx.services.kubernetes.apply import PodSettings, check_renderable, render_creates
from phalanx.services.operations import Operations
from support.memory_backend import MemoryBackend

JOBTYPES = builtin_jobtypes()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "0b5e6f3c-1111-2222-3333-444455556666"


def raw_job(scheduling: dict[str, Any] | None = None, *, workers: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "gang", "namespace": "team-a"},
        "spec": {
            "type": "generic",
            "replicas": {"worker": {"count": workers, "template": {"image": "example.org/t:1", "command": ["t"]}}},
            "scheduling": scheduling or {},
            **spec,
        },
    }


def make(scheduling: dict[str, Any] | None = None, **kwargs: Any) -> TrainingJob:
    job = validate_job(raw_job(scheduling, **kwargs), JOBTYPES)
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": UID})})


@pytest.mark.parametrize(
    ("named", "default", "placed_by"),
    [
        pytest.param(None, None, None, id="nothing-named:phalanx"),
        pytest.param("default-scheduler", None, "default-scheduler", id="named"),
        pytest.param(None, "default-scheduler", "default-scheduler", id="cluster-default"),
        pytest.param("phalanx-scheduler", "default-scheduler", None, id="phalanx-named-over-default"),
        pytest.param("gang.example.org", "default-scheduler", "gang.example.org", id="named-over-default"),
    ],
)
def test_who_places_a_job(named: str | None, default: str | None, placed_by: str | None) -> None:
    job = make({"schedulerName": named} if named else None)
    assert placing_scheduler(job, own="phalanx-scheduler", default=default) == placed_by


@pytest.mark.parametrize("name", ["Default_Scheduler", "-x", "a..b", "x" * 254, ""])
def test_a_scheduler_name_must_be_a_dns_subdomain(name: str) -> None:
    with pytest.raises(SpecError) as caught:
        validate_job(raw_job({"schedulerName": name}), JOBTYPES)
    assert caught.value.errors[0].path == "spec.scheduling.schedulerName"


@pytest.mark.parametrize(("min_available", "expected"), [(None, 3), (2, 2), (3, 3)])
def test_the_gang_is_every_replica_or_min_available(min_available: int | None, expected: int) -> None:
    job = make({"schedulerName": "default-scheduler", "minAvailable": min_available})
    assert gang_min_count(job) == expected
    assert render_pod_group(job)["spec"] == {"schedulingPolicy": {"gang": {"minCount": expected}}}


def test_the_planner_admits_a_cluster_placed_job_at_once_and_creates_every_pod() -> None:
    job = make({"schedulerName": "default-scheduler"})
    decided = plan(
        ReconcileInput(job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0, placed_by="default-scheduler")
    )
    assert decided.status.phase == Phase.DOWNLOADING
    reasons = [condition.reason for condition in decided.status.conditions]
    assert reasons == ["Accepted", "Delegated", "Staging"]
    assert set(decided.status.placements) == {"gang-worker-0", "gang-worker-1", "gang-worker-2"}
    assert {p.node for p in decided.status.placements.values()} == {CLUSTER_PLACED}
    assert decided.status.admitted_time == T0
    created = [a for a in decided.actions if isinstance(a, CreateReplica)]
    assert [(a.role, a.index) for a in created] == [("worker", 0), ("worker", 1), ("worker", 2)]


def test_without_a_cluster_scheduler_a_queued_job_waits_for_phalanx_scheduler() -> None:
    job = make()
    decided = plan(ReconcileInput(job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0))
    assert decided.status.phase == Phase.QUEUED
    assert not decided.actions


def test_cluster_placed_pods_name_the_scheduler_and_the_pod_group_and_no_node() -> None:
    job = make({"schedulerName": "default-scheduler"})
    settings = PodSettings()
    decided = plan(
        ReconcileInput(job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0, placed_by="default-scheduler")
    )
    admitted = job.model_copy(update={"status": decided.status})
    pods = render_creates(admitted, JOBTYPES["generic"], decided, settings)
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "gang"}
        assert "nodeName" not in pod["spec"]
        assert ANNOTATION_NODE not in pod["metadata"]["annotations"]


def test_a_cluster_placed_job_of_one_pod_is_not_created_bound() -> None:
    job = make({"schedulerName": "default-scheduler"}, workers=1)
    decided = plan(
        ReconcileInput(job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0, placed_by="default-scheduler")
    )
    admitted = job.model_copy(update={"status": decided.status})
    [pod] = render_creates(admitted, JOBTYPES["generic"], decided, PodSettings())
    assert "nodeName" not in pod["spec"]
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "gang"}


def test_the_cluster_default_applies_to_jobs_naming_no_scheduler() -> None:
    job = make()
    settings = PodSettings(job_scheduler="default-scheduler")
    decided = plan(
        ReconcileInput(
            job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0, placed_by=settings.placing_scheduler(job)
        )
    )
    pods = render_creates(job.model_copy(update={"status": decided.status}), JOBTYPES["generic"], decided, settings)
    assert {pod["spec"]["schedulerName"] for pod in pods} == {"default-scheduler"}


def test_phalanx_placed_pods_keep_phalanx_scheduler_and_no_group() -> None:
    job = make()
    pod = render_pod(job, JOBTYPES["generic"], "worker", 0, 0)
    assert pod["spec"]["schedulerName"] == "phalanx-scheduler"
    assert "schedulingGroup" not in pod["spec"]


def test_the_pod_group_is_owned_by_the_job() -> None:
    group = render_pod_group(make({"schedulerName": "default-scheduler"}))
    assert group["apiVersion"] == POD_GROUP_API_VERSION == "scheduling.k8s.io/v1alpha2"
    assert group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "gang"
    assert group["metadata"]["namespace"] == "team-a"
    [owner] = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", UID, True)


def test_a_placement_on_no_node_cannot_be_created_bound() -> None:
    job = make({"schedulerName": "default-scheduler"})
    decided = plan(ReconcileInput(job=job, jobtype=JOBTYPES["generic"], replicas=(), now=T0, placed_by="x"))
    placement = decided.status.placements["gang-worker-0"]
    with pytest.raises(RenderError, match="no placement on a node"):
        render_pod(job, JOBTYPES["generic"], "worker", 0, 0, placement=placement, bind=True)


@pytest.mark.parametrize(
    ("scheduling", "spec", "path"),
    [
        pytest.param({"queue": "team-a"}, {}, "spec.scheduling.queue", id="queue"),
        pytest.param({"priorityClass": "high"}, {}, "spec.scheduling.priorityClass", id="priority-class"),
        pytest.param({"priority": 5}, {}, "spec.scheduling.priority", id="priority"),
        pytest.param({"placement": "spread"}, {}, "spec.scheduling.placement", id="placement"),
        pytest.param({"topology": "required"}, {}, "spec.scheduling.topology", id="topology"),
        pytest.param({"gpuModel": "H100"}, {}, "spec.scheduling.gpuModel", id="gpu-model"),
        pytest.param(
            {},
            {
                "replicas": {
                    "worker": {"count": 2, "template": {"image": "i", "command": ["t"], "resources": {"gpuMilli": 500}}}
                }
            },
            "spec.replicas.worker.template.resources.gpuMilli",
            id="gpu-share",
        ),
        pytest.param({}, {"datasets": [{"name": "d", "dataset": "d"}]}, "spec.datasets", id="datasets"),
    ],
)
def test_fields_only_phalanx_scheduler_honours_are_refused_with_their_path(
    scheduling: dict[str, Any], spec: dict[str, Any], path: str
) -> None:
    job = make({"schedulerName": "default-scheduler", **scheduling}, **spec)
    [error] = conflicts(job, "default-scheduler")
    assert error.path == path
    assert "default-scheduler" in error.message
    with pytest.raises(RenderError, match=path.replace(".", r"\.")):
        check_renderable(job, JOBTYPES["generic"], PodSettings())
    # The same job is fine for phalanx-scheduler.
    check_renderable(job.model_copy(update={"spec": replace_scheduler(job, None)}), JOBTYPES["generic"], PodSettings())


def replace_scheduler(job: TrainingJob, name: str | None) -> Any:
    return job.spec.model_copy(update={"scheduling": job.spec.scheduling.model_copy(update={"scheduler_name": name})})


def test_the_embedded_runtime_refuses_a_scheduler_name_with_its_path() -> None:
    ops = Operations(MemoryBackend())
    with pytest.raises(SpecError) as caught:
        ops.validate([raw_job({"schedulerName": "default-scheduler"})])
    [error] = caught.value.errors
    assert error.path == "spec.scheduling.schedulerName"
    assert "remove schedulerName" in error.message
    ops.validate([raw_job()])  # without it, accepted


def cluster_backend() -> MemoryBackend:
    backend = MemoryBackend()
    backend.cluster_scheduling = True
    backend.own_scheduler = "phalanx-scheduler"
    return backend


def test_submit_on_a_cluster_refuses_what_the_named_scheduler_cannot_honour_before_creating_anything() -> None:
    # Before, the job was created and failed later, when the operator rendered its Pods.
    ops = Operations(cluster_backend())
    named = {"schedulerName": "default-scheduler", "queue": "team-a", "placement": "spread"}
    with pytest.raises(SpecError) as caught:
        ops.validate([raw_job(named)])
    paths = {error.path: error.message for error in caught.value.errors}
    assert set(paths) == {"spec.scheduling.queue", "spec.scheduling.placement"}
    assert "placed by 'default-scheduler'" in paths["spec.scheduling.queue"]
    # The same fields with Phalanx's own scheduler named (or none) are Phalanx's to honour.
    ops.validate([raw_job({**named, "schedulerName": "phalanx-scheduler"})])
    ops.validate([raw_job({"queue": "team-a", "placement": "spread"})])
    ops.validate([raw_job({"schedulerName": "default-scheduler"})])


def test_reconcile_input_defaults_to_phalanx_placing() -> None:
    job = make()
    assert replace(ReconcileInput(job=job, jobtype=None, replicas=(), now=T0)).placed_by is None


def test_the_install_gives_the_operator_and_the_scheduler_the_same_default() -> None:
    from phalanx.adapters.kubernetes.manifests import InstallParameters, cluster_rules, install_manifests

    documents = install_manifests(InstallParameters(image="x:1", default_job_scheduler="default-scheduler"))
    workloads = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}
    for name in ("phalanx-operator", "phalanx-scheduler"):
        [container] = workloads[name]["spec"]["template"]["spec"]["containers"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert env["PHALANX_DEFAULT_JOB_SCHEDULER"] == "default-scheduler", name
    rules = cluster_rules()["phalanx-operator"]
    assert {
        "apiGroups": ["scheduling.k8s.io"],
        "resources": ["podgroups"],
        "verbs": ["create", "get", "delete"],
    } in rules


def test_the_install_refuses_a_default_that_is_no_scheduler_name() -> None:
    from phalanx.services.kubernetes.install import InstallRequest, render_install

    with pytest.raises(ValueError, match="--default-job-scheduler 'Kube Scheduler' is not a DNS-1123 subdomain"):
        render_install(InstallRequest(image="x:1", default_job_scheduler="Kube Scheduler"))


@pytest.mark.parametrize("component", ["operator", "scheduler"])
def test_the_components_read_the_default_from_a_flag_or_the_environment(
    component: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    module = importlib.import_module(f"phalanx.entrypoints.kubernetes.{component}")
    monkeypatch.delenv("PHALANX_DEFAULT_JOB_SCHEDULER", raising=False)
    assert module.build_parser().parse_args([]).default_job_scheduler is None
    parsed = module.build_parser().parse_args(["--default-job-scheduler", "default-scheduler"])
    assert parsed.default_job_scheduler == "default-scheduler"
    monkeypatch.setenv("PHALANX_DEFAULT_JOB_SCHEDULER", "gang.example.org")
    assert module.build_parser().parse_args([]).default_job_scheduler == "gang.example.org"
    with pytest.raises(SystemExit) as exited:
        module.build_parser().parse_args(["--default-job-scheduler", "Bad_Name"])
    assert exited.value.code == 2
    assert "not a DNS-1123 subdomain" in capsys.readouterr().err


# -- the operator's PodGroup, on the in-memory API ---------------------------------------------------------------


def _operator(api: Any) -> Any:
    from unit.kubernetes.test_operator_loop import Harness

    return Harness(api)


def _spec(workers: int = 2) -> dict[str, Any]:
    return raw_job({"schedulerName": "default-scheduler"}, workers=workers)["spec"]


def test_the_operator_creates_the_pod_group_before_the_pods_and_admits_without_phalanx_scheduler() -> None:
    from phalanx.adapters.kubernetes.api import PODGROUPS, PODS, TRAININGJOBS
    from support.memory_kube_api import MemoryKubeApi

    api = MemoryKubeApi()
    harness = _operator(api)
    harness.submit("gang", _spec())
    harness.sync()
    writes = [(call.verb, call.plural) for call in api.writes if call.plural in ("podgroups", "pods")]
    assert writes == [("create", "podgroups"), ("create", "pods"), ("create", "pods")]
    [group] = api.of(PODGROUPS, "team-a")
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert {pod["spec"]["schedulerName"] for pod in api.of(PODS, "team-a")} == {"default-scheduler"}
    job = api.get(TRAININGJOBS, "gang", "team-a")
    assert job["status"]["phase"] in ("Admitted", "Downloading")
    assert [c["reason"] for c in job["status"]["conditions"]][:2] == ["Accepted", "Delegated"]


def test_a_cluster_without_pod_groups_fails_the_job_and_creates_no_pod() -> None:
    from phalanx.adapters.kubernetes.api import PODS, TRAININGJOBS
    from support.memory_kube_api import MemoryKubeApi

    api = MemoryKubeApi(unserved=["scheduling.k8s.io"])
    harness = _operator(api)
    harness.submit("gang", _spec())
    harness.sync()
    harness.sync()
    assert api.of(PODS, "team-a") == []
    status = api.get(TRAININGJOBS, "gang", "team-a")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "PodGroupUnavailable")
    assert status["message"].startswith("spec.scheduling.schedulerName: the job's Pods are left to 'default-scheduler'")


def test_a_pod_group_left_by_an_earlier_job_of_the_name_is_replaced() -> None:
    from phalanx.adapters.kubernetes.api import PODGROUPS, PODS
    from support.memory_kube_api import MemoryKubeApi

    api = MemoryKubeApi()
    stale = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": "gang",
            "namespace": "team-a",
            "ownerReferences": [
                {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "name": "gang", "uid": "old"}
            ],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
    }
    api.put(PODGROUPS, stale)
    harness = _operator(api)
    created = harness.submit("gang", _spec())
    harness.sync()  # finds the stale group, deletes it, creates no Pod yet
    assert api.of(PODS, "team-a") == []
    harness.operator.mark_all()
    harness.sync()
    [group] = api.of(PODGROUPS, "team-a")
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    assert len(api.of(PODS, "team-a")) == 2


@pytest.mark.parametrize(
    ("named", "default", "admitted"),
    [
        pytest.param("default-scheduler", None, False, id="named"),
        pytest.param(None, "default-scheduler", False, id="cluster-default"),
        pytest.param("phalanx-scheduler", "default-scheduler", True, id="phalanx-named"),
        pytest.param(None, None, True, id="nothing-named"),
    ],
)
def test_phalanx_scheduler_leaves_jobs_of_the_cluster_scheduler_alone(
    named: str | None, default: str | None, admitted: bool
) -> None:
    from phalanx.adapters.kubernetes.api import TRAININGJOBS
    from phalanx.services.kubernetes.scheduler import KubeScheduler, SchedulerSettings
    from support.memory_kube_api import MemoryKubeApi

    api = MemoryKubeApi()
    scheduler = KubeScheduler(api, SchedulerSettings(workers=1, job_scheduler=default))
    scheduler.nodes.observe(
        {
            "metadata": {"name": "gpu-0", "labels": {}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}},
        }
    )
    body = raw_job({"schedulerName": named} if named else None, workers=2)
    body["metadata"].update(uid="u-1", generation=1)
    scheduler.jobs.observe(api.put(TRAININGJOBS, body))
    result = scheduler.cycle()
    scheduler.flush()
    assert result.admitted == (["team-a/gang"] if admitted else [])
    assert result.waiting == {}
    if not admitted:
        assert api.writes_to(TRAININGJOBS.plural) == []  # not even a why-waiting


def test_the_operator_fails_a_cluster_placed_job_asking_for_a_queue_before_any_pod() -> None:
    from phalanx.adapters.kubernetes.api import PODGROUPS, PODS, TRAININGJOBS
    from support.memory_kube_api import MemoryKubeApi

    api = MemoryKubeApi()
    harness = _operator(api)
    harness.submit("gang", raw_job({"schedulerName": "default-scheduler", "queue": "team-a"})["spec"])
    harness.sync()
    status = api.get(TRAININGJOBS, "gang", "team-a")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.scheduling.queue: the job's Pods are placed by 'default-scheduler'" in status["message"]
    assert api.of(PODS, "team-a") == [] and api.of(PODGROUPS, "team-a") == []
