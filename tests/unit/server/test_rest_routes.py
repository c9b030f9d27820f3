"""The REST routes over the in-memory backend: what each verb stores and answers, and every refusal as a Status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from phalanx.entrypoints.server.access import Access, Refusal
from phalanx.entrypoints.server.app import create_app
from phalanx.model.jobs import TrainingJob
from support.memory_backend import MemoryBackend

API = "/apis/phalanx.dev/v1alpha1"
JOBS = f"{API}/namespaces/default/trainingjobs"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def job(name: str = "train", **metadata: Any) -> dict[str, Any]:
    template = {"command": ["python", "train.py"], "resources": {"cpu": 1, "memory": "64Mi"}}
    return {
        "apiVersion": "phalanx.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, **metadata},
        "spec": {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}},
    }


def queue(name: str = "team-a") -> dict[str, Any]:
    return {"kind": "Queue", "metadata": {"name": name}, "spec": {"quota": {"gpu": 4}}}


def dataset(name: str = "images") -> dict[str, Any]:
    return {"kind": "Dataset", "metadata": {"name": name}, "spec": {"source": {"url": "file:///data/images"}}}


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def client(backend: MemoryBackend) -> TestClient:
    return TestClient(create_app(backend))


def assert_status(response: Any, code: int, reason: str, *words: str) -> dict[str, Any]:
    """The response is a Kubernetes Status of ``code`` and ``reason`` whose message holds every word."""
    body: dict[str, Any] = response.json()
    assert response.status_code == code, body
    assert (body["kind"], body["status"], body["code"], body["reason"]) == ("Status", "Failure", code, reason)
    for word in words:
        assert word in body["message"], body["message"]
    return body


def test_a_job_created_is_read_back_listed_and_deleted(client: TestClient, backend: MemoryBackend) -> None:
    created = client.post(JOBS, json=job("train"))
    assert created.status_code == 201, created.json()
    assert created.json()["metadata"]["uid"] and created.json()["kind"] == "TrainingJob"
    assert backend.get(TrainingJob, "default", "train") is not None

    got = client.get(f"{JOBS}/train")
    assert got.status_code == 200 and got.json()["metadata"]["name"] == "train"
    assert got.json()["spec"]["replicas"]["worker"]["count"] == 1
    listed = client.get(JOBS).json()
    assert (listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == ("TrainingJobList", ["train"])

    deleted = client.delete(f"{JOBS}/train")
    assert deleted.status_code == 200 and deleted.json()["metadata"]["name"] == "train"
    assert backend.get(TrainingJob, "default", "train") is None
    assert_status(client.get(f"{JOBS}/train"), 404, "NotFound", "default/train not found")


def test_a_job_posted_without_kind_or_namespace_takes_the_paths(client: TestClient, backend: MemoryBackend) -> None:
    document = job("bare")
    del document["kind"], document["apiVersion"]
    assert client.post(f"{API}/namespaces/ml/trainingjobs", json=document).status_code == 201
    assert backend.get(TrainingJob, "ml", "bare") is not None
    assert backend.get(TrainingJob, "default", "bare") is None


def test_a_bad_spec_is_422_naming_the_field_and_nothing_is_stored(client: TestClient, backend: MemoryBackend) -> None:
    document = job("broken")
    document["spec"]["replicas"]["worker"]["count"] = 0
    body = assert_status(client.post(JOBS, json=document), 422, "Invalid", "spec.replicas.worker.count")
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.replicas.worker.count"]
    assert body["details"]["name"] == "broken" and body["details"]["kind"] == "TrainingJob"
    assert backend.calls == []


def test_a_job_reading_a_missing_dataset_is_422_at_its_path(client: TestClient, backend: MemoryBackend) -> None:
    document = job("reader")
    document["spec"]["datasets"] = [{"name": "nowhere"}]
    body = assert_status(client.post(JOBS, json=document), 422, "Invalid", "nowhere")
    assert body["details"]["causes"][0]["field"] == "spec.datasets[0].name"
    assert backend.calls == []


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"kind": "Queue"}, "kind", "this path takes TrainingJobs"),
        ({"metadata": {"name": "x", "namespace": "other"}}, "metadata.namespace", "the path's namespace is default"),
    ],
    ids=["kind-of-another-path", "namespace-of-another-path"],
)
def test_a_document_at_odds_with_its_path_is_refused(
    client: TestClient, backend: MemoryBackend, change: dict[str, Any], field: str, words: str
) -> None:
    body = assert_status(client.post(JOBS, json=job("x") | change), 422, "Invalid", words)
    assert [c["field"] for c in body["details"]["causes"]] == [field]
    assert backend.calls == []


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
    ids=["not-json", "a-list", "nested-too-deep"],
)
def test_a_body_that_is_no_object_is_400(
    client: TestClient, backend: MemoryBackend, content: bytes, words: str
) -> None:
    response = client.post(JOBS, content=content, headers={"content-type": "application/json"})
    assert_status(response, 400, "BadRequest", words)
    assert backend.calls == []


def test_a_taken_name_is_409_for_jobs_and_for_kinds_submit_would_configure(client: TestClient) -> None:
    assert client.post(JOBS, json=job("train")).status_code == 201
    assert_status(client.post(JOBS, json=job("train")), 409, "AlreadyExists", "train already exists")
    assert client.post(f"{API}/queues", json=queue("team-a")).status_code == 201
    # `phalanx submit` would replace the Queue's spec (kubectl apply); a POST creates, as on Kubernetes.
    assert_status(client.post(f"{API}/queues", json=queue("team-a")), 409, "AlreadyExists", "queue team-a")


def test_cluster_scoped_kinds_have_no_namespace_segment(client: TestClient, backend: MemoryBackend) -> None:
    assert client.post(f"{API}/queues", json=queue("team-a")).status_code == 201
    assert client.get(f"{API}/queues/team-a").json()["spec"]["quota"]["gpu"] == 4
    assert [q["metadata"]["name"] for q in client.get(f"{API}/queues").json()["items"]] == ["team-a"]
    assert_status(client.get(f"{API}/namespaces/default/queues"), 404, "NotFound", "cluster-scoped", f"{API}/queues")
    with_namespace = queue("team-b") | {"metadata": {"name": "team-b", "namespace": "ml"}}
    body = assert_status(client.post(f"{API}/queues", json=with_namespace), 422, "Invalid", "cluster-scoped")
    assert body["details"]["causes"][0]["field"] == "metadata.namespace"
    assert client.delete(f"{API}/queues/team-a").status_code == 200
    assert_status(client.get(f"{API}/queues/team-a"), 404, "NotFound", "queue team-a not found")


def test_a_namespaced_kind_lists_every_namespace_without_one(client: TestClient) -> None:
    for namespace, name in (("ml", "b"), ("default", "a"), ("research", "c")):
        assert client.post(f"{API}/namespaces/{namespace}/trainingjobs", json=job(name)).status_code == 201
    listed = client.get(f"{API}/trainingjobs").json()["items"]
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed] == [
        ("default", "a"),
        ("ml", "b"),
        ("research", "c"),
    ]
    assert [i["metadata"]["name"] for i in client.get(f"{API}/namespaces/ml/trainingjobs").json()["items"]] == ["b"]
    assert_status(client.post(f"{API}/trainingjobs", json=job("d")), 404, "NotFound", "namespaced")


def test_an_unknown_resource_is_404_naming_the_known_ones(client: TestClient) -> None:
    for path in (f"{API}/namespaces/default/pytorchjobs", f"{API}/widgets", f"{API}/namespaces/default/jobs/x"):
        assert_status(client.get(path), 404, "NotFound", "trainingjobs, jobtypes, queues", "pipelineruns")
    assert_status(client.get("/elsewhere"), 404, "NotFound", "/apis/phalanx.dev/v1alpha1")


def test_a_missing_object_names_those_there_are(client: TestClient) -> None:
    client.post(JOBS, json=job("alpha"))
    assert_status(client.get(f"{JOBS}/alhpa"), 404, "NotFound", "jobs in default: alpha")
    assert_status(client.delete(f"{JOBS}/alhpa"), 404, "NotFound", "jobs in default: alpha")
    assert_status(client.get(f"{API}/namespaces/empty/trainingjobs/x"), 404, "NotFound", "empty has no trainingjobs")


def test_a_verb_a_path_does_not_take_is_405_saying_which_it_does(client: TestClient) -> None:
    assert_status(client.put(f"{JOBS}/train", json=job()), 405, "MethodNotAllowed", "use GET or DELETE")
    assert_status(client.delete(JOBS), 405, "MethodNotAllowed", "use GET or POST")
    assert_status(client.get(f"{JOBS}/train/logs"), 404, "NotFound", "have these subresources: events, replicas, log")


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (f"{API}/namespaces/Not_A_Label/trainingjobs", "namespace"),
        (f"{JOBS}/{'x' * 64}", "name"),
    ],
    ids=["namespace", "name"],
)
def test_a_path_segment_no_object_can_have_is_400(client: TestClient, path: str, words: str) -> None:
    assert_status(client.get(path), 400, "BadRequest", f"the path's {words}")


def test_a_dataset_read_by_an_unfinished_job_is_not_deleted(client: TestClient, backend: MemoryBackend) -> None:
    assert client.post(f"{API}/namespaces/default/datasets", json=dataset("images")).status_code == 201
    reader = job("reader")
    reader["spec"]["datasets"] = [{"name": "images"}]
    assert client.post(JOBS, json=reader).status_code == 201
    stored = backend.get(TrainingJob, "default", "reader")
    assert stored is not None
    backend.write_status(stored, {"phase": "Running"})
    body = assert_status(client.delete(f"{API}/namespaces/default/datasets/images"), 409, "Conflict", "reader")
    assert body["details"]["name"] == "images"
    assert client.get(f"{API}/namespaces/default/datasets/images").status_code == 200


def test_a_query_parameter_of_the_wrong_type_is_400_naming_it(client: TestClient) -> None:
    assert_status(client.get(f"{JOBS}?limit=many"), 400, "BadRequest", "limit", "'many'")
    assert_status(client.get(f"{JOBS}?limit=-1"), 400, "BadRequest", "limit")


def test_the_authorize_hook_sees_each_request_and_its_refusal_is_the_answer(backend: MemoryBackend) -> None:
    seen: list[Access] = []

    def authorize(access: Access) -> Refusal | None:
        seen.append(access)
        if access.token is None:
            return Refusal(401, "send a token")
        if access.verb != "get":
            return Refusal(403, f"a viewer cannot {access.verb} {access.kind}s in {access.namespace}")
        return None

    client = TestClient(create_app(backend, authorize=authorize))
    assert_status(client.get(f"{JOBS}/train"), 401, "Unauthorized", "send a token")
    bearer = {"Authorization": "Bearer phx_abc"}
    assert_status(client.post(JOBS, json=job(), headers=bearer), 403, "Forbidden", "cannot create TrainingJobs")
    assert backend.calls == []  # refused before the backend was touched
    assert_status(client.get(f"{JOBS}/train", headers=bearer), 404, "NotFound")  # allowed: then not found
    assert_status(client.get(f"{API}/queues", headers=bearer), 403, "Forbidden", "cannot list Queues in None")
    assert seen == [
        Access("get", "TrainingJob", "default", "train", None),
        Access("create", "TrainingJob", "default", None, "phx_abc"),
        Access("get", "TrainingJob", "default", "train", "phx_abc"),
        Access("list", "Queue", None, None, "phx_abc"),
    ]


def test_a_finished_job_shows_its_status(client: TestClient, backend: MemoryBackend) -> None:
    client.post(JOBS, json=job("done"))
    stored = backend.get(TrainingJob, "default", "done")
    assert stored is not None
    backend.write_status(stored, {"phase": "Succeeded"})
    assert client.get(f"{JOBS}/done").json()["status"]["phase"] == "Succeeded"


def test_a_deletion_still_under_way_is_202_with_the_object_as_it_is(
    client: TestClient, backend: MemoryBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.post(JOBS, json=job("stopping"))
    stored = backend.get(TrainingJob, "default", "stopping")
    assert stored is not None

    def mark_deleting(namespace: str, name: str) -> None:  # as the embedded runtime does while replicas stop
        backend.write_status(stored, {"message": "stopping replicas"})

    monkeypatch.setattr(backend, "delete_job", mark_deleting)
    response = client.delete(f"{JOBS}/stopping")
    assert response.status_code == 202
    assert response.json()["status"]["message"] == "stopping replicas"  # read after the deletion, not before


def test_a_document_that_becomes_another_kind_is_refused(client: TestClient, backend: MemoryBackend) -> None:
    compiled_kfp = {"pipelineInfo": {"name": "p"}, "root": {"dag": {"tasks": {}}}, "schemaVersion": "2.1.0"}
    body = assert_status(client.post(JOBS, json=compiled_kfp), 422, "Invalid", "becomes a Pipeline; post it to")
    assert body["details"]["causes"][0]["field"] == "kind"
    assert backend.calls == []


def test_a_compiled_kfp_pipeline_posted_to_pipelines_is_the_pipeline_it_becomes(
    client: TestClient, backend: MemoryBackend
) -> None:
    compiled = yaml.safe_load((EXAMPLES / "pipelines" / "kfp_v2_pipeline.yaml").read_text())
    response = client.post(f"{API}/namespaces/ml/pipelines", json=compiled)
    assert response.status_code == 201, response.json()
    assert (response.json()["kind"], response.json()["metadata"]["namespace"]) == ("Pipeline", "ml")
    name = response.json()["metadata"]["name"]
    assert client.get(f"{API}/namespaces/ml/pipelines/{name}").status_code == 200
    again = client.post(f"{API}/namespaces/ml/pipelines", json=compiled)
    assert_status(again, 409, "AlreadyExists", f"pipeline ml/{name} already exists")


def test_a_jobtype_is_cluster_scoped_and_jobs_can_name_it(client: TestClient, backend: MemoryBackend) -> None:
    jobtype = {"kind": "JobType", "metadata": {"name": "solo"}, "spec": {"roles": {"main": {}}}}
    assert client.post(f"{API}/jobtypes", json=jobtype).status_code == 201
    assert client.get(f"{API}/jobtypes/solo").json()["spec"]["roles"]["main"] is not None
    document = job("uses-solo")
    document["spec"]["type"] = "solo"
    document["spec"]["replicas"] = {"main": document["spec"]["replicas"]["worker"]}
    assert client.post(JOBS, json=document).status_code == 201, "a job of the new type is accepted"
    assert client.delete(f"{API}/jobtypes/solo").status_code == 200
    assert_status(client.get(f"{API}/jobtypes/solo"), 404, "NotFound", "jobtype solo not found", "no jobtypes")
    assert ("delete", "JobType", "solo") in backend.calls
