"""A job's subresources through the REST API: the tenancy matrix of every route x {own namespace, other namespace,
no token, revoked token, viewer writing, admin of every namespace}, and what each route answers.

Reads (events, replicas, log, explain) need a viewer of the job's namespace, halt and resume an editor; a refused
halt changes nothing. The matrix's tokens and helpers are test_rest_tenancy's.
"""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from test_rest_tenancy import API, TOKENS, Tokens, bearer, job

from phalanx.entrypoints.server.app import create_app
from phalanx.entrypoints.server.tokens import token_authorizer
from phalanx.model.jobs import TrainingJob
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
}
ALLOWED = {
    **{route: {"editor-ml", "viewer-ml", "admin-all"} for route in READS},
    "halt": {"editor-ml", "admin-all"},
    "resume": {"editor-ml", "admin-all"},
    "events of another namespace": {"editor-cv", "admin-all"},
    "halt in another namespace": {"editor-cv", "admin-all"},
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
    return client, backend, tokens


def suspended(backend: MemoryBackend) -> list[bool]:
    return [j.spec.run_policy.suspend for j in backend.list(TrainingJob)]


@pytest.mark.parametrize("caller", CALLERS, ids=[str(caller) for caller in CALLERS])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_subresource_answers_2xx_only_where_the_token_allows_it(
    served: tuple[TestClient, MemoryBackend, Tokens], route: str, caller: str | None
) -> None:
    client, backend, _ = served
    method, path = ROUTES[route]
    before = suspended(backend)
    response = client.request(method, path, headers=bearer(caller))
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
    assert suspended(backend) == [False, False]


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
