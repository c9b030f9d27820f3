"""The kubernetes backend's operations against an in-memory API: what is created, patched and said."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from phalanx.adapters.kubernetes.api import (
    EVENTS,
    JOBTYPES,
    KubeApiError,
    error_from,
)
from phalanx.adapters.kubernetes.crds import crd_kind, custom_resource_definition
from phalanx.adapters.kubernetes.objects import event_from_object, job_body, replica_from_pod
from phalanx.adapters.kubernetes.structural import validate_value
from phalanx.core.clock import VirtualClock
from phalanx.entrypoints.cli.cluster import print_logs
from phalanx.model.base import API_GROUP
from phalanx.model.errors import SpecError
from phalanx.model.loading import parse_documents
from phalanx.services.kubernetes.operations import DELETE_WAIT_SECONDS, NOT_INSTALLED, KubeOperations
from phalanx.services.operations import OperationError
from support.memory_kube_api import Call, MemoryKubeApi

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def api() -> MemoryKubeApi:
    return MemoryKubeApi()


def quickstart(**changes: Any) -> dict[str, Any]:
    document = parse_documents((REPO / "examples" / "quickstart.yaml").read_text())[0]
    document["metadata"].update(changes)
    return document


def stored_job(api: MemoryKubeApi, phase: str = "Running", **status: Any) -> dict[str, Any]:
    ops = KubeOperations(api)
    ops.submit([quickstart()])
    obj = api.objects[("trainingjobs", "default", "quickstart")]
    obj["status"] = {"phase": phase, **status}
    return obj


def creates(api: MemoryKubeApi) -> list[Call]:
    return [call for call in api.calls if call.verb == "create"]


def patches(api: MemoryKubeApi) -> list[Any]:
    return [call.body for call in api.writes if call.verb == "patch"]


def requests(api: MemoryKubeApi) -> list[tuple[str, str, str | None]]:
    return [(call.verb, call.plural, call.namespace) for call in api.calls]


# -- submitting ------------------------------------------------------------------------------------------------------


def test_a_spec_error_creates_nothing_and_names_the_field(api: MemoryKubeApi) -> None:
    bad = quickstart()
    bad["spec"]["replicas"]["worker"]["count"] = 0
    jobtype = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "JobType", "metadata": {"name": "mine"}, "spec": {}}
    with pytest.raises(SpecError) as caught:
        KubeOperations(api).submit([jobtype, bad], source="job.yaml")
    assert "spec.replicas.worker.count" in [e.path for e in caught.value.errors]
    assert creates(api) == []


def test_the_job_is_created_defaulted_and_acceptable_to_the_crd(api: MemoryKubeApi) -> None:
    submitted = KubeOperations(api).submit([quickstart()], namespace="team-a")
    assert [(s.kind, s.namespace, s.name) for s in submitted] == [("TrainingJob", "team-a", "quickstart")]
    body = api.objects[("trainingjobs", "team-a", "quickstart")]
    assert body["spec"]["runPolicy"]["backoffLimit"] == 2
    assert "status" not in body
    schema = custom_resource_definition(crd_kind("TrainingJob"))["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    body = {k: v for k, v in body.items() if k != "metadata"}
    assert validate_value(body, schema) == []


def test_the_sim_and_template_annotations_reach_the_cluster() -> None:
    from phalanx.model.loading import builtin_jobtypes
    from phalanx.model.validation import validate_job

    document = quickstart(annotations={"phalanx.dev/sim-duration-ms": "300"})
    document["spec"]["replicas"]["worker"]["template"]["metadata"] = {"annotations": {"a": "b"}}
    body = job_body(validate_job(document, builtin_jobtypes()))
    assert body["metadata"] == {
        "name": "quickstart",
        "namespace": "default",
        "annotations": {"phalanx.dev/sim-duration-ms": "300"},
    }
    assert body["spec"]["replicas"]["worker"]["template"]["metadata"]["annotations"] == {"a": "b"}


def test_jobtypes_are_created_before_the_jobs_that_use_them(api: MemoryKubeApi) -> None:
    jobtype = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "JobType",
        "metadata": {"name": "solo"},
        "spec": {"roles": {"main": {"minCount": 1, "maxCount": 1}}},
    }
    job = {"kind": "TrainingJob", "metadata": {"name": "uses-solo"}, "spec": {"type": "solo", "replicas": {}}}
    job["spec"]["replicas"] = {"main": {"template": {"command": ["python", "x.py"]}}}
    KubeOperations(api).submit([jobtype, job])
    assert [c[1] for c in creates(api)] == ["jobtypes", "trainingjobs"]
    assert "namespace" not in api.objects[("jobtypes", None, "solo")]["metadata"]


def test_a_job_in_the_way_creates_nothing_and_says_how_to_delete_it(api: MemoryKubeApi) -> None:
    stored_job(api, "Succeeded")
    api.calls.clear()
    jobtype = {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "JobType",
        "metadata": {"name": "other"},
        "spec": {"roles": {"main": {}}},
    }
    with pytest.raises(OperationError, match=r"trainingjob default/quickstart already exists \(it is Succeeded\); "):
        KubeOperations(api).submit([jobtype, quickstart()])
    assert creates(api) == []
    with pytest.raises(OperationError, match="`phalanx delete job quickstart -n team-a`"):
        api.objects[("trainingjobs", "team-a", "quickstart")] = api.objects[("trainingjobs", "default", "quickstart")]
        KubeOperations(api).submit([quickstart()], namespace="team-a")


def test_run_replaces_a_finished_job_but_never_an_active_one(api: MemoryKubeApi) -> None:
    stored_job(api, "Failed")
    submitted = KubeOperations(api, poll_seconds=0).submit([quickstart()], replace_finished=True)
    assert submitted[0].replaced
    assert "status" not in api.objects[("trainingjobs", "default", "quickstart")]
    api.objects[("trainingjobs", "default", "quickstart")]["status"] = {"phase": "Halted"}
    with pytest.raises(OperationError, match="it is Halted"):
        KubeOperations(api).submit([quickstart()], replace_finished=True)


def test_a_finished_job_that_never_goes_away_is_reported_after_the_wait_on_the_injected_clock(
    api: MemoryKubeApi,
) -> None:
    stored_job(api, "Failed")
    api.delete = lambda *_, **__: None  # type: ignore[method-assign]  # a finalizer that never clears
    clock = VirtualClock()
    with pytest.raises(OperationError, match="job default/quickstart is still being deleted"):
        KubeOperations(api, clock=clock).submit([quickstart()], replace_finished=True)
    assert DELETE_WAIT_SECONDS <= clock.monotonic() < DELETE_WAIT_SECONDS + 1, "it polled on the clock it was given"


# -- errors ----------------------------------------------------------------------------------------------------------


def test_a_cluster_without_phalanx_says_how_to_install_it() -> None:
    api = MemoryKubeApi(unserved={API_GROUP})
    ops = KubeOperations(api)
    for call in (
        lambda: ops.get_job("default", "x"),
        lambda: ops.list_jobs("default"),
        lambda: ops.submit([quickstart()]),
    ):
        with pytest.raises(OperationError) as caught:
            call()
        assert str(caught.value) == NOT_INSTALLED
    assert NOT_INSTALLED.endswith("phalanx install --print | kubectl apply -f -")


def test_forbidden_names_the_verb_and_the_resource(api: MemoryKubeApi) -> None:
    api.fail["list"] = [error_from(403, {"reason": "Forbidden", "message": "User alice cannot list"})]
    with pytest.raises(OperationError, match=r"^forbidden: you may not list trainingjobs.phalanx.dev in namespace ml "):
        KubeOperations(api).list_jobs("ml")


def test_an_unreachable_server_is_named() -> None:
    api = MemoryKubeApi()
    api.fail["get"] = [KubeApiError(0, "Unreachable", "GET /x: connection refused")]
    with pytest.raises(OperationError, match=r"^cannot reach the Kubernetes API server at https://k:6443: GET"):
        KubeOperations(api, server="https://k:6443").get_job("default", "x")


def test_a_missing_job_names_the_existing_ones(api: MemoryKubeApi) -> None:
    stored_job(api)
    with pytest.raises(OperationError, match=r"^job default/other not found; jobs in default: quickstart$"):
        KubeOperations(api).get_job("default", "other")


# -- halt, resume, delete --------------------------------------------------------------------------------------------


def test_halt_is_a_merge_patch_of_suspend_on_the_version_read(api: MemoryKubeApi) -> None:
    obj = stored_job(api)
    version = obj["metadata"]["resourceVersion"]
    halted = KubeOperations(api).set_suspended("default", "quickstart", True)
    assert halted.spec.run_policy.suspend is True
    assert patches(api) == [{"metadata": {"resourceVersion": version}, "spec": {"runPolicy": {"suspend": True}}}]
    KubeOperations(api).set_suspended("default", "quickstart", True)  # already: nothing to write
    assert len(patches(api)) == 1


def test_halt_retries_when_the_job_changed_meanwhile(api: MemoryKubeApi) -> None:
    stored_job(api)
    api.fail["patch"] = [error_from(409, {"reason": "Conflict", "message": "modified"})]
    assert KubeOperations(api).set_suspended("default", "quickstart", True).spec.run_policy.suspend


def test_a_finished_job_cannot_be_halted_or_resumed(api: MemoryKubeApi) -> None:
    stored_job(api, "Succeeded")
    with pytest.raises(OperationError, match=r"^job default/quickstart is Succeeded; it cannot be halted or resumed$"):
        KubeOperations(api).set_suspended("default", "quickstart", False)


def test_delete_removes_the_job(api: MemoryKubeApi) -> None:
    stored_job(api)
    KubeOperations(api).delete_job("default", "quickstart")
    assert ("trainingjobs", "default", "quickstart") not in api.objects
    with pytest.raises(OperationError, match="not found"):
        KubeOperations(api).delete_job("default", "quickstart")


# -- reading ---------------------------------------------------------------------------------------------------------


def pod(name: str, job_uid: str, **status: Any) -> dict[str, Any]:
    role, index = name.split("-")[-2:]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"pod-{name}",
            "labels": {
                "phalanx.dev/job": "quickstart",
                "phalanx.dev/role": role,
                "phalanx.dev/replica-index": index,
                "phalanx.dev/attempt": "1",
            },
            "annotations": {"phalanx.dev/job-uid": job_uid},
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "replica", "command": ["python", "t.py"]}]},
        "status": status,
    }


def test_pods_are_replicas_with_their_node_and_exit_code(api: MemoryKubeApi) -> None:
    obj = stored_job(api)
    uid = obj["metadata"]["uid"]
    finished = {
        "phase": "Failed",
        "startTime": "2026-01-01T00:00:01Z",
        "containerStatuses": [{"name": "replica", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
    }
    api.objects[("pods", "default", "quickstart-worker-0")] = pod("quickstart-worker-0", uid, **finished)
    api.objects[("pods", "default", "quickstart-master-0")] = pod("quickstart-master-0", uid, phase="Running")
    api.objects[("pods", "default", "quickstart-old-0")] = pod("quickstart-old-0", "an-earlier-job", phase="Running")
    described = KubeOperations(api).describe("default", "quickstart")
    rows = [
        (r.metadata.name, r.status.phase, r.spec.attempt, r.spec.placement.node, r.status.exit_code)
        for r in described.replicas
    ]
    assert rows == [
        ("quickstart-master-0", "Running", 1, "gpu-1", None),
        ("quickstart-worker-0", "Failed", 1, "gpu-1", 3),
    ]
    assert ("list", EVENTS.plural, "default") in requests(api)


def test_logs_are_the_pods_latest_attempt_by_replica(api: MemoryKubeApi) -> None:
    obj = stored_job(api)
    uid = obj["metadata"]["uid"]
    api.objects[("pods", "default", "quickstart-worker-0")] = pod("quickstart-worker-0", uid, phase="Running")
    api.logs_text["quickstart-worker-0"] = "epoch 1\n"
    logs = KubeOperations(api).logs("default", "quickstart")
    assert [(log.replica, log.attempt, log.text, log.error) for log in logs] == [("worker-0", 1, "epoch 1\n", "")]
    with pytest.raises(OperationError, match="replica 'master-0' of job quickstart has no Pod yet"):
        KubeOperations(api).logs("default", "quickstart", "master-0")
    api.fail["logs"] = [error_from(500, {"message": "dial tcp: no such host"})]
    (log,) = KubeOperations(api).logs("default", "quickstart", "quickstart-worker-0")
    assert log.error == "the log of pod quickstart-worker-0 cannot be read: dial tcp: no such host"


def test_a_pod_that_printed_nothing_is_named_with_a_note_by_phalanx_logs(
    api: MemoryKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    uid = stored_job(api)["metadata"]["uid"]
    for name, phase in (("quickstart-master-0", "Running"), ("quickstart-worker-0", "Running")):
        api.objects[("pods", "default", name)] = pod(name, uid, phase=phase)
    api.logs_text["quickstart-master-0"] = "epoch 1\n"
    cluster = SimpleNamespace(ops=KubeOperations(api), namespace="default")
    logs = cluster.ops.logs("default", "quickstart")
    assert [(log.replica, log.text) for log in logs] == [("master-0", "epoch 1\n"), ("worker-0", "")]

    assert print_logs(cluster, "quickstart", None, follow_logs=False) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out == "  master-0 | epoch 1\n", "stdout stays the replicas' own output"
    assert err == "note: worker-0 has printed nothing yet\n"

    api.objects[("pods", "default", "quickstart-worker-0")]["status"]["phase"] = "Succeeded"
    assert print_logs(cluster, "quickstart", "worker-0", follow_logs=False) == 0  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "note: worker-0 printed nothing\n")


def test_logs_follow_names_a_pod_that_printed_nothing_once_the_job_ended(
    api: MemoryKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """`phalanx logs -f` on a cluster leaves out no silent replica either, with or without --replica."""
    uid = stored_job(api, "Succeeded")["metadata"]["uid"]
    for name in ("quickstart-master-0", "quickstart-worker-0"):
        api.objects[("pods", "default", name)] = pod(name, uid, phase="Succeeded")
    api.logs_text["quickstart-master-0"] = "epoch 1\n"
    cluster = SimpleNamespace(ops=KubeOperations(api), namespace="default", poll_seconds=0.01)

    assert print_logs(cluster, "quickstart", None, follow_logs=True) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert "master-0 | epoch 1" in out and "worker-0" not in out, out
    assert err == "note: worker-0 printed nothing\n"
    assert print_logs(cluster, "quickstart", "worker-0", follow_logs=True) == 0  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "note: worker-0 printed nothing\n")


def test_logs_of_a_job_without_pods_say_why_they_are_empty(
    api: MemoryKubeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    stored_job(api, "Queued")
    cluster = SimpleNamespace(ops=KubeOperations(api), namespace="default", poll_seconds=0.01)
    assert print_logs(cluster, "quickstart", None, follow_logs=False) == 0  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "note: no replica of job quickstart has started yet (it is Queued)\n")
    with pytest.raises(OperationError, match="job quickstart has no replica 'worker-9'; its replicas: "):
        KubeOperations(api).logs("default", "quickstart", "worker-9")


def test_explain_says_why_a_job_waits(api: MemoryKubeApi) -> None:
    stored_job(api, "Queued", reason="Waiting", message="a replica needs 16 GPUs but no node has that many")
    ops = KubeOperations(api)
    assert ops.explain("default", "quickstart") == "Queued: a replica needs 16 GPUs but no node has that many"
    api.objects[("trainingjobs", "default", "quickstart")]["status"] = {}
    assert ops.explain("default", "quickstart").startswith("Pending: accepted, waiting for the phalanx-operator")


def test_cluster_jobtypes_join_the_builtins_and_an_invalid_one_is_left_out(api: MemoryKubeApi) -> None:
    api.objects[("jobtypes", None, "solo")] = {"metadata": {"name": "solo"}, "spec": {"roles": {"main": {}}}}
    api.objects[("jobtypes", None, "broken")] = {"metadata": {"name": "broken"}, "spec": {"roles": "nope"}}
    names = set(KubeOperations(api).jobtypes())
    assert {"pytorch", "generic", "solo"} <= names
    assert "broken" not in names
    assert ("list", JOBTYPES.plural, None) in requests(api)


def test_an_event_reads_as_the_models_event() -> None:
    event = event_from_object(
        {
            "involvedObject": {"kind": "TrainingJob", "name": "j", "namespace": "ml", "uid": "u"},
            "reason": "Waiting",
            "message": "no room",
            "type": "Normal",
            "count": 3,
            "lastTimestamp": "2026-01-01T00:00:05Z",
        }
    )
    assert (event.object_name, event.namespace, event.reason, event.message) == ("j", "ml", "Waiting", "no room (x3)")
    assert event.time.isoformat() == "2026-01-01T00:00:05+00:00"


def test_a_pod_without_a_placement_or_node_still_reads() -> None:
    from phalanx.model.loading import builtin_jobtypes
    from phalanx.model.validation import validate_job

    job = validate_job(quickstart(), builtin_jobtypes())
    bare = pod("quickstart-worker-0", "u")
    bare["spec"].pop("nodeName")
    replica = replica_from_pod(bare, job)
    assert (replica.spec.placement.node, replica.status.phase) == ("-", "Pending")


def test_a_job_reading_a_dataset_that_exists_nowhere_creates_nothing(api: MemoryKubeApi) -> None:
    document = quickstart()
    document["spec"]["datasets"] = [{"name": "images"}]
    with pytest.raises(SpecError, match="dataset images does not exist in namespace default; create it first"):
        KubeOperations(api).submit([document])
    assert creates(api) == []


def test_configuring_a_queue_keeps_what_controllers_set_in_its_metadata(api: MemoryKubeApi) -> None:
    queue = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"}}
    KubeOperations(api).submit([{**queue, "spec": {"quota": {"gpu": 4}}}])
    stored = api.objects[("queues", None, "team-a")]
    stored["metadata"]["finalizers"] = ["example.com/keep"]
    (submitted,) = KubeOperations(api).submit([{**queue, "spec": {"quota": {"gpu": 8}}}])
    assert submitted.configured
    stored = api.objects[("queues", None, "team-a")]
    assert (stored["spec"]["quota"]["gpu"], stored["metadata"]["finalizers"]) == (8, ["example.com/keep"])
