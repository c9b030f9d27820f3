"""A job's subresources and PUT through the REST API: the tenancy matrix of every route x {own namespace, other
namespace, no token, revoked token, viewer writing, admin of every namespace}, and what each route answers.

Reads (events, replicas, log, explain) need a viewer of the job's namespace, halt and resume an editor, a PUT an
editor (an admin of every namespace for a Queue); a refused write changes nothing. The matrix's tokens and
helpers are test_rest_tenancy's.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import API, TOKENS, Tokens, bearer, job

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.datasets import Dataset
from phalanx.model.jobs import TrainingJob
from phalanx.model.queues import Queue
from phalanx.services.port import Written
from support.memory_backend import MemoryBackend
from support.waiting import wait_until

ML = f"{API}/namespaces/ml/trainingjobs/seed"
CV = f"{API}/namespaces/cv/trainingjobs/other"
READS = {"events", "replicas", "log", "explain"}
ROUTES = {
    "events": ("GET", f"{ML}/events"),
    "replicas": ("GET", f"{ML}/replicas"),
    "log": ("GET", f"{ML}/log?replica=worker-0"),
    "explain": ("GET", f"{ML}/explain"),
    "halt": ("POST", f"{ML}/halt"),
    "resume": ("POST", f"{ML}/resume"),
    "events of another namespace": ("GET", f"{CV}/events"),
    "halt in another namespace": ("POST", f"{CV}/halt"),
    "replace a dataset": ("PUT", f"{API}/namespaces/ml/datasets/images"),
    "replace a queue": ("PUT", f"{API}/queues/gpus"),
}
BODIES = {
    "replace a dataset": {"kind": "Dataset", "metadata": {"name": "images"}, "spec": {"source": {"url": "file:///v2"}}},
    "replace a queue": {"kind": "Queue", "metadata": {"name": "gpus"}, "spec": {"weight": 2}},
}
ALLOWED = {
    **{route: {"editor-ml", "viewer-ml", "admin-all"} for route in READS},
    "halt": {"editor-ml", "admin-all"},
    "resume": {"editor-ml", "admin-all"},
    "events of another namespace": {"editor-cv", "admin-all"},
    "halt in another namespace": {"editor-cv", "admin-all"},
    "replace a dataset": {"editor-ml", "admin-all"},
    "replace a queue": {"admin-all"},
}
CALLERS = [None, "not-a-token", *TOKENS]


@pytest.fixture
def served() -> tuple[TestClient, MemoryBackend, Tokens]:
    backend, tokens = MemoryBackend(), Tokens()
    client = TestClient(create_app(backend, authorize=token_authorizer(tokens)))  # type: ignore[arg-type]
    for namespace, token, name in (("ml", "editor-ml", "seed"), ("cv", "editor-cv", "other")):
        created = client.post(f"{API}/namespaces/{namespace}/trainingjobs", json=job(name), headers=bearer(token))
        assert created.status_code == 201, created.text
    seed = backend.get(TrainingJob, "ml", "seed")
    assert seed is not None and seed.metadata.uid is not None
    backend.logs[seed.metadata.uid] = {"worker-0": "epoch 1\nepoch 2\nlast"}
    backend.record(seed, "Queued", "waiting for quota")
    dataset = {"kind": "Dataset", "metadata": {"name": "images"}, "spec": {"source": {"url": "file:///v1"}}}
    made = client.post(f"{API}/namespaces/ml/datasets", json=dataset, headers=bearer("editor-ml"))
    assert made.status_code == 201, made.text
    made = client.post(
        f"{API}/queues", json={"kind": "Queue", "metadata": {"name": "gpus"}}, headers=bearer("admin-all")
    )
    assert made.status_code == 201, made.text
    return client, backend, tokens


def suspended(backend: MemoryBackend) -> list[Any]:
    """What a refused write must leave as it was: the jobs' suspend flags, the Dataset's and the Queue's specs."""
    return [
        *(j.spec.run_policy.suspend for j in backend.list(TrainingJob)),
        *(d.spec for d in backend.list(Dataset)),
        *(q.spec for q in backend.list(Queue)),
    ]


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_subresource_answers_2xx_only_where_the_token_allows_it(
    served: tuple[TestClient, MemoryBackend, Tokens], route: str, caller: str | None
) -> None:
    client, backend, _ = served
    method, path = ROUTES[route]
    before = suspended(backend)
    response = client.request(method, path, json=BODIES.get(route), headers=bearer(caller))
    if caller in ALLOWED[route]:
        assert 200 <= response.status_code < 300, response.text
        return
    assert response.status_code == (401 if caller not in TOKENS else 403), response.text
    if caller in TOKENS:
        assert caller in response.json()["message"]  # which token, and what it may not do
    assert suspended(backend) == before


def test_a_revoked_token_reads_no_more_logs(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, _, tokens = served
    assert client.get(f"{ML}/log?replica=worker-0", headers=bearer("viewer-ml")).status_code == 200
    del tokens.grants["viewer-ml"]
    assert client.get(f"{ML}/log?replica=worker-0", headers=bearer("viewer-ml")).status_code == 401


def test_a_viewer_halting_is_told_it_needs_an_editor(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, backend, _ = served
    refused = client.post(f"{ML}/halt", headers=bearer("viewer-ml"))
    assert refused.json()["message"] == (
        "the viewer token viewer-ml for namespaces ml cannot halt trainingjobs in ml: needs editor"
    )
    assert [j.spec.run_policy.suspend for j in backend.list(TrainingJob)] == [False, False]


def test_halt_and_resume_write_the_suspend_flag_and_answer_the_job(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, backend, _ = served
    halted = client.post(f"{ML}/halt", headers=bearer("editor-ml"))
    assert halted.json()["spec"]["runPolicy"]["suspend"] is True
    stored = backend.get(TrainingJob, "ml", "seed")
    assert stored is not None and stored.spec.run_policy.suspend
    resumed = client.post(f"{ML}/resume", headers=bearer("editor-ml"))
    assert resumed.json()["spec"]["runPolicy"]["suspend"] is False


def test_halting_a_finished_job_is_a_conflict_naming_its_phase(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, backend, _ = served
    seed = backend.get(TrainingJob, "ml", "seed")
    assert seed is not None
    assert backend.write_status(seed, {"phase": "Succeeded"}) is Written.WROTE
    refused = client.post(f"{ML}/halt", headers=bearer("editor-ml"))
    assert refused.status_code == 409
    assert refused.json()["message"] == "job ml/seed is Succeeded; it cannot be halted or resumed"


def test_events_explain_and_the_log_of_a_job(served: tuple[TestClient, MemoryBackend, Tokens]) -> None:
    client, backend, _ = served
    events = client.get(f"{ML}/events", headers=bearer("viewer-ml")).json()
    assert events["kind"] == "EventList"
    assert [(e["reason"], e["message"]) for e in events["items"]] == [("Queued", "waiting for quota")]
    backend.pending = "Pending: no control plane has taken it up."
    assert client.get(f"{ML}/explain", headers=bearer("viewer-ml")).json() == {"message": backend.pending}
    log = client.get(f"{ML}/log?replica=worker-0", headers=bearer("viewer-ml"))
    assert log.headers["content-type"].startswith("text/plain")
    assert log.text == "epoch 1\nepoch 2\nlast"


@pytest.mark.parametrize(
    ("path", "code", "words"),
    [
        (f"{ML}/log?replica=chief-0", 404, "job seed has no replica 'chief-0'; its replicas: worker-0"),
        (f"{ML}/log", 400, "replica: Field required"),
        (f"{API}/namespaces/ml/trainingjobs/gone/events", 404, "job ml/gone not found; jobs in ml: seed"),
        (f"{API}/namespaces/ML/trainingjobs/seed/explain", 400, "the path's namespace"),
    ],
    ids=["unknown replica", "no replica", "no such job", "bad namespace"],
)
def test_a_bad_subresource_request_is_one_sentence(
    served: tuple[TestClient, MemoryBackend, Tokens], path: str, code: int, words: str
) -> None:
    client, _, _ = served
    answer = client.get(path, headers=bearer("admin-all"))
    assert answer.status_code == code, answer.text
    assert words in answer.json()["message"]


def test_a_followed_log_streams_what_is_written_and_ends_when_the_job_stops(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, backend, _ = served
    seed = backend.get(TrainingJob, "ml", "seed")
    assert seed is not None and seed.metadata.uid is not None
    logs = backend.logs[seed.metadata.uid]
    received: list[bytes] = []
    ended = threading.Event()

    def read() -> None:
        with client.stream("GET", f"{ML}/log?replica=worker-0&follow=true", headers=bearer("viewer-ml")) as stream:
            for chunk in stream.iter_bytes():
                received.append(chunk)
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # The complete lines come at once; the unfinished last line waits for its newline.
    wait_until(lambda: b"".join(received) == b"epoch 1\nepoch 2\n", 10, "the complete lines")
    logs["worker-0"] += " line\nepoch 3\n"
    wait_until(lambda: b"".join(received) == b"epoch 1\nepoch 2\nlast line\nepoch 3\n", 10, "the new lines")
    assert not ended.is_set()
    logs["worker-0"] += "done, no newline"
    current = backend.get(TrainingJob, "ml", "seed")
    assert current is not None
    assert backend.write_status(current, {"phase": "Succeeded"}) is Written.WROTE
    assert ended.wait(10), "the followed log did not end when the job stopped"
    assert b"".join(received) == b"epoch 1\nepoch 2\nlast line\nepoch 3\ndone, no newline"


def test_a_put_gives_the_stored_object_the_new_spec_on_the_version_read(
    served: tuple[TestClient, MemoryBackend, Tokens],
) -> None:
    client, backend, _ = served
    path = f"{API}/namespaces/ml/datasets/images"
    read = client.get(path, headers=bearer("editor-ml")).json()
    stale = read["metadata"]["resourceVersion"]
    read["spec"]["source"]["url"] = "file:///v2"
    written = client.put(path, json=read, headers=bearer("editor-ml"))
    assert written.status_code == 200, written.text
    assert written.json()["spec"]["source"]["url"] == "file:///v2"
    stored = backend.get(Dataset, "ml", "images")
    assert stored is not None and stored.spec.source.url == "file:///v2"
    read["spec"]["source"]["url"] = "file:///v3"
    conflict = client.put(path, json=read, headers=bearer("editor-ml"))  # the version it read is gone
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["reason"] == "Conflict"
    assert f"changed since resourceVersion {stale!r} was read" in conflict.json()["message"]
    assert stored == backend.get(Dataset, "ml", "images")


@pytest.mark.parametrize(
    ("path", "body", "code", "words"),
    [
        (f"{API}/namespaces/ml/datasets/absent", {"spec": {"source": {"url": "file:///x"}}}, 404, "not found"),
        (f"{API}/namespaces/ml/datasets/images", {"metadata": {"name": "other"}, "spec": {}}, 422, "metadata.name"),
        (f"{API}/namespaces/ml/datasets/images", {"spec": {"source": {}}}, 422, "spec.source"),
        (f"{API}/queues/gpus", {"metadata": {"namespace": "ml"}}, 422, "cluster-scoped"),
    ],
    ids=["absent", "another name", "invalid spec", "a namespace on a queue"],
)
def test_a_bad_put_is_one_sentence_and_changes_nothing(
    served: tuple[TestClient, MemoryBackend, Tokens], path: str, body: dict[str, Any], code: int, words: str
) -> None:
    client, backend, _ = served
    before = suspended(backend)
    answer = client.put(path, json=body, headers=bearer("admin-all"))
    assert answer.status_code == code, answer.text
    assert words in answer.json()["message"]
    assert suspended(backend) == before
